#include "commands.hpp"

namespace tilefmha::cli {

void add_run_command(CLI::App& app) { app.add_subcommand("run", "Run one attention problem"); }

}  // namespace tilefmha::cli
