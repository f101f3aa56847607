// Context-parallel ring attention simulated on the CPU: N ranks hold zigzag shards and run the
// blocks ring_schedule lists, each block one call of the CPU reference, with the partial states
// of every query row merged by merge_states and K/V (plus dK/dV in the backward) passed around
// the ring. O, LSE, dQ, dK and dV must match the reference attention of the whole sequence on
// one device, in batch mode and packed varlen, causal and not, for rings of 1 to 8 ranks.
// The schedule's own properties follow: the blocks of all ranks and steps cover every attended
// (query, key) pair exactly once, and causal work is equal across ranks at every step.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <ostream>
#include <string>
#include <vector>

#include "core/numeric.hpp"
#include "support/forward_problems.hpp"
#include "support/zigzag_shards.hpp"
#include "tilefmha/context_parallel.hpp"
#include "tilefmha/error.hpp"
#include "tilefmha/merge_states.hpp"
#include "tilefmha/reference.hpp"

namespace tilefmha {
namespace {

namespace cp = context_parallel;
using testing::TensorPool;
using testing::ZigzagLayout;
using PartRows = ZigzagLayout::PartRows;

constexpr int64_t kHeadsQ = 4, kHeadsK = 2, kDim = 16;
// fp32 inputs and outputs, double accumulation: only the roundings of the stored partials and
// of the merges separate the ring from one device.
constexpr double kTolerance = 2e-5;
constexpr double kMinusInf = -std::numeric_limits<double>::infinity();

// Batch mode: 3 rows of 6 chunks per rank. Packed: documents of 3, 1, 4 and 2 units of 2N
// tokens (a document of one unit gives every rank chunks of a single token).
ZigzagLayout layout_for(int world, bool packed, int64_t batch = 3) {
  const int64_t unit = 2 * int64_t{world};
  if (!packed) return ZigzagLayout::batch_mode(world, batch, 3 * unit);
  return ZigzagLayout::packed_mode(world, {0, 3 * unit, 4 * unit, 8 * unit, 10 * unit});
}

// An attention call over `batch` rows of `rows_q` queries and `rows_k` keys, or, where the
// prefix sums are given, over packed documents; fp32, top-left causal or no mask.
ProblemBuilder attention(Family family, int64_t batch, int64_t rows_q, int64_t rows_k,
                         const std::vector<int64_t>& seqstart_q,
                         const std::vector<int64_t>& seqstart_k, bool causal) {
  ProblemBuilder builder(family);
  builder.dtype(DType::fp32);
  if (seqstart_q.empty()) {
    builder.shape(batch, kHeadsQ, kHeadsK, rows_q, rows_k, kDim, kDim);
  } else {
    builder.shape(1, kHeadsQ, kHeadsK, 0, 0, kDim, kDim).group(seqstart_q, seqstart_k);
  }
  if (causal) builder.causal(MaskAlign::top_left);
  return builder;
}

ProblemBuilder block_attention(Family family, const ZigzagLayout& layout, const PartRows& queries,
                               const PartRows& keys, bool causal) {
  return attention(family, layout.batch(), static_cast<int64_t>(queries.rows.size()),
                   static_cast<int64_t>(keys.rows.size()), queries.seqstarts, keys.seqstarts,
                   causal);
}

// An attention state: O [batch, rows, heads, dim] and LSE [batch, heads, rows].
struct State {
  TensorView o, lse;
};

struct Gradients {
  TensorView dq, dk, dv;
};

State forward(TensorPool& pool, ProblemBuilder builder, const TensorView& q, const TensorView& k,
              const TensorView& v) {
  const int64_t batch = q.shape[0], rows = q.shape[1];
  const State state{pool.filled(DType::fp32, {batch, rows, kHeadsQ, kDim}, testing::kUnwritten),
                    pool.filled(DType::fp32, {batch, kHeadsQ, rows}, testing::kUnwritten)};
  reference::forward(builder.q(q).k(k).v(v).o(state.o).lse(state.lse).build());
  return state;
}

// The backward of one call, given the O and LSE of the attention the call is a part of.
Gradients backward(TensorPool& pool, ProblemBuilder builder, const TensorView& q,
                   const TensorView& k, const TensorView& v, const State& state,
                   const TensorView& d_o) {
  const int64_t batch = q.shape[0], rows_q = q.shape[1], rows_k = k.shape[1];
  Backward bwd;
  bwd.d_o = d_o;
  bwd.dq = pool.filled(DType::fp32, {batch, rows_q, kHeadsQ, kDim}, testing::kUnwritten);
  bwd.dk = pool.filled(DType::fp32, {batch, rows_k, kHeadsK, kDim}, testing::kUnwritten);
  bwd.dv = pool.filled(DType::fp32, {batch, rows_k, kHeadsK, kDim}, testing::kUnwritten);
  bwd.d = pool.filled(DType::fp32, {batch, kHeadsQ, rows_q}, testing::kUnwritten);
  bwd.dq_acc = pool.filled(DType::fp32, {batch, rows_q, kHeadsQ, kDim}, testing::kUnwritten);
  reference::backward(builder.q(q).k(k).v(v).o(state.o).lse(state.lse).backward(bwd).build());
  return {bwd.dq, bwd.dk, bwd.dv};
}

// The whole-sequence problem on one device: inputs and the reference's outputs.
struct OneDevice {
  TensorView q, k, v, d_o;
  State state;
  Gradients grads;
};

OneDevice one_device(TensorPool& pool, const ZigzagLayout& layout, bool causal) {
  const int64_t batch = layout.batch(), rows = layout.global_rows();
  OneDevice whole;
  whole.q = pool.uniform(DType::fp32, {batch, rows, kHeadsQ, kDim}, -1, 1);
  whole.k = pool.uniform(DType::fp32, {batch, rows, kHeadsK, kDim}, -1, 1);
  whole.v = pool.uniform(DType::fp32, {batch, rows, kHeadsK, kDim}, -1, 1);
  whole.d_o = pool.uniform(DType::fp32, {batch, rows, kHeadsQ, kDim}, -1, 1);
  auto builder = [&](Family family) {
    return attention(family, batch, rows, rows, layout.global_seqstarts(),
                     layout.global_seqstarts(), causal);
  };
  whole.state = forward(pool, builder(Family::fwd), whole.q, whole.k, whole.v);
  whole.grads = backward(pool, builder(Family::bwd_dq_dk_dv), whole.q, whole.k, whole.v,
                         whole.state, whole.d_o);
  return whole;
}

// The state of a rank's queries merged with the partial states of a step's blocks (each over
// its part's rows; the other rows of a partial carry LSE = -inf, which weighs nothing).
struct Partial {
  std::vector<int64_t> rows;
  State state;
};

State merge(TensorPool& pool, const State& merged, const std::vector<Partial>& partials) {
  const int64_t n = 1 + static_cast<int64_t>(partials.size());
  const int64_t batch = merged.o.shape[0], rows = merged.o.shape[1];
  const TensorView o_states = pool.filled(DType::fp32, {n, batch, kHeadsQ, rows, kDim}, 0);
  const TensorView lse_states = pool.filled(DType::fp32, {n, batch, kHeadsQ, rows}, kMinusInf);
  auto put = [&](int64_t s, const State& state, int64_t from, int64_t to) {
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t h = 0; h < kHeadsQ; ++h) {
        numeric::store(lse_states, {s, b, h, to}, numeric::load(state.lse, {b, h, from}));
        for (int64_t d = 0; d < kDim; ++d)
          numeric::store(o_states, {s, b, h, to, d}, numeric::load(state.o, {b, from, h, d}));
      }
  };
  for (int64_t t = 0; t < rows; ++t) put(0, merged, t, t);
  for (int64_t s = 1; s < n; ++s) {
    const Partial& partial = partials[static_cast<size_t>(s - 1)];
    for (size_t t = 0; t < partial.rows.size(); ++t)
      put(s, partial.state, static_cast<int64_t>(t), partial.rows[t]);
  }
  const State out{pool.filled(DType::fp32, {batch, rows, kHeadsQ, kDim}, testing::kUnwritten),
                  pool.filled(DType::fp32, {batch, kHeadsQ, rows}, testing::kUnwritten)};
  reference::splitkv_combine(merge_states_problem({o_states, lse_states, out.o, out.lse, {}}));
  return out;
}

// What travels around the ring: a K/V shard, named by its owner, and in the backward the dK/dV
// accumulated for it so far.
struct Shard {
  int owner = 0;
  TensorView k, v, dk, dv;
};

// Every rank hands its shard to rank r + 1 and takes rank r - 1's.
void pass_on(std::vector<Shard>& held) {
  std::rotate(held.rbegin(), held.rbegin() + 1, held.rend());
}

class Ring {
 public:
  Ring(TensorPool& pool, const ZigzagLayout& layout, bool causal, const OneDevice& whole)
      : pool_(pool), layout_(layout), whole_(whole) {
    for (int r = 0; r < layout.world(); ++r) {
      rows_.push_back(layout.global_rows_of(r));
      schedules_.push_back(cp::ring_schedule(layout.world(), r, causal, layout.packed()));
    }
  }

