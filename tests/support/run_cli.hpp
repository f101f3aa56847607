// Test support: runs the tilefmha CLI binary and captures its exit code and output.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace tilefmha::testing {

struct CliResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

// $TILEFMHA_CLI overrides the build-time path (binaries carried to another machine).
inline CliResult run_cli(const std::string& arguments) {
  const char* override_path = std::getenv("TILEFMHA_CLI");
  const std::string binary = override_path ? override_path : TILEFMHA_CLI_PATH;
  const std::string command = binary + " " + arguments + " 2>&1";
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
