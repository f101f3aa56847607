// Errors of the filter language: column of the mistake, caret line, unknown fields, types;
// and --filter-file reading.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "enumerate/filter.hpp"
#include "tilefmha/error.hpp"

using namespace tilefmha;
using namespace tilefmha::enumerate;

namespace {

// The message of the error compiling `expression` throws ("" when it compiles).
std::string error_of(const std::string& expression) {
  try {
    Filter::compile(expression);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::invalid_argument);
    return e.what();
  }
  return "";
}

// The 1-based column an error message reports, checked against its caret line.
int reported_column(const std::string& message) {
  const std::string key = "at column ";
  const size_t at = message.find(key);
  if (at == std::string::npos) return -1;
  const int column = std::stoi(message.substr(at + key.size()));
  const size_t caret_line = message.rfind('\n');
  const std::string caret = message.substr(caret_line + 1);
  // Caret lines are indented by two like the echoed expression.
  EXPECT_EQ(caret.find('^'), size_t(column - 1 + 2)) << message;
  return column;
}

}  // namespace

TEST(FilterParse, UnknownFieldIsNamedWithItsColumn) {
  const std::string message = error_of("c.hdim_q == 128 and c.hdim == 1");
  EXPECT_NE(message.find("unknown field 'hdim'"), std::string::npos) << message;
  EXPECT_EQ(reported_column(message), 23);
}

TEST(FilterParse, SyntaxErrorsReportTheColumn) {
  EXPECT_EQ(reported_column(error_of("c.hdim_q == ")), 13);          // ends early
  EXPECT_EQ(reported_column(error_of("c.hdim_q = 128")), 10);        // '=' instead of '=='
  EXPECT_EQ(reported_column(error_of("(c.lse")), 7);                 // unclosed parenthesis
  EXPECT_EQ(reported_column(error_of("c.lse c.dropout")), 7);        // missing operator
  EXPECT_EQ(reported_column(error_of("c.hdim_q in [64, 128")), 21);  // unclosed list
  EXPECT_EQ(reported_column(error_of("c.mask == 'causal")), 11);     // unterminated string
  EXPECT_EQ(reported_column(error_of("c.lse && c.dropout")), 7);     // C operators
  EXPECT_EQ(reported_column(error_of("hdim_q == 128")), 1);          // missing c.
  EXPECT_EQ(reported_column(error_of("c.hdim_q == 1 == 1")), 15);    // chained comparison
  EXPECT_EQ(reported_column(error_of("c.hdim_q == 12a")), 15);       // malformed number
  EXPECT_EQ(reported_column(error_of("c. == 1")), 4);                // no field name
  EXPECT_EQ(reported_column(error_of("")), 1);                       // empty
  EXPECT_EQ(reported_column(error_of("c.lse)")), 6);                 // stray parenthesis
}

TEST(FilterParse, TypeErrorsReportTheColumn) {
  // Ordering on an enum or a boolean.
  std::string message = error_of("c.mask < 'causal'");
  EXPECT_NE(message.find("ordering comparisons need numbers"), std::string::npos) << message;
  EXPECT_EQ(reported_column(message), 8);
  EXPECT_EQ(reported_column(error_of("c.lse >= true")), 7);
  // Unknown enum name, wrong literal types.
  message = error_of("c.mask == 'casual'");
  EXPECT_NE(message.find("'casual' is not a MaskKind"), std::string::npos) << message;
  EXPECT_EQ(reported_column(message), 11);
  EXPECT_EQ(reported_column(error_of("c.hdim_q == '128'")), 13);
  EXPECT_EQ(reported_column(error_of("c.lse == 1")), 10);
  EXPECT_EQ(reported_column(error_of("c.mask == 1")), 11);
  EXPECT_EQ(reported_column(error_of("c.hdim_q in [64, 'x']")), 18);
  // Fields of different types, non-boolean conditions, literal lists.
  EXPECT_EQ(reported_column(error_of("c.mask == c.bias")), 11);
  EXPECT_EQ(reported_column(error_of("c.hdim_q and c.lse")), 1);
  EXPECT_EQ(reported_column(error_of("128")), 1);
  EXPECT_EQ(reported_column(error_of("128 in [1]")), 1);
  EXPECT_EQ(reported_column(error_of("c.hdim_q in [c.hdim_v]")), 14);
}

TEST(FilterParse, ValidExpressionsCompile) {
  EXPECT_EQ(error_of("c.hdim_q == 128 and c.pipeline == 'sm90_ws'"), "");
  EXPECT_EQ(error_of("  ( c.lse )  "), "");
  EXPECT_EQ(error_of("c.family not in ['bwd_dot_do_o']"), "");
}

TEST(FilterParse, FilterFileSkipsBlankAndCommentLines) {
  const auto path = std::filesystem::temp_directory_path() /
                    ("tilefmha_filter_parse_" + std::to_string(::getpid()) + ".txt");
  {
    std::ofstream file(path);
    file << "# keep hdim 128\n\nc.hdim_q == 128\n   # indented comment\nc.lse\r\n";
  }
  FilterSet set;
  set.add_file(path);
  EXPECT_EQ(set.filters().size(), 2u);
  KernelConfig c;
  c.hdim_q = 128;
  c.lse = true;
  EXPECT_TRUE(set.matches(c));
  c.lse = false;
  EXPECT_FALSE(set.matches(c));
  std::filesystem::remove(path);
}

TEST(FilterParse, FilterFileErrorsNameFileAndLine) {
  const auto path = std::filesystem::temp_directory_path() /
                    ("tilefmha_filter_parse_bad_" + std::to_string(::getpid()) + ".txt");
  {
    std::ofstream file(path);
    file << "c.lse\n# comment\nc.nope == 1\n";
  }
  FilterSet set;
  try {
    set.add_file(path);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find(path.string() + ":3:"), std::string::npos) << message;
    EXPECT_NE(message.find("unknown field 'nope'"), std::string::npos) << message;
  }
  std::filesystem::remove(path);
  EXPECT_THROW(set.add_file(path), Error);  // missing file
}
