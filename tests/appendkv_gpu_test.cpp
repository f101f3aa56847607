// Append-KV on a GPU through the Engine, against the CPU reference on fresh random inputs:
//   * the append alone into contiguous caches and paged pools (pages of 1, 16 and 1024 tokens,
//     vLLM block tables and SGLang page lists, NHD and HND pools), RoPE none / interleaved /
//     half-rotated over rotary_dim < hdim from tables or from a base with per-sequence position
//     offsets, Q rotated in place, GQA, a sequence with an empty cache, fp16 / bf16 / fp32;
//   * the append -> attend plan (a fwd_appendkv problem with O): one plan, the attention reading
//     the key counts the append wrote, with host or device key lengths;
//   * that plan captured in a CUDA graph and replayed with new device lengths and new tokens;
//   * fp8 (e4m3, e5m2, per-tensor scales) caches and Q, compared code for code (sm_89+): copies
//     byte for byte; RoPE'd codes byte for byte where the rotation is exact in fp32 (every code,
//     NaN and infinity included, scaled by few-bit factors: this pins the rounding, saturation
//     and NaN of the fp8 conversion), else within one rounding step (see fp8_mismatches); and
//     an fp8 append -> attend on sm90_ws's fp8 kernel (sm_90).
// The slots an append must write start as NaN in the caches, and O starts as NaN, so a missed
// write fails the comparison; every other slot must come back unchanged. The host half
// (problems validate, the reference runs) runs everywhere; the GPU half is skipped without a
// driver, a GPU or NVRTC.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <numeric>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "core/numeric.hpp"
#include "jit/cuda_driver.hpp"
#include "jit/module.hpp"
#include "runtime/device_mirror.hpp"
#include "runtime/tolerance.hpp"
#include "support/code_agreement.hpp"
#include "support/forward_problems.hpp"
#include "support/gpu_problem.hpp"
#include "support/quantizing_append.hpp"
#include "tilefmha/engine.hpp"
#include "tilefmha/reference.hpp"
#include "tilefmha/validate.hpp"

namespace tilefmha {
namespace {

using testing::gpu_skip_reason;
using testing::kUnwritten;
using testing::TensorPool;

struct AppendCase {
  std::string name;
  DType dtype = DType::bf16;
  int64_t hdim = 128;
  int64_t seqlen_knew = 5;
  PageTableKind table = PageTableKind::none;
  KvLayout layout = KvLayout::nhd;
  int64_t page_size = 0;
  RopeKind rope = RopeKind::none;
  int64_t rotary_dim = 0;
  bool theta = false;  // angles from rope_theta (with position offsets) instead of tables
  bool rotate_q = false;
  bool attend = false;  // O set: append -> attend
  // fp8: new tokens and Q hold every code in turn (NaN and infinities included), and the RoPE
  // tables scale by few-bit factors with sine 0, so the fp32 rotation is exact and only the
  // conversion back to fp8 rounds.
  bool every_code = false;
  // A quantizing append: new tokens of this 16-bit dtype into the fp8 pool, per-page scales.
  DType new_dtype = DType::fp32;

