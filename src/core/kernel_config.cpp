#include "tilefmha/kernel_config.hpp"

#include <charconv>
#include <nlohmann/json.hpp>
#include <type_traits>
#include <vector>

#include "tilefmha/error.hpp"

namespace tilefmha {
namespace {

[[noreturn]] void bad_field(std::string_view field, std::string_view text, std::string_view why) {
  throw Error(ErrorKind::invalid_argument, "kernel config field '" + std::string(field) +
                                               "': bad value '" + std::string(text) + "' (" +
                                               std::string(why) + ")");
}

template <class T>
std::string value_text(T value) {
  if constexpr (std::is_same_v<T, bool>)
    return value ? "1" : "0";
  else if constexpr (std::is_enum_v<T>)
    return std::string(to_string(value));
  else
    return std::to_string(value);
}

// Parses a field value from text; nullopt when the text is not a value of T.
template <class T>
std::optional<T> parse_value(std::string_view text) {
  if constexpr (std::is_same_v<T, bool>) {
    if (text == "1" || text == "true") return true;
    if (text == "0" || text == "false") return false;
    return std::nullopt;
  } else if constexpr (std::is_enum_v<T>) {
    return try_parse_enum<T>(text);
  } else {
    T value{};
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec != std::errc() || end != text.data() + text.size() || text.empty()) return std::nullopt;
    return value;
  }
}

template <class T>
std::string_view expected_text() {
  if constexpr (std::is_same_v<T, bool>)
    return "expected 0/1 or true/false";
  else if constexpr (std::is_enum_v<T>)
    return "not a known name";
  else
    return "expected an integer";
}

template <class T>
FieldValue to_field_value(T value) {
  if constexpr (std::is_same_v<T, bool>)
    return value;
  else if constexpr (std::is_enum_v<T>)
    return std::string(to_string(value));
  else
    return static_cast<int64_t>(value);
}

// Optional segments are omitted from names when they equal these defaults; out_dtype's default
// is the config's own dtype.
bool at_name_default(const KernelConfig& config, std::string_view field_name) {
  const KernelConfig defaults{};
  bool equal = false;
  for_each_kernel_config_field([&](const auto& field) {
    if (field.name != field_name) return;
    if (field.name == "out_dtype")
      equal = config.out_dtype == config.dtype;
    else
      equal = config.*field.member == defaults.*field.member;
  });
  return equal;
}

bool is_tile_tag(std::string_view tag) {
  return !tag.empty() && tag.back() != '-';
}

}  // namespace

std::string KernelConfig::name() const {
  std::string out;
  for_each_kernel_config_field([&](const auto& field) {
    const bool always = field.tag.empty() || is_tile_tag(field.tag);
    if (!always && at_name_default(*this, field.name)) return;
    if (!out.empty()) out += '.';
    out += field.tag;
    out += value_text(this->*field.member);
  });
  return out;
}

KernelConfig KernelConfig::parse_name(std::string_view name) {
  std::vector<std::string_view> segments;
  for (size_t start = 0;;) {
    const size_t dot = name.find('.', start);
    segments.push_back(name.substr(start, dot == std::string_view::npos ? dot : dot - start));
    if (dot == std::string_view::npos) break;
    start = dot + 1;
  }
  KernelConfig config;
  bool out_dtype_seen = false;
  size_t positional = 0;
  std::vector<std::string_view> seen;
  for_each_kernel_config_field([&](const auto& field) {
    using T = std::remove_reference_t<decltype(config.*field.member)>;
    if (!field.tag.empty()) return;
    if (positional >= segments.size())
      throw Error(ErrorKind::invalid_argument, "kernel name '" + std::string(name) +
                                                   "' ends before its " + std::string(field.name));
    auto value = parse_value<T>(segments[positional]);
    if (!value) bad_field(field.name, segments[positional], expected_text<T>());
    config.*field.member = *value;
    ++positional;
  });
  for (size_t s = positional; s < segments.size(); ++s) {
    const std::string_view segment = segments[s];
    bool matched = false;
    size_t best_tag = 0;
    // Longest tag whose remainder parses as that field's value (e.g. "s2" vs "sinklogit-1").
    for_each_kernel_config_field([&](const auto& field) {
      using T = std::remove_reference_t<decltype(config.*field.member)>;
      if (field.tag.empty() || !segment.starts_with(field.tag) || field.tag.size() < best_tag)
        return;
      auto value = parse_value<T>(segment.substr(field.tag.size()));
      if (!value) return;
      for (auto earlier : seen)
        if (earlier == field.name)
          throw Error(ErrorKind::invalid_argument, "kernel name '" + std::string(name) + "' sets " +
                                                       std::string(field.name) + " twice");
      config.*field.member = *value;
      best_tag = field.tag.size();
      matched = true;
      if (field.name == "out_dtype") out_dtype_seen = true;
    });
    if (!matched)
      throw Error(ErrorKind::invalid_argument, "kernel name '" + std::string(name) +
                                                   "': unknown segment '" + std::string(segment) +
                                                   "'");
    for_each_kernel_config_field([&](const auto& field) {
      if (!field.tag.empty() && segment.starts_with(field.tag) && field.tag.size() == best_tag)
        seen.push_back(field.name);
    });
  }
  if (!out_dtype_seen) config.out_dtype = config.dtype;
  return config;
}

