// Test support: runs the tilefmha CLI binary and captures its exit code and output.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <string>

namespace tilefmha::testing {

struct CliResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

inline CliResult run_cli(const std::string& arguments) {
  const std::string command = std::string(TILEFMHA_CLI_PATH) + " " + arguments + " 2>&1";
  CliResult result;
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return result;
  char buffer[4096];
  while (size_t n = fread(buffer, 1, sizeof(buffer), pipe)) result.output.append(buffer, n);
  const int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

}  // namespace tilefmha::testing
