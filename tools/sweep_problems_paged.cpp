// The paged families' host problem (fwd_pagedkv in batch mode, batch_prefill in group mode): K
// and V live in a page pool in the kernel's KV layout, reached through the kernel's table form.
// The pool is laid out to catch wrong page reads: each sequence's pages are scattered over a
// shuffled pool with spare pages, and every slot no sequence's key lives in (spare pages, the
// tail of a sequence's last page) holds NaN, as does the page that a vLLM table's padding
// entries name; a kernel that takes any of them into its sums (a NaN V row times even a zero
// probability) turns O into NaN, which validation rejects.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>

#include "core/numeric.hpp"
#include "sweep_problem.hpp"
#include "tilefmha/error.hpp"
#include "uniform_fill.hpp"

namespace tilefmha::cli {
namespace {

// Keys per sequence in batch mode, where the matrix gives one seqlen_k: the first sequence
// keeps it (the longest, as the matched problem says), the second is short (37 keys, a prime:
// it ends inside a page of every size above 1 and spans pages of size 16), the rest ragged.
// None drops below seqlen_q, so a bottom-right causal row always sees a key.
std::vector<int64_t> batch_key_lengths(int64_t batch, int64_t seqlen_q, int64_t seqlen_k) {
  std::vector<int64_t> lengths(static_cast<size_t>(batch), seqlen_k);
  const int64_t floor = std::min(seqlen_q, seqlen_k);
  for (int64_t b = 1; b < batch; ++b) {
    const int64_t ragged = b == 1 ? 37 : seqlen_k - b * (seqlen_k / (2 * batch)) - 1;
    lengths[static_cast<size_t>(b)] = std::clamp(ragged, floor, seqlen_k);
  }
  return lengths;
}

// The pool [num_pages, page_size, nhead_k, dim] with the strides of `layout` (HND: each page is
// [nhead_k, page_size, dim] in memory), no memory yet. The head dim is contiguous either way.
TensorView pool_view(DType dtype, KvLayout layout, int64_t pages, int64_t page_size, int64_t heads,
                     int64_t dim) {
  TensorView view = contiguous_view(nullptr, dtype, {pages, page_size, heads, dim});
  if (layout == KvLayout::hnd) view.stride = {heads * page_size * dim, dim, page_size * dim, 1, 0};
  return view;
}

// Every element of `bytes` set to NaN of `dtype`.
void fill_nan(std::vector<std::byte>& bytes, DType dtype, int64_t elements) {
  bytes.resize(static_cast<size_t>(elements * dtype_size(dtype)));
  if (bytes.empty()) return;
  numeric::store(bytes.data(), dtype, 0, std::numeric_limits<double>::quiet_NaN());
  // Doubling copies: a pool is tens of millions of elements.
  for (size_t filled = static_cast<size_t>(dtype_size(dtype)); filled < bytes.size(); filled *= 2)
    std::memcpy(bytes.data() + filled, bytes.data(), std::min(filled, bytes.size() - filled));
}

// The page assignment: which pool page holds logical page p of sequence b, and the spare
// (unused) pages. Pages are drawn from a shuffled pool, so a sequence's pages are neither
// adjacent nor in order.
struct PageAssignment {
  std::vector<std::vector<int32_t>> pages;  // per sequence, in logical order
  std::vector<int32_t> spare;
  int64_t num_pages = 0;
};

PageAssignment assign_pages(const std::vector<int64_t>& key_lengths, int64_t page_size,
                            uint64_t seed) {
  PageAssignment out;
  int64_t used = 0;
  for (int64_t keys : key_lengths) used += (keys + page_size - 1) / page_size;
  // A quarter more pages than the sequences need (two at least), so that spare pages sit
  // between them.
  out.num_pages = used + std::max<int64_t>(2, used / 4);
  if (out.num_pages > std::numeric_limits<int32_t>::max())
    throw Error(ErrorKind::invalid_argument,
                "paged.num_pages " + std::to_string(out.num_pages) +
                    " does not fit the int32 page ids of a page table");
  std::vector<int32_t> order(static_cast<size_t>(out.num_pages));
  std::iota(order.begin(), order.end(), 0);
  std::mt19937_64 rng(seed);
  std::shuffle(order.begin(), order.end(), rng);
  size_t next = 0;
  for (int64_t keys : key_lengths) {
    auto& pages = out.pages.emplace_back();
    for (int64_t p = 0; p < (keys + page_size - 1) / page_size; ++p) pages.push_back(order[next++]);
  }
  out.spare.assign(order.begin() + static_cast<std::ptrdiff_t>(next), order.end());
  return out;
}

// The table in the kernel's form. vLLM rows are as wide as the longest sequence needs; the
// entries past a sequence's pages name a spare (NaN) page, since a kernel must never read them.
PagedKv page_table(const PageAssignment& a, PageTableKind table, KvLayout layout,
                   int64_t page_size) {
  PagedKv paged;
  paged.table = table;
  paged.layout = layout;
  paged.page_size = page_size;
  paged.num_pages = a.num_pages;
  if (table == PageTableKind::vllm_block_table) {
    size_t widest = 1;
    for (const auto& pages : a.pages) widest = std::max(widest, pages.size());
    paged.max_pages_per_seq = static_cast<int64_t>(widest);
    for (const auto& pages : a.pages) {
      paged.block_table.insert(paged.block_table.end(), pages.begin(), pages.end());
      paged.block_table.insert(paged.block_table.end(), widest - pages.size(), a.spare.front());
    }
    return paged;
  }
  paged.page_indptr.assign(1, 0);
  for (const auto& pages : a.pages) {
    paged.page_indices.insert(paged.page_indices.end(), pages.begin(), pages.end());
    paged.page_indptr.push_back(static_cast<int64_t>(paged.page_indices.size()));
  }
  return paged;
}

// Allocates `pool` for `view` (pointing it there): NaN, but for logical K or V (token rows
// [total_keys, heads, dim], the sequences one after another, random from `seed`) at the slots
// the assignment gives. The logical values do not depend on the layout, page size or table form,
// so every row of a shape sees the same data.
void fill_pool(std::vector<std::byte>& pool, TensorView& view,
               const std::vector<int64_t>& key_lengths, const PageAssignment& a, uint64_t seed) {
  const int64_t heads = view.shape[2], dim = view.shape[3];
  const int64_t page_size = view.shape[1];
  const int64_t element = dtype_size(view.dtype);
  const auto row_bytes = static_cast<size_t>(dim * element);
  fill_nan(pool, view.dtype, view.shape[0] * page_size * heads * dim);
  int64_t total_keys = 0;
  for (int64_t keys : key_lengths) total_keys += keys;
  std::vector<std::byte> logical;
  fill_uniform(logical, view.dtype, total_keys * heads * dim, seed);
  int64_t token = 0;
  for (size_t b = 0; b < key_lengths.size(); ++b) {
    for (int64_t j = 0; j < key_lengths[b]; ++j, ++token) {
      const int64_t page = a.pages[b][static_cast<size_t>(j / page_size)];
      for (int64_t h = 0; h < heads; ++h) {
        const int64_t to = view.offset({page, j % page_size, h, 0}) * element;
        std::memcpy(pool.data() + to, logical.data() + (token * heads + h) * dim * element,
                    row_bytes);
      }
    }
  }
  view.data = pool.data();
}

}  // namespace

std::string build_paged_problem(const bench::MatrixShape& s, const KernelConfig& kernel,
                                HostProblem& h) {
  if (s.bias != BiasKind::none) return "timing does not set up bias tensors yet";
  // Both are checked upstream (the matrix loader, the match); here they would divide by zero or
  // build a contiguous problem for a paged kernel.
  if (s.page_size < 1)
    throw Error(ErrorKind::invalid_argument, "page_size " + std::to_string(s.page_size) + " of " +
                                                 s.label() + " is not positive");
  if (kernel.page_table == PageTableKind::none)
    throw Error(ErrorKind::invalid_argument, "page_table: kernel " + kernel.name() +
                                                 " has none, but " + s.label() + " is paged");
  const bool group = s.mode() == Mode::group;
  // Group mode: q = k lengths per sequence, the key counts coming from seqstart_k as a serving
  // engine's prefill gives them; batch mode: one query length, ragged key lengths.
  std::vector<int64_t> seqstart{0};
  for (int64_t n : s.varlen) seqstart.push_back(seqstart.back() + n);
  const std::vector<int64_t> key_lengths =
      group ? s.varlen : batch_key_lengths(s.batch, s.seqlen_q, s.seqlen_k);
  const int64_t batch = group ? 1 : s.batch;  // of the Q/O views
  const int64_t rows_q = group ? seqstart.back() : s.seqlen_q;
  const int64_t q_elems = batch * rows_q * s.nhead_q * s.hdim_q;
  const int64_t o_elems = batch * rows_q * s.nhead_q * s.hdim_v;
  fill_uniform(h.q, s.dtype, q_elems, 1);
  h.o.assign(static_cast<size_t>(o_elems * dtype_size(s.out_dtype)), std::byte{0});

  const PageAssignment pages = assign_pages(key_lengths, s.page_size, 0x9a9e5);
  const PagedKv paged = page_table(pages, kernel.page_table, kernel.kv_layout, s.page_size);
  TensorView k =
      pool_view(s.dtype, paged.layout, paged.num_pages, s.page_size, s.nhead_k, s.hdim_q);
  fill_pool(h.k, k, key_lengths, pages, 2);
  TensorView v =
      pool_view(s.dtype, paged.layout, paged.num_pages, s.page_size, s.nhead_k, s.hdim_v);
  fill_pool(h.v, v, key_lengths, pages, 3);

  ProblemBuilder builder(s.family);
  builder.dtype(s.dtype).shape(s.batch, s.nhead_q, s.nhead_k, s.seqlen_q, s.seqlen_k, s.hdim_q,
                               s.hdim_v);
  if (group)
    builder.group(seqstart, seqstart);
  else
    builder.key_lengths(key_lengths);
  builder.q(bshd(h.q.data(), s.dtype, batch, rows_q, s.nhead_q, s.hdim_q))
      .k(k)
      .v(v)
      .o(bshd(h.o.data(), s.out_dtype, batch, rows_q, s.nhead_q, s.hdim_v))
      .paged(paged);
  apply_shape_features(s, batch, rows_q, builder, h);
  h.problem = builder.build();

  int64_t keys = 0;
  for (int64_t n : key_lengths) keys += n;
  h.flops = 2.0 * visible_pairs(h.problem) * static_cast<double>(s.nhead_q * (s.hdim_q + s.hdim_v));
  // The keys' rows once each (not the pool, whose spare pages no kernel should touch).
  h.bytes = static_cast<double>((q_elems + keys * s.nhead_k * (s.hdim_q + s.hdim_v)) *
                                    dtype_size(s.dtype) +
                                o_elems * dtype_size(s.out_dtype));
  return "";
}

}  // namespace tilefmha::cli
