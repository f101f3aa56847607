// Semantics of the filter language: precedence, membership, negation, comparisons, enums.
#include <gtest/gtest.h>

#include <string>

#include "enumerate/filter.hpp"

using namespace tilefmha;
using namespace tilefmha::enumerate;

namespace {

KernelConfig sample() {
  KernelConfig c;
  c.family = Family::fwd;
  c.dtype = c.out_dtype = DType::bf16;
  c.pipeline = Pipeline::sm90_ws;
  c.hdim_q = 192;
  c.hdim_v = 128;
  c.block_m = 128;
  c.block_n = 112;
  c.mask = MaskKind::causal;
  c.lse = true;
  c.dropout = false;
  return c;
}

bool eval(const std::string& expression, const KernelConfig& c = sample()) {
  return Filter::compile(expression).matches(c);
}

}  // namespace

TEST(FilterEval, IntegerComparisons) {
  EXPECT_TRUE(eval("c.hdim_q == 192"));
  EXPECT_FALSE(eval("c.hdim_q == 128"));
  EXPECT_TRUE(eval("c.hdim_q != 128"));
  EXPECT_TRUE(eval("c.hdim_q > 128"));
  EXPECT_FALSE(eval("c.hdim_q > 192"));
  EXPECT_TRUE(eval("c.hdim_q >= 192"));
  EXPECT_TRUE(eval("c.hdim_v < 192"));
  EXPECT_FALSE(eval("c.hdim_v < 128"));
  EXPECT_TRUE(eval("c.hdim_v <= 128"));
  EXPECT_TRUE(eval("c.page_size > -1"));
}

TEST(FilterEval, LiteralOnTheLeftMirrorsTheOperator) {
  EXPECT_TRUE(eval("128 < c.hdim_q"));
  EXPECT_FALSE(eval("192 < c.hdim_q"));
  EXPECT_TRUE(eval("256 >= c.hdim_q"));
  EXPECT_TRUE(eval("'causal' == c.mask"));
}

TEST(FilterEval, FieldAgainstField) {
  EXPECT_FALSE(eval("c.hdim_q == c.hdim_v"));
  EXPECT_TRUE(eval("c.hdim_q > c.hdim_v"));
  EXPECT_TRUE(eval("c.out_dtype == c.dtype"));
  EXPECT_TRUE(eval("c.lse != c.dropout"));
}

TEST(FilterEval, EnumsCompareByName) {
  EXPECT_TRUE(eval("c.mask == 'causal'"));
  EXPECT_TRUE(eval("c.mask == \"causal\""));
  EXPECT_FALSE(eval("c.mask == 'window'"));
  EXPECT_TRUE(eval("c.pipeline != 'sm80_mma'"));
  EXPECT_TRUE(eval("c.family == 'fwd' and c.dtype == 'bf16'"));
}

TEST(FilterEval, BooleansAndBareFlags) {
  EXPECT_TRUE(eval("c.lse"));
  EXPECT_FALSE(eval("c.dropout"));
  EXPECT_TRUE(eval("not c.dropout"));
  EXPECT_TRUE(eval("c.lse == true"));
  EXPECT_TRUE(eval("c.dropout == false"));
  EXPECT_TRUE(eval("c.dropout == False"));
  EXPECT_TRUE(eval("true"));
  EXPECT_FALSE(eval("false"));
}

TEST(FilterEval, Membership) {
  EXPECT_TRUE(eval("c.hdim_q in [64, 192]"));
  EXPECT_FALSE(eval("c.hdim_q in [64, 128]"));
  EXPECT_TRUE(eval("c.hdim_q not in [64, 128]"));
  EXPECT_FALSE(eval("c.hdim_q not in [192]"));
  EXPECT_TRUE(eval("c.mask in ['causal', 'window']"));
  EXPECT_FALSE(eval("c.mask in []"));
  EXPECT_TRUE(eval("c.mask in ['none', 'causal',]"));
  EXPECT_TRUE(eval("not c.mask in ['none']"));
}

TEST(FilterEval, PrecedenceNotOverAndOverOr) {
  // or binds loosest: true or (false and false).
  EXPECT_TRUE(eval("c.lse or c.dropout and c.dropout"));
  EXPECT_FALSE(eval("(c.lse or c.dropout) and c.dropout"));
  // not binds tighter than and: (not lse) and lse is false; not (dropout and lse) is true.
  EXPECT_FALSE(eval("not c.lse and c.lse"));
  EXPECT_TRUE(eval("not (c.dropout and c.lse)"));
  // not applies to the whole comparison.
  EXPECT_TRUE(eval("not c.hdim_q == 128"));
  EXPECT_TRUE(eval("not not c.lse"));
  // Left to right within one level.
  EXPECT_TRUE(eval("c.dropout or c.dropout or c.lse"));
  EXPECT_FALSE(eval("c.lse and c.lse and c.dropout"));
}

TEST(FilterEval, ConstantComparisons) {
  EXPECT_TRUE(eval("1 < 2"));
  EXPECT_FALSE(eval("'a' == 'b'"));
  EXPECT_TRUE(eval("'a' != 'b'"));
}

TEST(FilterEval, EvaluatesEachConfig) {
  KernelConfig other = sample();
  other.hdim_q = other.hdim_v = 64;
  other.mask = MaskKind::none;
  const Filter filter = Filter::compile("c.hdim_q >= 128 or c.mask == 'none'");
  EXPECT_TRUE(filter.matches(sample()));
  EXPECT_TRUE(filter.matches(other));
  other.mask = MaskKind::window;
  EXPECT_FALSE(filter.matches(other));
  EXPECT_EQ(filter.expression(), "c.hdim_q >= 128 or c.mask == 'none'");
}

TEST(FilterEval, FilterSetNeedsEveryExpression) {
  FilterSet set;
  EXPECT_TRUE(set.empty());
  EXPECT_TRUE(set.matches(sample()));
  set.add("c.hdim_q == 192");
  EXPECT_TRUE(set.matches(sample()));
  set.add("c.mask == 'none'");
  EXPECT_FALSE(set.matches(sample()));
}