  // The forward: per rank, the merged state of its queries.
  std::vector<State> forward() {
    const int world = layout_.world();
    const int64_t batch = layout_.batch(), rows = layout_.local_rows();
    std::vector<Shard> held = initial_shards(false);
    std::vector<State> merged;
    for (int r = 0; r < world; ++r)
      merged.push_back({pool_.filled(DType::fp32, {batch, rows, kHeadsQ, kDim}, 0),
                        pool_.filled(DType::fp32, {batch, kHeadsQ, rows}, kMinusInf)});
    for (int i = 0; i < world; ++i) {
      for (int r = 0; r < world; ++r) {
        const cp::RingStep& step = schedules_[r][i];
        EXPECT_EQ(step.source_rank, held[r].owner) << "rank " << r << " step " << i;
        const TensorView q = local(whole_.q, r);
        std::vector<Partial> partials;
        for (const cp::Block& block : step.blocks) {
          const PartRows queries = layout_.part(block.queries), keys = layout_.part(block.keys);
          partials.push_back(
              {queries.rows,
               tilefmha::forward(
                   pool_, block_attention(Family::fwd, layout_, queries, keys, block.causal),
                   gather(q, queries), gather(held[r].k, keys), gather(held[r].v, keys))});
        }
        merged[r] = merge(pool_, merged[r], partials);
      }
      if (i + 1 < world) pass_on(held);
    }
    return merged;
  }

