// Append-KV reference: new tokens land rotated at the right cache rows and nowhere else, and
// attention over the appended cache equals attention over a cache the test builds itself with
// its own RoPE formula (complex multiplication by cos + i sin).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <complex>
#include <ostream>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "core/numeric.hpp"
#include "support/host_tensor.hpp"
#include "tilefmha/error.hpp"
#include "tilefmha/reference.hpp"

using namespace tilefmha;
using tilefmha::testing::HostTensor;

namespace {

constexpr int64_t kBatch = 2, kHeadsQ = 4, kHeadsK = 2, kDimQ = 16, kDimV = 12, kNew = 3;
constexpr int64_t kPageSize = 4, kPagesPerSeq = 3, kNumPages = 9;
constexpr int64_t kCapacity = kPageSize * kPagesPerSeq;  // cache rows per sequence
constexpr int64_t kMaxPosition = 16;                     // rows of the cos / sin tables
const std::vector<int64_t> kExisting = {5, 2};           // cached tokens before the append
// Pages of each sequence, deliberately out of order; page 1, 4 and 5 belong to nobody.
const std::vector<int32_t> kPages = {6, 2, 8, 0, 7, 3};

struct AppendCase {
  std::string name;
  PageTableKind table = PageTableKind::none;
  KvLayout layout = KvLayout::nhd;
  RopeKind rope = RopeKind::none;
  int64_t rotary_dim = 0;
  bool rotate_q = false;
  DType dtype = DType::fp16;
  bool group = false;  // contiguous cache in group mode (sequences packed one after another)
};

// gtest prints a failing parameter with this instead of its bytes.
void PrintTo(const AppendCase& c, std::ostream* out) {
  *out << c.name;
}

std::string case_name(const ::testing::TestParamInfo<AppendCase>& info) {
  return info.param.name;
}

// The test's own RoPE: pairs as complex numbers times (cos + i sin) from the tables.
std::vector<double> rotate(const std::vector<double>& row, const AppendCase& c,
                           const HostTensor& cos, const HostTensor& sin, int64_t position) {
  std::vector<double> out = row;
  if (c.rope == RopeKind::none) return out;
  const int64_t half = c.rotary_dim / 2;
  for (int64_t f = 0; f < half; ++f) {
    const int64_t re = c.rope == RopeKind::interleaved ? 2 * f : f;
    const int64_t im = c.rope == RopeKind::interleaved ? 2 * f + 1 : f + half;
    const std::complex<double> z =
        std::complex<double>(row[re], row[im]) *
        std::complex<double>(cos.at({position, f}), sin.at({position, f}));
    out[re] = z.real();
    out[im] = z.imag();
  }
  return out;
}

std::vector<double> rounded(std::vector<double> row, DType dtype) {
  for (double& x : row) x = numeric::round_to(dtype, x);
  return row;
}

class AppendKvTest : public ::testing::TestWithParam<AppendCase> {
 protected:
  void SetUp() override {
    const AppendCase& c = GetParam();
    const DType t = c.dtype;
    std::mt19937_64 rng(11);
    k_cache = make_cache(kDimQ);
    v_cache = make_cache(kDimV);
    // Poison: values far from the data range, so a stray write is visible.
    k_cache.fill_uniform(rng, 50.0, 60.0);
    v_cache.fill_uniform(rng, -60.0, -50.0);
    for (int64_t b = 0; b < kBatch; ++b)
      for (int64_t j = 0; j < kExisting[b]; ++j)
        for (int64_t h = 0; h < kHeadsK; ++h) {
          for (int64_t d = 0; d < kDimQ; ++d)
            set_cache(k_cache, b, j, h, d, std::uniform_real_distribution<>(-1, 1)(rng));
          for (int64_t d = 0; d < kDimV; ++d)
            set_cache(v_cache, b, j, h, d, std::uniform_real_distribution<>(-1, 1)(rng));
        }
    k_before = bytes_of(k_cache);
    v_before = bytes_of(v_cache);
    k_new = HostTensor(t, {kBatch, kNew, kHeadsK, kDimQ});
    v_new = HostTensor(t, {kBatch, kNew, kHeadsK, kDimV});
    q = c.group ? HostTensor(t, {1, kBatch * kNew, kHeadsQ, kDimQ})
                : HostTensor(t, {kBatch, kNew, kHeadsQ, kDimQ});
    for (HostTensor* x : {&k_new, &v_new, &q}) x->fill_uniform(rng, -1.0, 1.0);
    q_before = bytes_of(q);
    const int64_t half = std::max<int64_t>(c.rotary_dim / 2, 1);
    cos = HostTensor(DType::fp32, {kMaxPosition, half});
    sin = HostTensor(DType::fp32, {kMaxPosition, half});
    for (int64_t pos = 0; pos < kMaxPosition; ++pos)
      for (int64_t f = 0; f < half; ++f) {
        const double angle = pos * std::pow(100.0, -static_cast<double>(f) / half);
        cos.set({pos, f}, std::cos(angle));
        sin.set({pos, f}, std::sin(angle));
      }
  }