  bool quantizes() const { return is_fp8(dtype) && new_dtype != DType::fp32; }
};

constexpr int64_t kBatch = 3, kHeadsQ = 8, kHeadsK = 2, kCapacity = 96;
// Cached lengths: a middle sequence with an empty cache.
const std::vector<int64_t> kLengths = {37, 0, 70};

// fp8 descales (distinct, so that the attention after an append would show a swapped pair).
Fp8Scales fp8_scales() {
  Fp8Scales scales;
  scales.kind = Fp8ScaleKind::per_tensor;
  scales.q_descale = 0.5;
  scales.k_descale = 0.25;
  scales.v_descale = 2.0;
  return scales;
}

// The every_code cases' cosines, one per position in turn: each times an fp8 code is exact in
// fp32 (at most 9 significant bits). 1.0625 and 1.5 make rounding ties (to even, up and down),
// 2 saturates the largest codes, 2^-5 takes codes into the subnormals.
constexpr double kExactCosines[] = {1.0625, 1.5, 0.9375, 2.0, 0.03125, 1.25};

// A host fwd_appendkv problem whose tensors live in `pool`: caches random except the slots the
// append writes (NaN), new tokens and Q random, O NaN when the case attends.
class AppendProblem {
 public:
  AppendProblem(const AppendCase& c, uint64_t seed, std::vector<int64_t> lengths = kLengths)
      : c_(c), pool_(seed), lengths_(std::move(lengths)) {
    ProblemBuilder b(Family::fwd_appendkv);
    b.dtype(c.dtype).shape(kBatch, kHeadsQ, kHeadsK, c.seqlen_knew, 0, c.hdim, c.hdim);
    b.key_lengths(lengths_);
    if (c.table != PageTableKind::none) b.paged(pages());
    const TensorView k = cache(), v = cache();
    b.k(k).v(v);
    AppendKv a;
    a.seqlen_knew = c.seqlen_knew;
    const DType fresh = c.quantizes() ? c.new_dtype : c.dtype;
    const double range = c.quantizes() ? testing::kQuantizedRange : 1.0;
    a.k_new = pool_.uniform(fresh, {kBatch, c.seqlen_knew, kHeadsK, c.hdim}, -range, range);
    a.v_new = pool_.uniform(fresh, {kBatch, c.seqlen_knew, kHeadsK, c.hdim}, -range, range);
    a.rope = c.rope;
    a.rotary_dim = c.rotary_dim;
    a.rotate_q = c.rotate_q;
    if (c.rope != RopeKind::none && c.theta) {
      a.rope_theta = 10000.0;
      a.rope_position_offsets = {3, 1000, 0};
    } else if (c.rope != RopeKind::none) {
      tables(a, kCapacity + c.seqlen_knew);
    }
    b.append(a);
    b.q(pool_.uniform(c.dtype, {kBatch, c.seqlen_knew, kHeadsQ, c.hdim}, -1, 1));
    if (c.quantizes()) {
      b.fp8_scales(testing::quantizing_page_scales(pool_, num_pages_, kHeadsK));
    } else if (is_fp8(c.dtype)) {
      b.fp8_scales(fp8_scales());
    }
    if (c.attend) {
      const DType out = b.peek().out_dtype;  // bf16 for fp8 inputs
      TensorView o = pool_.filled(out, {kBatch, c.seqlen_knew, kHeadsQ, c.hdim}, kUnwritten);
      b.o(o).causal(MaskAlign::bottom_right);
      // fp8: logits of standard deviation ~3 (codes in [-1, 1], descales 0.5 and 0.25), so each
      // row's softmax picks a few keys and a lost descale moves O well past its bound.
      if (is_fp8(c.dtype)) b.scale(6.0);
    }
    if (c.every_code) {
      every_code(a.k_new);
      every_code(a.v_new);
      every_code(b.peek().q);
      if (c.rope != RopeKind::none) exact_tables(a);
    }
    problem_ = b.build();
    poison_new_slots();
  }

  const Problem& problem() const { return problem_; }
  Problem& problem() { return problem_; }

 private:
  // Logical [batch, capacity, heads, dim] caches, or [pages, page_size, heads, dim] pools in NHD
  // or HND memory order.
  TensorView cache() {
    if (c_.table == PageTableKind::none)
      return pool_.uniform(c_.dtype, {kBatch, kCapacity, kHeadsK, c_.hdim}, -1, 1);
    const int64_t ps = c_.page_size, page = ps * kHeadsK * c_.hdim;
    if (c_.layout == KvLayout::nhd)
      return pool_.strided(c_.dtype, num_pages_ * page, {num_pages_, ps, kHeadsK, c_.hdim},
                           {page, kHeadsK * c_.hdim, c_.hdim, 1}, -1, 1);
    return pool_.strided(c_.dtype, num_pages_ * page, {num_pages_, ps, kHeadsK, c_.hdim},
                         {page, c_.hdim, ps * c_.hdim, 1}, -1, 1);
  }

  // Each sequence's pages (room for its cached and new keys plus one spare page), shuffled over
  // the pool, with two pages nobody owns.
  PagedKv pages() {
    PagedKv p;
    p.table = c_.table;
    p.layout = c_.layout;
    p.page_size = c_.page_size;
    std::vector<int64_t> counts;
    for (int64_t b = 0; b < kBatch; ++b)
      counts.push_back((lengths_[b] + c_.seqlen_knew + c_.page_size - 1) / c_.page_size + 1);
    const int64_t owned = std::accumulate(counts.begin(), counts.end(), int64_t{0});
    num_pages_ = owned + 2;
    std::vector<int32_t> order(num_pages_);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), pool_.rng());
    p.num_pages = num_pages_;
    const int64_t widest = *std::max_element(counts.begin(), counts.end());
    int64_t next = 0;
    if (c_.table == PageTableKind::vllm_block_table) {
      p.max_pages_per_seq = widest;
      p.block_table.assign(kBatch * widest, 0);
      for (int64_t b = 0; b < kBatch; ++b)
        for (int64_t n = 0; n < counts[b]; ++n) p.block_table[b * widest + n] = order[next++];
    } else {
      p.page_indptr = {0};
      for (int64_t b = 0; b < kBatch; ++b) {
        for (int64_t n = 0; n < counts[b]; ++n) p.page_indices.push_back(order[next++]);
        p.page_indptr.push_back(static_cast<int64_t>(p.page_indices.size()));
      }
    }
    return p;
  }

  void tables(AppendKv& a, int64_t positions) {
    const int64_t half = c_.rotary_dim / 2;
    a.rope_cos = pool_.filled(DType::fp32, {positions, half}, 0);
    a.rope_sin = pool_.filled(DType::fp32, {positions, half}, 0);
    for (int64_t position = 0; position < positions; ++position)
      for (int64_t f = 0; f < half; ++f) {
        const double angle = position * std::pow(10000.0, -2.0 * f / c_.rotary_dim);
        numeric::store(a.rope_cos, {position, f}, std::cos(angle));
        numeric::store(a.rope_sin, {position, f}, std::sin(angle));
      }
  }