std::string KernelConfig::symbol() const {
  std::string out = "tilefmha_" + name();
  for (char& c : out)
    if (c == '.' || c == '-') c = '_';
  return out;
}

size_t KernelConfig::hash() const {
  size_t seed = 0x9e3779b97f4a7c15ull;
  for_each_kernel_config_field([&](const auto& field) {
    const auto raw = static_cast<uint64_t>(this->*field.member);
    seed ^= std::hash<uint64_t>{}(raw) + 0x9e3779b97f4a7c15ull + (seed << 6) + (seed >> 2);
  });
  return seed;
}

bool has_kernel_config_field(std::string_view name) {
  bool found = false;
  for_each_kernel_config_field([&](const auto& field) { found = found || field.name == name; });
  return found;
}

FieldValue get_field(const KernelConfig& config, std::string_view name) {
  std::optional<FieldValue> out;
  for_each_kernel_config_field([&](const auto& field) {
    if (field.name == name) out = to_field_value(config.*field.member);
  });
  if (!out)
    throw Error(ErrorKind::invalid_argument,
                "unknown kernel config field '" + std::string(name) + "'");
  return *out;
}

void set_field(KernelConfig& config, std::string_view name, std::string_view text) {
  bool found = false;
  for_each_kernel_config_field([&](const auto& field) {
    using T = std::remove_reference_t<decltype(config.*field.member)>;
    if (field.name != name) return;
    found = true;
    auto value = parse_value<T>(text);
    if (!value) bad_field(field.name, text, expected_text<T>());
    config.*field.member = *value;
  });
  if (!found)
    throw Error(ErrorKind::invalid_argument,
                "unknown kernel config field '" + std::string(name) + "'");
}

std::string field_to_string(const FieldValue& value) {
  if (auto* number = std::get_if<int64_t>(&value)) return std::to_string(*number);
  if (auto* flag = std::get_if<bool>(&value)) return *flag ? "true" : "false";
  return std::get<std::string>(value);
}

void to_json(nlohmann::json& out, const KernelConfig& config) {
  out = nlohmann::json::object();
  for_each_kernel_config_field([&](const auto& field) {
    using T = std::remove_reference_t<decltype(config.*field.member)>;
    const T value = config.*field.member;
    if constexpr (std::is_enum_v<T>)
      out[std::string(field.name)] = std::string(to_string(value));
    else
      out[std::string(field.name)] = value;
  });
}

void from_json(const nlohmann::json& in, KernelConfig& config) {
  if (!in.is_object())
    throw Error(ErrorKind::invalid_argument, "kernel config JSON must be an object");
  for (const auto& [key, value] : in.items())
    if (!has_kernel_config_field(key))
      throw Error(ErrorKind::invalid_argument, "unknown kernel config field '" + key + "'");
  config = KernelConfig{};
  for_each_kernel_config_field([&](const auto& field) {
    using T = std::remove_reference_t<decltype(config.*field.member)>;
    const auto it = in.find(std::string(field.name));
    if (it == in.end()) return;
    std::string text;
    if (it->is_string())
      text = it->template get<std::string>();
    else if (it->is_boolean())
      text = it->template get<bool>() ? "true" : "false";
    else if (it->is_number_integer())
      text = std::to_string(it->template get<int64_t>());
    else
      bad_field(field.name, it->dump(), "wrong JSON type");
    auto value = parse_value<T>(text);
    if (!value) bad_field(field.name, text, expected_text<T>());
    config.*field.member = *value;
  });
  if (!in.contains("out_dtype")) config.out_dtype = config.dtype;
}

}  // namespace tilefmha