  HostTensor make_cache(int64_t dim) const {
    const AppendCase& c = GetParam();
    const int64_t page_elems = kPageSize * kHeadsK * dim;
    if (c.table == PageTableKind::none)
      return c.group ? HostTensor(c.dtype, {1, kBatch * kCapacity, kHeadsK, dim})
                     : HostTensor(c.dtype, {kBatch, kCapacity, kHeadsK, dim});
    // Logical [page, slot, head, dim] in NHD or HND memory order.
    if (c.layout == KvLayout::nhd)
      return HostTensor(c.dtype, kNumPages * page_elems, {kNumPages, kPageSize, kHeadsK, dim},
                        {page_elems, kHeadsK * dim, dim, 1});
    return HostTensor(c.dtype, kNumPages * page_elems, {kNumPages, kPageSize, kHeadsK, dim},
                      {page_elems, dim, kPageSize * dim, 1});
  }

  // Element offset of (sequence b, position pos, head h, d) in a cache, from the test's own
  // reading of the layouts: pages in kPages order (both table kinds hold the same pages).
  int64_t cache_offset(const HostTensor& cache, int64_t b, int64_t pos, int64_t h,
                       int64_t d) const {
    const AppendCase& c = GetParam();
    const TensorView& view = cache.view();
    if (c.table == PageTableKind::none)
      return c.group ? view.offset({0, b * kCapacity + pos, h, d}) : view.offset({b, pos, h, d});
    const int64_t page = kPages[b * kPagesPerSeq + pos / kPageSize];
    return view.offset({page, pos % kPageSize, h, d});
  }

  void set_cache(HostTensor& cache, int64_t b, int64_t pos, int64_t h, int64_t d, double x) {
    numeric::store(cache.view().data, cache.view().dtype, cache_offset(cache, b, pos, h, d), x);
  }
  double cache_at(const HostTensor& cache, int64_t b, int64_t pos, int64_t h, int64_t d) const {
    return numeric::load(cache.view().data, cache.view().dtype, cache_offset(cache, b, pos, h, d));
  }

  PagedKv paged() const {
    const AppendCase& c = GetParam();
    PagedKv p;
    p.table = c.table;
    p.layout = c.layout;
    p.page_size = kPageSize;
    p.num_pages = kNumPages;
    if (c.table == PageTableKind::vllm_block_table) {
      p.block_table = kPages;
      p.max_pages_per_seq = kPagesPerSeq;
    } else if (c.table == PageTableKind::sglang_page_list) {
      p.page_indptr = {0, kPagesPerSeq, 2 * kPagesPerSeq};
      p.page_indices = kPages;
    }
    return p;
  }

  // The problem shape shared by the append and the attention over the cache.
  ProblemBuilder base(Family family, std::vector<int64_t> key_lengths) const {
    const AppendCase& c = GetParam();
    ProblemBuilder b(family);
    b.dtype(c.dtype).shape(kBatch, kHeadsQ, kHeadsK, kNew, kCapacity, kDimQ, kDimV);
    if (c.group) b.group({0, kNew, 2 * kNew}, {0, kCapacity, 2 * kCapacity});
    if (c.table != PageTableKind::none) b.paged(paged());
    return b.key_lengths(std::move(key_lengths)).q(q.view()).k(k_cache.view()).v(v_cache.view());
  }