  // Codes 0, 1, ..., 255, 0, ... in row-major order.
  static void every_code(const TensorView& x) {
    auto* codes = static_cast<unsigned char*>(x.data);
    for (int64_t e = 0; e < x.numel(); ++e) codes[e] = static_cast<unsigned char>(e % 256);
  }

  // cos = kExactCosines[position % 6], sin = 0 at every position.
  static void exact_tables(const AppendKv& a) {
    for (int64_t position = 0; position < a.rope_cos.shape[0]; ++position)
      for (int64_t f = 0; f < a.rope_cos.shape[1]; ++f) {
        numeric::store(a.rope_cos, {position, f}, kExactCosines[position % 6]);
        numeric::store(a.rope_sin, {position, f}, 0.0);
      }
  }

  void poison_new_slots() {
    const Problem& p = problem_;
    for (const TensorView* cache : {&p.k, &p.v})
      for (int64_t b = 0; b < kBatch; ++b)
        for (int64_t t = 0; t < c_.seqlen_knew; ++t) {
          const int64_t key = p.key_length(b) + t;
          int64_t row = b, slot = key;
          if (p.is_paged()) {
            const auto at = p.page_slot(b, key);
            row = at.page;
            slot = at.slot;
          }
          for (int64_t h = 0; h < kHeadsK; ++h)
            for (int64_t d = 0; d < c_.hdim; ++d)
              numeric::store(cache->data, cache->dtype, cache->offset({row, slot, h, d}),
                             kUnwritten);
        }
  }

  AppendCase c_;
  TensorPool pool_;
  std::vector<int64_t> lengths_;
  int64_t num_pages_ = 0;
  Problem problem_;
};

std::vector<AppendCase> append_cases() {
  std::vector<AppendCase> cases = {
      {"contiguous_bf16_plain", DType::bf16, 128, 5},
      {"contiguous_fp16_interleaved_rotate_q", DType::fp16, 128, 5, PageTableKind::none,
       KvLayout::nhd, 0, RopeKind::interleaved, 64, false, true},
      {"contiguous_bf16_half_rotated_theta", DType::bf16, 128, 1, PageTableKind::none,
       KvLayout::nhd, 0, RopeKind::half_rotated, 96, true, true},
      {"contiguous_fp32_half_rotated", DType::fp32, 64, 3, PageTableKind::none, KvLayout::nhd, 0,
       RopeKind::half_rotated, 48, false, true},
      // rotary_dim / 2 = 12 is not a multiple of the 8-element chunk: element-wise partners.
      {"contiguous_fp16_half_rotated_odd_chunks", DType::fp16, 96, 4, PageTableKind::none,
       KvLayout::nhd, 0, RopeKind::half_rotated, 24, false, true},
  };
  for (PageTableKind table : {PageTableKind::vllm_block_table, PageTableKind::sglang_page_list})
    for (KvLayout layout : {KvLayout::nhd, KvLayout::hnd})
      for (int64_t page_size : {1, 16, 1024}) {
        AppendCase c;
        c.name = std::string(to_string(table)) + "_" + std::string(to_string(layout)) + "_page" +
                 std::to_string(page_size);
        c.table = table;
        c.layout = layout;
        c.page_size = page_size;
        c.seqlen_knew = page_size == 16 ? 19 : 2;  // 19 new tokens straddle pages
        c.rope = page_size == 1 ? RopeKind::interleaved : RopeKind::half_rotated;
        c.rotary_dim = 64;
        c.theta = layout == KvLayout::hnd;
        c.rotate_q = table == PageTableKind::vllm_block_table;
        cases.push_back(c);
      }
  return cases;
}

std::vector<AppendCase> attend_cases() {
  std::vector<AppendCase> cases;
  AppendCase decode;
  decode.name = "paged_decode_then_attend";
  decode.table = PageTableKind::vllm_block_table;
  decode.page_size = 16;
  decode.seqlen_knew = 1;
  decode.rope = RopeKind::half_rotated;
  decode.rotary_dim = 128;
  decode.theta = true;
  decode.rotate_q = true;
  decode.attend = true;
  cases.push_back(decode);
  AppendCase prefill = decode;
  prefill.name = "page_list_chunk_then_attend";
  prefill.table = PageTableKind::sglang_page_list;
  prefill.layout = KvLayout::hnd;
  prefill.page_size = 1;
  prefill.seqlen_knew = 7;
  cases.push_back(prefill);
  AppendCase contiguous;
  contiguous.name = "contiguous_then_attend";
  contiguous.dtype = DType::fp16;
  contiguous.seqlen_knew = 4;
  contiguous.rope = RopeKind::interleaved;
  contiguous.rotary_dim = 32;
  contiguous.rotate_q = true;
  contiguous.attend = true;
  cases.push_back(contiguous);
  return cases;
}

