// Per-field allow-lists over KernelConfig fields, as written in sweep configs and profiles:
//   {"dtype": {"values": ["bf16"]}, "hdim_q": {"values": [64, 128]}}
// A field without a list allows every value.
#pragma once

#include <array>
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "enumerate/field_codes.hpp"

namespace tilefmha::enumerate {

class FieldAllowList {
 public:
  // Restricting a field twice keeps the intersection.
  void restrict(size_t field, const std::vector<int64_t>& codes);
  void intersect(const FieldAllowList& other);

  bool restricts(size_t field) const { return allowed_[field].has_value(); }
  bool allows(size_t field, int64_t code) const;
  bool allows(const KernelConfig& config) const;

 private:
  std::array<std::optional<std::vector<int64_t>>, kFieldCount> allowed_;
};

// Parses one section. Fields outside `permitted` are errors that point to `other_section` (e.g. a
// tile field in trait_config); unknown fields, keys other than "values" and values that are not
// values of the field are errors naming them.
FieldAllowList parse_allow_section(const nlohmann::json& section, const std::string& context,
                                   const FieldSet& permitted, std::string_view other_section);

// The tile fields (tile_config); every other field belongs to trait_config.
const FieldSet& tile_fields();

}  // namespace tilefmha::enumerate
