// The plan cache's key: everything about a problem that its plan depends on (shapes, traits,
// requested split count), never data pointers or per-call index contents (group-mode plans key
// on batch and the longest sequences). The fields are listed once, in kPlanKeyFields; the key's
// values, equality, hash and description all come from that list, so a field cannot be compared
// but forgotten in the hash, or the reverse.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <functional>
#include <string>
#include <tuple>
#include <type_traits>

#include "tilefmha/problem.hpp"

namespace tilefmha::runtime {

template <class Projection>
struct PlanKeyField {
  using Project = Projection;
  const char* name;
  Projection project;  // const Problem& -> value
};
template <class Project>
PlanKeyField(const char*, Project) -> PlanKeyField<Project>;

// Entries the plan workspace holds for a host page table (block table or page list): the
// table's size rounded up to a power of two, so that calls whose tables grow a little share a
// plan (0 without a host table).
inline int64_t page_table_capacity(const PagedKv& paged) {
  const size_t entries = std::max(paged.block_table.size(), paged.page_indices.size());
  return entries == 0 ? 0 : static_cast<int64_t>(std::bit_ceil(entries));
}

inline const auto kPlanKeyFields = std::make_tuple(
    PlanKeyField{"family", [](const Problem& p) { return p.family; }},
    PlanKeyField{"dtype", [](const Problem& p) { return p.dtype; }},
    PlanKeyField{"out_dtype", [](const Problem& p) { return p.out_dtype; }},
    PlanKeyField{"mode", [](const Problem& p) { return p.mode; }},
    PlanKeyField{"batch", [](const Problem& p) { return p.batch; }},
    PlanKeyField{"nhead_q", [](const Problem& p) { return p.nhead_q; }},
    PlanKeyField{"nhead_k", [](const Problem& p) { return p.nhead_k; }},
    PlanKeyField{"seqlen_q", [](const Problem& p) { return p.seqlen_q; }},
    PlanKeyField{"seqlen_k", [](const Problem& p) { return p.seqlen_k; }},
    PlanKeyField{"hdim_q", [](const Problem& p) { return p.hdim_q; }},
    PlanKeyField{"hdim_v", [](const Problem& p) { return p.hdim_v; }},
    PlanKeyField{"per_batch_key_lengths", [](const Problem& p) { return p.has_key_lengths(); }},
    PlanKeyField{"host_indices",
                 [](const Problem& p) {
                   return !p.seqstart_q.empty() || !p.seqlen_k_per_batch.empty() ||
                          !p.paged.page_indptr.empty();
                 }},
    PlanKeyField{"scale_positive", [](const Problem& p) { return p.scale() > 0; }},
    PlanKeyField{"mask.kind", [](const Problem& p) { return p.mask.kind; }},
    PlanKeyField{"mask.align", [](const Problem& p) { return p.mask.align; }},
    PlanKeyField{"mask.window_left", [](const Problem& p) { return p.mask.window_left; }},
    PlanKeyField{"mask.window_right", [](const Problem& p) { return p.mask.window_right; }},
    PlanKeyField{"mask.sink_tokens", [](const Problem& p) { return p.mask.sink_tokens; }},
    PlanKeyField{"bias_kind", [](const Problem& p) { return p.bias_kind; }},
    PlanKeyField{"softcap", [](const Problem& p) { return p.softcap > 0; }},
    PlanKeyField{"sink_logit", [](const Problem& p) { return !p.sink_logits.empty(); }},
    PlanKeyField{"return_lse", [](const Problem& p) { return p.return_lse; }},
    PlanKeyField{"accumulate", [](const Problem& p) { return p.accumulate; }},
    PlanKeyField{"dropout", [](const Problem& p) { return p.has_dropout(); }},
    PlanKeyField{"paged.table", [](const Problem& p) { return p.paged.table; }},
    PlanKeyField{"paged.layout", [](const Problem& p) { return p.paged.layout; }},
    PlanKeyField{"paged.page_size", [](const Problem& p) { return p.paged.page_size; }},
    // Host page tables are uploaded into plan workspace sized by this power-of-two class.
    PlanKeyField{"paged.table_capacity",
                 [](const Problem& p) { return page_table_capacity(p.paged); }},
    PlanKeyField{"fp8.kind", [](const Problem& p) { return p.fp8.kind; }},
    PlanKeyField{"split.num_splits", [](const Problem& p) { return p.split.num_splits; }},
    PlanKeyField{"append.rope", [](const Problem& p) { return p.append.rope; }},
    // The append kernel's grid covers seqlen_knew tokens (and Q rows when rotate_q); the
    // attention after it sees seqlen_knew more keys.
    PlanKeyField{"append.seqlen_knew", [](const Problem& p) { return p.append.seqlen_knew; }},
    PlanKeyField{"append.rotate_q", [](const Problem& p) { return p.append.rotate_q; }},
    // 0: none, 1: host (a workspace upload), 2: device.
    PlanKeyField{"append.rope_position_offsets",
                 [](const Problem& p) {
                   return p.device_indices.rope_position_offsets != nullptr
                              ? 2
                              : (p.append.rope_position_offsets.empty() ? 0 : 1);
                 }},
    PlanKeyField{"append.attends", [](const Problem& p) { return appends_then_attends(p); }},
    PlanKeyField{"bwd.deterministic", [](const Problem& p) { return p.bwd.deterministic; }},
    PlanKeyField{"bwd.dbias", [](const Problem& p) { return !p.bwd.dbias.empty(); }},
    // A backward problem without D or the dQ accumulator gets them in plan workspace.
    PlanKeyField{"bwd.d_given", [](const Problem& p) { return !p.bwd.d.empty(); }},
    PlanKeyField{"bwd.dq_acc_given", [](const Problem& p) { return !p.bwd.dq_acc.empty(); }},
    // dSink's partials live in plan workspace; it selects no kernel (a runtime pointer).
    PlanKeyField{"bwd.dsink", [](const Problem& p) { return !p.bwd.dsink.empty(); }});

template <class Fields>
struct ProjectedValues;
template <class... Fields>
struct ProjectedValues<std::tuple<Fields...>> {
  using type =
      std::tuple<std::decay_t<std::invoke_result_t<typename Fields::Project, const Problem&>>...>;
};

// The tuple of every field's value type, in kPlanKeyFields order.
using PlanKeyValues = ProjectedValues<std::decay_t<decltype(kPlanKeyFields)>>::type;

struct PlanKey {
  PlanKeyValues values;

  static PlanKey of(const Problem& problem);
  bool operator==(const PlanKey&) const = default;
  size_t hash() const;
  // "family=fwd dtype=bf16 ... " for --explain and error messages.
  std::string describe() const;
};

struct PlanKeyHash {
  size_t operator()(const PlanKey& key) const { return key.hash(); }
};

}  // namespace tilefmha::runtime