// fp8 appends: contiguous and paged (both table forms, NHD and HND), RoPE of both kinds from
// tables or a base, Q rotated, a plain copy, and every code through an exact rotation.
std::vector<AppendCase> fp8_append_cases() {
  const DType e4m3 = DType::fp8_e4m3, e5m2 = DType::fp8_e5m2;
  const auto none = PageTableKind::none, vllm = PageTableKind::vllm_block_table,
             sglang = PageTableKind::sglang_page_list;
  const auto half = RopeKind::half_rotated, interleaved = RopeKind::interleaved;
  return {
      // rotary_dim 96 < hdim: dims 96..127 are copies; half 48 is three whole 16-code chunks.
      {"fp8_e4m3_contiguous_half_rotated_rotate_q", e4m3, 128, 5, none, KvLayout::nhd, 0, half, 96,
       false, true},
      // 19 new tokens straddle pages; angles from a base with position offsets.
      {"fp8_e4m3_vllm_nhd_page16_half_rotated_theta", e4m3, 128, 19, vllm, KvLayout::nhd, 16, half,
       128, true, true},
      {"fp8_e5m2_sglang_hnd_page1_interleaved", e5m2, 64, 3, sglang, KvLayout::hnd, 1, interleaved,
       64, false, true},
      // hdim 96 on the hdim-128 kernel; half 20 is no multiple of the chunk (partners code by
      // code) and rotary_dim 40 ends inside a chunk.
      {"fp8_e4m3_contiguous_hdim96_element_partners", e4m3, 96, 3, none, KvLayout::nhd, 0, half, 40,
       true, true},
      // A byte copy: NaN payloads and infinities come through unchanged.
      {"fp8_e5m2_contiguous_plain_every_code", e5m2, 128, 4, none, KvLayout::nhd, 0, RopeKind::none,
       0, false, false, false, true},
      {"fp8_e4m3_every_code_exact_rope", e4m3, 128, 6, none, KvLayout::nhd, 0, interleaved, 128,
       false, true, false, true},
      {"fp8_e5m2_every_code_exact_rope_paged", e5m2, 128, 6, vllm, KvLayout::hnd, 16, half, 128,
       false, true, false, true},
  };
}

// Quantizing appends: bf16 or fp16 new tokens into fp8 pools with per-page scales (pages of 16
// and 1, both table forms, NHD and HND, RoPE of both kinds from tables and from a base, e4m3 and
// e5m2). The cached lengths (37, 0, 70) leave held keys in the first page the new tokens reach.
std::vector<AppendCase> quantizing_append_cases() {
  const DType e4m3 = DType::fp8_e4m3, e5m2 = DType::fp8_e5m2;
  const auto vllm = PageTableKind::vllm_block_table, sglang = PageTableKind::sglang_page_list;
  const auto half = RopeKind::half_rotated, interleaved = RopeKind::interleaved;
  std::vector<AppendCase> cases = {
      {"quantize_e4m3_vllm_nhd_page16_half_rotated_bf16", e4m3, 128, 19, vllm, KvLayout::nhd, 16,
       half, 128},
      {"quantize_e5m2_sglang_hnd_page16_interleaved_theta_fp16", e5m2, 128, 5, sglang,
       KvLayout::hnd, 16, interleaved, 64, true},
      {"quantize_e4m3_vllm_hnd_page1_plain_bf16", e4m3, 64, 3, vllm, KvLayout::hnd, 1,
       RopeKind::none, 0},
      {"quantize_e4m3_sglang_nhd_page16_decode_bf16", e4m3, 128, 1, sglang, KvLayout::nhd, 16, half,
       64, true},
  };
  cases[0].new_dtype = cases[2].new_dtype = cases[3].new_dtype = DType::bf16;
  cases[1].new_dtype = DType::fp16;
  return cases;
}

// fp8 append -> attend at hdim 128 (sm90_ws's fp8 attention): a chunk into a contiguous cache
// and a decode step into 16-key pages.
std::vector<AppendCase> fp8_attend_cases() {
  AppendCase chunk;
  chunk.name = "fp8_e4m3_contiguous_chunk_then_attend";
  chunk.dtype = DType::fp8_e4m3;
  chunk.seqlen_knew = 4;
  chunk.rope = RopeKind::half_rotated;
  chunk.rotary_dim = 128;
  chunk.theta = true;
  chunk.rotate_q = true;
  chunk.attend = true;
  AppendCase decode = chunk;
  decode.name = "fp8_e4m3_paged_decode_then_attend";
  decode.table = PageTableKind::vllm_block_table;
  decode.page_size = 16;
  decode.seqlen_knew = 1;
  return {chunk, decode};
}

