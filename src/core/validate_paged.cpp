// validate(): which families take a paged KV cache, and the page tables (vLLM block tables,
// SGLang page lists) against the pool and the key lengths.
#include "core/validate_detail.hpp"

namespace tilefmha::validation {
namespace {

inline constexpr int64_t kMaxPageSize = 1024;

bool is_power_of_two(int64_t value) {
  return value > 0 && (value & (value - 1)) == 0;
}

// Whether each sequence's key count is known on the host (else key_length(b) is the longest).
bool lengths_on_host(const Problem& p) {
  return p.device_indices.seqlen_k == nullptr;
}

int64_t pages_for(int64_t keys, int64_t page_size) {
  return (keys + page_size - 1) / page_size;
}

// "70 keys" or "70 keys (64 cached + 6 appended)" for messages about sequence b.
std::string keys_text(const Problem& p, int64_t b) {
  const int64_t keys = keys_to_hold(p, b);
  if (keys == p.key_length(b)) return cat(keys, " keys");
  return cat(keys, " keys (", p.key_length(b), " cached + ", p.append.seqlen_knew, " appended)");
}

void check_page_entry(int64_t value, std::string_view table, size_t index, int64_t num_pages) {
  if (value < 0) fail(cat("paged.", table, "[", index, "] = ", value, " is negative"));
  if (value >= num_pages)
    fail(cat("paged.", table, "[", index, "] = ", value,
             " points past the pool (num_pages = ", num_pages, ")"));
}

void check_vllm_table(const Problem& p) {
  const PagedKv& t = p.paged;
  if (!t.page_indptr.empty() || !t.page_indices.empty())
    fail(cat("paged.page_indptr / paged.page_indices are set (", t.page_indptr.size(), " / ",
             t.page_indices.size(), " entries) but paged.table = vllm_block_table"));
  if (t.max_pages_per_seq < 0)
    fail(cat("paged.max_pages_per_seq = ", t.max_pages_per_seq, " is negative"));
  const auto entries = static_cast<int64_t>(t.block_table.size());
  // entries == batch * max_pages_per_seq, by division so that no product can overflow.
  const int64_t rows = t.max_pages_per_seq;
  const bool size_matches =
      rows == 0 ? entries == 0 : entries % rows == 0 && entries / rows == p.batch;
  if (!size_matches)
    fail(cat("paged.block_table has ", entries, " entries but batch * paged.max_pages_per_seq = ",
             p.batch, " * ", rows, " are needed"));
  for (int64_t b = 0; b < p.batch; ++b) {
    const int64_t needed = pages_for(keys_to_hold(p, b), t.page_size);
    if (needed > t.max_pages_per_seq)
      fail(cat("paged.max_pages_per_seq = ", t.max_pages_per_seq, " but sequence ", b, " needs ",
               needed, " pages for ", keys_text(p, b), " (page_size ", t.page_size, ")"));
    // Entries past a sequence's last page are padding and may hold anything; with the key
    // lengths on the device, which entries are padding is unknown here.
    if (!lengths_on_host(p)) continue;
    for (int64_t j = 0; j < needed; ++j) {
      const auto index = static_cast<size_t>(b * t.max_pages_per_seq + j);
      check_page_entry(t.block_table[index], "block_table", index, t.num_pages);
    }
  }
}

void check_sglang_list(const Problem& p) {
  const PagedKv& t = p.paged;
  if (!t.block_table.empty())
    fail(cat("paged.block_table has ", t.block_table.size(),
             " entries but paged.table = sglang_page_list"));
  const auto& indptr = t.page_indptr;
  if (static_cast<int64_t>(indptr.size()) != p.batch + 1)
    fail(cat("paged.page_indptr has ", indptr.size(), " entries but batch = ", p.batch,
             " needs batch + 1 = ", p.batch + 1));
  if (indptr[0] < 0) fail(cat("paged.page_indptr[0] = ", indptr[0], " is negative"));
  for (size_t i = 1; i < indptr.size(); ++i)
    if (indptr[i] < indptr[i - 1])
      fail(cat("paged.page_indptr is not non-decreasing at index ", i, " (", indptr[i], " < ",
               indptr[i - 1], ")"));
  const auto indices = static_cast<int64_t>(t.page_indices.size());
  if (indptr.back() > indices)
    fail(cat("paged.page_indptr[", indptr.size() - 1, "] = ", indptr.back(),
             " points past paged.page_indices (", indices, " entries)"));
  for (size_t i = 0; i < t.page_indices.size(); ++i)
    check_page_entry(t.page_indices[i], "page_indices", i, t.num_pages);
  // Key lengths on the device: each sequence's need is unknown here (the kernels trust them).
  if (!lengths_on_host(p)) return;
  for (int64_t b = 0; b < p.batch; ++b) {
    const int64_t pages = indptr[b + 1] - indptr[b];
    const int64_t needed = pages_for(keys_to_hold(p, b), t.page_size);
    if (pages < needed)
      fail(cat("paged.page_indptr gives sequence ", b, " ", pages, " pages (page_indptr[", b + 1,
               "] - page_indptr[", b, "]) but it needs ", needed, " for ", keys_text(p, b),
               " (page_size ", t.page_size, ")"));
  }
}

// A table in device memory: only its form and its room for the longest sequence are checked.
void check_device_table(const Problem& p) {
  const PagedKv& t = p.paged;
  const DeviceIndexArrays& d = p.device_indices;
  if (!t.block_table.empty() || !t.page_indptr.empty() || !t.page_indices.empty())
    fail(
        "paged.block_table / page_indptr / page_indices have host entries and a device page "
        "table is set: give the table one way");
  if (t.table == PageTableKind::sglang_page_list) {
    if (d.block_table != nullptr)
      fail("device_indices.block_table is set but paged.table = sglang_page_list");
    if (d.page_indptr == nullptr || d.page_indices == nullptr)
      fail(
          "device_indices.page_indptr and page_indices must both be set for an SGLang page "
          "list on the device");
    return;
  }
  if (d.page_indptr != nullptr || d.page_indices != nullptr)
    fail("device_indices.page_indptr / page_indices are set but paged.table = vllm_block_table");
  if (d.block_table == nullptr)
    fail("device_indices.block_table is null but a device page table was given");
  if (t.max_pages_per_seq < 0)
    fail(cat("paged.max_pages_per_seq = ", t.max_pages_per_seq, " is negative"));
  for (int64_t b = 0; b < p.batch; ++b) {
    const int64_t needed = pages_for(keys_to_hold(p, b), t.page_size);
    if (needed > t.max_pages_per_seq)
      fail(cat("paged.max_pages_per_seq = ", t.max_pages_per_seq, " but sequence ", b, " needs ",
               needed, " pages for ", keys_text(p, b), " (page_size ", t.page_size, ")"));
  }
}

}  // namespace

void check_family_paging(const Problem& p) {
  const std::string family = cat("family ", to_string(p.family));
  switch (p.family) {
    case Family::fwd:
    case Family::bwd_dot_do_o:
    case Family::bwd_dq_dk_dv:
    case Family::bwd_convert_dq:
      if (p.is_paged())
        fail(cat("paged.table = ", to_string(p.paged.table), " but ", family,
                 " takes contiguous K/V (paged forward is fwd_pagedkv or batch_prefill)"));
      return;
    case Family::fwd_pagedkv:
    case Family::batch_prefill:
      if (!p.is_paged())
        fail(cat("paged.table = none but ", family, " reads K/V through a page table"));
      if (p.family == Family::batch_prefill && p.mode != Mode::group)
        fail(cat("mode = ", to_string(p.mode), " but ", family,
                 " takes varlen (mode = group) queries"));
      return;
    case Family::fwd_splitkv:
    case Family::fwd_splitkv_combine:
    case Family::fwd_appendkv: return;  // contiguous or paged
  }
}

void check_page_table(const Problem& p) {
  const PagedKv& t = p.paged;
  if (!p.is_paged()) {
    if (p.device_indices.page_table())
      fail("device_indices holds a page table but paged.table = none");
    if (!t.block_table.empty())
      fail(cat("paged.block_table has ", t.block_table.size(), " entries but paged.table = none"));
    if (!t.page_indptr.empty() || !t.page_indices.empty())
      fail(cat("paged.page_indptr / paged.page_indices are set (", t.page_indptr.size(), " / ",
               t.page_indices.size(), " entries) but paged.table = none"));
    return;
  }
  if (t.page_size < 1 || t.page_size > kMaxPageSize || !is_power_of_two(t.page_size))
    fail(cat("paged.page_size = ", t.page_size, " is not a power of two in [1, ", kMaxPageSize,
             "]"));
  if (t.num_pages < 1) fail(cat("paged.num_pages = ", t.num_pages, " must be at least 1"));
  // Group mode has no single seqlen_k, so the key lengths must come per sequence.
  if (p.mode == Mode::group && p.seqlen_k_per_batch.empty() && p.seqstart_k.empty() &&
      p.device_indices.seqlen_k == nullptr)
    fail(
        "seqlen_k_per_batch is empty (and so is seqstart_k) but a paged group-mode problem "
        "needs the key length of every sequence");
  if (p.device_indices.page_table())
    check_device_table(p);
  else if (t.table == PageTableKind::vllm_block_table)
    check_vllm_table(p);
  else
    check_sglang_list(p);
}

}  // namespace tilefmha::validation
