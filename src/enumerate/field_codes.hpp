// KernelConfig fields addressed by position in kKernelConfigFields, with every value encoded as
// an int64 "code" (enum index, 0/1, or the integer itself). Enumeration, allow-lists and the
// filter language work on codes so that a per-config check is an integer compare.
#pragma once

#include <array>
#include <bitset>
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <tuple>

#include "tilefmha/kernel_config.hpp"

namespace tilefmha::enumerate {

inline constexpr size_t kFieldCount =
    std::tuple_size_v<std::decay_t<decltype(kKernelConfigFields)>>;
using FieldSet = std::bitset<kFieldCount>;

enum class FieldKind { integer, boolean, enumeration };

struct FieldInfo {
  std::string_view name;
  FieldKind kind;
  std::string_view enum_type;                    // e.g. "MaskKind"; empty unless enumeration
  std::span<const std::string_view> enum_names;  // value names, indexed by code
};

const std::array<FieldInfo, kFieldCount>& field_infos();

std::optional<size_t> find_field(std::string_view name);
// Throws Error(invalid_argument) naming the unknown field.
size_t field_index(std::string_view name);
FieldSet field_set(std::initializer_list<std::string_view> names);

int64_t get_code(const KernelConfig& config, size_t field);
void set_code(KernelConfig& config, size_t field, int64_t code);

// A JSON scalar (string, boolean or integer) as a code of the field; nullopt when it is not a
// value of that field (wrong JSON type, unknown enum name, integer out of range).
std::optional<int64_t> parse_code(size_t field, const nlohmann::json& value);
// Text form: enum names, true/false, decimal integers.
std::string code_to_string(size_t field, int64_t code);
// The accepted values of an enum or bool field, for error messages ("none, causal, window").
std::string accepted_values(size_t field);

}  // namespace tilefmha::enumerate
