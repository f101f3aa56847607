#include "enumerate/enumerator.hpp"

#include <algorithm>
#include <chrono>

#include "enumerate/rules.hpp"
#include "tilefmha/error.hpp"

namespace tilefmha::enumerate {
namespace {

// The order fields are fixed in. The tile level sets pipeline, head dims and the tile at once
// from the arch's tile table; every other level walks one field's domain.
constexpr std::string_view kLeadingFields[] = {"family", "arch", "dtype"};
constexpr std::string_view kTileLevelFields[] = {"pipeline", "hdim_q",  "hdim_v", "block_m",
                                                 "block_n",  "block_k", "warps",  "stages"};
constexpr std::string_view kTrailingFields[] = {
    "out_dtype",  "mode",       "pad_seqlen_q", "pad_seqlen_k", "pad_hdim_q", "pad_hdim_v",
    "mask",       "bias",       "softcap",      "lse",          "dropout",    "sink_logit",
    "page_table", "page_size",  "kv_layout",    "rope",         "fp8_scale",  "deterministic",
    "dbias",      "persistent", "pack_gqa",     "accumulate",   "warp_decode"};

struct Level {
  bool is_tile = false;
  size_t field = 0;             // scalar levels
  std::vector<int64_t> domain;  // scalar levels, already intersected with the allow-list
  std::vector<const Rule*> rules;
};

class Walker {
 public:
  Walker(const ArchSpec& arch, const EnumerationRequest& request, Enumeration& out)
      : arch_(arch), request_(request), out_(out) {
    std::array<int, kFieldCount> level_of;
    level_of.fill(-1);
    auto add_scalar = [&](std::string_view name) {
      Level level;
      level.field = field_index(name);
      level.domain = domain(level.field);
      level_of[level.field] = static_cast<int>(levels_.size());
      levels_.push_back(std::move(level));
    };
    for (auto name : kLeadingFields) add_scalar(name);
    Level tile;
    tile.is_tile = true;
    for (auto name : kTileLevelFields) {
      tile_level_fields_.push_back(field_index(name));
      level_of[tile_level_fields_.back()] = static_cast<int>(levels_.size());
    }
    levels_.push_back(std::move(tile));
    for (auto name : kTrailingFields) add_scalar(name);
    for (size_t field = 0; field < kFieldCount; ++field)
      if (level_of[field] < 0)
        throw Error(ErrorKind::not_supported,
                    "enumeration has no domain for kernel config field '" +
                        std::string(field_infos()[field].name) + "'");
    for (const Rule& rule : rules()) {
      int level = 0;
      for (size_t field = 0; field < kFieldCount; ++field)
        if (rule.reads.test(field)) level = std::max(level, level_of[field]);
      levels_[size_t(level)].rules.push_back(&rule);
    }
  }

  void run() { descend(0); }

 private:
  std::vector<int64_t> domain(size_t field) const {
    std::vector<int64_t> values;
    const FieldInfo& info = field_infos()[field];
    if (info.name == "family") {
      for (Family family : request_.families) values.push_back(int64_t(family));
    } else if (info.name == "arch") {
      values.push_back(int64_t(arch_.arch));
    } else if (info.name == "dtype") {
      for (DType dtype : arch_.dtypes) values.push_back(int64_t(dtype));
    } else if (info.name == "page_size") {
      for (int32_t size : arch_.page_sizes) values.push_back(size);
    } else if (info.kind == FieldKind::boolean) {
      values = {0, 1};
    } else if (info.kind == FieldKind::enumeration) {
      for (size_t code = 0; code < info.enum_names.size(); ++code) values.push_back(int64_t(code));
    } else {
      throw Error(ErrorKind::not_supported,
                  "enumeration has no domain for integer field '" + std::string(info.name) + "'");
    }
    std::erase_if(values, [&](int64_t code) { return !request_.allow.allows(field, code); });
    return values;
  }

  bool tile_allowed(const KernelConfig& config) const {
    for (size_t field : tile_level_fields_)
      if (!request_.allow.allows(field, get_code(config, field))) return false;
    return true;
  }

  bool rules_hold(const Level& level, const KernelConfig& config) const {
    for (const Rule* rule : level.rules)
      if (!rule->holds(config)) return false;
    return true;
  }

  void descend(size_t depth) {
    if (depth == levels_.size()) {
      for (const FilterSet* filters : request_.filters)
        if (!filters->matches(config_)) return;
      out_.configs.push_back(config_);
      ++out_.per_family[size_t(config_.family)];
      return;
    }
    const Level& level = levels_[depth];
    if (level.is_tile) {
      for (const TileEntry& tile : arch_.tiles) {
        if (tile.dtype != config_.dtype || std::find(tile.families.begin(), tile.families.end(),
                                                     config_.family) == tile.families.end())
          continue;
        tile.apply_to(config_);
        if (tile_allowed(config_) && rules_hold(level, config_)) descend(depth + 1);
      }
      return;
    }
    for (int64_t code : level.domain) {
      set_code(config_, level.field, code);
      if (rules_hold(level, config_)) descend(depth + 1);
    }
  }

  const ArchSpec& arch_;
  const EnumerationRequest& request_;
  Enumeration& out_;
  std::vector<Level> levels_;
  std::vector<size_t> tile_level_fields_;
  KernelConfig config_;
};

}  // namespace

Enumeration enumerate_kernels(const ArchSpec& arch, const EnumerationRequest& request) {
  const auto start = std::chrono::steady_clock::now();
  Enumeration out;
  Walker(arch, request, out).run();
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return out;
}

Enumeration enumerate_kernels(const ArchSpec& arch, const SweepConfig& config,
                              const Profile& profile, const FilterSet& extra) {
  EnumerationRequest request;
  request.families = config.families;
  request.allow = config.allow;
  request.allow.intersect(profile.allow);
  if (!profile.where.empty()) request.filters.push_back(&profile.where);
  if (!extra.empty()) request.filters.push_back(&extra);
  return enumerate_kernels(arch, request);
}

}  // namespace tilefmha::enumerate
