// Test support: what ptxas says of a compiled kernel (its verbose log), for the codegen tests'
// register and spill checks.
#pragma once

#include <regex>
#include <string>

#include "jit/compiler.hpp"

namespace tilefmha::testing {

// Registers and spills of the (first) entry function in a ptxas -v log.
struct PtxasReport {
  int registers = -1;  // -1: the log has no "Used N registers" line
  int spill_bytes = 0;
};

inline PtxasReport ptxas_report(const std::string& log) {
  PtxasReport report;
  std::smatch match;
  if (std::regex_search(log, match, std::regex("Used ([0-9]+) registers")))
    report.registers = std::stoi(match[1]);
  const std::regex spill("([0-9]+) bytes spill (stores|loads)");
  for (auto it = std::sregex_iterator(log.begin(), log.end(), spill); it != std::sregex_iterator();
       ++it)
    report.spill_bytes += std::stoi((*it)[1]);
  return report;
}

// Compile options for `arch` that keep the PTX and make ptxas print the log read above.
inline jit::CompileOptions verbose_ptxas_options(const std::string& arch) {
  jit::CompileOptions options;
  options.arch = arch;
  options.keep_ptx = true;
  options.extra_arguments = {"--ptxas-options=-v"};
  return options;
}

}  // namespace tilefmha::testing
