#include "runtime/timing.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <string>

#include "jit/module.hpp"
#include "tilefmha/error.hpp"

namespace tilefmha::runtime {

SampleStats summarize(std::vector<double> samples) {
  if (samples.empty())
    throw Error(ErrorKind::invalid_argument, "timing samples: none to summarize");
  for (size_t i = 0; i < samples.size(); ++i)
    if (std::isnan(samples[i]))
      throw Error(ErrorKind::invalid_argument, "timing sample " + std::to_string(i) + " is NaN");
  SampleStats stats;
  stats.samples = samples;
  std::sort(samples.begin(), samples.end());
  const size_t n = samples.size();
  stats.median = n % 2 == 1 ? samples[n / 2] : 0.5 * (samples[n / 2 - 1] + samples[n / 2]);
  stats.min = samples.front();
  stats.max = samples.back();
  stats.mean = std::accumulate(samples.begin(), samples.end(), 0.0) / static_cast<double>(n);
  return stats;
}

void check_timing_options(const TimingOptions& options) {
  if (options.warmup < 0)
    throw Error(ErrorKind::invalid_argument,
                "warmup = " + std::to_string(options.warmup) + ": must be 0 or more");
  if (options.repeat < 1)
    throw Error(ErrorKind::invalid_argument,
                "repeat = " + std::to_string(options.repeat) + ": must be 1 or more");
}

L2Flusher::L2Flusher(int64_t bytes) : buffer_(std::make_unique<jit::DeviceBuffer>(bytes)) {}

L2Flusher::~L2Flusher() = default;

void L2Flusher::flush(jit::CUstream stream) {
  // A changing value keeps the writes from being skipped as redundant by any layer.
  buffer_->fill_bytes_async(next_value_++, stream);
}

SampleStats time_on_gpu(const std::function<void(jit::CUstream)>& launch,
                        const TimingOptions& options, jit::CUstream stream, L2Flusher* flusher) {
  check_timing_options(options);
  std::unique_ptr<L2Flusher> own_flusher;
  if (options.l2_flush && flusher == nullptr) {
    own_flusher = std::make_unique<L2Flusher>();
    flusher = own_flusher.get();
  }
  for (int w = 0; w < options.warmup; ++w) launch(stream);
  // One start/stop pair per repeat, so the flush between repeats stays outside every interval.
  std::vector<jit::Event> starts(static_cast<size_t>(options.repeat));
  std::vector<jit::Event> stops(static_cast<size_t>(options.repeat));
  for (int r = 0; r < options.repeat; ++r) {
    if (options.l2_flush) flusher->flush(stream);
    starts[r].record(stream);
    launch(stream);
    stops[r].record(stream);
  }
  stops.back().synchronize();
  std::vector<double> milliseconds;
  milliseconds.reserve(stops.size());
  for (int r = 0; r < options.repeat; ++r)
    milliseconds.push_back(jit::elapsed_milliseconds(starts[r], stops[r]));
  return summarize(std::move(milliseconds));
}

SampleStats time_on_host(const std::function<void()>& call, int warmup, int repeat) {
  check_timing_options({warmup, repeat, false});
  for (int w = 0; w < warmup; ++w) call();
  std::vector<double> microseconds;
  microseconds.reserve(static_cast<size_t>(repeat));
  for (int r = 0; r < repeat; ++r) {
    const auto start = std::chrono::steady_clock::now();
    call();
    const auto stop = std::chrono::steady_clock::now();
    microseconds.push_back(std::chrono::duration<double, std::micro>(stop - start).count());
  }
  return summarize(std::move(microseconds));
}

}  // namespace tilefmha::runtime
