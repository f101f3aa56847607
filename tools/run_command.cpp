// `tilefmha run`: flags -> problem -> inputs (random or --load) -> validation -> the reference
// -> --save and a one-line summary. Every check happens before the computation and every file
// is written after it, so a failure writes nothing.
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>

#include "commands.hpp"
#include "jit/cuda_driver.hpp"
#include "run_execute.hpp"
#include "run_gpu.hpp"
#include "run_options.hpp"
#include "run_save.hpp"
#include "run_spec.hpp"
#include "run_summary.hpp"
#include "run_tensors.hpp"
#include "tilefmha/error.hpp"

namespace tilefmha::cli {
namespace {

// --backend auto: the GPU where a driver and GPU are usable and the family runs there (fwd),
// else the CPU reference, so one command line (scripts/quickstart.sh) suits either machine.
std::string chosen_backend(const RunOptions& options) {
  if (options.backend != "auto") return options.backend;
  return options.family == "fwd" && jit::gpu_unavailable_reason().empty() ? "gpu" : "cpu";
}

void run(const RunOptions& given) {
  RunOptions options = given;
  options.backend = chosen_backend(given);
  // parallel_for reads the worker count from the environment.
  if (options.threads) setenv("TILEFMHA_THREADS", std::to_string(*options.threads).c_str(), 1);
  std::optional<InputDir> input;
  if (options.load_dir) input.emplace(*options.load_dir);
  if (options.save_dir) check_save_target(*options.save_dir);

  RunSpec spec = resolve_run_spec(options, input ? &*input : nullptr);
  const RunTensors tensors = prepare_tensors(spec, input ? &*input : nullptr);
  const std::vector<Problem> stages = stage_problems(spec);
  validate_stages(stages);

  NamedArrays files;
  if (options.save_dir) files = saved_inputs(spec, tensors);
  double seconds = 0;
  std::string backend = "cpu";
  std::optional<Validation> validation;
  if (options.backend == "gpu") {
    const GpuRun gpu =
        run_on_gpu(stages, options.pipeline ? std::optional(parse_enum<Pipeline>(*options.pipeline))
                                            : std::nullopt);
    seconds = gpu.seconds;
    backend = "gpu " + gpu.device_name;
    if (options.explain) std::printf("%s", gpu.explanation.c_str());
    if (options.validate) validation = validate_against_reference(stages, gpu);
    keep_written_inputs(stages, gpu);
  } else {
    seconds = run_on_cpu(stages);
  }
  if (options.save_dir) {
    for (auto& output : saved_outputs(spec, tensors)) files.push_back(std::move(output));
    save_files(*options.save_dir, files);
  }
  std::printf("%s\n", summary_line(spec, backend, seconds, checksum_views(spec, tensors)).c_str());
  if (validation) {
    std::printf("%svalidation %s\n", validation->report.c_str(),
                validation->passed ? "passed" : "FAILED");
    if (!validation->passed)
      throw Error(ErrorKind::runtime, "GPU outputs differ from the CPU reference beyond tolerance");
  }
}

}  // namespace

void add_run_command(CLI::App& app) {
  CLI::App* command = app.add_subcommand(
      "run",
      "Run one attention problem described by flags (or --load files) and print a "
      "one-line summary; --save writes its inputs and outputs as .npy files");
  auto options = std::make_shared<RunOptions>();
  add_run_options(*command, *options);
  command->callback([options] { run(*options); });
}

}  // namespace tilefmha::cli
