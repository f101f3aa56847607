// Pieces of validate(): one check per group of Problem fields, plus the shared view checker.
// validate() runs them in a fixed order so that each check may rely on the ones before it
// (e.g. the page-table check relies on key lengths already being non-negative).
#pragma once

#include <charconv>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "tilefmha/problem.hpp"

namespace tilefmha::validation {

// Throws Error(ErrorKind::invalid_problem, message).
[[noreturn]] void fail(const std::string& message);

// Shortest text that reads back as `value` ("1", "-0.1", "inf").
std::string number(double value);

namespace detail {
// Appends without a stream: validate() runs on every plan call, and the messages it prepares
// on its success path (e.g. "family fwd reads it") must not pay for a locale-bound ostream.
inline void append(std::string& out, std::string_view text) {
  out += text;
}
inline void append(std::string& out, const char* text) {
  out += text;
}
inline void append(std::string& out, char c) {
  out += c;
}
template <class Integer>
requires std::is_integral_v<Integer>
void append(std::string& out, Integer value) {
  char buffer[24];
  out.append(buffer, std::to_chars(buffer, buffer + sizeof buffer, value).ptr);
}
}  // namespace detail

template <class... Parts>
std::string cat(const Parts&... parts) {
  std::string out;
  (detail::append(out, parts), ...);
  return out;
}

// How one dimension of a view must relate to the problem.
struct DimRule {
  std::string name;  // e.g. "seqlen_q", "nhead_k"
  int64_t size;
  bool at_least = false;  // the view may be longer (group-mode token dims, cache capacity)
};

struct ViewRule {
  std::string field;          // e.g. "split.o_acc"
  std::vector<DType> dtypes;  // accepted element types
  std::vector<DimRule> shape;
  bool written = false;        // outputs must not broadcast: two elements would share an address
  bool broadcastable = false;  // bias-like: every stride may be 0, the last one included
};

// A view counts as present when it points at memory.
inline bool present(const TensorView& view) {
  return !view.empty();
}
// Checks rank, shape, dtype and strides of a present view; an absent one passes.
void check_view(const TensorView& view, const ViewRule& rule);
// As check_view, but an absent view fails with "<field> is missing (null data) but <why>".
// A null view whose shape has no elements is accepted (nothing to point at).
void require_view(const TensorView& view, const ViewRule& rule, const std::string& why);
// Fails with "<field> is set (non-null data) but <reason>" when the view is present.
void forbid_view(const TensorView& view, std::string_view field, const std::string& reason);

// Dimension rules of token-major views (Q/O-like and contiguous K/V-like).
std::vector<DimRule> query_rows(const Problem& problem);  // [batch, seqlen_q] or [1, >=total_q]
std::vector<DimRule> key_rows(const Problem& problem);    // contiguous K/V; see key_rows()
// [batch, nhead_q, seqlen_q] or [1, nhead_q, >=total_q]: LSE, D.
ViewRule lse_rule(const Problem& problem, std::string field);
// [batch, nhead_q, seqlen_q, seqlen_k]: bias, dbias, dropout random values.
std::vector<DimRule> score_dims(const Problem& problem);
// Keys sequence b must hold: its key length, plus the appended tokens for fwd_appendkv.
int64_t keys_to_hold(const Problem& problem, int64_t b);

// Float element types a bias may have.
std::vector<DType> float_dtypes();

void check_enums(const Problem& problem);
void check_sizes(const Problem& problem);
void check_sequences(const Problem& problem);
void check_logits(const Problem& problem);
void check_accumulate(const Problem& problem);
void check_dropout(const Problem& problem);
void check_fp8(const Problem& problem);
void check_family_paging(const Problem& problem);
void check_page_table(const Problem& problem);
void check_append(const Problem& problem);
// Runs last: a fwd_appendkv with O must also make a valid attention after the append.
void check_append_chain(const Problem& problem);
void check_split(const Problem& problem);
void check_main_views(const Problem& problem);
void check_backward_views(const Problem& problem);
void check_key_capacity(const Problem& problem);
void check_memory_space(const Problem& problem);

}  // namespace tilefmha::validation
