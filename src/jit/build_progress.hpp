// Progress of a kernel build on stderr: a redrawn bar on a terminal, a plain line every few
// seconds otherwise (logs, CI), and one summary line at the end.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>

namespace tilefmha::jit {

struct BuildCounts {
  int64_t total = 0;
  int64_t done = 0;
  int64_t built = 0;  // compiled by NVRTC (misses and rebuilt corrupt entries)
  int64_t cache_hits = 0;
  int64_t failures = 0;
};

class BuildProgress {
 public:
  BuildProgress(bool enabled, std::FILE* stream);
  void update(const BuildCounts& counts);
  void finish(const BuildCounts& counts, double seconds);

 private:
  double elapsed() const;
  bool enabled_;
  bool terminal_;
  std::FILE* stream_;
  std::chrono::steady_clock::time_point start_;
  double last_line_ = 0;
};

}  // namespace tilefmha::jit
