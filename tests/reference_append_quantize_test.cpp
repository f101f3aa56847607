// The quantizing append of the CPU reference (quantizes_append: bf16 or fp16 new tokens into an
// fp8 paged cache with per-page scales): a fresh page takes the scale that maps its largest new
// value to the fp8 maximum, a held page keeps its scale while the new values fit and otherwise
// grows it and re-encodes its held codes, every new value lands as the code of value / scale,
// and nothing else changes. Bad inputs are refused naming the field.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "core/numeric.hpp"
#include "support/host_tensor.hpp"
#include "tilefmha/error.hpp"
#include "tilefmha/reference.hpp"

using namespace tilefmha;
using tilefmha::testing::HostTensor;

namespace {

// Two sequences, pages of 4 keys, one KV head of 8 dims. Sequence 0 holds 2 keys in its page 3
// (slots 0-1) and appends 3: slots 2-3 of page 3 and slot 0 of page 1. Sequence 1 holds none and
// appends into page 0; its page 2 gets nothing.
constexpr int64_t kBatch = 2, kPageSize = 4, kPages = 4, kDim = 8, kNew = 3;
const std::vector<int64_t> kHeld = {2, 0};
constexpr double kLargest = 448.0;  // e4m3
constexpr float kSmallKScale = 0.001f, kLargeVScale = 0.01f, kUntouchedScale = 0.5f;

struct Cache {
  HostTensor k{DType::fp8_e4m3, {kPages, kPageSize, 1, kDim}};
  HostTensor v{DType::fp8_e4m3, {kPages, kPageSize, 1, kDim}};
  HostTensor k_new{DType::bf16, {kBatch, kNew, 1, kDim}};
  HostTensor v_new{DType::bf16, {kBatch, kNew, 1, kDim}};
  HostTensor k_scales{DType::fp32, {kPages, 1}};
  HostTensor v_scales{DType::fp32, {kPages, 1}};

  Cache() {
    std::mt19937_64 rng(11);
    for (HostTensor* x : {&k, &v}) x->fill_uniform(rng, -300, 300);
    // New values within +-2; page 3's K scale is too small for them, V's large enough.
    for (HostTensor* x : {&k_new, &v_new}) x->fill_uniform(rng, -2, 2);
    k_scales.fill(kUntouchedScale);
    v_scales.fill(kUntouchedScale);
    k_scales.set({3, 0}, kSmallKScale);
    v_scales.set({3, 0}, kLargeVScale);
  }

