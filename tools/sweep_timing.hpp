// The GPU half of `tilefmha sweep`: each matched (shape, kernel) pair timed on its own (an Engine
// whose only kernel is that one, so the plan runs exactly it, read from the disk cache the
// sweep's build filled), with the same CUDA-event timing as `tilefmha bench`, on the host
// problem its family's builder sets up (sweep_problem.hpp: fwd, fwd_pagedkv, batch_prefill).
// Other families and shapes with a bias are left untimed with the reason in the row.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench_runner.hpp"
#include "runtime/timing.hpp"
#include "sweep_match.hpp"

namespace tilefmha::cli {

class SweepTimer {
 public:
  // Opens the GPU; Error(runtime) with the reason when none is usable. `cache_dir`: the cubin
  // cache the kernels were built into (empty: KernelCache::default_directory()).
  explicit SweepTimer(runtime::TimingOptions timing, std::string cache_dir = {});
  ~SweepTimer();
  SweepTimer(const SweepTimer&) = delete;
  SweepTimer& operator=(const SweepTimer&) = delete;

  const DeviceFacts& device() const;

  // Times one match (its kernel built into the cache beforehand, else compiled now) and fills
  // the row's timing columns: median_ms, tflops, gbps, card, clocks, driver; or status
  // "untimed" / "error" with the reason. With `validate`, the first run's output is compared
  // with the CPU reference (sweep_validate.hpp): columns validated, validation, max_abs_error,
  // and status "mismatch" with the agreement in the reason when they disagree.
  void time(const SweepMatch& match, nlohmann::ordered_json& row, bool validate);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace tilefmha::cli