// The host half runs everywhere: every case's problem validates and the reference appends (and
// attends) without leaving a NaN in a slot it should write (every_code cases append NaN codes on
// purpose).
TEST(AppendKvGpuCases, ProblemsValidateAndTheReferenceFillsEveryNewSlot) {
  std::vector<AppendCase> cases = append_cases();
  for (const auto& more :
       {attend_cases(), fp8_append_cases(), fp8_attend_cases(), quantizing_append_cases()})
    cases.insert(cases.end(), more.begin(), more.end());
  uint64_t seed = 1;
  for (const AppendCase& c : cases) {
    SCOPED_TRACE(c.name);
    AppendProblem host(c, seed++);
    ASSERT_NO_THROW(validate(host.problem()));
    ASSERT_NO_THROW(reference::run(host.problem()));
    if (c.every_code) continue;
    const Problem& p = host.problem();
    for (int64_t b = 0; b < kBatch; ++b)
      for (int64_t t = 0; t < c.seqlen_knew; ++t) {
        const int64_t key = p.key_length(b) + t;
        const auto at = p.is_paged() ? p.page_slot(b, key) : Problem::PageSlot{b, key};
        EXPECT_FALSE(std::isnan(numeric::load(p.k, {at.page, at.slot, 1, c.hdim - 1})));
      }
    if (c.attend) {
      EXPECT_FALSE(std::isnan(numeric::load(p.o, {2, c.seqlen_knew - 1, kHeadsQ - 1, 0})));
    }
  }
}

// int64 values in device memory.
std::unique_ptr<jit::DeviceBuffer> upload(const std::vector<int64_t>& values) {
  auto buffer = std::make_unique<jit::DeviceBuffer>(static_cast<int64_t>(values.size() * 8));
  buffer->copy_from_host(std::as_bytes(std::span(values)));
  return buffer;
}

// Moves the problem's key counts to `lengths` in device memory: the host vector goes, and
// seqlen_k becomes the longest count plus `headroom` (the caller vouches for it).
void use_device_key_lengths(Problem& device, const jit::DeviceBuffer& lengths,
                            int64_t headroom = 0) {
  device.seqlen_k_per_batch.clear();
  device.seqlen_k = *std::max_element(kLengths.begin(), kLengths.end()) + headroom;
  device.device_indices.seqlen_k = reinterpret_cast<const int64_t*>(lengths.address());
}

class AppendKvGpu : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (gpu_skip_reason().empty()) engine_ = std::make_unique<Engine>();
  }
  static void TearDownTestSuite() { engine_.reset(); }
  void SetUp() override {
    if (const std::string why = gpu_skip_reason(); !why.empty()) GTEST_SKIP() << why;
    context_ = std::make_unique<jit::GpuContext>(0);
  }

  // Mismatches of what the GPU left in `mirror` against the reference run on `host` (which the
  // reference updates in place): the caches, Q when it rotates, O when the problem attends.
  static int64_t mismatches(const runtime::DeviceMirror& mirror, const Problem& host,
                            const std::string& name) {
    reference::run(host);
    const Problem& device = mirror.device_problem();
    const runtime::Tolerance tolerance = runtime::output_tolerance(host.dtype);
    int64_t bad = 0;
    const auto check = [&](const TensorView& gpu, const TensorView& ref, const char* what) {
      const auto got = mirror.download(gpu);
      const runtime::Agreement a = testing::compare(ref, got.view, tolerance.atol, tolerance.rtol);
      std::printf("  %-40s %-2s max abs err %.2e over %lld\n", name.c_str(), what, a.max_abs_error,
                  static_cast<long long>(a.compared));
      bad += a.mismatches + (a.compared == ref.numel() ? 0 : 1);
    };
    check(device.k, host.k, "k");
    check(device.v, host.v, "v");
    if (host.append.rotate_q) check(device.q, host.q, "q");
    if (appends_then_attends(host)) check(device.o, host.o, "o");
    return bad;
  }

  // The fp8 form of mismatches(): caches and Q code for code (testing::compare_codes). V,
  // unrotated K and the dims past rotary_dim must match byte for byte, and so must rotated codes
  // where the rotation is exact in fp32 (every_code): there only the fp8 conversion rounds, so
  // its ties, saturation and NaN are the reference's. Elsewhere a rotated code may be one step
  // from the reference's: the kernel rotates in fp32 with the hardware's sine and cosine (abs
  // error ~4e-7), the reference in double, so a value that close to a rounding midpoint may round
  // the other way. For values near 1 that is about 1 in 2^17 codes (e4m3's midpoints lie 2^-4
  // apart, relatively); more than 1 in 1000 fails. O (bf16, after an attention) gets the fp8
  // attention's bound: its kernel rounds P to e4m3 (relative 2^-4) before P V.
  static int64_t fp8_mismatches(const runtime::DeviceMirror& mirror, const Problem& host,
                                const AppendCase& c) {
    reference::run(host);
    const Problem& device = mirror.device_problem();
    int64_t bad = 0;
    const auto codes = [&](const TensorView& gpu, const TensorView& ref, const char* what,
                           bool rotates) {
      const auto got = mirror.download(gpu);
      const int64_t rotated =
          rotates && !c.every_code && c.rope != RopeKind::none ? c.rotary_dim : 0;
      // A quantizing append divides by the scale as a product with its fp32 reciprocal: any of its
      // codes may be one step off.
      const testing::CodeAgreement a = testing::compare_codes(got.view, ref, [&](int64_t linear) {
        return c.quantizes() || linear % c.hdim < rotated;
      });
      std::printf("  %-44s %-2s %lld codes, %lld one step off (of %lld rotated), %lld wrong\n",
                  c.name.c_str(), what, static_cast<long long>(a.compared),
                  static_cast<long long>(a.one_step), static_cast<long long>(a.loose),
                  static_cast<long long>(a.mismatches));
      bad += a.mismatches + (a.compared == ref.numel() ? 0 : 1) + (a.one_step * 1000 > a.loose);
    };
    codes(device.k, host.k, "k", true);
    codes(device.v, host.v, "v", false);
    if (c.quantizes()) {
      for (const auto& [gpu, ref, what] :
           {std::tuple{&device.fp8.k_page, &host.fp8.k_page, "fp8.k_page"},
            std::tuple{&device.fp8.v_page, &host.fp8.v_page, "fp8.v_page"}}) {
        const auto got = mirror.download(*gpu);
        const runtime::Agreement a = testing::compare(*ref, got.view, 0.0, 1e-5);
        std::printf("  %-44s %s max abs err %.2e over %lld\n", c.name.c_str(), what,
                    a.max_abs_error, static_cast<long long>(a.compared));
        bad += a.mismatches + (a.compared == ref->numel() ? 0 : 1);
      }
    }
    if (host.append.rotate_q) codes(device.q, host.q, "q", true);
    if (appends_then_attends(host)) {
      const auto o = mirror.download(device.o);
      const double atol = std::ldexp(host.fp8.v_descale, -4) + 1e-2;  // |V codes| <= 1
      const runtime::Agreement a = testing::compare(host.o, o.view, atol, 1e-2);
      std::printf("  %-44s o  max abs err %.2e (bound %.2e) over %lld\n", c.name.c_str(),
                  a.max_abs_error, atol, static_cast<long long>(a.compared));
      bad += a.mismatches + (a.compared == host.o.numel() ? 0 : 1);
    }
    return bad;
  }

  // The fp8 append kernels need sm_89 conversions, the fp8 attention sm_90's sm90_ws.
  std::string fp8_skip_reason(bool attends) const {
    const int cc = context_->compute_capability();
    if (attends && cc != 90) return "the fp8 attention after an append needs an sm_90 GPU";
    if (cc < 89) return "fp8 append-KV needs an sm_89 or newer GPU";
    return "";
  }

  static std::unique_ptr<Engine> engine_;
  std::unique_ptr<jit::GpuContext> context_;
};

