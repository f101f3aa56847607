#include <cstdio>
#include <exception>

#include "commands.hpp"
#include "tilefmha/error.hpp"

int main(int argc, char** argv) {
  CLI::App app{"tilefmha: fused multi-head attention engine"};
  app.require_subcommand(1);
  tilefmha::cli::add_run_command(app);
  tilefmha::cli::add_list_command(app);
  tilefmha::cli::add_build_command(app);
  tilefmha::cli::add_bench_command(app);
  tilefmha::cli::add_sweep_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : tilefmha::cli::kExitUsage;
  } catch (const tilefmha::Error& e) {
    std::fprintf(stderr, "tilefmha: error: %s\n", e.what());
    return e.kind() == tilefmha::ErrorKind::invalid_problem ||
                   e.kind() == tilefmha::ErrorKind::invalid_argument ||
                   e.kind() == tilefmha::ErrorKind::io
               ? tilefmha::cli::kExitUsage
               : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tilefmha: internal error: %s\n", e.what());
    return 1;
  }
  return 0;
}
