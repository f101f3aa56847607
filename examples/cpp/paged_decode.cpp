// Paged decode: one new query token per sequence attends to a KV cache stored in fixed-size
// pages scattered through a pool, located by a vLLM-style block table; each sequence has its
// own cache length. The result must equal attention over the keys gathered in order.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>
#include <vector>

#include "example_support.hpp"
#include "tilefmha/problem.hpp"
#include "tilefmha/reference.hpp"

using namespace tilefmha;

int main() {
  constexpr int64_t kHeadsQ = 4, kHeadsK = 2, kDim = 64, kPageSize = 16;
  const std::vector<int64_t> cache_lengths = {37, 5, 64};
  const int64_t batch = static_cast<int64_t>(cache_lengths.size());
  const int64_t max_keys = *std::max_element(cache_lengths.begin(), cache_lengths.end());
  const int64_t max_pages = (max_keys + kPageSize - 1) / kPageSize;
  const int64_t num_pages = batch * max_pages;

  // The page pool, logical [num_pages, page_size, nhead_k, dim] (NHD layout).
  examples::HostBuffer k_cache(DType::fp32, {num_pages, kPageSize, kHeadsK, kDim});
  examples::HostBuffer v_cache(DType::fp32, {num_pages, kPageSize, kHeadsK, kDim});
  examples::fill_uniform(k_cache, 31);
  examples::fill_uniform(v_cache, 32);
  examples::HostBuffer q(DType::fp32, {batch, 1, kHeadsQ, kDim});
  examples::HostBuffer o(DType::fp32, {batch, 1, kHeadsQ, kDim});
  examples::fill_uniform(q, 33);

  // Pages handed out in shuffled order, as an allocator reusing freed pages would.
  std::vector<int32_t> pool(static_cast<size_t>(num_pages));
  std::iota(pool.begin(), pool.end(), 0);
  std::shuffle(pool.begin(), pool.end(), std::mt19937(34));
  PagedKv paged;
  paged.table = PageTableKind::vllm_block_table;
  paged.layout = KvLayout::nhd;
  paged.page_size = kPageSize;
  paged.num_pages = num_pages;
  paged.max_pages_per_seq = max_pages;
  paged.block_table = pool;  // row b: the pages of sequence b, in key order

  const Problem problem = ProblemBuilder(Family::fwd_pagedkv)
                              .dtype(DType::fp32)
                              .shape(batch, kHeadsQ, kHeadsK, 1, max_keys, kDim, kDim)
                              .key_lengths(cache_lengths)
                              .q(q.view)
                              .k(k_cache.view)
                              .v(v_cache.view)
                              .o(o.view)
                              .paged(paged)
                              .build();
  reference::run(problem);

  examples::MaxError error;
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < kHeadsQ; ++h) {
      const int64_t kv_head = h / (kHeadsQ / kHeadsK);
      // Key j of sequence b: page block_table[b][j / page_size], slot j % page_size.
      const auto cached = [&](const examples::HostBuffer& cache) {
        return [&, b, kv_head](int64_t j, int64_t c) {
          const int64_t page = paged.block_table[b * max_pages + j / kPageSize];
          return numeric::load(cache.view, {page, j % kPageSize, kv_head, c});
        };
      };
      const auto expected =
          examples::attend_row(examples::read_row(q.view, b, 0, h), cache_lengths[b], kDim,
                               1.0 / std::sqrt(double(kDim)), cached(k_cache), cached(v_cache));
      for (int64_t c = 0; c < kDim; ++c)
        error.add(numeric::load(o.view, {b, 0, h, c}), expected[c]);
    }
  return error.report("paged decode vs gathered-cache formula", 1e-5) ? 0 : 1;
}
