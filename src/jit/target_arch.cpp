#include "jit/target_arch.hpp"

#include <cctype>

#include "tilefmha/error.hpp"

namespace tilefmha::jit {

std::string validate_target_arch(std::string_view arch) {
  const std::string_view prefix = "sm_";
  bool valid = arch.substr(0, prefix.size()) == prefix;
  std::string_view rest = valid ? arch.substr(prefix.size()) : std::string_view();
  if (!rest.empty() && (rest.back() == 'a' || rest.back() == 'f')) rest.remove_suffix(1);
  valid = valid && rest.size() >= 2 && rest.size() <= 3;
  for (const char c : rest) valid = valid && std::isdigit(static_cast<unsigned char>(c));
  if (!valid) {
    throw Error(
        ErrorKind::invalid_argument,
        "arch '" + std::string(arch) +
            "' is not an NVRTC target: expected sm_<major><minor>[a], e.g. sm_80 or sm_90a");
  }
  return std::string(arch);
}

std::string nvrtc_target(Arch arch) {
  switch (arch) {
    case Arch::sm80: return "sm_80";
    case Arch::sm86: return "sm_86";
    case Arch::sm89: return "sm_89";
    case Arch::sm90: return "sm_90a";
  }
  throw Error(ErrorKind::invalid_argument,
              "arch " + std::to_string(static_cast<int>(arch)) + " has no NVRTC target");
}

}  // namespace tilefmha::jit
