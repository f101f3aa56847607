// The append-KV kernel's own code (kernels/fmha/appendkv.h), compiled for the host against the
// stand-ins of tests/emulation/ and run with one std::thread per CUDA thread (a std::barrier per
// warp for __syncwarp, and an exchange array beside it for __shfl_sync), on the parameters
// runtime::make_appendkv_params builds and the grid codegen::launch_shape_appendkv sizes, against
// the CPU reference: contiguous caches and paged pools (vLLM and SGLang, NHD and HND, pages of 1,
// 16 and 1024), every RoPE kind from tables or a base with position offsets, Q rotated in place,
// 16-byte and element-wise paths, fp32, fp16, bf16 and fp8 (codes compared byte for byte: copies
// exactly, rotated dims within one rounding step of the reference's double rotation), and the key
// counts after the append; runs of heads per thread group (codegen::appendkv_runs) with shorter
// last runs, GQA and MQA, V narrower than K, unrotated Q, and fp32 rows whose runs move in two
// batches. It checks indexing, the vector and scalar paths, the warp ordering of the in-place
// rotation and that the grid covers every row; the GPU itself (PTX, memory model) is
// appendkv_gpu_test's.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "codegen/appendkv.hpp"
#include "core/numeric.hpp"
#include "emulated_launch.hpp"
#include "fmha/appendkv.h"
#include "runtime/appendkv_params.hpp"
#include "runtime/tolerance.hpp"
#include "support/code_agreement.hpp"
#include "support/quantizing_append.hpp"
#include "support/tensor_pool.hpp"
#include "tilefmha/reference.hpp"
#include "tilefmha/validate.hpp"

namespace tilefmha {
namespace {

using testing::TensorPool;

// Runs append_kv<Traits> over the launch shape's grid (tests/emulation/emulated_launch.hpp).
template <class Traits>
void emulate(const fmha::AppendKvParams& params, const jit::LaunchShape& shape) {
  ASSERT_EQ(shape.block[0] % 32, 0u);
  emulation::run_grid(shape.grid[0], shape.block[0], [&] { fmha::append_kv<Traits>(params); });
}

struct Case {
  std::string name;
  DType dtype;
  int64_t hdim;
  PageTableKind table = PageTableKind::none;
  KvLayout layout = KvLayout::nhd;
  int64_t page_size = 0;
  RopeKind rope = RopeKind::none;
  int64_t rotary_dim = 0;
  bool theta = false;
  int64_t seqlen_knew = 5;
  // GQA by default; counts of more than kAppendKvRunHeads heads split into runs with a tail.
  int64_t heads_q = 8;
  int64_t heads_k = 2;
  int64_t hdim_v = 0;  // 0: hdim
  bool rotate_q = true;
  // The run lengths codegen::appendkv_runs must pick (0: not checked).
  int64_t k_run = 0;
  int64_t q_run = 0;
  // A quantizing append (an fp8 paged cache with per-page scales): the new tokens' 16-bit dtype.
  DType new_dtype = DType::fp32;

  bool quantizes() const { return is_fp8(dtype) && new_dtype != DType::fp32; }

  int64_t v_dim() const { return hdim_v > 0 ? hdim_v : hdim; }
};

constexpr int64_t kBatch = 3, kCapacity = 48;
const std::vector<int64_t> kLengths = {17, 0, 40};

// fp8 caches share one scale with the new tokens and Q (the append moves codes).
Fp8Scales per_tensor_scales() {
  Fp8Scales scales;
  scales.kind = Fp8ScaleKind::per_tensor;
  return scales;
}

// One fwd_appendkv problem with its own tensors; two built from one seed are identical.
struct Setup {
  TensorPool pool;
  std::vector<int64_t> lengths = kLengths;
  Problem problem;

