#include "enumerate/allow_list.hpp"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "enumerate/strict_json.hpp"

namespace tilefmha::enumerate {

void FieldAllowList::restrict(size_t field, const std::vector<int64_t>& codes) {
  if (!allowed_[field]) {
    allowed_[field] = codes;
    return;
  }
  std::vector<int64_t> kept;
  for (int64_t code : *allowed_[field])
    if (std::find(codes.begin(), codes.end(), code) != codes.end()) kept.push_back(code);
  allowed_[field] = std::move(kept);
}

void FieldAllowList::intersect(const FieldAllowList& other) {
  for (size_t field = 0; field < kFieldCount; ++field)
    if (other.allowed_[field]) restrict(field, *other.allowed_[field]);
}

bool FieldAllowList::allows(size_t field, int64_t code) const {
  const auto& allowed = allowed_[field];
  return !allowed || std::find(allowed->begin(), allowed->end(), code) != allowed->end();
}

bool FieldAllowList::allows(const KernelConfig& config) const {
  for (size_t field = 0; field < kFieldCount; ++field)
    if (!allows(field, get_code(config, field))) return false;
  return true;
}

const FieldSet& tile_fields() {
  static const FieldSet fields = field_set({"block_m", "block_n", "block_k", "warps", "stages"});
  return fields;
}

FieldAllowList parse_allow_section(const nlohmann::json& section, const std::string& context,
                                   const FieldSet& permitted, std::string_view other_section) {
  if (!section.is_object())
    data_error(context, "expected an object of fields, got " + section.dump());
  FieldAllowList out;
  for (const auto& [key, entry] : section.items()) {
    const std::string where = context + "." + key;
    const auto field = find_field(key);
    if (!field) data_error(context, "unknown kernel config field '" + key + "'");
    if (!permitted.test(*field))
      data_error(context, "field '" + key + "' belongs in " + std::string(other_section));
    StrictObject object(entry, where);
    // Unknown keys first: {"value": [...]} is a misspelling, not a missing "values".
    const nlohmann::json* listed = object.optional("values");
    object.finish();
    if (!listed) data_error(where, "missing key 'values'");
    if (!listed->is_array()) data_error(where, "'values' must be an array, got " + listed->dump());
    const nlohmann::json& values = *listed;
    std::vector<int64_t> codes;
    for (const nlohmann::json& value : values) {
      const auto code = parse_code(*field, value);
      if (!code)
        data_error(where, value.dump() + " is not a value of " + key +
                              " (accepted: " + accepted_values(*field) + ")");
      codes.push_back(*code);
    }
    out.restrict(*field, codes);
  }
  return out;
}

}  // namespace tilefmha::enumerate