  // The backward from the merged states: per rank, dQ of its queries and dK/dV of its shard.
  std::vector<Gradients> backward(const std::vector<State>& merged) {
    const int world = layout_.world();
    std::vector<Shard> held = initial_shards(true);
    std::vector<Gradients> grads(static_cast<size_t>(world));
    for (int r = 0; r < world; ++r) grads[r].dq = zeros_like(whole_.q);
    for (int i = 0; i < world; ++i) {
      for (int r = 0; r < world; ++r) {
        const cp::RingStep& step = schedules_[r][i];
        EXPECT_EQ(step.source_rank, held[r].owner) << "rank " << r << " step " << i;
        const TensorView q = local(whole_.q, r), d_o = local(whole_.d_o, r);
        for (const cp::Block& block : step.blocks) {
          const PartRows queries = layout_.part(block.queries), keys = layout_.part(block.keys);
          const State state{gather(merged[r].o, queries),
                            testing::gather_lse_rows(pool_, merged[r].lse, queries.rows)};
          const Gradients part = tilefmha::backward(
              pool_, block_attention(Family::bwd_dq_dk_dv, layout_, queries, keys, block.causal),
              gather(q, queries), gather(held[r].k, keys), gather(held[r].v, keys), state,
              gather(d_o, queries));
          testing::add_rows(grads[r].dq, queries.rows, part.dq);
          testing::add_rows(held[r].dk, keys.rows, part.dk);
          testing::add_rows(held[r].dv, keys.rows, part.dv);
        }
      }
      // After the last step this hop brings every shard's dK/dV home to its owner.
      pass_on(held);
    }
    for (int r = 0; r < world; ++r) {
      EXPECT_EQ(held[r].owner, r);
      grads[r].dk = held[r].dk;
      grads[r].dv = held[r].dv;
    }
    return grads;
  }