  Setup(const Case& c, uint64_t seed) : pool(seed) {
    ProblemBuilder b(Family::fwd_appendkv);
    b.dtype(c.dtype).shape(kBatch, c.heads_q, c.heads_k, c.seqlen_knew, 0, c.hdim, c.v_dim());
    b.key_lengths(lengths);
    int64_t pages = 0;
    if (c.table != PageTableKind::none) {
      PagedKv p;
      p.table = c.table;
      p.layout = c.layout;
      p.page_size = c.page_size;
      std::vector<int64_t> counts;
      for (int64_t n : lengths)
        counts.push_back((n + c.seqlen_knew + c.page_size - 1) / c.page_size);
      pages = std::accumulate(counts.begin(), counts.end(), int64_t{0}) + 1;
      std::vector<int32_t> order(pages);
      std::iota(order.begin(), order.end(), 0);
      std::shuffle(order.begin(), order.end(), pool.rng());
      p.num_pages = pages;
      const int64_t widest = *std::max_element(counts.begin(), counts.end());
      int64_t next = 0;
      if (c.table == PageTableKind::vllm_block_table) {
        p.max_pages_per_seq = widest;
        p.block_table.assign(kBatch * widest, 0);
        for (int64_t s = 0; s < kBatch; ++s)
          for (int64_t n = 0; n < counts[s]; ++n) p.block_table[s * widest + n] = order[next++];
      } else {
        p.page_indptr = {0};
        for (int64_t s = 0; s < kBatch; ++s) {
          for (int64_t n = 0; n < counts[s]; ++n) p.page_indices.push_back(order[next++]);
          p.page_indptr.push_back(static_cast<int64_t>(p.page_indices.size()));
        }
      }
      b.paged(p);
    }
    const int64_t hk = c.heads_k;
    const auto cache = [&](int64_t dim) {
      if (c.table == PageTableKind::none)
        return pool.uniform(c.dtype, {kBatch, kCapacity, hk, dim}, -1, 1);
      const int64_t ps = c.page_size, page = ps * hk * dim;
      return c.layout == KvLayout::nhd ? pool.strided(c.dtype, pages * page, {pages, ps, hk, dim},
                                                      {page, hk * dim, dim, 1}, -1, 1)
                                       : pool.strided(c.dtype, pages * page, {pages, ps, hk, dim},
                                                      {page, dim, ps * dim, 1}, -1, 1);
    };
    const TensorView k = cache(c.hdim), v = cache(c.v_dim());
    b.k(k).v(v);
    AppendKv a;
    a.seqlen_knew = c.seqlen_knew;
    const DType fresh = c.quantizes() ? c.new_dtype : c.dtype;
    const double range = c.quantizes() ? testing::kQuantizedRange : 1.0;
    a.k_new = pool.uniform(fresh, {kBatch, c.seqlen_knew, hk, c.hdim}, -range, range);
    a.v_new = pool.uniform(fresh, {kBatch, c.seqlen_knew, hk, c.v_dim()}, -range, range);
    a.rope = c.rope;
    a.rotary_dim = c.rotary_dim;
    a.rotate_q = c.rope != RopeKind::none && c.rotate_q && !c.quantizes();
    if (c.rope != RopeKind::none && c.theta) {
      a.rope_theta = 500.0;
      a.rope_position_offsets = {7, 0, 300};
    } else if (c.rope != RopeKind::none) {
      const int64_t positions = kCapacity + c.seqlen_knew, half = c.rotary_dim / 2;
      a.rope_cos = pool.uniform(DType::fp32, {positions, half}, -1, 1);
      a.rope_sin = pool.uniform(DType::fp32, {positions, half}, -1, 1);
    }
    b.append(a);
    b.q(pool.uniform(c.dtype, {kBatch, c.seqlen_knew, c.heads_q, c.hdim}, -1, 1));
    if (c.quantizes()) {
      b.fp8_scales(testing::quantizing_page_scales(pool, pages, hk));
    } else if (is_fp8(c.dtype)) {
      b.fp8_scales(per_tensor_scales());
    }
    problem = b.build();
  }
};

// The problem's views flagged as device memory (they stay host memory, which the emulated
// threads read), as make_appendkv_params requires.
Problem as_device(Problem p) {
  for (TensorView* view : {&p.q, &p.k, &p.v, &p.append.k_new, &p.append.v_new, &p.append.rope_cos,
                           &p.append.rope_sin, &p.fp8.k_page, &p.fp8.v_page})
    view->space = MemorySpace::device;
  return p;
}

KernelConfig config_of(const Case& c) {
  KernelConfig k;
  k.family = Family::fwd_appendkv;
  k.pipeline = Pipeline::appendkv;
  k.arch = Arch::sm80;
  k.dtype = k.out_dtype = c.dtype;
  if (is_fp8(c.dtype)) {
    k.arch = Arch::sm90;
    k.fp8_scale = c.quantizes() ? Fp8ScaleKind::per_page : Fp8ScaleKind::per_tensor;
  }
  k.hdim_q = static_cast<int32_t>((c.hdim + 31) / 32 * 32);
  k.hdim_v = static_cast<int32_t>((c.v_dim() + 31) / 32 * 32);
  k.warps = 4;
  k.page_table = c.table;
  k.rope = c.rope;
  return k;
}

// fp8 caches and Q, code by code: V and the unrotated dims exactly; rotated dims (of K and Q)
// within one rounding step, since the kernel rotates in fp32 and the reference in double. A
// quantizing append divides by the scale as a product with its fp32 reciprocal, so any of its
// codes may be one step off.
void expect_same_codes(const TensorView& got, const TensorView& want, const Case& c,
                       const std::string& name) {
  const int64_t rotated = name == "v" || c.rope == RopeKind::none ? 0 : c.rotary_dim;
  const testing::CodeAgreement a = testing::compare_codes(
      got, want, [&](int64_t linear) { return c.quantizes() || linear % c.hdim < rotated; });
  std::printf("  %-40s %s: %lld codes, %lld of %lld rotated one step off\n", c.name.c_str(),
              name.c_str(), static_cast<long long>(a.compared), static_cast<long long>(a.one_step),
              static_cast<long long>(a.loose));
  EXPECT_EQ(a.compared, want.numel()) << name;
  EXPECT_EQ(a.mismatches, 0) << name << ": " << a.one_step << " codes one step off";
  EXPECT_LE(a.one_step * 1000, a.loose) << name << ": " << a.one_step << " of " << a.loose;
}

// A quantizing append's page scales: equal where no RoPE rounds differently, else within 1e-5.
void expect_same_scales(const TensorView& got, const TensorView& want, const char* name) {
  runtime::Agreement agreement;
  agreement.add(got, want, {0.0, 1e-5});
  EXPECT_EQ(agreement.mismatches, 0) << name << ": max abs err " << agreement.max_abs_error;
  EXPECT_EQ(agreement.compared, want.numel()) << name;
}

template <class Element, int Hdim, bool Paged, fmha::RopeMode Rope, bool Quantize = false>
void check(const Case& c) {
  SCOPED_TRACE(c.name);
  const KernelConfig config = config_of(c);
  ASSERT_EQ(std::max(config.hdim_q, config.hdim_v), Hdim) << "the traits below must be codegen's";
  ASSERT_EQ(config.page_table != PageTableKind::none, Paged);
  Setup emulated(c, 5), expected(c, 5);
  ASSERT_NO_THROW(validate(emulated.problem));
  const Problem device = as_device(emulated.problem);
  runtime::FwdDeviceIndices indices;
  indices.seqlen_k_per_batch = emulated.problem.seqlen_k_per_batch.data();
  indices.block_table = emulated.problem.paged.block_table.data();
  indices.page_indptr = emulated.problem.paged.page_indptr.data();
  indices.page_indices = emulated.problem.paged.page_indices.data();
  indices.rope_position_offsets = emulated.problem.append.rope_position_offsets.empty()
                                      ? nullptr
                                      : emulated.problem.append.rope_position_offsets.data();
  std::vector<int64_t> after(kBatch, -1);
  const fmha::AppendKvParams params = runtime::make_appendkv_params(device, indices, after.data());
  if (c.k_run > 0) {
    EXPECT_EQ(params.k_run, c.k_run);
  }
  if (c.q_run > 0) {
    EXPECT_EQ(params.q_run, c.q_run);
  }
  ASSERT_LE(params.k_run, fmha::kAppendKvRunHeads);
  ASSERT_LE(params.q_run, fmha::kAppendKvRunHeads);
  ASSERT_EQ(c.quantizes(), Quantize);
  emulate<fmha::AppendKvTraits<Element, Hdim, 4, Paged, Rope, Quantize>>(
      params, codegen::launch_shape_appendkv(config, device));

  reference::run(expected.problem);
  const runtime::Tolerance tolerance = runtime::output_tolerance(c.dtype);
  for (const auto& [got, want, name] :
       {std::tuple{&emulated.problem.k, &expected.problem.k, "k"},
        std::tuple{&emulated.problem.v, &expected.problem.v, "v"},
        std::tuple{&emulated.problem.q, &expected.problem.q, "q"}}) {
    if (is_fp8(c.dtype)) {
      expect_same_codes(*got, *want, c, name);
      continue;
    }
    runtime::Agreement agreement;
    agreement.add(*got, *want, tolerance);
    EXPECT_EQ(agreement.mismatches, 0) << name << ": max abs err " << agreement.max_abs_error;
    EXPECT_EQ(agreement.compared, want->numel()) << name;
  }
  if (c.quantizes()) {
    expect_same_scales(emulated.problem.fp8.k_page, expected.problem.fp8.k_page, "fp8.k_page");
    expect_same_scales(emulated.problem.fp8.v_page, expected.problem.fp8.v_page, "fp8.v_page");
  }
  for (int64_t b = 0; b < kBatch; ++b) EXPECT_EQ(after[b], kLengths[b] + c.seqlen_knew);
}

TEST(AppendKvEmulation, PagedBf16HalfRotatedVectorPartners) {
  check<tile::bfloat16_t, 128, true, fmha::RopeMode::half_rotated>(
      {"vllm nhd page 16", DType::bf16, 128, PageTableKind::vllm_block_table, KvLayout::nhd, 16,
       RopeKind::half_rotated, 64, false, 19});
}

TEST(AppendKvEmulation, ContiguousFp16HalfRotatedElementPartnersFromABase) {
  // rotary_dim / 2 = 12: partners are not whole 8-element chunks.
  check<tile::half_t, 96, false, fmha::RopeMode::half_rotated>(
      {"contiguous theta", DType::fp16, 96, PageTableKind::none, KvLayout::nhd, 0,
       RopeKind::half_rotated, 24, true});
}

TEST(AppendKvEmulation, PagedFp32InterleavedPageOfOneHnd) {
  check<float, 64, true, fmha::RopeMode::interleaved>(
      {"sglang hnd page 1", DType::fp32, 64, PageTableKind::sglang_page_list, KvLayout::hnd, 1,
       RopeKind::interleaved, 48});
}

TEST(AppendKvEmulation, ElementWisePathForARaggedHeadDim) {
  // hdim 36 is no multiple of the 8-element chunk: every row moves element by element.
  check<tile::bfloat16_t, 64, false, fmha::RopeMode::interleaved>(
      {"contiguous hdim 36", DType::bf16, 36, PageTableKind::none, KvLayout::nhd, 0,
       RopeKind::interleaved, 20, true, 3});
  check<tile::half_t, 64, false, fmha::RopeMode::half_rotated>(
      {"contiguous hdim 36 half", DType::fp16, 36, PageTableKind::none, KvLayout::nhd, 0,
       RopeKind::half_rotated, 36, false, 2});
}

TEST(AppendKvEmulation, Fp8PagedHalfRotatedVectorPartners) {
  check<tile::float_e4m3_t, 128, true, fmha::RopeMode::half_rotated>(
      {"e4m3 vllm nhd page 16", DType::fp8_e4m3, 128, PageTableKind::vllm_block_table,
       KvLayout::nhd, 16, RopeKind::half_rotated, 64, false, 19});
}

TEST(AppendKvEmulation, Fp8ContiguousFromABase) {
  // rotary_dim 48 ends inside the third 16-code chunk; half 20 is no multiple of the chunk.
  check<tile::float_e5m2_t, 64, false, fmha::RopeMode::interleaved>(
      {"e5m2 contiguous interleaved theta", DType::fp8_e5m2, 64, PageTableKind::none, KvLayout::nhd,
       0, RopeKind::interleaved, 48, true});
  check<tile::float_e4m3_t, 96, false, fmha::RopeMode::half_rotated>(
      {"e4m3 contiguous half element partners", DType::fp8_e4m3, 96, PageTableKind::none,
       KvLayout::nhd, 0, RopeKind::half_rotated, 40, true, 3});
}

TEST(AppendKvEmulation, Fp8ElementWiseAndPlainCopies) {
  // hdim 36 is no multiple of the 16-code chunk: every row moves code by code.
  check<tile::float_e5m2_t, 64, false, fmha::RopeMode::half_rotated>(
      {"e5m2 contiguous hdim 36", DType::fp8_e5m2, 36, PageTableKind::none, KvLayout::nhd, 0,
       RopeKind::half_rotated, 36, false, 2});
  check<tile::float_e4m3_t, 128, true, fmha::RopeMode::none>(
      {"e4m3 sglang hnd page 1024 copy", DType::fp8_e4m3, 128, PageTableKind::sglang_page_list,
       KvLayout::hnd, 1024, RopeKind::none, 0, false, 2});
}

// Quantizing appends: bf16 or fp16 new tokens into fp8 pools with per-page scales. The lengths
// (17, 0, 40) put held keys in the first page new tokens reach in two of three sequences, whose
// scales (0.002-0.01) grow for new values of +-3 in about half the pages; pages of 1 make a page
// per token; every RoPE kind, from tables and from a base; 8-dim spans whole, and partial (a
// head dim of 36, a rotary half of 18); groups of 8 to 32 lanes (head dims 64 to 256); segments
// staged in shared memory (pages of up to 16 keys) and read twice (pages of 64).
TEST(AppendKvEmulation, QuantizingAppendsSetPageScales) {
  Case c{"quantize e4m3 vllm nhd page 16 half",
         DType::fp8_e4m3,
         128,
         PageTableKind::vllm_block_table,
         KvLayout::nhd,
         16,
         RopeKind::half_rotated,
         64,
         false,
         19};
  c.new_dtype = DType::bf16;
  check<tile::float_e4m3_t, 128, true, fmha::RopeMode::half_rotated, true>(c);
  c = {"quantize e5m2 sglang hnd page 4 interleaved theta",
       DType::fp8_e5m2,
       64,
       PageTableKind::sglang_page_list,
       KvLayout::hnd,
       4,
       RopeKind::interleaved,
       48,
       true,
       9};
  c.new_dtype = DType::fp16;
  check<tile::float_e5m2_t, 64, true, fmha::RopeMode::interleaved, true>(c);
  c = {"quantize e4m3 vllm hnd page 1 copy",
       DType::fp8_e4m3,
       128,
       PageTableKind::vllm_block_table,
       KvLayout::hnd,
       1,
       RopeKind::none,
       0,
       false,
       3};
  c.new_dtype = DType::fp16;
  check<tile::float_e4m3_t, 128, true, fmha::RopeMode::none, true>(c);
  // Half of rotary_dim not a whole 8-dim span: partners element by element.
  c = {"quantize e4m3 sglang nhd page 8 half rotary 36",
       DType::fp8_e4m3,
       128,
       PageTableKind::sglang_page_list,
       KvLayout::nhd,
       8,
       RopeKind::half_rotated,
       36,
       true,
       11};
  c.new_dtype = DType::bf16;
  check<tile::float_e4m3_t, 128, true, fmha::RopeMode::half_rotated, true>(c);
  // A head dim of partial spans: loads and stores element by element.
  c = {"quantize e4m3 vllm nhd page 16 interleaved hdim 36",
       DType::fp8_e4m3,
       36,
       PageTableKind::vllm_block_table,
       KvLayout::nhd,
       16,
       RopeKind::interleaved,
       20,
       false,
       5};
  c.new_dtype = DType::fp16;
  check<tile::float_e4m3_t, 64, true, fmha::RopeMode::interleaved, true>(c);
  // A whole warp per group: hdim 256 has 32 spans a row.
  c = {"quantize e5m2 sglang hnd page 16 half hdim 256",
       DType::fp8_e5m2,
       256,
       PageTableKind::sglang_page_list,
       KvLayout::hnd,
       16,
       RopeKind::half_rotated,
       256,
       true,
       7};
  c.new_dtype = DType::bf16;
  check<tile::float_e5m2_t, 256, true, fmha::RopeMode::half_rotated, true>(c);
  // Pages of 64: segments of up to 50 new rows are read twice rather than staged, and their
  // angles step from row to row, formed exactly again every kAnglesExactEvery rows.
  c = {"quantize e4m3 vllm nhd page 64 half theta",
       DType::fp8_e4m3,
       128,
       PageTableKind::vllm_block_table,
       KvLayout::nhd,
       64,
       RopeKind::half_rotated,
       128,
       true,
       50};
  c.new_dtype = DType::bf16;
  check<tile::float_e4m3_t, 128, true, fmha::RopeMode::half_rotated, true>(c);
}

TEST(AppendKvEmulation, PagesOf1024WithoutRope) {
  check<tile::half_t, 128, true, fmha::RopeMode::none>(
      {"vllm hnd page 1024", DType::fp16, 128, PageTableKind::vllm_block_table, KvLayout::hnd, 1024,
       RopeKind::none, 0, false, 2});
  check<float, 256, true, fmha::RopeMode::half_rotated>(
      {"sglang nhd page 1024 fp32 hdim 256", DType::fp32, 256, PageTableKind::sglang_page_list,
       KvLayout::nhd, 1024, RopeKind::half_rotated, 256, true, 2});
}

// Runs of heads: a thread group moves several heads of one token with one set of angles. 11 KV
// heads split 6 + 5 and 22 query heads 8 + 8 + 6 (tails), GQA, angles from a base with offsets.
TEST(AppendKvEmulation, HeadRunsWithTailsHalfRotatedFromABase) {
  Case c{"runs 6+5 / 8+8+6 theta",
         DType::bf16,
         128,
         PageTableKind::none,
         KvLayout::nhd,
         0,
         RopeKind::half_rotated,
         128,
         true,
         4};
  c.heads_k = 11;
  c.heads_q = 22;
  c.k_run = 6;
  c.q_run = 8;
  check<tile::bfloat16_t, 128, false, fmha::RopeMode::half_rotated>(c);
}

// Paged runs (one page lookup per run), interleaved tables, rotary_dim < hdim_q, V narrower than
// K, and query runs 5 + 4 over 3 KV heads.
TEST(AppendKvEmulation, PagedHeadRunsInterleavedTablesNarrowV) {
  Case c{"vllm nhd page 16 runs, hdim_v 64",
         DType::fp16,
         128,
         PageTableKind::vllm_block_table,
         KvLayout::nhd,
         16,
         RopeKind::interleaved,
         96,
         false,
         19};
  c.hdim_v = 64;
  c.heads_k = 3;
  c.heads_q = 9;
  c.k_run = 3;
  c.q_run = 5;
  check<tile::half_t, 128, true, fmha::RopeMode::interleaved>(c);
  // MQA: one KV head per token, the query heads in two runs of 6.
  c.name = "sglang hnd page 1 runs, MQA";
  c.table = PageTableKind::sglang_page_list;
  c.layout = KvLayout::hnd;
  c.page_size = 1;
  c.seqlen_knew = 3;
  c.heads_k = 1;
  c.heads_q = 12;
  c.k_run = 1;
  c.q_run = 6;
  check<tile::half_t, 128, true, fmha::RopeMode::interleaved>(c);
}

// fp32 rows of 256 dims hold two chunks per lane, so a run of 5 heads moves in two batches
// (4 + 1), each with its own warp barrier before the in-place stores.
TEST(AppendKvEmulation, WideRowsMoveARunInTwoBatches) {
  Case c{"fp32 hdim 256 runs of 5",
         DType::fp32,
         256,
         PageTableKind::sglang_page_list,
         KvLayout::nhd,
         16,
         RopeKind::half_rotated,
         192,
         true,
         3};
  c.heads_k = 5;
  c.heads_q = 10;
  c.k_run = 5;
  c.q_run = 5;
  check<float, 256, true, fmha::RopeMode::half_rotated>(c);
}

// Element-wise rows (hdim 36) in runs with tails: 13 heads as 7 + 6, both RoPE kinds; Q left
// alone when it does not rotate.
TEST(AppendKvEmulation, ElementWiseHeadRunsAndUnrotatedQ) {
  Case c{"hdim 36 runs 7+6 theta",
         DType::bf16,
         36,
         PageTableKind::none,
         KvLayout::nhd,
         0,
         RopeKind::interleaved,
         20,
         true,
         3};
  c.heads_k = 13;
  c.heads_q = 13;
  c.k_run = 7;
  c.q_run = 7;
  check<tile::bfloat16_t, 64, false, fmha::RopeMode::interleaved>(c);
  c = Case{"hdim 36 half, q not rotated",
           DType::fp16,
           36,
           PageTableKind::none,
           KvLayout::nhd,
           0,
           RopeKind::half_rotated,
           36,
           false,
           2};
  c.heads_k = 9;
  c.heads_q = 18;
  c.rotate_q = false;
  c.k_run = 5;
  check<tile::half_t, 64, false, fmha::RopeMode::half_rotated>(c);
}

// fp8 codes in runs (16 codes a chunk, so a half-rotated lane keeps 16 angles per chunk).
TEST(AppendKvEmulation, Fp8HeadRunsHalfRotated) {
  Case c{"e4m3 vllm hnd page 16 runs",
         DType::fp8_e4m3,
         128,
         PageTableKind::vllm_block_table,
         KvLayout::hnd,
         16,
         RopeKind::half_rotated,
         128,
         true,
         5};
  c.heads_k = 4;
  c.heads_q = 20;
  c.k_run = 4;
  c.q_run = 7;
  check<tile::float_e4m3_t, 128, true, fmha::RopeMode::half_rotated>(c);
}

// Without RoPE a group still moves a run of heads (11 heads: runs of 6 and 5), so a run's loads
// go out together and its page lookup is shared; paged, so that the shared lookup is exercised.
TEST(AppendKvEmulation, PlainCopiesMoveRunsOfHeads) {
  Case c{"copy 11 heads",
         DType::bf16,
         128,
         PageTableKind::none,
         KvLayout::nhd,
         0,
         RopeKind::none,
         0,
         false,
         3};
  c.heads_k = 11;
  c.heads_q = 11;
  c.k_run = 6;
  check<tile::bfloat16_t, 128, false, fmha::RopeMode::none>(c);
  Case paged = c;
  paged.name = "copy 11 heads, vllm page 16";
  paged.table = PageTableKind::vllm_block_table;
  paged.page_size = 16;
  check<tile::bfloat16_t, 128, true, fmha::RopeMode::none>(paged);
}

}  // namespace
}  // namespace tilefmha