std::unique_ptr<Engine> AppendKvGpu::engine_;

TEST_F(AppendKvGpu, AppendMatchesTheReference) {
  uint64_t seed = 100;
  for (const AppendCase& c : append_cases()) {
    SCOPED_TRACE(c.name);
    AppendProblem host(c, seed++);
    runtime::DeviceMirror mirror(host.problem());
    const EnginePlan plan = engine_->plan(mirror.device_problem());
    jit::Stream stream;
    engine_->run(plan, mirror.device_problem(), stream.handle());
    stream.synchronize();
    EXPECT_EQ(mismatches(mirror, host.problem(), c.name), 0) << plan.explanation();
  }
}

TEST_F(AppendKvGpu, Fp8AppendMatchesTheReferenceCodeForCode) {
  if (const std::string why = fp8_skip_reason(false); !why.empty()) GTEST_SKIP() << why;
  uint64_t seed = 400;
  for (const AppendCase& c : fp8_append_cases()) {
    SCOPED_TRACE(c.name);
    AppendProblem host(c, seed++);
    runtime::DeviceMirror mirror(host.problem());
    const EnginePlan plan = engine_->plan(mirror.device_problem());
    ASSERT_EQ(plan.kernels().front().dtype, c.dtype) << plan.explanation();
    jit::Stream stream;
    engine_->run(plan, mirror.device_problem(), stream.handle());
    stream.synchronize();
    EXPECT_EQ(fp8_mismatches(mirror, host.problem(), c), 0) << plan.explanation();
  }
}

// The quantizing append on the GPU against the reference: codes within one rounding step,
// page scales equal (within the reference's double RoPE), every new slot written.
TEST_F(AppendKvGpu, QuantizingAppendMatchesTheReference) {
  if (const std::string why = fp8_skip_reason(false); !why.empty()) GTEST_SKIP() << why;
  uint64_t seed = 700;
  for (const AppendCase& c : quantizing_append_cases()) {
    SCOPED_TRACE(c.name);
    AppendProblem host(c, seed++);
    runtime::DeviceMirror mirror(host.problem());
    const EnginePlan plan = engine_->plan(mirror.device_problem());
    ASSERT_EQ(plan.kernels().front().fp8_scale, Fp8ScaleKind::per_page) << plan.explanation();
    jit::Stream stream;
    engine_->run(plan, mirror.device_problem(), stream.handle());
    stream.synchronize();
    EXPECT_EQ(fp8_mismatches(mirror, host.problem(), c), 0) << plan.explanation();
  }
}