  void append() {
    const AppendCase& c = GetParam();
    AppendKv spec;
    spec.seqlen_knew = kNew;
    spec.k_new = k_new.view();
    spec.v_new = v_new.view();
    spec.rope = c.rope;
    spec.rotary_dim = c.rotary_dim;
    if (c.rope != RopeKind::none) {
      spec.rope_cos = cos.view();
      spec.rope_sin = sin.view();
    }
    spec.rotate_q = c.rotate_q;
    reference::append_kv(base(Family::fwd_appendkv, kExisting).append(spec).build());
  }

  std::vector<double> new_row(const HostTensor& x, int64_t b, int64_t t, int64_t h,
                              int64_t dim) const {
    std::vector<double> row(dim);
    for (int64_t d = 0; d < dim; ++d) row[d] = x.at({b, t, h, d});
    return row;
  }

  // Query row i of sequence b as the test expects it after the append.
  std::vector<double> expected_q(int64_t b, int64_t i, int64_t h) const {
    const AppendCase& c = GetParam();
    std::vector<double> row(kDimQ);
    for (int64_t d = 0; d < kDimQ; ++d) {
      const int64_t offset =
          c.group ? q.view().offset({0, b * kNew + i, h, d}) : q.view().offset({b, i, h, d});
      row[d] = numeric::load(q_before.data(), c.dtype, offset);
    }
    if (!c.rotate_q) return row;
    return rounded(rotate(row, c, cos, sin, kExisting[b] + i), c.dtype);
  }

  static std::vector<uint8_t> bytes_of(const HostTensor& x) {
    const auto* data = static_cast<const uint8_t*>(x.view().data);
    return {data, data + x.elements() * dtype_size(x.view().dtype)};
  }