  Problem problem(DType new_dtype = DType::bf16) {
    PagedKv paged;
    paged.table = PageTableKind::vllm_block_table;
    paged.page_size = kPageSize;
    paged.num_pages = kPages;
    paged.max_pages_per_seq = 2;
    paged.block_table = {3, 1, 0, 2};
    AppendKv a;
    a.seqlen_knew = kNew;
    a.k_new = k_new.view();
    a.v_new = v_new.view();
    a.k_new.dtype = a.v_new.dtype = new_dtype;  // fp16 reads the same bits as other values
    Fp8Scales scales;
    scales.kind = Fp8ScaleKind::per_page;
    scales.k_page = k_scales.view();
    scales.v_page = v_scales.view();
    return ProblemBuilder(Family::fwd_appendkv)
        .dtype(DType::fp8_e4m3)
        .shape(kBatch, 1, 1, kNew, 2 * kPageSize, kDim, kDim)
        .key_lengths(kHeld)
        .paged(paged)
        .k(k.view())
        .v(v.view())
        .append(a)
        .fp8_scales(scales)
        .peek();
  }
};

uint8_t code(const HostTensor& cache, int64_t page, int64_t slot, int64_t d) {
  return static_cast<const uint8_t*>(cache.view().data)[cache.view().offset({page, slot, 0, d})];
}

double largest_new(const HostTensor& fresh, int64_t b, int64_t first, int64_t end) {
  double amax = 0;
  for (int64_t t = first; t < end; ++t)
    for (int64_t d = 0; d < kDim; ++d) amax = std::max(amax, std::fabs(fresh.at({b, t, 0, d})));
  return amax;
}

TEST(ReferenceAppendQuantize, ScalesGrowOrStayAndNewValuesLandAsCodes) {
  Cache before, after;
  reference::append_kv(after.problem());
  const float grown =
      static_cast<float>(largest_new(after.k_new, 0, 0, 2)) / static_cast<float>(kLargest);
  // Page 3, K: its scale grew to the new values', and its two held rows were re-encoded.
  EXPECT_EQ(after.k_scales.at({3, 0}), grown);
  EXPECT_GT(grown, kSmallKScale);
  for (int64_t slot = 0; slot < 2; ++slot)
    for (int64_t d = 0; d < kDim; ++d) {
      const double held = before.k.at({3, slot, 0, d}) * kSmallKScale;
      EXPECT_EQ(code(after.k, 3, slot, d), numeric::float_to_fp8_e4m3(held / grown))
          << slot << " " << d;
    }
  // Page 3, V: the new values fit its scale, which stays, and the held codes are untouched.
  EXPECT_EQ(after.v_scales.at({3, 0}), kLargeVScale);
  for (int64_t slot = 0; slot < 2; ++slot)
    for (int64_t d = 0; d < kDim; ++d)
      EXPECT_EQ(code(after.v, 3, slot, d), code(before.v, 3, slot, d));
  // New rows: the code of value / scale, within e4m3's rounding of the value once dequantized.
  const auto expect_new = [&](const HostTensor& cache, const HostTensor& fresh, double scale,
                              int64_t b, int64_t t, int64_t page, int64_t slot) {
    for (int64_t d = 0; d < kDim; ++d) {
      const double x = fresh.at({b, t, 0, d});
      EXPECT_EQ(code(cache, page, slot, d), numeric::float_to_fp8_e4m3(x / scale));
      EXPECT_NEAR(cache.at({page, slot, 0, d}) * scale, x,
                  std::ldexp(std::fabs(x), -4) + 1e-3 * scale);
    }
  };
  for (int64_t t = 0; t < 2; ++t) {
    expect_new(after.k, after.k_new, grown, 0, t, 3, 2 + t);
    expect_new(after.v, after.v_new, kLargeVScale, 0, t, 3, 2 + t);
  }
  // Fresh pages (page 1: sequence 0's third new key; page 0: sequence 1's three) take the scale
  // of their own largest new value, whose code is the fp8 maximum.
  for (const auto& [b, first, end, page] :
       {std::tuple{int64_t{0}, int64_t{2}, int64_t{3}, int64_t{1}},
        std::tuple{int64_t{1}, int64_t{0}, int64_t{3}, int64_t{0}}}) {
    for (const auto& [cache, fresh, scales] :
         {std::tuple{&after.k, &after.k_new, &after.k_scales},
          std::tuple{&after.v, &after.v_new, &after.v_scales}}) {
      const float scale =
          static_cast<float>(largest_new(*fresh, b, first, end)) / static_cast<float>(kLargest);
      EXPECT_EQ(scales->at({page, 0}), scale) << "page " << page;
      double largest_code = 0;
      for (int64_t t = first; t < end; ++t) {
        expect_new(*cache, *fresh, scale, b, t, page, t - first);
        for (int64_t d = 0; d < kDim; ++d)
          largest_code = std::max(largest_code, std::fabs(cache->at({page, t - first, 0, d})));
      }
      EXPECT_EQ(largest_code, kLargest) << "page " << page;
    }
  }
  // Page 2 gets no key: its codes and scales stay; so do the fresh pages' unused slots.
  for (int64_t slot = 0; slot < kPageSize; ++slot)
    for (int64_t d = 0; d < kDim; ++d) {
      EXPECT_EQ(code(after.k, 2, slot, d), code(before.k, 2, slot, d));
      EXPECT_EQ(code(after.v, 2, slot, d), code(before.v, 2, slot, d));
    }
  EXPECT_EQ(after.k_scales.at({2, 0}), kUntouchedScale);
  EXPECT_EQ(after.v_scales.at({2, 0}), kUntouchedScale);
  for (int64_t slot = 1; slot < kPageSize; ++slot)
    for (int64_t d = 0; d < kDim; ++d)
      EXPECT_EQ(code(after.k, 1, slot, d), code(before.k, 1, slot, d));
}

// fp16 new tokens read as fp16 (the same bits as bf16 would be other values).
TEST(ReferenceAppendQuantize, Fp16NewTokensAreReadAsFp16) {
  Cache cache;
  cache.k_new.fill(1.5);  // as bf16 bits, read as fp16 they are another value
  reference::append_kv(cache.problem(DType::fp16));
  const double fp16_value = numeric::half_to_float(0x3FC0);  // bf16 1.5's bits
  EXPECT_EQ(cache.k_scales.at({0, 0}),
            static_cast<float>(fp16_value) / static_cast<float>(kLargest));
}

TEST(ReferenceAppendQuantize, BadInputsAreRefusedNamingTheField) {
  const auto refusal = [](const Problem& p) {
    try {
      reference::append_kv(p);
    } catch (const Error& error) {
      return std::string(error.what());
    }
    return std::string();
  };
  {
    Cache cache;
    cache.k_scales.set({3, 0}, 0.0);  // page 3 holds keys, so its scale must be usable
    const std::string why = refusal(cache.problem());
    EXPECT_NE(why.find("fp8.k_page[3, 0]"), std::string::npos) << why;
  }
  {
    Cache cache;
    Problem p = cache.problem();
    p.append.v_new.dtype = DType::fp16;
    const std::string why = refusal(p);
    EXPECT_NE(why.find("append.v_new"), std::string::npos) << why;
  }
  {
    Cache cache;
    Problem p = cache.problem();
    p.fp8.k_page = TensorView{};
    const std::string why = refusal(p);
    EXPECT_NE(why.find("fp8.k_page"), std::string::npos) << why;
  }
  {
    Cache cache;
    HostTensor q(DType::fp8_e4m3, {kBatch, kNew, 1, kDim});
    Problem p = cache.problem();
    p.q = q.view();
    p.seqlen_q = kNew;
    p.append.rope = RopeKind::half_rotated;
    p.append.rotary_dim = kDim;
    p.append.rope_theta = 10000.0;
    p.append.rotate_q = true;
    const std::string why = refusal(p);
    EXPECT_NE(why.find("append.rotate_q"), std::string::npos) << why;
    p.append.rotate_q = false;
    HostTensor o(DType::bf16, {kBatch, kNew, 1, kDim});
    p.o = o.view();
    const std::string chained = refusal(p);
    EXPECT_NE(chained.find("does not chain an attention"), std::string::npos) << chained;
  }
  {
    Cache cache;
    Problem p = cache.problem();
    p.append.k_new.dtype = p.append.v_new.dtype = DType::fp32;
    const std::string why = refusal(p);
    EXPECT_NE(why.find("append.k_new"), std::string::npos) << why;
  }
}

}  // namespace
