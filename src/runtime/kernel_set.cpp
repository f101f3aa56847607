#include "tilefmha/kernel_set.hpp"

#include "enumerate/enumerator.hpp"
#include "tilefmha/error.hpp"

namespace tilefmha {

KernelSet::KernelSet(std::string name, std::initializer_list<std::string_view> patterns)
    : name_(std::move(name)), patterns_(patterns.begin(), patterns.end()) {
  if (patterns_.empty())
    throw Error(ErrorKind::invalid_argument, "kernel set " + name_ + " declares no patterns");
}

bool matches_pattern(std::string_view pattern, std::string_view name) {
  // Iterative glob with one backtrack point: the last '*' seen.
  size_t p = 0, n = 0, star = std::string_view::npos, resume = 0;
  while (n < name.size()) {
    if (p < pattern.size() && (pattern[p] == '?' || pattern[p] == name[n])) {
      ++p;
      ++n;
    } else if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      resume = n;
    } else if (star != std::string_view::npos) {
      p = star + 1;
      n = ++resume;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

std::vector<KernelConfig> KernelSet::resolve(Arch arch) const {
  const auto all = enumerate::enumerate_kernels(
                       enumerate::load_arch_spec(arch), enumerate::load_sweep_config("all"),
                       enumerate::load_profile("full"), enumerate::FilterSet{})
                       .configs;
  std::vector<bool> pattern_used(patterns_.size(), false);
  std::vector<KernelConfig> out;
  for (const KernelConfig& config : all) {
    const std::string name = config.name();
    bool selected = false;
    for (size_t i = 0; i < patterns_.size(); ++i) {
      if (!matches_pattern(patterns_[i], name)) continue;
      pattern_used[i] = true;
      selected = true;
    }
    if (selected) out.push_back(config);
  }
  for (size_t i = 0; i < patterns_.size(); ++i)
    if (!pattern_used[i])
      throw Error(ErrorKind::invalid_argument, "kernel set " + name_ + ": pattern '" +
                                                   patterns_[i] + "' matches no kernel on " +
                                                   std::string(to_string(arch)));
  return out;
}

}  // namespace tilefmha
