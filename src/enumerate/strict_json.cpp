#include "enumerate/strict_json.hpp"

#include "tilefmha/error.hpp"
#include "tilefmha/types.hpp"

namespace tilefmha::enumerate {

void data_error(std::string_view context, std::string_view message) {
  std::string text(context);
  text.append(": ").append(message);
  throw Error(ErrorKind::invalid_argument, text);
}

StrictObject::StrictObject(const nlohmann::json& object, std::string context)
    : object_(object), context_(std::move(context)) {
  if (!object_.is_object()) data_error(context_, "expected a JSON object, got " + object_.dump());
}

const nlohmann::json* StrictObject::optional(std::string_view key) {
  const auto it = object_.find(std::string(key));
  if (it == object_.end()) return nullptr;
  read_.emplace(key);
  return &*it;
}

const nlohmann::json& StrictObject::required(std::string_view key) {
  if (const nlohmann::json* value = optional(key)) return *value;
  data_error(context_, "missing key '" + std::string(key) + "'");
}

int64_t StrictObject::required_int(std::string_view key, int64_t min_value) {
  const nlohmann::json& value = required(key);
  if (!value.is_number_integer() || value.get<int64_t>() < min_value)
    data_error(context_, "'" + std::string(key) + "' must be an integer >= " +
                             std::to_string(min_value) + ", got " + value.dump());
  return value.get<int64_t>();
}

std::string StrictObject::required_string(std::string_view key) {
  const nlohmann::json& value = required(key);
  if (!value.is_string())
    data_error(context_, "'" + std::string(key) + "' must be a string, got " + value.dump());
  return value.get<std::string>();
}

std::string StrictObject::optional_string(std::string_view key) {
  const nlohmann::json* value = optional(key);
  if (!value) return {};
  if (!value->is_string())
    data_error(context_, "'" + std::string(key) + "' must be a string, got " + value->dump());
  return value->get<std::string>();
}

const nlohmann::json& StrictObject::required_array(std::string_view key) {
  const nlohmann::json& value = required(key);
  if (!value.is_array())
    data_error(context_, "'" + std::string(key) + "' must be an array, got " + value.dump());
  return value;
}

void StrictObject::finish() const {
  for (const auto& [key, value] : object_.items())
    if (!read_.contains(key)) data_error(context_, "unknown key '" + key + "'");
}

template <class E>
E parse_enum_value(const nlohmann::json& value, std::string_view context) {
  if (!value.is_string()) data_error(context, "expected a name, got " + value.dump());
  try {
    return parse_enum<E>(value.get<std::string>());
  } catch (const Error& e) {
    data_error(context, e.what());
  }
}

template <class E>
std::vector<E> parse_enum_array(const nlohmann::json& array, std::string_view context) {
  if (!array.is_array()) data_error(context, "expected an array of names, got " + array.dump());
  std::vector<E> out;
  for (const nlohmann::json& item : array) out.push_back(parse_enum_value<E>(item, context));
  return out;
}

template Pipeline parse_enum_value<Pipeline>(const nlohmann::json&, std::string_view);
template std::vector<Family> parse_enum_array<Family>(const nlohmann::json&, std::string_view);
template std::vector<DType> parse_enum_array<DType>(const nlohmann::json&, std::string_view);
template std::vector<Pipeline> parse_enum_array<Pipeline>(const nlohmann::json&, std::string_view);

}  // namespace tilefmha::enumerate