// fp8 append -> attend: the attention runs on sm90_ws's fp8 kernel with the problem's descales
// and a bf16 O, reading the key counts the append wrote (host or device lengths).
TEST_F(AppendKvGpu, Fp8AppendThenAttendIsOnePlan) {
  if (const std::string why = fp8_skip_reason(true); !why.empty()) GTEST_SKIP() << why;
  uint64_t seed = 500;
  for (const AppendCase& c : fp8_attend_cases()) {
    for (bool device_lengths : {false, true}) {
      SCOPED_TRACE(c.name + (device_lengths ? " (device lengths)" : " (host lengths)"));
      AppendProblem host(c, seed++);
      runtime::DeviceMirror mirror(host.problem());
      auto lengths = upload(host.problem().seqlen_k_per_batch);
      Problem device = mirror.device_problem();
      if (device_lengths) use_device_key_lengths(device, *lengths);
      const EnginePlan plan = engine_->plan(device);
      const std::vector<KernelConfig> kernels = plan.kernels();
      ASSERT_GE(kernels.size(), 2u) << plan.explanation();
      EXPECT_EQ(kernels[0].family, Family::fwd_appendkv);
      EXPECT_EQ(kernels[0].dtype, c.dtype);
      EXPECT_EQ(kernels[1].pipeline, Pipeline::sm90_ws) << plan.explanation();
      EXPECT_EQ(kernels[1].dtype, c.dtype) << plan.explanation();
      EXPECT_EQ(kernels[1].out_dtype, DType::bf16) << plan.explanation();
      EXPECT_EQ(kernels[1].fp8_scale, Fp8ScaleKind::per_tensor) << plan.explanation();
      jit::Stream stream;
      engine_->run(plan, device, stream.handle());
      stream.synchronize();
      EXPECT_EQ(fp8_mismatches(mirror, host.problem(), c), 0) << plan.explanation();
    }
  }
}

// Device key lengths: the append reads them where they are (no upload region for them).
TEST_F(AppendKvGpu, DeviceKeyLengths) {
  AppendCase c = append_cases()[1];
  AppendProblem host(c, 7);
  runtime::DeviceMirror mirror(host.problem());
  auto lengths = upload(host.problem().seqlen_k_per_batch);
  Problem device = mirror.device_problem();
  use_device_key_lengths(device, *lengths);
  const EnginePlan plan = engine_->plan(device);
  jit::Stream stream;
  engine_->run(plan, device, stream.handle());
  stream.synchronize();
  EXPECT_EQ(mismatches(mirror, host.problem(), c.name), 0) << plan.explanation();
}

// Device RoPE position offsets (with angles from rope_theta) and device key lengths.
TEST_F(AppendKvGpu, DevicePositionOffsets) {
  AppendCase c = append_cases()[2];  // half-rotated from a base, offsets {3, 1000, 0}
  ASSERT_TRUE(c.theta);
  AppendProblem host(c, 8);
  runtime::DeviceMirror mirror(host.problem());
  auto lengths = upload(host.problem().seqlen_k_per_batch);
  auto offsets = upload(host.problem().append.rope_position_offsets);
  Problem device = mirror.device_problem();
  use_device_key_lengths(device, *lengths);
  device.append.rope_position_offsets.clear();
  device.device_indices.rope_position_offsets =
      reinterpret_cast<const int64_t*>(offsets->address());
  const EnginePlan plan = engine_->plan(device);
  EXPECT_EQ(plan.workspace_bytes(), 0) << "nothing to upload";
  jit::Stream stream;
  engine_->run(plan, device, stream.handle());
  stream.synchronize();
  EXPECT_EQ(mismatches(mirror, host.problem(), c.name), 0) << plan.explanation();
}

TEST_F(AppendKvGpu, AppendThenAttendIsOnePlan) {
  uint64_t seed = 200;
  for (const AppendCase& c : attend_cases()) {
    for (bool device_lengths : {false, true}) {
      SCOPED_TRACE(c.name + (device_lengths ? " (device lengths)" : " (host lengths)"));
      AppendProblem host(c, seed++);
      runtime::DeviceMirror mirror(host.problem());
      auto lengths = upload(host.problem().seqlen_k_per_batch);
      Problem device = mirror.device_problem();
      if (device_lengths) use_device_key_lengths(device, *lengths);
      const EnginePlan plan = engine_->plan(device);
      EXPECT_NE(plan.explanation().find("then attention over the appended cache"),
                std::string::npos)
          << plan.explanation();
      const std::vector<KernelConfig> kernels = plan.kernels();
      ASSERT_GE(kernels.size(), 2u) << plan.explanation();
      EXPECT_EQ(kernels.front().family, Family::fwd_appendkv);
      const Family attention = c.table == PageTableKind::none ? Family::fwd : Family::fwd_pagedkv;
      EXPECT_TRUE(kernels[1].family == attention || kernels[1].family == Family::fwd_splitkv)
          << plan.explanation();
      jit::Stream stream;
      engine_->run(plan, device, stream.handle());
      stream.synchronize();
      EXPECT_EQ(mismatches(mirror, host.problem(), c.name), 0) << plan.explanation();
    }
  }
}

