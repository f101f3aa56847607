// Each CLI subcommand registers itself on the app; main only parses and maps errors to exit codes.
#pragma once

#include <CLI/CLI.hpp>

namespace tilefmha::cli {

// Exit code for bad flags, missing files, invalid problems: nothing is written.
inline constexpr int kExitUsage = 2;

void add_run_command(CLI::App& app);
void add_list_command(CLI::App& app);
void add_build_command(CLI::App& app);
void add_bench_command(CLI::App& app);
void add_sweep_command(CLI::App& app);

}  // namespace tilefmha::cli
