#include <iostream>
#include <memory>

#include "commands.hpp"
#include "enumerate/list_report.hpp"

namespace tilefmha::cli {

void add_list_command(CLI::App& app) {
  auto options = std::make_shared<enumerate::ListOptions>();
  auto arch_name = std::make_shared<std::string>("sm90");
  CLI::App* list = app.add_subcommand(
      "list", "Enumerate kernel specializations of a sweep config (counts, names or JSON)");
  list->add_option("config", options->config,
                   "sweep config: a name under <data>/configs (fwd, bwd, ...) or a JSON path")
      ->required();
  list->add_option("--arch", *arch_name, "target architecture: sm80, sm86, sm89, sm90")
      ->capture_default_str();
  list->add_option("--profile", options->profile,
                   "named profile: full, ci, pytorch, flash, serving, training, fp8, fp32")
      ->capture_default_str();
  auto* count_only =
      list->add_flag("--count-only", options->count_only, "print only the total count");
  list->add_flag("--list", options->list, "print every kernel's canonical name")
      ->excludes(count_only);
  list->add_option("--json", options->json_path, "write the configs as a JSON array to this file");
  // One value per flag, so a positional after --filter is not taken as a second expression.
  list->add_option("--filter", options->filters,
                   "filter expression over c.<field>, e.g. \"c.hdim_q == 128\"; repeatable")
      ->allow_extra_args(false);
  list->add_option("--filter-file", options->filter_files,
                   "file of filter expressions, one per line; repeatable")
      ->allow_extra_args(false);
  list->callback([options, arch_name] {
    options->arch = parse_enum<Arch>(*arch_name);
    enumerate::run_list(*options, std::cout);
  });
}

}  // namespace tilefmha::cli
