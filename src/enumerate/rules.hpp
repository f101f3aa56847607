// The validity rules of kernel configs: which feature products exist per family and pipeline.
// Each rule is a small named predicate over the fields it declares; enumeration checks a rule
// as soon as those fields are set, and every rule has a unit test (enumerate_rules_test).
#pragma once

#include <functional>
#include <span>
#include <string>
#include <string_view>

#include "enumerate/field_codes.hpp"
#include "tilefmha/kernel_config.hpp"

namespace tilefmha::enumerate {

struct Rule {
  std::string name;  // snake_case, unique
  std::string why;   // one sentence, for messages and docs
  FieldSet reads;    // the only fields `holds` looks at
  std::function<bool(const KernelConfig&)> holds;
};

// Every rule, in a fixed order.
std::span<const Rule> rules();
// Throws Error(invalid_argument) for an unknown name.
const Rule& find_rule(std::string_view name);
// The first rule the config breaks, or nullptr when it satisfies all.
const Rule* first_violated_rule(const KernelConfig& config);

}  // namespace tilefmha::enumerate
