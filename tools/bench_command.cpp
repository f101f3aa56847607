// `tilefmha bench`: the sweep's shapes through the Dispatcher on the GPU, timed with CUDA
// events, compared with the anchors; optional CSV / JSON and verification.
#include <iostream>
#include <memory>
#include <optional>
#include <string>

#include "bench_output.hpp"
#include "bench_runner.hpp"
#include "bench_sweep.hpp"
#include "commands.hpp"
#include "tilefmha/error.hpp"

namespace tilefmha::cli {
namespace {

struct BenchCommandOptions {
  BenchOptions bench;
  std::string dtype;  // empty: the sweep's
};

void run_bench(BenchCommandOptions command, std::ostream& out) {
  BenchOptions& options = command.bench;
  runtime::check_timing_options(options.timing);
  if (options.workers < 0)
    throw Error(ErrorKind::invalid_argument,
                "--workers " + std::to_string(options.workers) + " is negative; 0 = every core");
  if (!command.dtype.empty()) options.shapes.dtype = parse_enum<DType>(command.dtype);
  const BenchSweep sweep = load_bench_sweep(options.sweep_path);
  const std::vector<BenchShape> shapes = expand_shapes(sweep, options.shapes);
  check_output_path(options.csv_path, "--csv");
  check_output_path(options.json_path, "--json");
  if (options.list_shapes) {
    print_shape_list(out, sweep, shapes);
    return;
  }

  BenchSession session(options);
  print_bench_header(out, options, sweep, session.device(), session.candidates());
  out.flush();
  const double jit_seconds = session.prepare(shapes);
  print_table_header(out);
  std::vector<BenchRow> rows;
  std::vector<nlohmann::ordered_json> records;
  for (const BenchShape& shape : shapes) {
    rows.push_back(session.run(shape, sweep));
    print_bench_row(out, rows.back());
    out.flush();
    records.push_back(bench_row_json(rows.back(), options, session.device()));
  }
  print_bench_summary(out, rows, jit_seconds);
  if (!options.csv_path.empty()) {
    write_bench_csv(options.csv_path, records);
    out << "wrote " << options.csv_path << '\n';
  }
  if (!options.json_path.empty()) {
    write_bench_json(options.json_path, options, sweep, session.device(), records);
    out << "wrote " << options.json_path << '\n';
  }
  out.flush();

  int64_t timed = 0, errors = 0, failed = 0;
  for (const BenchRow& row : rows) {
    timed += row.status == "ok";
    errors += row.status == "error";
    failed += row.verify.status == "failed";
  }
  if (errors > 0 || failed > 0)
    throw Error(ErrorKind::runtime, std::to_string(errors) + " shape(s) failed to run and " +
                                        std::to_string(failed) + " failed verification");
  if (timed == 0) throw Error(ErrorKind::no_kernel, "no shape had a kernel to time");
}

}  // namespace

void add_bench_command(CLI::App& app) {
  auto command = std::make_shared<BenchCommandOptions>();
  BenchOptions& o = command->bench;
  CLI::App* bench = app.add_subcommand(
      "bench", "Time forward shapes of a sweep on the GPU through the dispatcher (CUDA events)");
  bench->add_option("--sweep", o.sweep_path, "sweep file, e.g. bench/fa3_sweep.json")->required();
  bench->add_option("--hdim", o.shapes.hdims, "head dims, e.g. 64,128,256 (default: the sweep's)")
      ->delimiter(',');
  bench->add_option("--seqlen", o.shapes.seqlens, "sequence lengths (default: the sweep's)")
      ->delimiter(',');
  bench->add_option("--causal", o.shapes.causal, "both, yes or no (default: the sweep's)")
      ->check(CLI::IsMember({"both", "yes", "no"}));
  bench->add_option("--dtype", command->dtype,
                    "bf16, fp16 or fp8_e4m3 (per-tensor descales, bf16 O) (default: the sweep's)");
  bench->add_option("--warmup", o.timing.warmup, "untimed runs before the repeats")
      ->capture_default_str();
  bench->add_option("--repeat", o.timing.repeat, "timed runs; the median is reported")
      ->capture_default_str();
  bench->add_flag("--l2-flush", o.timing.l2_flush,
                  "overwrite a 256 MB buffer before each repeat (cold L2)");
  bench->add_flag("--verify", o.verify,
                  "compare with the CPU reference (the whole shape when cheap, else a slice)");
  bench->add_flag("--lse", o.lse, "also write (and verify) the log-sum-exp");
  bench->add_option("--csv", o.csv_path, "write one row per shape to this CSV file");
  bench->add_option("--json", o.json_path, "write the rows and the device to this JSON file");
  bench->add_option("--profile", o.profile, "candidate kernels: profile of the fwd enumeration")
      ->capture_default_str();
  bench->add_option("--filter", o.filters, "candidate filter over c.<field>; repeatable")
      ->allow_extra_args(false);
  bench->add_option("--filter-file", o.filter_files, "file of candidate filters; repeatable")
      ->allow_extra_args(false);
  bench->add_option("--cache-dir", o.cache_dir,
                    "cubin cache directory (default $TILEFMHA_CACHE_DIR or the user cache dir)");
  bench->add_option("--workers", o.workers, "JIT threads; 0 = every hardware thread")
      ->capture_default_str();
  bench->add_option("--input-seed", o.input_seed, "seed of the random inputs")
      ->capture_default_str();
  bench->add_flag("--list-shapes", o.list_shapes,
                  "print the shapes, FLOPs and anchors and exit (no GPU needed)");
  bench->add_flag("--no-progress", o.no_progress, "no JIT progress bar on stderr");
  bench->callback([command] { run_bench(*command, std::cout); });
}

}  // namespace tilefmha::cli
