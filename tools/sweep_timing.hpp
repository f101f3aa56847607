// The GPU half of `tilefmha sweep`: each matched (shape, kernel) pair of the forward family timed
// on its own (a registry and dispatcher holding only that kernel, so the plan runs exactly it),
// with the same CUDA-event timing as `tilefmha bench`. Other families and shapes with a bias
// are left untimed with the reason in the row.
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
  // Opens the GPU; Error(runtime) with the reason when none is usable.
  explicit SweepTimer(runtime::TimingOptions timing);
  ~SweepTimer();
  SweepTimer(const SweepTimer&) = delete;
  SweepTimer& operator=(const SweepTimer&) = delete;

  const DeviceFacts& device() const;

  // Times one match (its kernel's cubin given) and fills the row's timing columns: median_ms,
  // tflops, gbps, card, clocks, driver; or status "untimed" / "error" with the reason.
  void time(const SweepMatch& match, const std::vector<char>& cubin, nlohmann::ordered_json& row);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace tilefmha::cli
