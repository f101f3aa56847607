#include "enumerate/field_codes.hpp"

#include <limits>
#include <nlohmann/json.hpp>
#include <type_traits>
#include <utility>

#include "tilefmha/error.hpp"

namespace tilefmha::enumerate {
namespace {

template <size_t I>
using FieldType =
    std::remove_cvref_t<decltype(KernelConfig{}.*(std::get<I>(kKernelConfigFields).member))>;

template <size_t I>
int64_t get_impl(const KernelConfig& config) {
  return static_cast<int64_t>(config.*(std::get<I>(kKernelConfigFields).member));
}

template <size_t I>
void set_impl(KernelConfig& config, int64_t code) {
  config.*(std::get<I>(kKernelConfigFields).member) = static_cast<FieldType<I>>(code);
}

template <size_t I>
constexpr FieldInfo info_impl() {
  using T = FieldType<I>;
  const std::string_view name = std::get<I>(kKernelConfigFields).name;
  if constexpr (std::is_same_v<T, bool>) {
    return {name, FieldKind::boolean, {}, {}};
  } else if constexpr (std::is_enum_v<T>) {
    return {name, FieldKind::enumeration, EnumNames<T>::type_name,
            std::span<const std::string_view>(EnumNames<T>::names)};
  } else {
    return {name, FieldKind::integer, {}, {}};
  }
}

using Getter = int64_t (*)(const KernelConfig&);
using Setter = void (*)(KernelConfig&, int64_t);

template <size_t... I>
constexpr std::array<Getter, kFieldCount> make_getters(std::index_sequence<I...>) {
  return {&get_impl<I>...};
}
template <size_t... I>
constexpr std::array<Setter, kFieldCount> make_setters(std::index_sequence<I...>) {
  return {&set_impl<I>...};
}
template <size_t... I>
constexpr std::array<FieldInfo, kFieldCount> make_infos(std::index_sequence<I...>) {
  return {info_impl<I>()...};
}

constexpr auto kIndices = std::make_index_sequence<kFieldCount>{};
constexpr std::array<Getter, kFieldCount> kGetters = make_getters(kIndices);
constexpr std::array<Setter, kFieldCount> kSetters = make_setters(kIndices);
constexpr std::array<FieldInfo, kFieldCount> kInfos = make_infos(kIndices);

}  // namespace

const std::array<FieldInfo, kFieldCount>& field_infos() {
  return kInfos;
}

std::optional<size_t> find_field(std::string_view name) {
  for (size_t i = 0; i < kFieldCount; ++i)
    if (kInfos[i].name == name) return i;
  return std::nullopt;
}

size_t field_index(std::string_view name) {
  if (auto index = find_field(name)) return *index;
  throw Error(ErrorKind::invalid_argument,
              "unknown kernel config field '" + std::string(name) + "'");
}

FieldSet field_set(std::initializer_list<std::string_view> names) {
  FieldSet set;
  for (auto name : names) set.set(field_index(name));
  return set;
}

int64_t get_code(const KernelConfig& config, size_t field) {
  return kGetters[field](config);
}

void set_code(KernelConfig& config, size_t field, int64_t code) {
  kSetters[field](config, code);
}

std::optional<int64_t> parse_code(size_t field, const nlohmann::json& value) {
  const FieldInfo& info = kInfos[field];
  switch (info.kind) {
    case FieldKind::boolean:
      if (value.is_boolean()) return value.get<bool>() ? 1 : 0;
      return std::nullopt;
    case FieldKind::enumeration:
      if (!value.is_string()) return std::nullopt;
      for (size_t i = 0; i < info.enum_names.size(); ++i)
        if (info.enum_names[i] == value.get_ref<const std::string&>()) return int64_t(i);
      return std::nullopt;
    case FieldKind::integer:
      if (!value.is_number_integer()) return std::nullopt;
      const int64_t number = value.get<int64_t>();
      // Every integer field of KernelConfig is int32_t.
      if (number < std::numeric_limits<int32_t>::min() ||
          number > std::numeric_limits<int32_t>::max())
        return std::nullopt;
      return number;
  }
  return std::nullopt;
}

std::string code_to_string(size_t field, int64_t code) {
  const FieldInfo& info = kInfos[field];
  switch (info.kind) {
    case FieldKind::boolean: return code ? "true" : "false";
    case FieldKind::enumeration: return std::string(info.enum_names[size_t(code)]);
    case FieldKind::integer: return std::to_string(code);
  }
  return {};
}

std::string accepted_values(size_t field) {
  const FieldInfo& info = kInfos[field];
  if (info.kind == FieldKind::boolean) return "true, false";
  if (info.kind == FieldKind::integer) return "integers";
  std::string out;
  for (auto name : info.enum_names) {
    if (!out.empty()) out += ", ";
    out += name;
  }
  return out;
}

}  // namespace tilefmha::enumerate
