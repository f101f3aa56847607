// The GPU half of `tilefmha bench`: each shape of the sweep planned by a tilefmha::Engine over
// the enumerated fwd candidates (its only kernels), the kernels it picks JIT-built up front in
// parallel into its disk cache, then timed with CUDA events (runtime/timing.hpp) and optionally
// verified against the CPU reference.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bench_sweep.hpp"
#include "bench_verify.hpp"
#include "runtime/timing.hpp"
#include "tilefmha/kernel_config.hpp"

namespace tilefmha::cli {

struct BenchOptions {
  std::string sweep_path = "bench/fa3_sweep.json";
  ShapeSelection shapes;
  runtime::TimingOptions timing;
  bool verify = false;
  bool lse = false;  // also write (and verify) the LSE
  std::string csv_path;
  std::string json_path;
  // Candidate kernels: the `fwd` sweep config for the device's arch under this profile and
  // filters.
  std::string profile = "full";
  std::vector<std::string> filters;
  std::vector<std::string> filter_files;
  std::string cache_dir;  // empty: KernelCache::default_directory()
  int workers = 0;        // JIT threads; 0 = every hardware thread
  bool list_shapes = false;
  bool no_progress = false;
  uint64_t input_seed = 1;
};

struct DeviceFacts {
  std::string card;
  Arch arch = Arch::sm90;
  int sm_count = 0;
  int driver_version = 0;  // e.g. 13000 for CUDA 13.0
  int sm_clock_mhz = 0;    // peak clocks the driver reports; 0 when unknown
  int memory_clock_mhz = 0;
};

struct CandidateCounts {
  int64_t enumerated = 0;
  int64_t implemented = 0;  // those codegen supports, offered to the engine
};

struct KernelBuild {
  double seconds = 0;  // NVRTC compile, or cache read on a hit
  std::string cache;   // hit, miss, rebuilt, uncached
};

struct BenchRow {
  BenchShape shape;
  std::optional<AnchorRow> anchor;
  std::string status = "ok";  // ok, no_kernel, error
  std::string message;        // why, when not ok
  std::optional<KernelConfig> kernel;
  std::optional<KernelBuild> build;
  runtime::SampleStats gpu_ms;  // per repeat
  double tflops = 0;            // at the median
  double plan_cached_us = 0;    // host cost of Engine::plan on a planned signature (median)
  double run_host_us = 0;       // host cost of Engine::run, launch only (median)
  VerifyResult verify;
};

class BenchSession {
 public:
  // Opens the GPU (Error runtime with the reason when none is usable), enumerates the
  // candidates and creates the engine.
  explicit BenchSession(const BenchOptions& options);
  ~BenchSession();
  BenchSession(const BenchSession&) = delete;
  BenchSession& operator=(const BenchSession&) = delete;

  const DeviceFacts& device() const;
  const CandidateCounts& candidates() const;

  // Fills the random inputs for the largest shape and JIT-builds, in parallel, the kernel the
  // engine picks for each shape (into the disk cache its plans read). Returns the build's wall
  // seconds.
  double prepare(const std::vector<BenchShape>& shapes);

  // Plans, times and (with --verify) checks one shape. Errors of this shape land in the row.
  BenchRow run(const BenchShape& shape, const BenchSweep& sweep);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace tilefmha::cli