// The append -> attend plan over device lengths and a device block table, captured once and
// replayed twice: first with the captured lengths, then one decode step later (lengths grown by
// the appended token, new tokens written into the captured k_new / v_new buffers).
TEST_F(AppendKvGpu, AppendThenAttendReplaysInACudaGraphWithNewLengths) {
  AppendCase c = attend_cases()[0];
  c.rotate_q = false;  // a replay would rotate the captured Q again
  AppendProblem host(c, 300);
  runtime::DeviceMirror mirror(host.problem());
  auto lengths = upload(host.problem().seqlen_k_per_batch);
  const std::vector<int32_t>& table = host.problem().paged.block_table;
  jit::DeviceBuffer block_table(static_cast<int64_t>(table.size() * 4));
  block_table.copy_from_host(std::as_bytes(std::span(table)));
  Problem device = mirror.device_problem();
  use_device_key_lengths(device, *lengths, 1);  // both steps
  device.paged.block_table.clear();
  device.device_indices.block_table = reinterpret_cast<const int32_t*>(block_table.address());
  const EnginePlan plan = engine_->plan(device);

  jit::Stream stream;
  const jit::CudaDriverApi& api = jit::cuda_driver();
  jit::DeviceBuffer workspace(std::max<int64_t>(plan.workspace_bytes(), 1));
  void* address = reinterpret_cast<void*>(workspace.address());
  engine_->run(plan, device, stream.handle(), address);  // loads the kernels before capture
  stream.synchronize();
  // That run appended once; start the replays from the host caches again.
  runtime::DeviceMirror fresh(host.problem());
  Problem replayed = device;
  replayed.k = fresh.device_problem().k;
  replayed.v = fresh.device_problem().v;
  replayed.q = fresh.device_problem().q;
  replayed.o = fresh.device_problem().o;
  replayed.append.k_new = fresh.device_problem().append.k_new;
  replayed.append.v_new = fresh.device_problem().append.v_new;
  jit::CUgraph graph = nullptr;
  jit::CUgraphExec exec = nullptr;
  jit::check_cuda(api.stream_begin_capture(stream.handle(), 2), "cuStreamBeginCapture");
  engine_->run(plan, replayed, stream.handle(), address);
  jit::check_cuda(api.stream_end_capture(stream.handle(), &graph), "cuStreamEndCapture");
  jit::check_cuda(api.graph_instantiate(&exec, graph, 0), "cuGraphInstantiate");

  jit::check_cuda(api.graph_launch(exec, stream.handle()), "cuGraphLaunch");
  stream.synchronize();
  EXPECT_EQ(mismatches(fresh, host.problem(), c.name + " replay 1"), 0);

  // One decode step later: the host problem now holds the first step's caches (the reference
  // appended into them); new tokens and lengths go to the captured buffers.
  Problem next = host.problem();
  for (int64_t& n : next.seqlen_k_per_batch) n += c.seqlen_knew;
  next.seqlen_k = *std::max_element(next.seqlen_k_per_batch.begin(), next.seqlen_k_per_batch.end());
  std::mt19937_64 rng(301);
  for (const TensorView* x : {&next.append.k_new, &next.append.v_new})
    for (int64_t e = 0; e < x->numel(); ++e)
      numeric::store(x->data, x->dtype, e, std::uniform_real_distribution<>(-1, 1)(rng));
  const auto bytes = [](const TensorView& x) {
    return std::span(static_cast<const std::byte*>(x.data), x.numel() * dtype_size(x.dtype));
  };
  jit::check_cuda(api.memcpy_htod(reinterpret_cast<jit::CUdeviceptr>(replayed.append.k_new.data),
                                  next.append.k_new.data, bytes(next.append.k_new).size()),
                  "cuMemcpyHtoD");
  jit::check_cuda(api.memcpy_htod(reinterpret_cast<jit::CUdeviceptr>(replayed.append.v_new.data),
                                  next.append.v_new.data, bytes(next.append.v_new).size()),
                  "cuMemcpyHtoD");
  lengths->copy_from_host(std::as_bytes(std::span(next.seqlen_k_per_batch)));
  fresh.poison_outputs();
  jit::check_cuda(api.graph_launch(exec, stream.handle()), "cuGraphLaunch");
  stream.synchronize();
  EXPECT_EQ(mismatches(fresh, next, c.name + " replay 2"), 0);
  api.graph_exec_destroy(exec);
  api.graph_destroy(graph);
}

}  // namespace
}  // namespace tilefmha
