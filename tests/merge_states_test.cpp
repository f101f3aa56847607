// Properties of merging attention states (tilefmha/merge_states.hpp), on the CPU reference: the
// split-KV partials of a forward merge back into the forward; the merge ignores the states'
// order, is associative, ignores a state that saw no key whatever its O holds, and a sink logit
// acts as one more state with O = 0.
#include "tilefmha/merge_states.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "core/numeric.hpp"
#include "support/forward_problems.hpp"
#include "tilefmha/error.hpp"
#include "tilefmha/reference.hpp"

namespace tilefmha {
namespace {

using testing::TensorPool;

constexpr int64_t kBatch = 2, kHeads = 3, kSeq = 5, kDim = 16;

// Random states: O fp32 [n, batch, heads, seq, dim], LSE fp32 [n, batch, heads, seq] in [-3, 3].
struct States {
  TensorView o, lse;
};

States random_states(TensorPool& pool, int64_t n) {
  return {pool.uniform(DType::fp32, {n, kBatch, kHeads, kSeq, kDim}, -1, 1),
          pool.uniform(DType::fp32, {n, kBatch, kHeads, kSeq}, -3, 3)};
}

struct Merged {
  TensorView o, lse;
};

Merged merge(TensorPool& pool, const States& states, TensorView sink = {}) {
  Merged out{pool.filled(DType::fp32, {kBatch, kSeq, kHeads, kDim}, testing::kUnwritten),
             pool.filled(DType::fp32, {kBatch, kHeads, kSeq}, testing::kUnwritten)};
  reference::splitkv_combine(merge_states_problem({states.o, states.lse, out.o, out.lse, sink}));
  return out;
}

// The states listed in `order`, copied into fresh views.
States select(TensorPool& pool, const States& from, const std::vector<int64_t>& order) {
  const int64_t n = static_cast<int64_t>(order.size());
  States out{pool.filled(DType::fp32, {n, kBatch, kHeads, kSeq, kDim}, 0),
             pool.filled(DType::fp32, {n, kBatch, kHeads, kSeq}, 0)};
  for (int64_t s = 0; s < n; ++s)
    for (int64_t b = 0; b < kBatch; ++b)
      for (int64_t h = 0; h < kHeads; ++h)
        for (int64_t i = 0; i < kSeq; ++i) {
          numeric::store(out.lse, {s, b, h, i}, numeric::load(from.lse, {order[s], b, h, i}));
          for (int64_t d = 0; d < kDim; ++d)
            numeric::store(out.o, {s, b, h, i, d}, numeric::load(from.o, {order[s], b, h, i, d}));
        }
  return out;
}

double max_difference(const TensorView& a, const TensorView& b) {
  double worst = 0;
  const int64_t n = a.numel();
  for (int64_t e = 0; e < n; ++e) {
    const double x = numeric::load(a.data, a.dtype, e), y = numeric::load(b.data, b.dtype, e);
    if (std::isinf(x) && x == y) continue;
    worst = std::max(worst, std::isnan(x - y) ? INFINITY : std::abs(x - y));
  }
  return worst;
}

TEST(MergeStates, SplitPartialsMergeIntoTheForward) {
  TensorPool pool(1);
  const testing::Dims d{2, 4, 2, 7, 900, 32, 32};
  const Problem forward =
      testing::batch_problem(pool, Family::fwd, DType::fp32, d).causal(MaskAlign::bottom_right).build();
  reference::forward(forward);
  for (int64_t n : {1, 3, 8}) {
    ProblemBuilder split_builder(Family::fwd_splitkv);
    split_builder.dtype(DType::fp32)
        .shape(d.batch, d.nhead_q, d.nhead_k, d.seqlen_q, d.seqlen_k, d.hdim_q, d.hdim_v)
        .q(forward.q).k(forward.k).v(forward.v)
        .causal(MaskAlign::bottom_right)
        .splits(n, pool.filled(DType::fp32, {n, d.batch, d.nhead_q, d.seqlen_q, d.hdim_v}, 0),
                pool.filled(DType::fp32, {n, d.batch, d.nhead_q, d.seqlen_q}, 0));
    const Problem split = split_builder.build();
    reference::forward_splitkv(split);
    const TensorView o = pool.filled(DType::fp32, {d.batch, d.seqlen_q, d.nhead_q, d.hdim_v}, 0);
    const TensorView lse = pool.filled(DType::fp32, {d.batch, d.nhead_q, d.seqlen_q}, 0);
    reference::splitkv_combine(merge_states_problem({split.split.o_acc, split.split.lse_acc, o, lse, {}}));
    EXPECT_LT(max_difference(o, forward.o), 1e-6) << n << " states";
    EXPECT_LT(max_difference(lse, forward.lse), 1e-5) << n << " states";
  }
}

TEST(MergeStates, OrderDoesNotMatter) {
  TensorPool pool(2);
  const States states = random_states(pool, 4);
  const Merged a = merge(pool, states);
  const Merged b = merge(pool, select(pool, states, {2, 0, 3, 1}));
  EXPECT_LT(max_difference(a.o, b.o), 1e-6);
  EXPECT_LT(max_difference(a.lse, b.lse), 1e-6);
}

// merge(merge(s0, s1), s2) = merge(s0, s1, s2): a merged state is a state like any other, so
// ranks can merge as their shards arrive.
TEST(MergeStates, MergingIsAssociative) {
  TensorPool pool(3);
  const States states = random_states(pool, 3);
  const Merged all = merge(pool, states);
  const Merged first_two = merge(pool, select(pool, states, {0, 1}));
  // Stack (merged first two, state 2) and merge again.
  States pair{pool.filled(DType::fp32, {2, kBatch, kHeads, kSeq, kDim}, 0),
              pool.filled(DType::fp32, {2, kBatch, kHeads, kSeq}, 0)};
  for (int64_t b = 0; b < kBatch; ++b)
    for (int64_t h = 0; h < kHeads; ++h)
      for (int64_t i = 0; i < kSeq; ++i) {
        numeric::store(pair.lse, {0, b, h, i}, numeric::load(first_two.lse, {b, h, i}));
        numeric::store(pair.lse, {1, b, h, i}, numeric::load(states.lse, {2, b, h, i}));
        for (int64_t d = 0; d < kDim; ++d) {
          numeric::store(pair.o, {0, b, h, i, d}, numeric::load(first_two.o, {b, i, h, d}));
          numeric::store(pair.o, {1, b, h, i, d}, numeric::load(states.o, {2, b, h, i, d}));
        }
      }
  const Merged nested = merge(pool, pair);
  EXPECT_LT(max_difference(all.o, nested.o), 1e-6);
  EXPECT_LT(max_difference(all.lse, nested.lse), 1e-6);
}

// A state that saw no key (LSE -inf) weighs nothing, even when its O holds NaN; rows whose
// states all saw nothing merge to O = 0, LSE = -inf.
TEST(MergeStates, EmptyStatesWeighNothing) {
  TensorPool pool(4);
  const States states = random_states(pool, 2);
  States with_empty = select(pool, states, {0, 1, 0});
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double minus_inf = -std::numeric_limits<double>::infinity();
  for (int64_t b = 0; b < kBatch; ++b)
    for (int64_t h = 0; h < kHeads; ++h)
      for (int64_t i = 0; i < kSeq; ++i) {
        numeric::store(with_empty.lse, {2, b, h, i}, minus_inf);
        for (int64_t d = 0; d < kDim; ++d) numeric::store(with_empty.o, {2, b, h, i, d}, nan);
      }
  const Merged plain = merge(pool, states);
  const Merged padded = merge(pool, with_empty);
  EXPECT_LT(max_difference(plain.o, padded.o), 1e-6);
  EXPECT_LT(max_difference(plain.lse, padded.lse), 1e-6);

  States nothing = select(pool, with_empty, {2, 2});
  const Merged empty = merge(pool, nothing);
  for (int64_t e = 0; e < empty.o.numel(); ++e)
    EXPECT_EQ(numeric::load(empty.o.data, DType::fp32, e), 0.0);
  for (int64_t e = 0; e < empty.lse.numel(); ++e)
    EXPECT_EQ(numeric::load(empty.lse.data, DType::fp32, e), minus_inf);
}

// A per-head sink logit enters the denominator once: the same as one more state with LSE = sink
// and O = 0.
TEST(MergeStates, SinkLogitIsAStateOfZeros) {
  TensorPool pool(5);
  const States states = random_states(pool, 2);
  const TensorView sink = pool.uniform(DType::fp32, {kHeads}, -1, 2);
  const Merged with_sink = merge(pool, states, sink);
  States extended = select(pool, states, {0, 1, 0});
  for (int64_t b = 0; b < kBatch; ++b)
    for (int64_t h = 0; h < kHeads; ++h)
      for (int64_t i = 0; i < kSeq; ++i) {
        numeric::store(extended.lse, {2, b, h, i}, numeric::load(sink, {h}));
        for (int64_t d = 0; d < kDim; ++d) numeric::store(extended.o, {2, b, h, i, d}, 0.0);
      }
  const Merged as_state = merge(pool, extended);
  EXPECT_LT(max_difference(with_sink.o, as_state.o), 1e-6);
  EXPECT_LT(max_difference(with_sink.lse, as_state.lse), 1e-6);
}

TEST(MergeStates, BadViewsAreNamed) {
  TensorPool pool(6);
  const States states = random_states(pool, 2);
  const TensorView o = pool.filled(DType::fp32, {kBatch, kSeq, kHeads, kDim}, 0);
  auto message = [&](MergeStates bad) {
    try {
      merge_states_problem(bad);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(message({states.lse, states.lse, o, {}, {}}).find("o_states.rank"), std::string::npos);
  const TensorView short_o = pool.filled(DType::fp32, {kBatch, kSeq - 1, kHeads, kDim}, 0);
  EXPECT_NE(message({states.o, states.lse, short_o, {}, {}}).find("split.o_acc"), std::string::npos)
      << message({states.o, states.lse, short_o, {}, {}});
}

}  // namespace
}  // namespace tilefmha
