// Timing (DESIGN §9): GPU time of a launch sequence by CUDA events (warm-ups, then the median
// of repeats, optionally with the L2 cache flushed before each), and host-side costs of calls
// such as Dispatcher::plan on a cached problem or the launch overhead of Dispatcher::run.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "jit/cuda_driver.hpp"

namespace tilefmha::jit {
class DeviceBuffer;
}

namespace tilefmha::runtime {

// Summary of repeated measurements (any unit; the caller's).
struct SampleStats {
  std::vector<double> samples;  // in measurement order
  double median = 0;            // mean of the two middle samples for an even count
  double min = 0;
  double max = 0;
  double mean = 0;
};

// Throws Error(invalid_argument) for an empty vector or a NaN sample.
SampleStats summarize(std::vector<double> samples);

struct TimingOptions {
  int warmup = 3;
  int repeat = 15;
  // Write a buffer larger than the L2 cache between repeats (outside the timed interval), so
  // every repeat reads its inputs from HBM as a cold first call would.
  bool l2_flush = false;
};

// Throws Error(invalid_argument) naming the field for warmup < 0 or repeat < 1.
void check_timing_options(const TimingOptions& options);

// Bytes written by an L2 flush: several times the largest L2 (50 MB on H100).
inline constexpr int64_t kL2FlushBytes = int64_t{256} << 20;

// The flush buffer, allocated once per timer (needs a current CUDA context).
class L2Flusher {
 public:
  explicit L2Flusher(int64_t bytes = kL2FlushBytes);
  ~L2Flusher();
  L2Flusher(const L2Flusher&) = delete;
  L2Flusher& operator=(const L2Flusher&) = delete;
  // Queues the write on `stream`.
  void flush(jit::CUstream stream);

 private:
  std::unique_ptr<jit::DeviceBuffer> buffer_;
  unsigned char next_value_ = 0;
};

// Queues `launch(stream)` warmup + repeat times on `stream`, each repeat between two events,
// and returns the per-repeat GPU times in milliseconds. `flusher` is used when
// options.l2_flush (it is created on demand when null). Needs a current CUDA context.
SampleStats time_on_gpu(const std::function<void(jit::CUstream)>& launch,
                        const TimingOptions& options, jit::CUstream stream,
                        L2Flusher* flusher = nullptr);

// Host wall time of `call` in microseconds: `warmup` untimed calls, then `repeat` timed one by
// one (steady clock). For calls that return at once (cached plans, asynchronous launches).
SampleStats time_on_host(const std::function<void()>& call, int warmup, int repeat);

}  // namespace tilefmha::runtime
