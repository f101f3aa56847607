// validate(): a valid baseline of every family passes; each invalid case mutates one thing of a
// baseline and must fail with ErrorKind::invalid_problem naming the field (and the value).
#include "tilefmha/validate.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "core/numeric.hpp"
#include "support/host_tensor.hpp"
#include "tilefmha/error.hpp"

using namespace tilefmha;
using tilefmha::testing::HostTensor;

namespace {

constexpr DType kBf16 = DType::bf16;
constexpr DType kF32 = DType::fp32;

// A problem together with the host memory its views point at.
class Fixture {
 public:
  Problem problem;

  // A contiguous tensor of `shape`.
  TensorView tensor(DType dtype, std::vector<int64_t> shape) {
    std::vector<int64_t> stride(shape.size());
    int64_t running = 1;
    for (size_t d = shape.size(); d-- > 0;) {
      stride[d] = running;
      running *= shape[d];
    }
    return strided(dtype, running, shape, stride);
  }
  // `elements` elements of storage viewed through `shape` and `stride` (bhsd, HND, broadcast).
  TensorView strided(DType dtype, int64_t elements, std::vector<int64_t> shape,
                     std::vector<int64_t> stride) {
    storage_.push_back(
        std::make_unique<HostTensor>(dtype, std::initializer_list<int64_t>{elements}));
    TensorView view = storage_.back()->view();
    view.rank = static_cast<int>(shape.size());
    for (size_t d = 0; d < shape.size(); ++d) {
      view.shape[d] = shape[d];
      view.stride[d] = stride[d];
    }
    return view;
  }

