#include "jit/build_progress.hpp"

#include <unistd.h>

#include <string>

namespace tilefmha::jit {
namespace {

constexpr int bar_width = 30;
constexpr double plain_line_interval_seconds = 2.0;

double rate(int64_t kernels, double seconds) {
  return seconds > 0 ? kernels / seconds : 0.0;
}

}  // namespace

BuildProgress::BuildProgress(bool enabled, std::FILE* stream)
    : enabled_(enabled),
      terminal_(enabled && ::isatty(::fileno(stream)) != 0),
      stream_(stream),
      start_(std::chrono::steady_clock::now()) {}

double BuildProgress::elapsed() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

void BuildProgress::update(const BuildCounts& counts) {
  if (!enabled_) return;
  const double seconds = elapsed();
  if (terminal_) {
    const int filled =
        counts.total > 0 ? static_cast<int>(bar_width * counts.done / counts.total) : 0;
    const std::string bar = std::string(filled, '#') + std::string(bar_width - filled, '.');
    std::fprintf(stream_, "\r[%s] %lld/%lld  built %lld  hits %lld  failed %lld  %.1f kernels/s ",
                 bar.c_str(), static_cast<long long>(counts.done),
                 static_cast<long long>(counts.total), static_cast<long long>(counts.built),
                 static_cast<long long>(counts.cache_hits), static_cast<long long>(counts.failures),
                 rate(counts.done, seconds));
    std::fflush(stream_);
  } else if (seconds - last_line_ >= plain_line_interval_seconds) {
    last_line_ = seconds;
    std::fprintf(stream_, "tilefmha jit: %lld/%lld done (%lld built, %lld hits, %lld failed)\n",
                 static_cast<long long>(counts.done), static_cast<long long>(counts.total),
                 static_cast<long long>(counts.built), static_cast<long long>(counts.cache_hits),
                 static_cast<long long>(counts.failures));
  }
}

void BuildProgress::finish(const BuildCounts& counts, double seconds) {
  if (!enabled_) return;
  if (terminal_) std::fputc('\n', stream_);
  std::fprintf(stream_,
               "tilefmha jit: %lld kernels in %.2f s: %lld built, %lld cache hits, %lld failures, "
               "%.1f kernels/s\n",
               static_cast<long long>(counts.total), seconds, static_cast<long long>(counts.built),
               static_cast<long long>(counts.cache_hits), static_cast<long long>(counts.failures),
               rate(counts.done, seconds));
  std::fflush(stream_);
}

}  // namespace tilefmha::jit
