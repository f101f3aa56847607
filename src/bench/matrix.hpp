// The benchmark test-shape matrix as data (data/matrix/<tier>.json): tiers smoke, full and
// nightly, each a list of groups whose axes (lists of values) expand as a cartesian product into
// concrete shapes. A tier may `include` smaller tiers, so nightly ⊇ full ⊇ smoke by construction.
//   {"description": "...", "include": ["smoke"],
//    "groups": [{"name": "gqa", "family": ["fwd"], "dtype": ["bf16"], "batch": [2],
//                "heads": [[32, 32], [32, 4], [32, 1]], "hdim": [128, [192, 128]],
//                "seqlen": [1024, [1, 4096]], "mask": ["none", "causal"]}]}
// Axes: family, dtype, batch, heads ([nhead_q, nhead_k] or n), hdim ([hdim_q, hdim_v] or d),
// seqlen ([seqlen_q, seqlen_k] or n), varlen (lists of per-sequence lengths, 0 allowed: group
// mode), page_table, page_size, num_splits, seqlen_knew, mask, bias, softcap, dropout, lse.
// Absent axes take one default value. Every key and value is read strictly.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "tilefmha/problem.hpp"

namespace tilefmha::bench {

struct MatrixShape {
  std::string group;  // the group it came from
  std::string tier;   // the tier file that declares the group
  Family family = Family::fwd;
  DType dtype = DType::bf16;
  DType out_dtype = DType::bf16;  // bf16 for fp8 inputs
  int64_t batch = 1;
  int64_t nhead_q = 1, nhead_k = 1;
  int64_t seqlen_q = 0, seqlen_k = 0;  // group mode: the longest sequence
  int64_t hdim_q = 0, hdim_v = 0;
  std::vector<int64_t> varlen;  // per-sequence lengths (q = k) in group mode; empty: batch mode
  PageTableKind page_table = PageTableKind::none;
  int64_t page_size = 0;
  int64_t num_splits = 1;   // fwd_splitkv
  int64_t seqlen_knew = 0;  // fwd_appendkv
  MaskKind mask = MaskKind::none;
  BiasKind bias = BiasKind::none;
  bool softcap = false;
  bool dropout = false;
  bool lse = false;

  Mode mode() const { return varlen.empty() ? Mode::batch : Mode::group; }
  // e.g. "fwd bf16 b2 h32/4 d128/128 s1024/1024 mask=causal"
  std::string label() const;
  // The problem's metadata (shapes, features, index vectors), without tensors: what kernel
  // matching reads.
  Problem to_problem() const;
};

inline constexpr std::string_view kMatrixTiers[] = {"smoke", "full", "nightly"};

// data_dir()/matrix/<tier>.json.
std::filesystem::path matrix_tier_path(std::string_view tier);

// The tier's shapes: those of its includes first, then its own groups, in file order. Throws
// Error(io) for a missing file and Error(invalid_argument) naming the tier, group and key for
// an unknown key, a bad value, an ill-formed shape or an include cycle.
std::vector<MatrixShape> load_matrix_tier(std::string_view tier);
std::vector<MatrixShape> load_matrix_file(const std::filesystem::path& path);

}  // namespace tilefmha::bench