 private:
  std::vector<std::unique_ptr<HostTensor>> storage_;
};

// ---- Valid baselines, one or more per family -------------------------------------------------
// Batch-mode shapes: batch 2, heads 4/2 (GQA), seqlen_q 5, seqlen_k 7, hdim_q 32, hdim_v 16.

Fixture fwd_batch() {
  Fixture f;
  ProblemBuilder b(Family::fwd);
  b.dtype(kBf16)
      .shape(2, 4, 2, 5, 7, 32, 16)
      .q(f.tensor(kBf16, {2, 5, 4, 32}))
      .k(f.tensor(kBf16, {2, 7, 2, 32}))
      .v(f.tensor(kBf16, {2, 7, 2, 16}))
      .o(f.tensor(kBf16, {2, 5, 4, 16}))
      .lse(f.tensor(kF32, {2, 4, 5}));
  f.problem = b.peek();
  return f;
}

// Memory order [batch, head, seq, dim] through strides.
Fixture fwd_bhsd() {
  Fixture f = fwd_batch();
  Problem& p = f.problem;
  p.q = f.strided(kBf16, 2 * 5 * 4 * 32, {2, 5, 4, 32}, {4 * 5 * 32, 32, 5 * 32, 1});
  p.k = f.strided(kBf16, 2 * 7 * 2 * 32, {2, 7, 2, 32}, {2 * 7 * 32, 32, 7 * 32, 1});
  p.o = f.strided(kBf16, 2 * 5 * 4 * 16, {2, 5, 4, 16}, {4 * 5 * 16, 16, 5 * 16, 1});
  return f;
}

// Three sequences, the second with no queries, the third with no keys.
Fixture fwd_group() {
  Fixture f;
  ProblemBuilder b(Family::fwd);
  b.dtype(DType::fp16)
      .shape(0, 4, 2, 0, 0, 32, 16)
      .group({0, 3, 3, 8}, {0, 4, 9, 9})
      .causal(MaskAlign::bottom_right)
      .q(f.tensor(DType::fp16, {1, 8, 4, 32}))
      .k(f.tensor(DType::fp16, {1, 9, 2, 32}))
      .v(f.tensor(DType::fp16, {1, 9, 2, 16}))
      .o(f.tensor(DType::fp16, {1, 8, 4, 16}))
      .lse(f.tensor(kF32, {1, 4, 8}));
  f.problem = b.peek();
  return f;
}

// Group mode over a contiguous cache: only part of each sequence's K span is valid.
Fixture fwd_group_cache() {
  Fixture f = fwd_group();
  f.problem.seqlen_k_per_batch = {2, 5, 0};
  return f;
}

Fixture fwd_features() {
  Fixture f = fwd_batch();
  ProblemBuilder b(Family::fwd);
  b.dtype(kBf16)
      .shape(2, 4, 2, 5, 7, 32, 16)
      .window(3, 0, MaskAlign::bottom_right)
      .sink_tokens(2)
      .scale(0.2)
      // Broadcast over the batch: stride 0.
      .bias(f.strided(kBf16, 4 * 5 * 7, {2, 4, 5, 7}, {0, 35, 7, 1}))
      .sink_logits(f.tensor(kF32, {4}))
      .dropout(0.1, 42, 7, f.tensor(DType::uint8, {2, 4, 5, 7}))
      .q(f.problem.q)
      .k(f.problem.k)
      .v(f.problem.v)
      .o(f.problem.o);
  f.problem = b.peek();
  return f;
}

Fixture fwd_alibi() {
  Fixture f = fwd_batch();
  f.problem.bias_kind = BiasKind::alibi;
  f.problem.alibi_slopes = f.tensor(kF32, {2, 4});  // per sequence and head
  f.problem.softcap = 30.0;
  f.problem.mask = {MaskKind::causal, MaskAlign::top_left, -1, 0, 0};
  return f;
}

Fixture fwd_fp8_block() {
  Fixture f;
  const DType e4m3 = DType::fp8_e4m3;
  Fp8Scales scales;
  scales.kind = Fp8ScaleKind::per_block;
  scales.q_block = f.tensor(kF32, {2, 4, 1});
  scales.k_block = f.tensor(kF32, {2, 2, 2});  // 130 keys: two blocks of 128
  scales.v_block = f.tensor(kF32, {2, 2, 2});
  ProblemBuilder b(Family::fwd);
  b.dtype(e4m3)
      .shape(2, 4, 2, 5, 130, 32, 16)
      .fp8_scales(scales)
      .q(f.tensor(e4m3, {2, 5, 4, 32}))
      .k(f.tensor(e4m3, {2, 130, 2, 32}))
      .v(f.tensor(e4m3, {2, 130, 2, 16}))
      .o(f.tensor(kBf16, {2, 5, 4, 16}));
  f.problem = b.peek();
  return f;
}

Fixture fwd_fp8_tensor() {
  Fixture f;
  const DType e5m2 = DType::fp8_e5m2;
  Fp8Scales scales;
  scales.kind = Fp8ScaleKind::per_tensor;
  scales.q_descale = 0.5;
  ProblemBuilder b(Family::fwd);
  b.dtype(e5m2)
      .out_dtype(kF32)
      .shape(2, 4, 2, 5, 7, 32, 16)
      .fp8_scales(scales)
      .q(f.tensor(e5m2, {2, 5, 4, 32}))
      .k(f.tensor(e5m2, {2, 7, 2, 32}))
      .v(f.tensor(e5m2, {2, 7, 2, 16}))
      .o(f.tensor(kF32, {2, 5, 4, 16}));
  f.problem = b.peek();
  return f;
}

// Decode over a vLLM block table: key lengths 7 and 20, pages of 16, 6 pages in the pool.
// Entries past a sequence's last page are padding (-1).
Fixture paged_vllm() {
  Fixture f;
  PagedKv paged;
  paged.table = PageTableKind::vllm_block_table;
  paged.page_size = 16;
  paged.num_pages = 6;
  paged.max_pages_per_seq = 2;
  paged.block_table = {3, -1, 0, 5};
  ProblemBuilder b(Family::fwd_pagedkv);
  b.dtype(kBf16)
      .shape(2, 4, 2, 1, 0, 32, 16)
      .key_lengths({7, 20})
      .paged(paged)
      .q(f.tensor(kBf16, {2, 1, 4, 32}))
      .k(f.tensor(kBf16, {6, 16, 2, 32}))
      .v(f.tensor(kBf16, {6, 16, 2, 16}))
      .o(f.tensor(kBf16, {2, 1, 4, 16}));
  f.problem = b.peek();
  return f;
}

Fixture paged_fp8_page() {
  Fixture f = paged_vllm();
  Problem& p = f.problem;
  p.dtype = DType::fp8_e4m3;
  p.out_dtype = kF32;
  p.q = f.tensor(p.dtype, {2, 1, 4, 32});
  p.k = f.tensor(p.dtype, {6, 16, 2, 32});
  p.v = f.tensor(p.dtype, {6, 16, 2, 16});
  p.o = f.tensor(kF32, {2, 1, 4, 16});
  p.fp8.kind = Fp8ScaleKind::per_page;
  p.fp8.q_descale = 0.25;
  p.fp8.k_page = f.tensor(kF32, {6, 2});
  p.fp8.v_page = f.tensor(kF32, {6, 2});
  return f;
}

// Varlen prefill over an SGLang page list with an HND cache ([pages, heads, page_size, dim]).
Fixture prefill_sglang() {
  Fixture f;
  PagedKv paged;
  paged.table = PageTableKind::sglang_page_list;
  paged.layout = KvLayout::hnd;
  paged.page_size = 16;
  paged.num_pages = 8;
  paged.page_indptr = {0, 1, 1, 4};
  paged.page_indices = {7, 2, 0, 5};
  const std::vector<int64_t> hnd_k = {2 * 16 * 32, 32, 16 * 32, 1};
  const std::vector<int64_t> hnd_v = {2 * 16 * 16, 16, 16 * 16, 1};
  ProblemBuilder b(Family::batch_prefill);
  b.dtype(kBf16)
      .shape(0, 4, 2, 0, 0, 32, 16)
      .group({0, 4, 4, 6}, {})
      .key_lengths({10, 0, 33})
      .paged(paged)
      .q(f.tensor(kBf16, {1, 6, 4, 32}))
      .k(f.strided(kBf16, 8 * 2 * 16 * 32, {8, 16, 2, 32}, hnd_k))
      .v(f.strided(kBf16, 8 * 2 * 16 * 16, {8, 16, 2, 16}, hnd_v))
      .o(f.tensor(kBf16, {1, 6, 4, 16}))
      .lse(f.tensor(kF32, {1, 4, 6}));
  f.problem = b.peek();
  return f;
}

Fixture splitkv_batch() {
  Fixture f;
  ProblemBuilder b(Family::fwd_splitkv);
  b.dtype(kBf16)
      .shape(2, 4, 2, 5, 7, 32, 16)
      .splits(3, f.tensor(kF32, {3, 2, 4, 5, 16}), f.tensor(kF32, {3, 2, 4, 5}))
      .q(f.tensor(kBf16, {2, 5, 4, 32}))
      .k(f.tensor(kBf16, {2, 7, 2, 32}))
      .v(f.tensor(kBf16, {2, 7, 2, 16}));
  f.problem = b.peek();
  return f;
}

Fixture splitkv_group() {
  Fixture f = fwd_group();
  Problem& p = f.problem;
  p.family = Family::fwd_splitkv;
  p.o = {};
  p.lse = {};
  p.return_lse = false;
  p.split = {2, f.tensor(kF32, {2, 1, 4, 8, 16}), f.tensor(kF32, {2, 1, 4, 8})};
  return f;
}

Fixture splitkv_combine() {
  Fixture f;
  ProblemBuilder b(Family::fwd_splitkv_combine);
  b.dtype(kBf16)
      .shape(2, 4, 2, 5, 7, 32, 16)
      .splits(3, f.tensor(kF32, {3, 2, 4, 5, 16}), f.tensor(kF32, {3, 2, 4, 5}))
      .sink_logits(f.tensor(kF32, {4}))
      .o(f.tensor(kBf16, {2, 5, 4, 16}))
      .lse(f.tensor(kF32, {2, 4, 5}));
  f.problem = b.peek();
  return f;
}

// Append 4 tokens to caches of capacity 16 holding 3 and 10 tokens, RoPE on K and Q.
Fixture append_rope() {
  Fixture f;
  AppendKv a;
  a.seqlen_knew = 4;
  a.k_new = f.tensor(kBf16, {2, 4, 2, 32});
  a.v_new = f.tensor(kBf16, {2, 4, 2, 16});
  a.rope = RopeKind::half_rotated;
  a.rotary_dim = 16;
  a.rope_cos = f.tensor(kF32, {20, 8});
  a.rope_sin = f.tensor(kF32, {20, 8});
  a.rotate_q = true;
  ProblemBuilder b(Family::fwd_appendkv);
  b.dtype(kBf16)
      .shape(2, 4, 2, 2, 16, 32, 16)
      .key_lengths({3, 10})
      .append(a)
      .q(f.tensor(kBf16, {2, 2, 4, 32}))
      .k(f.tensor(kBf16, {2, 16, 2, 32}))
      .v(f.tensor(kBf16, {2, 16, 2, 16}));
  f.problem = b.peek();
  return f;
}

// Append 3 tokens into a vLLM-paged cache: sequence 1 grows from 17 to 20 keys (3 pages of 8).
Fixture append_paged() {
  Fixture f;
  AppendKv a;
  a.seqlen_knew = 3;
  a.k_new = f.tensor(kBf16, {2, 3, 2, 32});
  a.v_new = f.tensor(kBf16, {2, 3, 2, 16});
  PagedKv paged;
  paged.table = PageTableKind::vllm_block_table;
  paged.page_size = 8;
  paged.num_pages = 6;
  paged.max_pages_per_seq = 3;
  paged.block_table = {4, -1, -1, 0, 2, 5};
  ProblemBuilder b(Family::fwd_appendkv);
  b.dtype(kBf16)
      .shape(2, 4, 2, 1, 0, 32, 16)
      .key_lengths({5, 17})
      .append(a)
      .paged(paged)
      .k(f.tensor(kBf16, {6, 8, 2, 32}))
      .v(f.tensor(kBf16, {6, 8, 2, 16}));
  f.problem = b.peek();
  return f;
}

Fixture bwd_dot_do_o() {
  Fixture f;
  Backward g;
  g.d_o = f.tensor(kBf16, {2, 5, 4, 16});
  g.d = f.tensor(kF32, {2, 4, 5});
  ProblemBuilder b(Family::bwd_dot_do_o);
  b.dtype(kBf16).shape(2, 4, 2, 5, 7, 32, 16).o(f.tensor(kBf16, {2, 5, 4, 16})).backward(g);
  f.problem = b.peek();
  return f;
}

Fixture bwd_dq_dk_dv() {
  Fixture f;
  Backward g;
  g.d_o = f.tensor(kBf16, {2, 5, 4, 16});
  g.d = f.tensor(kF32, {2, 4, 5});
  g.dq_acc = f.tensor(kF32, {2, 5, 4, 32});
  g.dk = f.tensor(kBf16, {2, 7, 2, 32});
  g.dv = f.tensor(kBf16, {2, 7, 2, 16});
  g.dbias = f.tensor(kBf16, {2, 4, 5, 7});
  g.deterministic = true;
  ProblemBuilder b(Family::bwd_dq_dk_dv);
  b.dtype(kBf16)
      .shape(2, 4, 2, 5, 7, 32, 16)
      .causal()
      .bias(f.tensor(kBf16, {2, 4, 5, 7}))
      .dropout(0.2, 1, 2)
      .q(f.tensor(kBf16, {2, 5, 4, 32}))
      .k(f.tensor(kBf16, {2, 7, 2, 32}))
      .v(f.tensor(kBf16, {2, 7, 2, 16}))
      .lse(f.tensor(kF32, {2, 4, 5}))
      .backward(g);
  f.problem = b.peek();
  return f;
}

Fixture bwd_dq_dk_dv_group() {
  Fixture f = fwd_group();
  Problem& p = f.problem;
  p.family = Family::bwd_dq_dk_dv;
  p.o = {};
  p.bias_kind = BiasKind::alibi;
  p.alibi_slopes = f.tensor(kF32, {4});
  p.bwd.d_o = f.tensor(DType::fp16, {1, 8, 4, 16});
  p.bwd.d = f.tensor(kF32, {1, 4, 8});
  p.bwd.dq_acc = f.tensor(kF32, {1, 8, 4, 32});
  p.bwd.dk = f.tensor(DType::fp16, {1, 9, 2, 32});
  p.bwd.dv = f.tensor(DType::fp16, {1, 9, 2, 16});
  return f;
}

Fixture bwd_convert_dq() {
  Fixture f;
  Backward g;
  g.dq_acc = f.tensor(kF32, {2, 5, 4, 32});
  g.dq = f.tensor(kBf16, {2, 5, 4, 32});
  ProblemBuilder b(Family::bwd_convert_dq);
  b.dtype(kBf16).shape(2, 4, 2, 5, 7, 32, 16).backward(g);
  f.problem = b.peek();
  return f;
}

using Baseline = Fixture (*)();

struct NamedBaseline {
  const char* name;
  Baseline make;
};

const std::vector<NamedBaseline>& baselines() {
  static const std::vector<NamedBaseline> all = {
      {"fwd_batch", fwd_batch},
      {"fwd_bhsd", fwd_bhsd},
      {"fwd_group", fwd_group},
      {"fwd_group_cache", fwd_group_cache},
      {"fwd_features", fwd_features},
      {"fwd_alibi", fwd_alibi},
      {"fwd_fp8_block", fwd_fp8_block},
      {"fwd_fp8_tensor", fwd_fp8_tensor},
      {"paged_vllm", paged_vllm},
      {"paged_fp8_page", paged_fp8_page},
      {"prefill_sglang", prefill_sglang},
      {"splitkv_batch", splitkv_batch},
      {"splitkv_group", splitkv_group},
      {"splitkv_combine", splitkv_combine},
      {"append_rope", append_rope},
      {"append_paged", append_paged},
      {"bwd_dot_do_o", bwd_dot_do_o},
      {"bwd_dq_dk_dv", bwd_dq_dk_dv},
      {"bwd_dq_dk_dv_group", bwd_dq_dk_dv_group},
      {"bwd_convert_dq", bwd_convert_dq},
  };
  return all;
}

// Runs validate() and returns the message of the invalid_problem error it throws.
::testing::AssertionResult rejects(const Problem& problem, std::string* message) {
  try {
    validate(problem);
  } catch (const Error& error) {
    if (error.kind() != ErrorKind::invalid_problem)
      return ::testing::AssertionFailure()
             << "threw an Error of another kind: " << static_cast<int>(error.kind()) << " "
             << error.what();
    *message = error.what();
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << "validate() accepted the problem";
}

}  // namespace

// ---- Every valid baseline passes --------------------------------------------------------------

class ValidBaseline : public ::testing::TestWithParam<NamedBaseline> {};

TEST_P(ValidBaseline, Passes) {
  const Fixture f = GetParam().make();
  EXPECT_NO_THROW(validate(f.problem)) << f.problem.describe();
}

INSTANTIATE_TEST_SUITE_P(EveryFamily, ValidBaseline, ::testing::ValuesIn(baselines()),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(ValidBaseline, CoversEveryFamily) {
  std::vector<bool> seen(enum_count<Family>(), false);
  for (const auto& baseline : baselines())
    seen[static_cast<size_t>(baseline.make().problem.family)] = true;
  for (size_t i = 0; i < seen.size(); ++i)
    EXPECT_TRUE(seen[i]) << "no baseline of family " << to_string(static_cast<Family>(i));
}

TEST(Validate, EmptySequencesWithNullViewsPass) {
  // seqlen_q = 0: the Q/O/LSE views have no elements and nothing to point at.
  Fixture f = fwd_batch();
  Problem& p = f.problem;
  p.seqlen_q = 0;
  p.q = f.tensor(kBf16, {2, 0, 4, 32});
  p.o = f.tensor(kBf16, {2, 0, 4, 16});
  p.lse = f.tensor(kF32, {2, 4, 0});
  p.q.data = p.o.data = p.lse.data = nullptr;
  EXPECT_NO_THROW(validate(p));
}

TEST(Validate, NeverReadsTensorMemory) {
  // Device views with addresses that must not be dereferenced on the host.
  Fixture f = bwd_dq_dk_dv();
  Problem& p = f.problem;
  for (TensorView* view : {&p.q, &p.k, &p.v, &p.lse, &p.bias, &p.bwd.d_o, &p.bwd.d, &p.bwd.dq_acc,
                           &p.bwd.dk, &p.bwd.dv, &p.bwd.dbias}) {
    view->space = MemorySpace::device;
    view->data = reinterpret_cast<void*>(uintptr_t{0x10});
  }
  EXPECT_NO_THROW(validate(p));
}

TEST(Validate, DeviceSinkLogitsAreNotRead) {
  // Host sink logits are checked for finiteness; device ones cannot be read without a copy,
  // so validation leaves them to the caller (planning must not synchronize).
  Fixture f = fwd_features();
  Problem& p = f.problem;
  for (TensorView* view :
       {&p.q, &p.k, &p.v, &p.o, &p.bias, &p.sink_logits, &p.dropout.random_values}) {
    view->space = MemorySpace::device;
    view->data = reinterpret_cast<void*>(uintptr_t{0x10});
  }
  EXPECT_NO_THROW(validate(p));
}

TEST(Validate, BuilderBuildRejectsInvalidProblems) {
  ProblemBuilder builder(Family::fwd);
  builder.dtype(kBf16).shape(1, 6, 4, 8, 8, 64, 64);
  try {
    builder.build();
    FAIL() << "build() accepted nhead_q = 6 with nhead_k = 4";
  } catch (const Error& error) {
    EXPECT_EQ(error.kind(), ErrorKind::invalid_problem);
    EXPECT_NE(std::string(error.what()).find("nhead_q = 6"), std::string::npos) << error.what();
  }
}

TEST(Validate, PagedPaddingEntriesAreNotChecked) {
  // block_table[1] is padding for sequence 0 (7 keys fit in one page); any value is allowed.
  Fixture f = paged_vllm();
  f.problem.paged.block_table[1] = 1000;
  EXPECT_NO_THROW(validate(f.problem));
  f.problem.seqlen_k_per_batch[0] = 17;  // now the second page is used and points past the pool
  std::string message;
  ASSERT_TRUE(rejects(f.problem, &message));
  EXPECT_NE(message.find("paged.block_table[1] = 1000"), std::string::npos) << message;
}

// Device page tables: their entries are not read, only their form and their room for the
// longest sequence are checked, and a table given both ways is refused.
TEST(Validate, DevicePageTablesAreCheckedForFormAndRoomOnly) {
  const auto table = reinterpret_cast<const int32_t*>(uintptr_t{1} << 20);
  const auto offsets = reinterpret_cast<const int64_t*>(uintptr_t{2} << 20);
  Fixture f = paged_vllm();
  f.problem.paged.block_table.clear();
  f.problem.device_indices.block_table = table;
  EXPECT_NO_THROW(validate(f.problem));
  std::string message;
  f.problem.paged.max_pages_per_seq = 1;  // sequence 1 (20 keys) needs 2 pages of 16
  ASSERT_TRUE(rejects(f.problem, &message));
  EXPECT_NE(message.find("paged.max_pages_per_seq = 1"), std::string::npos) << message;
  f.problem.paged.max_pages_per_seq = 2;
  f.problem.paged.block_table = {3, -1, 0, 5};  // the host table too
  ASSERT_TRUE(rejects(f.problem, &message));
  EXPECT_NE(message.find("give the table one way"), std::string::npos) << message;

  Fixture g = prefill_sglang();
  g.problem.paged.page_indptr.clear();
  g.problem.paged.page_indices.clear();
  g.problem.device_indices.page_indices = table;
  ASSERT_TRUE(rejects(g.problem, &message));  // the offsets are missing
  EXPECT_NE(message.find("page_indptr and page_indices"), std::string::npos) << message;
  g.problem.device_indices.page_indptr = offsets;
  EXPECT_NO_THROW(validate(g.problem));
  g.problem.device_indices.block_table = table;
  ASSERT_TRUE(rejects(g.problem, &message));
  EXPECT_NE(message.find("device_indices.block_table is set"), std::string::npos) << message;
}

TEST(Validate, DeviceKeyLengthsServePagedGroupMode) {
  Fixture f = prefill_sglang();
  f.problem.seqlen_k_per_batch.clear();
  std::string message;
  ASSERT_TRUE(rejects(f.problem, &message));
  EXPECT_NE(message.find("seqlen_k_per_batch is empty"), std::string::npos) << message;
  f.problem.device_indices.seqlen_k = reinterpret_cast<const int64_t*>(uintptr_t{1} << 20);
  f.problem.seqlen_k = 33;  // the longest, as the caller gives it
  EXPECT_NO_THROW(validate(f.problem));
}

TEST(Validate, SoftcapAndScaleBoundaries) {
  Fixture f = fwd_batch();
  f.problem.softcap = 0.0;         // off
  f.problem.softmax_scale = -0.5;  // negative scales are legal (non-zero, finite)
  EXPECT_NO_THROW(validate(f.problem));
  f.problem.dropout.p = std::nextafter(1.0, 0.0);
  EXPECT_NO_THROW(validate(f.problem));
}

// ---- Invalid problems: one mutation of a valid baseline each ------------------------------------

namespace {

struct InvalidCase {
  const char* name;
  Baseline baseline;
  std::function<void(Fixture&)> mutate;
  // Every fragment must appear in the message: the field name, and the value where meaningful.
  std::vector<std::string> fragments;
};

const double kNan = std::numeric_limits<double>::quiet_NaN();

const std::vector<InvalidCase>& invalid_cases() {
  static const std::vector<InvalidCase> all = {
      // Sizes and dtypes.
      {"NheadNotMultiple",
       fwd_batch,
       [](Fixture& f) { f.problem.nhead_q = 7; },
       {"nhead_q = 7", "nhead_k = 2", "multiple"}},
      {"NheadKZero", fwd_batch, [](Fixture& f) { f.problem.nhead_k = 0; }, {"nhead_k = 0"}},
      {"BatchZero", fwd_batch, [](Fixture& f) { f.problem.batch = 0; }, {"batch = 0"}},
      {"HdimZero", fwd_batch, [](Fixture& f) { f.problem.hdim_q = 0; }, {"hdim_q = 0", "[1, 256]"}},
      {"Hdim300",
       fwd_batch,
       [](Fixture& f) { f.problem.hdim_q = 300; },
       {"hdim_q = 300", "[1, 256]"}},
      {"HdimV257", fwd_batch, [](Fixture& f) { f.problem.hdim_v = 257; }, {"hdim_v = 257"}},
      {"NegativeSeqlenQ",
       fwd_batch,
       [](Fixture& f) { f.problem.seqlen_q = -1; },
       {"seqlen_q = -1"}},
      {"NegativeSeqlenK",
       fwd_batch,
       [](Fixture& f) { f.problem.seqlen_k = -3; },
       {"seqlen_k = -3"}},
      {"IndexDtype",
       fwd_batch,
       [](Fixture& f) { f.problem.dtype = DType::int32; },
       {"dtype = int32"}},
      {"OutDtypeDiffers",
       fwd_batch,
       [](Fixture& f) { f.problem.out_dtype = DType::fp16; },
       {"out_dtype = fp16", "bf16"}},
      {"Fp8OutDtypeFp16",
       fwd_fp8_block,
       [](Fixture& f) { f.problem.out_dtype = DType::fp16; },
       {"out_dtype = fp16", "fp8_e4m3"}},
      {"FamilyOutOfRange",
       fwd_batch,
       [](Fixture& f) { f.problem.family = static_cast<Family>(42); },
       {"family = 42"}},

      // Logits and masks.
      {"WindowOnUnmasked",
       fwd_batch,
       [](Fixture& f) { f.problem.mask.window_left = 5; },
       {"mask.window_left = 5", "mask.kind = none"}},
      {"SinkTokensOnUnmasked",
       fwd_batch,
       [](Fixture& f) { f.problem.mask.sink_tokens = 2; },
       {"mask.sink_tokens = 2", "mask.kind = none"}},
      {"NegativeSinkTokens",
       fwd_features,
       [](Fixture& f) { f.problem.mask.sink_tokens = -1; },
       {"mask.sink_tokens = -1"}},
      {"CausalWithRightWindow",
       fwd_group,
       [](Fixture& f) { f.problem.mask.window_right = 3; },
       {"mask.window_right = 3", "causal"}},
      {"WindowBelowMinusOne",
       fwd_features,
       [](Fixture& f) { f.problem.mask.window_left = -2; },
       {"mask.window_left = -2"}},
      {"ScaleZero",
       fwd_batch,
       [](Fixture& f) { f.problem.softmax_scale = 0.0; },
       {"softmax_scale = 0"}},
      {"ScaleNan",
       fwd_batch,
       [](Fixture& f) { f.problem.softmax_scale = kNan; },
       {"softmax_scale = nan"}},
      {"NegativeSoftcap",
       fwd_alibi,
       [](Fixture& f) { f.problem.softcap = -1.0; },
       {"softcap = -1"}},
      {"BiasMissing",
       fwd_features,
       [](Fixture& f) { f.problem.bias = {}; },
       {"bias is missing", "bias_kind = elementwise"}},
      {"BiasWrongShape",
       fwd_features,
       [](Fixture& f) {
         f.problem.bias = f.tensor(kBf16, {2, 4, 5, 6});
       },
       {"bias.shape = [2, 4, 5, 6]", "seqlen_k"}},
      {"BiasIntDtype",
       fwd_features,
       [](Fixture& f) {
         f.problem.bias = f.tensor(DType::int32, {2, 4, 5, 7});
       },
       {"bias.dtype = int32"}},
      {"BiasWithoutKind",
       fwd_batch,
       [](Fixture& f) {
         f.problem.bias = f.tensor(kBf16, {2, 4, 5, 7});
       },
       {"bias is set", "bias_kind = none"}},
      {"AlibiWrongShape",
       fwd_alibi,
       [](Fixture& f) { f.problem.alibi_slopes = f.tensor(kF32, {3}); },
       {"alibi_slopes.shape = [3]", "nhead_q"}},
      {"AlibiHalf",
       fwd_alibi,
       [](Fixture& f) { f.problem.alibi_slopes = f.tensor(DType::fp16, {4}); },
       {"alibi_slopes.dtype = fp16"}},
      {"AlibiSlopesWithoutKind",
       fwd_batch,
       [](Fixture& f) { f.problem.alibi_slopes = f.tensor(kF32, {4}); },
       {"alibi_slopes is set", "bias_kind = none"}},
      {"SinkLogitsWrongShape",
       splitkv_combine,
       [](Fixture& f) { f.problem.sink_logits = f.tensor(kF32, {2}); },
       {"sink_logits.shape = [2]"}},

      // Accumulation into the output.
      {"AccumulateOnPagedFamily",
       paged_vllm,
       [](Fixture& f) { f.problem.accumulate = true; },
       {"accumulate = true", "family fwd", "fwd_pagedkv"}},
      {"AccumulateFp8",
       fwd_fp8_tensor,
       [](Fixture& f) { f.problem.accumulate = true; },
       {"accumulate = true", "fp16 or bf16", "fp8_e5m2"}},
      {"AccumulateWithSinkLogit",
       fwd_features,
       [](Fixture& f) { f.problem.accumulate = true; },
       {"accumulate = true", "sink_logits", "merge_states"}},
      {"AccumulateWithSplits",
       fwd_batch,
       [](Fixture& f) {
         f.problem.accumulate = true;
         f.problem.split.num_splits = 3;
       },
       {"accumulate = true", "one pass", "split.num_splits = 3"}},
      {"AccumulateWithoutLse",
       fwd_batch,
       [](Fixture& f) {
         f.problem.accumulate = true;
         f.problem.return_lse = false;
         f.problem.lse = {};
       },
       {"accumulate = true", "needs lse"}},

      // Dropout.
      {"DropoutOne",
       fwd_features,
       [](Fixture& f) { f.problem.dropout.p = 1.0; },
       {"dropout.p = 1", "[0, 1)"}},
      {"DropoutNegative",
       fwd_batch,
       [](Fixture& f) { f.problem.dropout.p = -0.1; },
       {"dropout.p = -0.1"}},
      {"DropoutNan",
       bwd_dq_dk_dv,
       [](Fixture& f) { f.problem.dropout.p = kNan; },
       {"dropout.p = nan"}},
      {"RandomValuesDtype",
       fwd_features,
       [](Fixture& f) {
         f.problem.dropout.random_values = f.tensor(kF32, {2, 4, 5, 7});
       },
       {"dropout.random_values.dtype = fp32", "uint8"}},
      {"RandomValuesWithoutDropout",
       fwd_features,
       [](Fixture& f) { f.problem.dropout.p = 0; },
       {"dropout.random_values is set", "dropout.p = 0"}},

      // FP8.
      {"Fp8WithoutScales",
       fwd_fp8_tensor,
       [](Fixture& f) { f.problem.fp8.kind = Fp8ScaleKind::none; },
       {"fp8_e5m2", "fp8.kind"}},
      {"ScalesWithoutFp8",
       fwd_batch,
       [](Fixture& f) { f.problem.fp8.kind = Fp8ScaleKind::per_tensor; },
       {"fp8.kind = per_tensor", "dtype = bf16"}},
      {"Fp8DescaleZero",
       fwd_fp8_tensor,
       [](Fixture& f) { f.problem.fp8.k_descale = 0; },
       {"fp8.k_descale = 0"}},
      {"Fp8BlockMissing",
       fwd_fp8_block,
       [](Fixture& f) { f.problem.fp8.q_block = {}; },
       {"fp8.q_block is missing"}},
      {"Fp8BlockWrongBlocks",
       fwd_fp8_block,
       [](Fixture& f) {
         f.problem.fp8.k_block = f.tensor(kF32, {2, 2, 1});
       },
       {"fp8.k_block.shape = [2, 2, 1]", "ceil(seqlen_k / 128)"}},
      {"Fp8PageOnContiguous",
       fwd_fp8_tensor,
       [](Fixture& f) { f.problem.fp8.kind = Fp8ScaleKind::per_page; },
       {"fp8.kind = per_page", "paged"}},
      {"Fp8PageScalesMissing",
       paged_fp8_page,
       [](Fixture& f) { f.problem.fp8.v_page = {}; },
       {"fp8.v_page is missing"}},
      {"Fp8PageScalesWrongShape",
       paged_fp8_page,
       [](Fixture& f) {
         f.problem.fp8.k_page = f.tensor(kF32, {5, 2});
       },
       {"fp8.k_page.shape = [5, 2]", "paged.num_pages"}},
      {"Fp8BlockViewUnderTensorKind",
       fwd_fp8_tensor,
       [](Fixture& f) {
         f.problem.fp8.q_block = f.tensor(kF32, {2, 4, 1});
       },
       {"fp8.q_block is set", "fp8.kind = per_tensor"}},

      // Main views.
      {"OutputMissing",
       fwd_batch,
       [](Fixture& f) { f.problem.o = {}; },
       {"o is missing (null data)", "fwd writes it"}},
      {"QueryMissing",
       paged_vllm,
       [](Fixture& f) { f.problem.q = {}; },
       {"q is missing", "fwd_pagedkv reads it"}},
      {"WrongQueryShape",
       fwd_batch,
       [](Fixture& f) {
         f.problem.q = f.tensor(kBf16, {2, 6, 4, 32});
       },
       {"q.shape = [2, 6, 4, 32]", "seqlen_q", "[2, 5, 4, 32]"}},
      {"WrongQueryRank",
       fwd_batch,
       [](Fixture& f) {
         f.problem.q = f.tensor(kBf16, {2, 5, 128});
       },
       {"q.shape = [2, 5, 128]"}},
      {"WrongKeyHdim",
       fwd_batch,
       [](Fixture& f) {
         f.problem.k = f.tensor(kBf16, {2, 7, 2, 16});
       },
       {"k.shape = [2, 7, 2, 16]", "hdim_q"}},
      {"ValueDtype",
       fwd_batch,
       [](Fixture& f) { f.problem.v.dtype = DType::fp16; },
       {"v.dtype = fp16", "bf16"}},
      {"LastDimStride",
       fwd_batch,
       [](Fixture& f) { f.problem.q.stride[3] = 2; },
       {"q.stride[3] = 2", "contiguous"}},
      {"NegativeStride",
       fwd_batch,
       [](Fixture& f) { f.problem.k.stride[1] = -64; },
       {"k.stride[1] = -64", "negative"}},
      {"BroadcastOutput",
       fwd_batch,
       [](Fixture& f) { f.problem.o.stride[0] = 0; },
       {"o.stride[0] = 0"}},
      {"MixedSpaces",
       fwd_batch,
       [](Fixture& f) { f.problem.k.space = MemorySpace::device; },
       {"k.space = device", "q.space = host"}},
      {"LseDtype",
       fwd_batch,
       [](Fixture& f) { f.problem.lse.dtype = kBf16; },
       {"lse.dtype = bf16", "fp32"}},
      {"LseWrongShape",
       fwd_group,
       [](Fixture& f) {
         f.problem.lse = f.tensor(kF32, {3, 4, 5});
       },
       {"lse.shape = [3, 4, 5]", "total_q"}},
      {"ReturnLseWithoutLse",
       fwd_batch,
       [](Fixture& f) { f.problem.lse = {}; },
       {"lse is missing", "return_lse = true"}},
      {"LseWithoutReturnLse",
       fwd_batch,
       [](Fixture& f) { f.problem.return_lse = false; },
       {"lse is set", "return_lse = false"}},

      // Group mode.
      {"SeqstartNotIncreasing",
       fwd_group,
       [](Fixture& f) {
         f.problem.seqstart_q = {0, 3, 2, 8};
       },
       {"seqstart_q is not non-decreasing at index 2 (2 < 3)"}},
      {"SeqstartNotFromZero",
       fwd_group,
       [](Fixture& f) {
         f.problem.seqstart_k = {1, 4, 9, 9};
       },
       {"seqstart_k[0] = 1"}},
      {"SeqstartKWrongSize",
       fwd_group,
       [](Fixture& f) {
         f.problem.seqstart_k = {0, 4, 9};
       },
       {"seqstart_k has 3 entries", "batch = 3"}},
      {"SeqstartPastQueryView",
       fwd_group,
       [](Fixture& f) {
         f.problem.seqstart_q = {0, 3, 4, 9};
       },
       {"q.shape = [1, 8, 4, 32]", "total_q", ">=9"}},
      {"BatchDisagreesWithSeqstart",
       fwd_group,
       [](Fixture& f) { f.problem.batch = 2; },
       {"batch = 2", "seqstart_q"}},
      {"SeqlenQShorterThanSequence",
       fwd_group,
       [](Fixture& f) { f.problem.seqlen_q = 4; },
       {"seqlen_q = 4", "query length 5"}},
      {"SeqstartInBatchMode",
       fwd_batch,
       [](Fixture& f) {
         f.problem.seqstart_q = {0, 5, 10};
       },
       {"seqstart_q has 3 entries", "mode = batch"}},
      {"KeyLengthNegative",
       fwd_group_cache,
       [](Fixture& f) { f.problem.seqlen_k_per_batch[1] = -1; },
       {"seqlen_k_per_batch[1] = -1"}},
      {"KeyLengthsWrongCount",
       paged_vllm,
       [](Fixture& f) {
         f.problem.seqlen_k_per_batch = {7, 20, 3};
       },
       {"seqlen_k_per_batch has 3 entries", "batch = 2"}},
      {"KeyLengthPastSpan",
       fwd_group_cache,
       [](Fixture& f) { f.problem.seqlen_k_per_batch[0] = 5; },
       {"seqlen_k_per_batch[0] = 5", "seqstart_k[1] - seqstart_k[0] = 4"}},
      {"KeyLengthPastSeqlenK",
       paged_vllm,
       [](Fixture& f) { f.problem.seqlen_k = 19; },
       {"seqlen_k = 19", "key length 20"}},

      // Families and paging.
      {"FwdPaged",
       paged_vllm,
       [](Fixture& f) { f.problem.family = Family::fwd; },
       {"paged.table = vllm_block_table", "family fwd"}},
      {"PagedFamilyNotPaged",
       fwd_batch,
       [](Fixture& f) { f.problem.family = Family::fwd_pagedkv; },
       {"paged.table = none", "fwd_pagedkv"}},
      {"PrefillBatchMode",
       paged_vllm,
       [](Fixture& f) { f.problem.family = Family::batch_prefill; },
       {"mode = batch", "batch_prefill"}},
      {"BackwardPaged",
       bwd_dq_dk_dv,
       [](Fixture& f) {
         f.problem.paged.table = PageTableKind::vllm_block_table;
         f.problem.paged.page_size = 16;
         f.problem.paged.num_pages = 1;
       },
       {"paged.table = vllm_block_table", "bwd_dq_dk_dv"}},
      {"PagePastPool",
       paged_vllm,
       [](Fixture& f) { f.problem.paged.block_table[3] = 6; },
       {"paged.block_table[3] = 6", "points past the pool", "num_pages = 6"}},
      {"NegativePage",
       paged_vllm,
       [](Fixture& f) { f.problem.paged.block_table[2] = -1; },
       {"paged.block_table[2] = -1", "negative"}},
      {"TooFewPages",
       paged_vllm,
       [](Fixture& f) {
         f.problem.seqlen_k_per_batch[1] = 40;
         f.problem.seqlen_k = 40;
       },
       {"paged.max_pages_per_seq = 2", "sequence 1 needs 3 pages", "40 keys"}},
      {"BlockTableWrongSize",
       paged_vllm,
       [](Fixture& f) { f.problem.paged.block_table.pop_back(); },
       {"paged.block_table has 3 entries", "2 * 2"}},
      {"PageSizeNotPowerOfTwo",
       paged_vllm,
       [](Fixture& f) { f.problem.paged.page_size = 24; },
       {"paged.page_size = 24"}},
      {"PageSizeTooLarge",
       paged_vllm,
       [](Fixture& f) { f.problem.paged.page_size = 2048; },
       {"paged.page_size = 2048", "1024"}},
      {"NoPages",
       paged_vllm,
       [](Fixture& f) { f.problem.paged.num_pages = 0; },
       {"paged.num_pages = 0"}},
      {"CacheViewWrongPageSize",
       paged_vllm,
       [](Fixture& f) {
         f.problem.k = f.tensor(kBf16, {6, 8, 2, 32});
       },
       {"k.shape = [6, 8, 2, 32]", "paged.page_size"}},
      {"PageIndexPastPool",
       prefill_sglang,
       [](Fixture& f) { f.problem.paged.page_indices[2] = 8; },
       {"paged.page_indices[2] = 8", "num_pages = 8"}},
      {"IndptrDecreasing",
       prefill_sglang,
       [](Fixture& f) {
         f.problem.paged.page_indptr = {0, 2, 1, 4};
       },
       {"paged.page_indptr is not non-decreasing at index 2"}},
      {"IndptrPastIndices",
       prefill_sglang,
       [](Fixture& f) {
         f.problem.paged.page_indptr = {0, 1, 1, 5};
       },
       {"paged.page_indptr[3] = 5", "4 entries"}},
      {"SglangTooFewPages",
       prefill_sglang,
       [](Fixture& f) {
         f.problem.seqlen_k_per_batch[2] = 49;
         f.problem.seqlen_k = 49;
       },
       {"sequence 2", "3 pages", "needs 4", "49 keys"}},
      {"PagedGroupWithoutKeyLengths",
       prefill_sglang,
       [](Fixture& f) { f.problem.seqlen_k_per_batch.clear(); },
       {"seqlen_k_per_batch is empty"}},
      {"TableVectorsWithoutTable",
       fwd_batch,
       [](Fixture& f) {
         f.problem.paged.block_table = {0, 1};
       },
       {"paged.block_table has 2 entries", "paged.table = none"}},

      // Split-KV.
      {"ZeroSplits",
       splitkv_batch,
       [](Fixture& f) { f.problem.split.num_splits = 0; },
       {"split.num_splits = 0"}},
      {"SplitAccumulatorDtype",
       splitkv_batch,
       [](Fixture& f) { f.problem.split.o_acc.dtype = kBf16; },
       {"split.o_acc.dtype = bf16", "fp32"}},
      {"SplitAccumulatorShape",
       splitkv_group,
       [](Fixture& f) {
         f.problem.split.o_acc = f.tensor(kF32, {3, 1, 4, 8, 16});
       },
       {"split.o_acc.shape = [3, 1, 4, 8, 16]", "split.num_splits"}},
      {"SplitLseMissing",
       splitkv_batch,
       [](Fixture& f) { f.problem.split.lse_acc = {}; },
       {"split.lse_acc is missing", "fwd_splitkv writes it"}},
      {"CombineOutputMissing",
       splitkv_combine,
       [](Fixture& f) { f.problem.o = {}; },
       {"o is missing", "fwd_splitkv_combine writes it"}},
      {"CombinePartialsMissing",
       splitkv_combine,
       [](Fixture& f) { f.problem.split.o_acc = {}; },
       {"split.o_acc is missing", "fwd_splitkv_combine reads it"}},

      // Append-KV and RoPE.
      {"AppendNothing",
       append_rope,
       [](Fixture& f) { f.problem.append.seqlen_knew = 0; },
       {"append.seqlen_knew = 0"}},
      {"AppendNewKeysMissing",
       append_rope,
       [](Fixture& f) { f.problem.append.k_new = {}; },
       {"append.k_new is missing"}},
      {"AppendNewValuesWrongShape",
       append_rope,
       [](Fixture& f) {
         f.problem.append.v_new = f.tensor(kBf16, {2, 3, 2, 16});
       },
       {"append.v_new.shape = [2, 3, 2, 16]", "append.seqlen_knew"}},
      {"AppendWithoutCacheLengths",
       append_rope,
       [](Fixture& f) { f.problem.seqlen_k_per_batch.clear(); },
       {"seqlen_k_per_batch is empty"}},
      {"AppendOverflowsCache",
       append_rope,
       [](Fixture& f) {
         f.problem.seqlen_k_per_batch = {3, 13};
       },
       {"k.shape[1] = 16 (cache capacity) cannot hold sequence 1",
        "seqlen_k_per_batch[1] = 13 cached + append.seqlen_knew = 4 new keys"}},
      {"AppendOverflowBlamesCapacityNotRopeTables",
       append_rope,
       [](Fixture& f) {
         // Tables sized to the capacity fall short too; the capacity is what is wrong.
         f.problem.seqlen_k_per_batch = {3, 13};
         f.problem.append.rope_cos = f.tensor(kF32, {16, 8});
         f.problem.append.rope_sin = f.tensor(kF32, {16, 8});
       },
       {"k.shape[1] = 16 (cache capacity)"}},
      {"SinkLogitInfinite",
       fwd_features,
       [](Fixture& f) {
         numeric::store(f.problem.sink_logits, {2}, std::numeric_limits<double>::infinity());
       },
       {"sink_logits[2] = inf must be finite"}},
      {"SinkLogitNan",
       fwd_features,
       [](Fixture& f) {
         numeric::store(f.problem.sink_logits, {0}, std::numeric_limits<double>::quiet_NaN());
       },
       {"sink_logits[0] = nan must be finite"}},
      {"ViewSpanningPastInt64",
       fwd_batch,
       [](Fixture& f) {
         // A huge stride on a dimension of size 2 (never read): offsets would wrap int64.
         f.problem.q.stride[0] = int64_t{1} << 62;
       },
       {"problem too large: q.shape = [2, 5, 4, 32]", "spans more bytes than int64 holds"}},
      {"AppendOverflowsPages",
       append_paged,
       [](Fixture& f) {
         f.problem.seqlen_k_per_batch = {5, 22};
         f.problem.seqlen_k = 22;
       },
       {"sequence 1 needs 4 pages", "22 cached + 3 appended"}},
      {"RotaryDimOdd",
       append_rope,
       [](Fixture& f) { f.problem.append.rotary_dim = 7; },
       {"append.rotary_dim = 7"}},
      {"RotaryDimPastHdim",
       append_rope,
       [](Fixture& f) { f.problem.append.rotary_dim = 64; },
       {"append.rotary_dim = 64", "hdim_q = 32"}},
      {"RotaryDimWithoutRope",
       append_paged,
       [](Fixture& f) { f.problem.append.rotary_dim = 16; },
       {"append.rotary_dim = 16", "append.rope = none"}},
      {"RopeTableTooShort",
       append_rope,
       [](Fixture& f) {
         f.problem.append.rope_cos = f.tensor(kF32, {13, 8});
       },
       {"append.rope_cos.shape[0] = 13", "position 13"}},
      {"RopeTableDtype",
       append_rope,
       [](Fixture& f) {
         f.problem.append.rope_sin = f.tensor(DType::fp16, {20, 8});
       },
       {"append.rope_sin.dtype = fp16"}},
      {"RopeTableMissing",
       append_rope,
       [](Fixture& f) { f.problem.append.rope_cos = {}; },
       {"append.rope_cos is missing"}},
      {"RotateQWithoutRope",
       append_paged,
       [](Fixture& f) { f.problem.append.rotate_q = true; },
       {"append.rotate_q"}},
      {"RotateQWithoutQ",
       append_rope,
       [](Fixture& f) { f.problem.q = {}; },
       {"q is missing", "fwd_appendkv writes it"}},

      // Backward.
      {"DotMissingD",
       bwd_dot_do_o,
       [](Fixture& f) { f.problem.bwd.d = {}; },
       {"bwd.d is missing", "bwd_dot_do_o writes it"}},
      {"DotMissingO",
       bwd_dot_do_o,
       [](Fixture& f) { f.problem.o = {}; },
       {"o is missing", "bwd_dot_do_o reads it"}},
      {"GradMissingLse",
       bwd_dq_dk_dv,
       [](Fixture& f) { f.problem.lse = {}; },
       {"lse is missing", "bwd_dq_dk_dv reads it"}},
      {"ConvertMissingDqAcc",
       bwd_convert_dq,
       [](Fixture& f) { f.problem.bwd.dq_acc = {}; },
       {"bwd.dq_acc is missing", "bwd_convert_dq reads it"}},
      {"GradMissingDv",
       bwd_dq_dk_dv,
       [](Fixture& f) { f.problem.bwd.dv = {}; },
       {"bwd.dv is missing"}},
      {"GradDkDtype",
       bwd_dq_dk_dv,
       [](Fixture& f) { f.problem.bwd.dk.dtype = kF32; },
       {"bwd.dk.dtype = fp32", "bf16"}},
      {"DqAccDtype",
       bwd_convert_dq,
       [](Fixture& f) { f.problem.bwd.dq_acc.dtype = kBf16; },
       {"bwd.dq_acc.dtype = bf16", "fp32"}},
      {"DbiasWithoutBias",
       bwd_dq_dk_dv_group,
       [](Fixture& f) {
         f.problem.bwd.dbias = f.tensor(kF32, {3, 4, 5, 5});
       },
       {"bwd.dbias is set", "bias_kind = alibi"}},
      {"DbiasWrongShape",
       bwd_dq_dk_dv,
       [](Fixture& f) {
         f.problem.bwd.dbias = f.tensor(kBf16, {2, 4, 5, 8});
       },
       {"bwd.dbias.shape = [2, 4, 5, 8]"}},
      {"ConvertMissingDq",
       bwd_convert_dq,
       [](Fixture& f) { f.problem.bwd.dq = {}; },
       {"bwd.dq is missing", "bwd_convert_dq writes it"}},
      {"GradDoWrongShape",
       bwd_dq_dk_dv_group,
       [](Fixture& f) { f.problem.bwd.d_o = f.tensor(DType::fp16, {1, 8, 4, 32}); },
       {"bwd.d_o.shape = [1, 8, 4, 32]", "hdim_v"}},
      {"DsinkWithoutSinkLogits",
       bwd_dq_dk_dv,
       [](Fixture& f) { f.problem.bwd.dsink = f.tensor(kF32, {4}); },
       {"bwd.dsink is set", "sink_logits is not"}},
      {"DsinkDtype",
       bwd_dq_dk_dv,
       [](Fixture& f) {
         f.problem.sink_logits = f.tensor(kF32, {4});
         f.problem.bwd.dsink = f.tensor(kBf16, {4});
       },
       {"bwd.dsink.dtype = bf16", "fp32"}},
      {"DsinkShape",
       bwd_dq_dk_dv,
       [](Fixture& f) {
         f.problem.sink_logits = f.tensor(kF32, {4});
         f.problem.bwd.dsink = f.tensor(kF32, {2});
       },
       {"bwd.dsink.shape = [2]", "nhead_q"}},
      {"DsinkBroadcast",
       bwd_dq_dk_dv,
       [](Fixture& f) {
         f.problem.sink_logits = f.tensor(kF32, {4});
         f.problem.bwd.dsink = f.strided(kF32, 1, {4}, {0});
       },
       {"bwd.dsink.stride[0] = 0"}},
      {"DsinkOnForward",
       fwd_features,
       [](Fixture& f) { f.problem.bwd.dsink = f.tensor(kF32, {4}); },
       {"bwd.dsink is set", "family = fwd", "bwd_dq_dk_dv"}},
      {"DsinkOnDotStage",
       bwd_dot_do_o,
       [](Fixture& f) {
         f.problem.sink_logits = f.tensor(kF32, {4});
         f.problem.bwd.dsink = f.tensor(kF32, {4});
       },
       {"bwd.dsink is set", "family = bwd_dot_do_o", "bwd_dq_dk_dv"}},
  };
  return all;
}

}  // namespace

class InvalidProblem : public ::testing::TestWithParam<InvalidCase> {};

TEST_P(InvalidProblem, IsRejectedNamingTheField) {
  const InvalidCase& c = GetParam();
  Fixture f = c.baseline();
  // The baseline itself is valid, so the rejection below comes from the one mutation.
  ASSERT_NO_THROW(validate(f.problem));
  c.mutate(f);
  std::string message;
  ASSERT_TRUE(rejects(f.problem, &message));
  for (const std::string& fragment : c.fragments)
    EXPECT_NE(message.find(fragment), std::string::npos)
        << "message \"" << message << "\" lacks \"" << fragment << "\"";
}

INSTANTIATE_TEST_SUITE_P(OneMutation, InvalidProblem, ::testing::ValuesIn(invalid_cases()),
                         [](const auto& info) { return std::string(info.param.name); });