  const std::vector<int64_t>& global_rows_of(int rank) const { return rows_[rank]; }

 private:
  std::vector<Shard> initial_shards(bool with_gradients) {
    std::vector<Shard> held;
    for (int r = 0; r < layout_.world(); ++r) {
      Shard shard{r, local(whole_.k, r), local(whole_.v, r), {}, {}};
      if (with_gradients) {
        shard.dk = zeros_like(whole_.k);
        shard.dv = zeros_like(whole_.v);
      }
      held.push_back(shard);
    }
    return held;
  }
  // Rank r's shard of a whole-sequence tensor.
  TensorView local(const TensorView& whole, int r) {
    return testing::gather_rows(pool_, whole, rows_[r]);
  }
  TensorView gather(const TensorView& shard, const PartRows& part) {
    return testing::gather_rows(pool_, shard, part.rows);
  }
  TensorView zeros_like(const TensorView& whole) {
    return pool_.filled(DType::fp32,
                        {whole.shape[0], layout_.local_rows(), whole.shape[2], whole.shape[3]}, 0);
  }

  TensorPool& pool_;
  const ZigzagLayout& layout_;
  const OneDevice& whole_;
  std::vector<std::vector<int64_t>> rows_;
  std::vector<std::vector<cp::RingStep>> schedules_;
};

// Elements of a rank-local view [batch, rows, heads, dim] (or [batch, heads, rows] when `lse`)
// against the whole-sequence rows they stand for; the count outside |a - e| <= tol (1 + |e|).
int64_t mismatches(const TensorView& local, const TensorView& whole,
                   const std::vector<int64_t>& rows, const std::string& name, bool lse = false) {
  int64_t bad = 0;
  auto check = [&](double actual, double expected, int64_t b, int64_t t, int64_t h, int64_t d) {
    if (std::abs(actual - expected) <= kTolerance * (1 + std::abs(expected))) return;
    if (++bad <= 3)
      ADD_FAILURE() << name << " [b " << b << ", local row " << t << " = row " << rows[t]
                    << ", head " << h << ", dim " << d << "]: " << actual << " vs " << expected;
  };
  const int64_t batch = local.shape[0];
  const int64_t heads = lse ? local.shape[1] : local.shape[2];
  const int64_t dim = lse ? 1 : local.shape[3];
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t t = 0; t < static_cast<int64_t>(rows.size()); ++t)
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t d = 0; d < dim; ++d) {
          if (lse)
            check(numeric::load(local, {b, h, t}), numeric::load(whole, {b, h, rows[t]}), b, t, h,
                  d);
          else
            check(numeric::load(local, {b, t, h, d}), numeric::load(whole, {b, rows[t], h, d}), b,
                  t, h, d);
        }
  return bad;
}

struct RingCase {
  int world;
  bool causal;
  bool packed;
};

std::string case_name(const RingCase& c) {
  return std::string(c.packed ? "packed" : "batch") + (c.causal ? "_causal" : "_full") + "_world" +
         std::to_string(c.world);
}

void PrintTo(const RingCase& c, std::ostream* os) {
  *os << case_name(c);
}

std::vector<RingCase> ring_cases() {
  std::vector<RingCase> cases;
  for (const bool packed : {false, true})
    for (const bool causal : {true, false})
      for (int world = 1; world <= 8; ++world) cases.push_back({world, causal, packed});
  return cases;
}