  HostTensor k_cache, v_cache, k_new, v_new, q, cos, sin;
  std::vector<uint8_t> k_before, v_before, q_before;
};

double tolerance(DType dtype, double expected) {
  // Two units in the last place of the storage type: the reference and the test may round a
  // value that sits on a tie differently, but a wrong rotation is off by O(1).
  const double ulp = dtype == DType::fp32   ? std::ldexp(1.0, -23)
                     : dtype == DType::fp16 ? std::ldexp(1.0, -10)
                                            : std::ldexp(1.0, -7);
  return 2 * ulp * std::max(1.0, std::abs(expected));
}

TEST_P(AppendKvTest, WritesRotatedTokensAndNothingElse) {
  const AppendCase& c = GetParam();
  append();
  for (auto [cache, before, dim] :
       {std::tuple{&k_cache, &k_before, kDimQ}, std::tuple{&v_cache, &v_before, kDimV}}) {
    const bool is_k = cache == &k_cache;
    std::set<int64_t> written;
    for (int64_t b = 0; b < kBatch; ++b)
      for (int64_t t = 0; t < kNew; ++t)
        for (int64_t h = 0; h < kHeadsK; ++h) {
          const int64_t pos = kExisting[b] + t;
          std::vector<double> expected = new_row(is_k ? k_new : v_new, b, t, h, dim);
          if (is_k) expected = rounded(rotate(expected, c, cos, sin, pos), c.dtype);
          for (int64_t d = 0; d < dim; ++d) {
            written.insert(cache_offset(*cache, b, pos, h, d));
            EXPECT_NEAR(cache_at(*cache, b, pos, h, d), expected[d],
                        tolerance(c.dtype, expected[d]))
                << (is_k ? "K" : "V") << " b " << b << " t " << t << " h " << h << " d " << d;
          }
        }
    // Every other byte of the pool (other sequences' rows, unused pages, slots past the new
    // tokens, existing tokens) is as it was.
    const std::vector<uint8_t> after = bytes_of(*cache);
    const int64_t size = dtype_size(c.dtype);
    int64_t changed_elsewhere = 0;
    for (int64_t e = 0; e < cache->elements(); ++e)
      if (!written.count(e))
        changed_elsewhere += !std::equal(after.begin() + e * size, after.begin() + (e + 1) * size,
                                         before->begin() + e * size);
    EXPECT_EQ(changed_elsewhere, 0) << (is_k ? "K" : "V");
  }
  for (int64_t b = 0; b < kBatch; ++b)
    for (int64_t i = 0; i < kNew; ++i)
      for (int64_t h = 0; h < kHeadsQ; ++h) {
        const std::vector<double> expected = expected_q(b, i, h);
        for (int64_t d = 0; d < kDimQ; ++d) {
          const double got = c.group ? q.at({0, b * kNew + i, h, d}) : q.at({b, i, h, d});
          EXPECT_NEAR(got, expected[d], tolerance(c.dtype, expected[d]))
              << "Q b " << b << " i " << i << " h " << h << " d " << d;
        }
      }
  if (!c.rotate_q || c.rope == RopeKind::none) {
    EXPECT_TRUE(bytes_of(q) == q_before);
  }
}

// Attention of the (rotated) new queries over the appended cache equals attention over a
// contiguous cache holding the old tokens followed by the test-rotated new ones.
TEST_P(AppendKvTest, AttentionOverAppendedCacheMatchesConcatenatedCache) {
  const AppendCase& c = GetParam();
  append();
  std::vector<int64_t> total(kBatch);
  for (int64_t b = 0; b < kBatch; ++b) total[b] = kExisting[b] + kNew;
  const int64_t longest = *std::max_element(total.begin(), total.end());

  HostTensor o_cache = c.group ? HostTensor(c.dtype, {1, kBatch * kNew, kHeadsQ, kDimV})
                               : HostTensor(c.dtype, {kBatch, kNew, kHeadsQ, kDimV});
  const Family family = c.table == PageTableKind::none ? Family::fwd : Family::fwd_pagedkv;
  reference::forward(base(family, total).o(o_cache.view()).causal(MaskAlign::bottom_right).build());

  HostTensor k_flat(c.dtype, {kBatch, longest, kHeadsK, kDimQ});
  HostTensor v_flat(c.dtype, {kBatch, longest, kHeadsK, kDimV});
  HostTensor q_flat(c.dtype, {kBatch, kNew, kHeadsQ, kDimQ});
  k_flat.fill(0.0);
  v_flat.fill(0.0);
  for (int64_t b = 0; b < kBatch; ++b)
    for (int64_t h = 0; h < kHeadsK; ++h) {
      for (int64_t j = 0; j < kExisting[b]; ++j) {
        // The old tokens, read from the cache before the append.
        for (int64_t d = 0; d < kDimQ; ++d)
          k_flat.set({b, j, h, d},
                     numeric::load(k_before.data(), c.dtype, cache_offset(k_cache, b, j, h, d)));
        for (int64_t d = 0; d < kDimV; ++d)
          v_flat.set({b, j, h, d},
                     numeric::load(v_before.data(), c.dtype, cache_offset(v_cache, b, j, h, d)));
      }
      for (int64_t t = 0; t < kNew; ++t) {
        const std::vector<double> k_row =
            rotate(new_row(k_new, b, t, h, kDimQ), c, cos, sin, kExisting[b] + t);
        for (int64_t d = 0; d < kDimQ; ++d) k_flat.set({b, kExisting[b] + t, h, d}, k_row[d]);
        for (int64_t d = 0; d < kDimV; ++d)
          v_flat.set({b, kExisting[b] + t, h, d}, v_new.at({b, t, h, d}));
      }
    }
  for (int64_t b = 0; b < kBatch; ++b)
    for (int64_t i = 0; i < kNew; ++i)
      for (int64_t h = 0; h < kHeadsQ; ++h) {
        const std::vector<double> row = expected_q(b, i, h);
        for (int64_t d = 0; d < kDimQ; ++d) q_flat.set({b, i, h, d}, row[d]);
      }
  HostTensor o_flat(c.dtype, {kBatch, kNew, kHeadsQ, kDimV});
  reference::forward(ProblemBuilder(Family::fwd)
                         .dtype(c.dtype)
                         .shape(kBatch, kHeadsQ, kHeadsK, kNew, longest, kDimQ, kDimV)
                         .key_lengths(total)
                         .q(q_flat.view())
                         .k(k_flat.view())
                         .v(v_flat.view())
                         .o(o_flat.view())
                         .causal(MaskAlign::bottom_right)
                         .build());

  for (int64_t b = 0; b < kBatch; ++b)
    for (int64_t i = 0; i < kNew; ++i)
      for (int64_t h = 0; h < kHeadsQ; ++h)
        for (int64_t d = 0; d < kDimV; ++d) {
          const double expected = o_flat.at({b, i, h, d});
          const double got =
              c.group ? o_cache.at({0, b * kNew + i, h, d}) : o_cache.at({b, i, h, d});
          EXPECT_NEAR(got, expected, tolerance(c.dtype, expected))
              << "O b " << b << " i " << i << " h " << h << " d " << d;
        }
}

AppendCase make(std::string name, PageTableKind table, KvLayout layout, RopeKind rope,
                int64_t rotary_dim, bool rotate_q, DType dtype, bool group = false) {
  return {std::move(name), table, layout, rope, rotary_dim, rotate_q, dtype, group};
}

constexpr auto kNone = PageTableKind::none;
constexpr auto kVllm = PageTableKind::vllm_block_table;
constexpr auto kSglang = PageTableKind::sglang_page_list;
constexpr auto kNhd = KvLayout::nhd;
constexpr auto kHnd = KvLayout::hnd;
constexpr auto kInterleaved = RopeKind::interleaved;
constexpr auto kHalf = RopeKind::half_rotated;

INSTANTIATE_TEST_SUITE_P(
    ReferenceAppendKv, AppendKvTest,
    ::testing::Values(
        make("contiguous_no_rope", kNone, kNhd, RopeKind::none, 0, false, DType::fp16),
        make("contiguous_no_rope_fp32", kNone, kNhd, RopeKind::none, 0, false, DType::fp32),
        make("contiguous_interleaved_q", kNone, kNhd, kInterleaved, kDimQ, true, DType::fp16),
        make("contiguous_half_partial_q", kNone, kNhd, kHalf, 8, true, DType::bf16),
        make("contiguous_group_half_q", kNone, kNhd, kHalf, kDimQ, true, DType::fp32, true),
        make("vllm_nhd_interleaved_partial", kVllm, kNhd, kInterleaved, 8, false, DType::fp16),
        make("vllm_hnd_half_q", kVllm, kHnd, kHalf, kDimQ, true, DType::fp32),
        make("sglang_nhd_half_partial_q", kSglang, kNhd, kHalf, 6, true, DType::bf16),
        make("sglang_hnd_interleaved_q", kSglang, kHnd, kInterleaved, 10, true, DType::fp16)),
    case_name);

// Codes 0, 1, ..., 255, 0, ... in storage order.
void fill_every_code(HostTensor& x) {
  auto* codes = static_cast<uint8_t*>(x.view().data);
  for (int64_t e = 0; e < x.elements(); ++e) codes[e] = static_cast<uint8_t>(e % 256);
}

uint8_t code_at(const HostTensor& x, std::initializer_list<int64_t> index) {
  return static_cast<const uint8_t*>(x.view().data)[x.view().offset(index)];
}

// fp8 with a per-tensor scale: the rotated dims of K and Q are the double rotation of the decoded
// codes, rounded by numeric::store (nearest even, saturating, NaN as 0x7F); every other element,
// infinities and NaN payloads included, is copied code for code.
TEST(ReferenceAppendKv, Fp8RotatesTheRotaryDimsAndCopiesEveryOtherCode) {
  constexpr int64_t kRotary = 8;
  const DType e5m2 = DType::fp8_e5m2;
  HostTensor k_cache(e5m2, {kBatch, kCapacity, kHeadsK, kDimQ});
  HostTensor v_cache(e5m2, {kBatch, kCapacity, kHeadsK, kDimV});
  HostTensor k_new(e5m2, {kBatch, kNew, kHeadsK, kDimQ});
  HostTensor v_new(e5m2, {kBatch, kNew, kHeadsK, kDimV});
  HostTensor q(e5m2, {kBatch, kNew, kHeadsQ, kDimQ});
  HostTensor q_before(e5m2, {kBatch, kNew, kHeadsQ, kDimQ});
  for (HostTensor* x : {&k_new, &v_new, &q, &q_before}) fill_every_code(*x);
  HostTensor cos(DType::fp32, {kMaxPosition, kRotary / 2});
  HostTensor sin(DType::fp32, {kMaxPosition, kRotary / 2});
  for (int64_t pos = 0; pos < kMaxPosition; ++pos)
    for (int64_t f = 0; f < kRotary / 2; ++f) {
      cos.set({pos, f}, std::cos(0.7 * pos + f));
      sin.set({pos, f}, std::sin(0.7 * pos + f));
    }
  AppendKv a;
  a.seqlen_knew = kNew;
  a.k_new = k_new.view();
  a.v_new = v_new.view();
  a.rope = RopeKind::interleaved;
  a.rotary_dim = kRotary;
  a.rope_cos = cos.view();
  a.rope_sin = sin.view();
  a.rotate_q = true;
  Fp8Scales scales;
  scales.kind = Fp8ScaleKind::per_tensor;
  reference::append_kv(ProblemBuilder(Family::fwd_appendkv)
                           .dtype(e5m2)
                           .shape(kBatch, kHeadsQ, kHeadsK, kNew, kCapacity, kDimQ, kDimV)
                           .key_lengths(kExisting)
                           .q(q.view())
                           .k(k_cache.view())
                           .v(v_cache.view())
                           .append(a)
                           .fp8_scales(scales)
                           .build());

  int64_t nan_copies = 0;
  for (int64_t b = 0; b < kBatch; ++b)
    for (int64_t t = 0; t < kNew; ++t) {
      const int64_t pos = kExisting[b] + t;
      const auto rotated = [&](const HostTensor& from, std::initializer_list<int64_t> at,
                               int64_t d) {
        const std::vector<int64_t> i(at);
        const double x1 = from.at({i[0], i[1], i[2], d & ~int64_t{1}});
        const double x2 = from.at({i[0], i[1], i[2], d | 1});
        const double c = cos.at({pos, d / 2}), s = sin.at({pos, d / 2});
        return numeric::float_to_fp8_e5m2(d % 2 == 0 ? x1 * c - x2 * s : x2 * c + x1 * s);
      };
      for (int64_t h = 0; h < kHeadsK; ++h) {
        for (int64_t d = 0; d < kDimQ; ++d) {
          const uint8_t want =
              d < kRotary ? rotated(k_new, {b, t, h}, d) : code_at(k_new, {b, t, h, d});
          EXPECT_EQ(code_at(k_cache, {b, pos, h, d}), want)
              << b << " " << t << " " << h << " " << d;
        }
        for (int64_t d = 0; d < kDimV; ++d) {
          EXPECT_EQ(code_at(v_cache, {b, pos, h, d}), code_at(v_new, {b, t, h, d}));
          nan_copies += std::isnan(v_new.at({b, t, h, d}));
        }
      }
      for (int64_t h = 0; h < kHeadsQ; ++h)
        for (int64_t d = 0; d < kDimQ; ++d) {
          const uint8_t want =
              d < kRotary ? rotated(q_before, {b, t, h}, d) : code_at(q_before, {b, t, h, d});
          EXPECT_EQ(code_at(q, {b, t, h, d}), want);
        }
    }
  EXPECT_GT(nan_copies, 0) << "the copies include NaN codes other than 0x7F";
}

TEST(ReferenceAppendKv, Fp8PerPageScalesAreNotSupported) {
  HostTensor cache(DType::fp8_e4m3, {kBatch, kCapacity, kHeadsK, kDimQ});
  HostTensor fresh(DType::fp8_e4m3, {kBatch, kNew, kHeadsK, kDimQ});
  Problem p = ProblemBuilder(Family::fwd_appendkv)
                  .dtype(DType::fp8_e4m3)
                  .shape(kBatch, kHeadsQ, kHeadsK, kNew, kCapacity, kDimQ, kDimQ)
                  .key_lengths(kExisting)
                  .k(cache.view())
                  .v(cache.view())
                  .peek();
  p.append.seqlen_knew = kNew;
  p.append.k_new = p.append.v_new = fresh.view();
  p.fp8.kind = Fp8ScaleKind::per_block;
  // The validator or the reference refuses; either way nothing runs.
  EXPECT_THROW(reference::append_kv(p), Error);
}

}  // namespace
