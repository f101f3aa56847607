// Declarative kernel sets: the kernels a C++ program ships, declared by canonical-name patterns
// with wildcards ('*' any run of characters, '?' one character), e.g.
//
//   TILEFMHA_KERNEL_SET(decode_kernels,
//                       "fwd.sm90.bf16.batch.sm90_ws.hq128.hv128.*",
//                       "fwd.sm90.bf16.group.sm80_mma.hq128.hv128.*.mask-causal*");
//   ...
//   auto configs = decode_kernels().resolve(Arch::sm90);  // -> dispatcher candidates
//
// The macro defines a function returning the set, built once on first call (thread-safe), so a
// program's sets are never unsynchronised globals.
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "tilefmha/kernel_config.hpp"

namespace tilefmha {

class KernelSet {
 public:
  KernelSet(std::string name, std::initializer_list<std::string_view> patterns);

  const std::string& name() const { return name_; }
  const std::vector<std::string>& patterns() const { return patterns_; }

  // Every kernel of the arch's full enumeration (all families) whose canonical name matches a
  // pattern, in enumeration order. A pattern that matches nothing is an error naming it (a typo
  // must not silently ship an empty set).
  std::vector<KernelConfig> resolve(Arch arch) const;

 private:
  std::string name_;
  std::vector<std::string> patterns_;
};

// Whether `name` matches `pattern` ('*' any run of characters, '?' exactly one).
bool matches_pattern(std::string_view pattern, std::string_view name);

}  // namespace tilefmha

#define TILEFMHA_KERNEL_SET(set_name, ...)                            \
  inline const ::tilefmha::KernelSet& set_name() {                    \
    static const ::tilefmha::KernelSet set(#set_name, {__VA_ARGS__}); \
    return set;                                                       \
  }
