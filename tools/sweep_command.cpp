// `tilefmha sweep`: a tier of the test-shape matrix (data/matrix) against the kernels of one
// variant: enumerate (profile, filters), JIT-build in parallel (capped by --max-kernels), match
// every shape to the built kernels by the dispatcher's rule, and write the match table; with a
// GPU, time each match and (--validate, the default for the serving families) check its output
// against the CPU reference, exiting 1 when any row disagrees.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>

#include "bench/matrix.hpp"
#include "bench_output.hpp"
#include "codegen/generate.hpp"
#include "commands.hpp"
#include "jit/build_pipeline.hpp"
#include "jit/cuda_driver.hpp"
#include "jit/kernel_cache.hpp"
#include "jit/target_arch.hpp"
#include "runtime/kernel_selection.hpp"
#include "sweep_match.hpp"
#include "sweep_timing.hpp"
#include "tilefmha/error.hpp"

namespace tilefmha::cli {
namespace {

struct SweepOptions {
  std::string category;
  std::string variant;
  std::string arch_name = "sm90";
  std::string profile = "full";
  std::vector<std::string> filters;
  int64_t max_kernels = 0;  // 0: every enumerated kernel codegen implements
  bool compile_only = false;
  std::optional<bool> validate;  // unset: on for the serving families (validates_by_default)
  std::string csv_path;
  std::string json_path;
  std::string cache_dir;
  int workers = 0;
  bool no_progress = false;
  runtime::TimingOptions timing;
};

// Validation recomputes each row on the CPU reference. The serving families' smoke shapes cost
// it about a second each and their correctness is what the sweep serves, so it is on for them;
// fwd sweeps time large shapes and ask for it with --validate.
bool validates_by_default(Family family) {
  return family == Family::fwd_pagedkv || family == Family::batch_prefill;
}

void write_json(const std::string& path, const SweepOptions& options, const std::string& kernels,
                int64_t built, bool validated, const std::vector<nlohmann::ordered_json>& rows) {
  nlohmann::ordered_json root;
  root["command"] = "sweep";
  root["category"] = options.category;
  root["variant"] = options.variant;
  root["arch"] = options.arch_name;
  root["kernels"] = kernels;
  root["kernels_built"] = built;
  root["timed"] = !options.compile_only;
  root["validated"] = validated;
  root["rows"] = rows;
  const std::string partial = path + ".partial";
  {
    std::ofstream file(partial);
    file << root.dump(2) << '\n';
    if (!file) throw Error(ErrorKind::io, "cannot write '" + path + "'");
  }
  std::error_code error;
  std::filesystem::rename(partial, path, error);
  if (error) throw Error(ErrorKind::io, "cannot write '" + path + "': " + error.message());
}

void run_sweep(const SweepOptions& options, std::ostream& out) {
  const Family family = variant_family(options.variant);
  if (options.max_kernels < 0)
    throw Error(ErrorKind::invalid_argument,
                "--max-kernels " + std::to_string(options.max_kernels) + " is negative");
  if (options.workers < 0)
    throw Error(ErrorKind::invalid_argument,
                "--workers " + std::to_string(options.workers) + " is negative; 0 = every core");
  if (options.compile_only && options.validate.value_or(false))
    throw Error(ErrorKind::invalid_argument,
                "--validate compares the GPU's output with the CPU reference; it needs timing "
                "(drop --compile-only)");
  const bool validate =
      !options.compile_only && options.validate.value_or(validates_by_default(family));
  check_output_path(options.csv_path, "--csv");
  check_output_path(options.json_path, "--json");
  std::vector<bench::MatrixShape> shapes;
  for (bench::MatrixShape& shape : bench::load_matrix_tier(options.category))
    if (shape.family == family) shapes.push_back(std::move(shape));
  // The GPU is opened before any compiling, so a machine without one fails at once.
  std::unique_ptr<SweepTimer> timer;
  if (!options.compile_only)
    timer = std::make_unique<SweepTimer>(options.timing, options.cache_dir);

  runtime::KernelSelection selection;
  selection.config = options.variant;
  selection.arch = parse_enum<Arch>(options.arch_name);
  selection.profile = options.profile;
  selection.filters = options.filters;
  if (timer && timer->device().arch != selection.arch)
    throw Error(ErrorKind::invalid_argument, "--arch " + options.arch_name + ": the GPU (" +
                                                 timer->device().card + ") is " +
                                                 std::string(to_string(timer->device().arch)) +
                                                 "; time with that arch or pass --compile-only");
  const runtime::SelectedKernels kernels = runtime::select_kernels(selection);
  std::vector<KernelConfig> to_build = kernels.supported;
  if (options.max_kernels > 0 && static_cast<int64_t>(to_build.size()) > options.max_kernels)
    to_build.resize(static_cast<size_t>(options.max_kernels));

  out << "sweep: tier " << options.category << ", " << shapes.size() << " " << to_string(family)
      << " shapes; " << kernels.description << '\n';
  out << "  enumerated " << kernels.enumerated << ", implemented " << kernels.supported.size()
      << ", building " << to_build.size() << (validate ? "; validating on the CPU reference" : "")
      << '\n';
  out.flush();

  const jit::KernelCache cache(options.cache_dir.empty()
                                   ? jit::KernelCache::default_directory()
                                   : std::filesystem::path(options.cache_dir));
  jit::BuildOptions build;
  build.compile.arch = jit::nvrtc_target(selection.arch);
  build.workers = options.workers;
  build.show_progress = !options.no_progress;
  std::vector<jit::BuildJob> jobs;
  std::unordered_map<std::string, const KernelConfig*> by_symbol;
  for (const KernelConfig& config : to_build) {
    jobs.push_back({config.symbol(), codegen::generate_source(config)});
    by_symbol.emplace(config.symbol(), &config);
  }
  const jit::BuildReport report = jit::build_kernels(jobs, build, &cache);
  std::vector<KernelConfig> built;
  for (const jit::BuildResult& result : report.results) {
    if (result.ok) built.push_back(*by_symbol.at(result.name));
    if (!result.ok)
      std::cerr << "kernel " << by_symbol.at(result.name)->name() << " failed:\n"
                << result.error << "\n\n";
  }
  out << "  built " << built.size() << " of " << jobs.size() << " in " << report.summary.seconds
      << " s\n";

  const std::vector<SweepMatch> matches = match_shapes(shapes, built, selection.arch);
  std::vector<nlohmann::ordered_json> rows;
  int64_t matched = 0, unserved = 0;
  for (const SweepMatch& match : matches) {
    rows.push_back(sweep_row_json(match));
    (match.status == "match" ? matched : unserved) += 1;
    if (timer && match.status == "match") {
      nlohmann::ordered_json& row = rows.back();
      timer->time(match, row, validate);
      out << "  " << match.shape->label() << "  " << match.kernel->name() << "  "
          << row["status"].get<std::string>() << "  "
          << (row["median_ms"].is_null() ? row["reason"].dump() : row["median_ms"].dump() + " ms");
      if (!row["validation"].is_null())
        out << "  " << row["validation"].get<std::string>() << ", max abs err "
            << row["max_abs_error"].dump();
      out << '\n';
      out.flush();
    }
  }
  int64_t served_shapes = 0;
  const bench::MatrixShape* last = nullptr;
  for (const SweepMatch& match : matches)
    if (match.status == "match" && match.shape != last) ++served_shapes, last = match.shape;
  const auto count = [&](const char* column, const nlohmann::ordered_json& value) {
    return std::count_if(rows.begin(), rows.end(),
                         [&](const auto& row) { return row[column] == value; });
  };
  const int64_t errors = count("status", "error");
  const int64_t mismatches = count("status", "mismatch");
  out << "  shapes served " << served_shapes << ", unserved " << unserved << ", match rows "
      << matched;
  if (validate)
    out << ", validated " << count("validated", true) << ", mismatched " << mismatches
        << ", not validated " << count("validated", false) - mismatches;
  out << '\n';
  if (!options.csv_path.empty()) {
    write_bench_csv(options.csv_path, rows);
    out << "wrote " << options.csv_path << '\n';
  }
  if (!options.json_path.empty()) {
    write_json(options.json_path, options, kernels.description, static_cast<int64_t>(built.size()),
               validate, rows);
    out << "wrote " << options.json_path << '\n';
  }
  out.flush();
  if (errors > 0 || mismatches > 0)
    throw Error(ErrorKind::runtime, std::to_string(errors) + " match(es) failed to run, " +
                                        std::to_string(mismatches) +
                                        " disagree with the CPU reference (rows above)");
  if (report.summary.counts.failures > 0)
    throw Error(ErrorKind::compile, std::to_string(report.summary.counts.failures) +
                                        " kernel(s) failed to build (logs above)");
}

}  // namespace

void add_sweep_command(CLI::App& app) {
  auto o = std::make_shared<SweepOptions>();
  CLI::App* sweep = app.add_subcommand(
      "sweep", "Match (and time) a tier of the test-shape matrix against a variant's kernels");
  sweep->add_option("--category", o->category, "matrix tier: smoke, full or nightly")
      ->required()
      ->check(CLI::IsMember({"smoke", "full", "nightly"}));
  sweep
      ->add_option("--variant", o->variant, "fwd, bwd, splitkv, pagedkv, appendkv or batch_prefill")
      ->required()
      ->check(CLI::IsMember({"fwd", "bwd", "splitkv", "pagedkv", "appendkv", "batch_prefill"}));
  sweep->add_option("--arch", o->arch_name, "target architecture: sm80, sm86, sm89, sm90")
      ->capture_default_str();
  sweep->add_option("--profile", o->profile, "enumeration profile")->capture_default_str();
  sweep->add_option("--filter", o->filters, "kernel filter over c.<field>; repeatable")
      ->allow_extra_args(false);
  sweep->add_option("--max-kernels", o->max_kernels, "build at most N kernels (0: all)")
      ->capture_default_str();
  sweep->add_flag("--compile-only", o->compile_only,
                  "build and match only, no timing: needs no GPU");
  CLI::Option* validate = sweep->add_flag_callback(
      "--validate", [o] { o->validate = true; },
      "compare each timed row's GPU output with the CPU reference "
      "(default: on for pagedkv and batch_prefill)");
  sweep
      ->add_flag_callback(
          "--no-validate", [o] { o->validate = false; },
          "time only, even pagedkv and batch_prefill")
      ->excludes(validate);
  sweep->add_option("--csv", o->csv_path, "write the rows to this CSV file");
  sweep->add_option("--json", o->json_path, "write the rows to this JSON file");
  sweep->add_option("--cache-dir", o->cache_dir,
                    "cubin cache directory (default $TILEFMHA_CACHE_DIR or the user cache dir)");
  sweep->add_option("--workers", o->workers, "JIT threads; 0 = every hardware thread")
      ->capture_default_str();
  sweep->add_option("--warmup", o->timing.warmup, "untimed runs before the repeats")
      ->capture_default_str();
  sweep->add_option("--repeat", o->timing.repeat, "timed runs; the median is reported")
      ->capture_default_str();
  sweep->add_flag("--l2-flush", o->timing.l2_flush, "overwrite a large buffer before each repeat");
  sweep->add_flag("--no-progress", o->no_progress, "no JIT progress bar on stderr");
  sweep->callback([o] { run_sweep(*o, std::cout); });
}

}  // namespace tilefmha::cli