class RingSimulation : public ::testing::TestWithParam<RingCase> {};

TEST_P(RingSimulation, ForwardMatchesOneDevice) {
  const RingCase c = GetParam();
  TensorPool pool(100 + c.world);
  const ZigzagLayout layout = layout_for(c.world, c.packed);
  const OneDevice whole = one_device(pool, layout, c.causal);
  Ring ring(pool, layout, c.causal, whole);
  const std::vector<State> merged = ring.forward();
  for (int r = 0; r < c.world; ++r) {
    const std::string rank = "rank " + std::to_string(r) + " ";
    EXPECT_EQ(mismatches(merged[r].o, whole.state.o, ring.global_rows_of(r), rank + "O"), 0);
    EXPECT_EQ(
        mismatches(merged[r].lse, whole.state.lse, ring.global_rows_of(r), rank + "LSE", true), 0);
  }
}

TEST_P(RingSimulation, BackwardMatchesOneDevice) {
  const RingCase c = GetParam();
  TensorPool pool(200 + c.world);
  const ZigzagLayout layout = layout_for(c.world, c.packed);
  const OneDevice whole = one_device(pool, layout, c.causal);
  Ring ring(pool, layout, c.causal, whole);
  const std::vector<Gradients> grads = ring.backward(ring.forward());
  for (int r = 0; r < c.world; ++r) {
    const std::string rank = "rank " + std::to_string(r) + " ";
    const std::vector<int64_t>& rows = ring.global_rows_of(r);
    EXPECT_EQ(mismatches(grads[r].dq, whole.grads.dq, rows, rank + "dQ"), 0);
    EXPECT_EQ(mismatches(grads[r].dk, whole.grads.dk, rows, rank + "dK"), 0);
    EXPECT_EQ(mismatches(grads[r].dv, whole.grads.dv, rows, rank + "dV"), 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Zigzag, RingSimulation, ::testing::ValuesIn(ring_cases()),
                         [](const auto& info) { return case_name(info.param); });

// The (query, key) pairs a block attends to, as indices into its parts' rows: per sequence (the
// whole part in batch mode, each document of the part when packed), top-left causal or all.
template <typename Visit>
void for_each_attended_pair(const PartRows& queries, const PartRows& keys, bool causal,
                            Visit visit) {
  const std::vector<int64_t> one_q{0, static_cast<int64_t>(queries.rows.size())};
  const std::vector<int64_t> one_k{0, static_cast<int64_t>(keys.rows.size())};
  const std::vector<int64_t>& sq = queries.seqstarts.empty() ? one_q : queries.seqstarts;
  const std::vector<int64_t>& sk = keys.seqstarts.empty() ? one_k : keys.seqstarts;
  ASSERT_EQ(sq.size(), sk.size());
  for (size_t s = 0; s + 1 < sq.size(); ++s)
    for (int64_t i = sq[s]; i < sq[s + 1]; ++i)
      for (int64_t j = sk[s]; j < sk[s + 1]; ++j)
        if (!causal || j - sk[s] <= i - sq[s]) visit(queries.rows[i], keys.rows[j]);
}

// The document of every whole-sequence row (batch mode: one sequence).
std::vector<int64_t> documents(const ZigzagLayout& layout) {
  std::vector<int64_t> doc(static_cast<size_t>(layout.global_rows()), 0);
  const std::vector<int64_t>& starts = layout.global_seqstarts();
  for (size_t d = 0; d + 1 < starts.size(); ++d)
    std::fill(doc.begin() + starts[d], doc.begin() + starts[d + 1], static_cast<int64_t>(d));
  return doc;
}

TEST(RingSchedule, BlocksCoverEveryAttendedPairOnce) {
  for (const bool packed : {false, true})
    for (const bool causal : {true, false})
      for (int world = 1; world <= 8; ++world) {
        SCOPED_TRACE(std::string(packed ? "packed" : "batch") + (causal ? " causal" : " full") +
                     " world " + std::to_string(world));
        const ZigzagLayout layout = layout_for(world, packed, 1);
        const int64_t n = layout.global_rows();
        std::vector<int> covered(static_cast<size_t>(n * n), 0);
        std::vector<std::vector<int64_t>> rows;
        for (int r = 0; r < world; ++r) rows.push_back(layout.global_rows_of(r));
        for (int r = 0; r < world; ++r)
          for (const cp::RingStep& step : cp::ring_schedule(world, r, causal, packed))
            for (const cp::Block& block : step.blocks)
              for_each_attended_pair(layout.part(block.queries), layout.part(block.keys),
                                     block.causal, [&](int64_t i, int64_t j) {
                                       ++covered[rows[r][i] * n + rows[step.source_rank][j]];
                                     });
        const std::vector<int64_t> doc = documents(layout);
        int64_t wrong = 0;
        for (int64_t q = 0; q < n; ++q)
          for (int64_t k = 0; k < n; ++k) {
            const int expected = doc[q] == doc[k] && (!causal || k <= q) ? 1 : 0;
            if (covered[q * n + k] != expected && ++wrong <= 3)
              ADD_FAILURE() << "query " << q << ", key " << k << ": covered " << covered[q * n + k]
                            << " times, expected " << expected;
          }
        EXPECT_EQ(wrong, 0);
      }
}

// Zigzag's point: under a causal mask every rank attends to as many (query, key) pairs as every
// other, at every ring step and so in total.
TEST(RingSchedule, WorkIsEqualAcrossRanksAtEveryStep) {
  for (const bool packed : {false, true})
    for (const bool causal : {true, false})
      for (int world = 1; world <= 8; ++world) {
        SCOPED_TRACE(std::string(packed ? "packed" : "batch") + (causal ? " causal" : " full") +
                     " world " + std::to_string(world));
        const ZigzagLayout layout = layout_for(world, packed, 1);
        std::vector<std::vector<int64_t>> work(static_cast<size_t>(world));
        for (int r = 0; r < world; ++r)
          for (const cp::RingStep& step : cp::ring_schedule(world, r, causal, packed)) {
            int64_t pairs = 0;
            for (const cp::Block& block : step.blocks)
              for_each_attended_pair(layout.part(block.queries), layout.part(block.keys),
                                     block.causal, [&](int64_t, int64_t) { ++pairs; });
            work[r].push_back(pairs);
          }
        for (int r = 1; r < world; ++r) EXPECT_EQ(work[r], work[0]) << "rank " << r;
        // No step is idle: every step of every rank has work.
        for (int64_t pairs : work[0]) EXPECT_GT(pairs, 0);
      }
}

std::string error_message(const auto& call) {
  try {
    call();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::invalid_argument);
    return e.what();
  }
  return "accepted";
}

TEST(RingSchedule, PackedDocumentNotAMultipleOfTwoWorldIsNamed) {
  // world 3: documents must be multiples of 6; document 1 has 5 tokens.
  const std::string message = error_message([] { cp::packed_shards({0, 12, 17, 29}, 3); });
  EXPECT_NE(message.find("document 1"), std::string::npos) << message;
  EXPECT_NE(message.find("5 tokens"), std::string::npos) << message;
  EXPECT_EQ(error_message([] { cp::packed_shards({0, 12, 18, 30}, 3); }), "accepted");
}

TEST(RingSchedule, RankOutsideTheRingIsRefused) {
  for (const bool packed : {false, true}) {
    const std::string above = error_message([&] { cp::ring_schedule(4, 4, true, packed); });
    EXPECT_NE(above.find("rank = 4"), std::string::npos) << above;
    const std::string below = error_message([&] { cp::ring_schedule(4, -1, false, packed); });
    EXPECT_NE(below.find("rank = -1"), std::string::npos) << below;
    const std::string empty = error_message([&] { cp::ring_schedule(0, 0, true, packed); });
    EXPECT_NE(empty.find("world = 0"), std::string::npos) << empty;
  }
}

}  // namespace
}  // namespace tilefmha
