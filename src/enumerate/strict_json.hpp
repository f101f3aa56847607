// Strict reading of a JSON object: every key must be consumed, so a misspelled key in a data
// file is an error naming it instead of a setting silently ignored.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace tilefmha::enumerate {

class StrictObject {
 public:
  // `context` prefixes every message, e.g. "arch spec 'sm90.json': tiles[2]".
  StrictObject(const nlohmann::json& object, std::string context);

  const nlohmann::json& required(std::string_view key);
  const nlohmann::json* optional(std::string_view key);
  int64_t required_int(std::string_view key, int64_t min_value);
  std::string required_string(std::string_view key);
  std::string optional_string(std::string_view key);
  const nlohmann::json& required_array(std::string_view key);

  // Throws Error(invalid_argument) naming the first key never read.
  void finish() const;
  const std::string& context() const { return context_; }

 private:
  const nlohmann::json& object_;
  std::string context_;
  std::set<std::string, std::less<>> read_;
};

// Error(invalid_argument) "<context>: <message>".
[[noreturn]] void data_error(std::string_view context, std::string_view message);

// Parses one enum name; a bad name is an error naming it and the accepted names.
template <class E>
E parse_enum_value(const nlohmann::json& value, std::string_view context);
// Parses every element of a JSON array of enum names.
template <class E>
std::vector<E> parse_enum_array(const nlohmann::json& array, std::string_view context);

}  // namespace tilefmha::enumerate
