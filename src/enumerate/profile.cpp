#include "enumerate/profile.hpp"

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "enumerate/data_dir.hpp"
#include "enumerate/strict_json.hpp"
#include "tilefmha/error.hpp"

namespace tilefmha::enumerate {

Profile parse_profile(const nlohmann::json& json, const std::string& name,
                      const std::string& source) {
  const std::string context = "profile '" + source + "'";
  StrictObject in(json, context);
  Profile profile;
  profile.name = name;
  profile.description = in.required_string("description");
  if (const nlohmann::json* allow = in.optional("allow"))
    profile.allow = parse_allow_section(*allow, context + ": allow", FieldSet().set(), "");
  if (const nlohmann::json* where = in.optional("where")) {
    if (!where->is_array()) data_error(context, "'where' must be an array of filter expressions");
    for (size_t i = 0; i < where->size(); ++i) {
      const nlohmann::json& expression = (*where)[i];
      if (!expression.is_string())
        data_error(context, "where[" + std::to_string(i) + "] must be a string");
      try {
        profile.where.add(expression.get<std::string>());
      } catch (const Error& e) {
        data_error(context + ": where[" + std::to_string(i) + "]", e.what());
      }
    }
  }
  in.finish();
  return profile;
}

std::vector<std::string> profile_names() {
  return json_file_stems(data_dir() / "profiles");
}

Profile load_profile(std::string_view name) {
  const auto path = data_dir() / "profiles" / (std::string(name) + ".json");
  if (name.find('/') != std::string_view::npos || !is_readable_file(path)) {
    std::string known;
    for (const auto& n : profile_names()) known += (known.empty() ? "" : ", ") + n;
    throw Error(ErrorKind::invalid_argument,
                "unknown profile '" + std::string(name) + "' (known: " + known + ")");
  }
  return parse_profile(read_json_file(path), std::string(name), path.string());
}

}  // namespace tilefmha::enumerate
