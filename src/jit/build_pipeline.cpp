#include "jit/build_pipeline.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>

#include "tilefmha/error.hpp"

namespace tilefmha::jit {
namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

std::string current_exception_message() {
  try {
    throw;
  } catch (const std::exception& error) {
    return error.what();
  } catch (...) {
    return "unknown exception";
  }
}

// Finished job indices, handed from the compile workers to the loading thread.
class CompletionQueue {
 public:
  void push(size_t index) {
    {
      std::lock_guard lock(mutex_);
      ready_.push_back(index);
    }
    ready_signal_.notify_one();
  }
  size_t pop() {
    std::unique_lock lock(mutex_);
    ready_signal_.wait(lock, [&] { return !ready_.empty(); });
    const size_t index = ready_.front();
    ready_.pop_front();
    return index;
  }

 private:
  std::mutex mutex_;
  std::condition_variable ready_signal_;
  std::deque<size_t> ready_;
};

int resolved_workers(int requested, size_t jobs) {
  if (requested < 0) {
    throw Error(ErrorKind::invalid_argument,
                "workers " + std::to_string(requested) + " is negative; use 0 for every core");
  }
  const int available = std::max(1u, std::thread::hardware_concurrency());
  const int workers = requested == 0 ? available : requested;
  return static_cast<int>(std::max<size_t>(1, std::min<size_t>(workers, jobs)));
}

}  // namespace

std::string BuildReport::failure_report() const {
  std::string report;
  for (const BuildResult& result : results) {
    if (!result.ok) report += "kernel '" + result.name + "' failed:\n" + result.error + "\n\n";
  }
  return report;
}

BuildReport build_kernels(std::span<const BuildJob> jobs, const BuildOptions& options,
                          const KernelCache* cache, const LoadStage& load) {
  const auto start = std::chrono::steady_clock::now();
  BuildReport report;
  report.results.resize(jobs.size());
  BuildCounts& counts = report.summary.counts;
  counts.total = static_cast<int64_t>(jobs.size());
  BuildProgress progress(options.show_progress, stderr);

  CompletionQueue completed;
  std::atomic<size_t> next_job{0};
  // Each worker writes only results[index] of the jobs it claimed; the queue's mutex
  // publishes those writes to the loading thread.
  auto compile_worker = [&] {
    for (size_t index = next_job++; index < jobs.size(); index = next_job++) {
      BuildResult& result = report.results[index];
      result.name = jobs[index].name;
      const auto compile_start = std::chrono::steady_clock::now();
      try {
        CachedKernel kernel =
            compile_cached(jobs[index].name, jobs[index].source, options.compile, cache);
        result.cubin = std::move(kernel.cubin);
        result.cache = kernel.outcome;
        result.note = std::move(kernel.note);
        result.ok = true;
      } catch (...) {
        result.error = current_exception_message();
      }
      result.compile_seconds = seconds_since(compile_start);
      completed.push(index);
    }
  };

  const int workers = resolved_workers(options.workers, jobs.size());
  std::vector<std::jthread> pool;
  pool.reserve(workers);
  for (int i = 0; i < workers && !jobs.empty(); ++i) pool.emplace_back(compile_worker);

  for (size_t finished = 0; finished < jobs.size(); ++finished) {
    BuildResult& result = report.results[completed.pop()];
    if (result.ok && load) {
      const auto load_start = std::chrono::steady_clock::now();
      try {
        load(result);
      } catch (...) {
        result.ok = false;
        result.error =
            "loading kernel '" + result.name + "' failed: " + current_exception_message();
      }
      result.load_seconds = seconds_since(load_start);
    }
    ++counts.done;
    if (!result.ok) {
      ++counts.failures;
    } else if (result.cache == CacheOutcome::hit) {
      ++counts.cache_hits;
    } else {
      ++counts.built;
    }
    progress.update(counts);
  }
  pool.clear();  // joins

  report.summary.seconds = seconds_since(start);
  const int64_t succeeded = counts.total - counts.failures;
  report.summary.kernels_per_second =
      report.summary.seconds > 0 ? succeeded / report.summary.seconds : 0.0;
  progress.finish(counts, report.summary.seconds);
  return report;
}

}  // namespace tilefmha::jit
