#include "commands.hpp"

namespace tilefmha::cli {

void add_list_command(CLI::App& app) {
  app.add_subcommand("list", "Enumerate kernel specializations");
}

}  // namespace tilefmha::cli
