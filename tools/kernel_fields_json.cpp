#include "kernel_fields_json.hpp"

#include <string>
#include <variant>

namespace tilefmha::cli {

void put_kernel_fields(nlohmann::ordered_json& out, const KernelConfig* kernel) {
  using json = nlohmann::ordered_json;
  for_each_kernel_config_field([&](const auto& field) {
    out[std::string(field.name)] =
        kernel ? std::visit([](const auto& v) { return json(v); }, get_field(*kernel, field.name))
               : json(nullptr);
  });
}

}  // namespace tilefmha::cli
