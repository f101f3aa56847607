#include "run_summary.hpp"

#include <cmath>
#include <cstdio>

#include "core/numeric.hpp"
#include "core/parallel.hpp"
#include "core/tensor_iteration.hpp"

namespace tilefmha::cli {

Checksum checksum(const TensorView& view) {
  Checksum total;
  for_each_element(view, [&](int64_t, int64_t offset) {
    const double value = numeric::load(view.data, view.dtype, offset);
    total.sum += value;
    total.abs_sum += std::fabs(value);
  });
  return total;
}

std::string summary_line(const RunSpec& spec, const std::string& backend, double seconds,
                         const std::vector<NamedView>& outputs) {
  char timing[256];
  if (backend == "cpu") {
    const int threads = worker_count();
    std::snprintf(timing, sizeof(timing), " | backend cpu, %d thread%s | %.1f ms", threads,
                  threads == 1 ? "" : "s", seconds * 1e3);
  } else {
    std::snprintf(timing, sizeof(timing), " | backend %s | %.3f ms", backend.c_str(),
                  seconds * 1e3);
  }
  std::string line = spec.problem.describe() + timing;
  for (const NamedView& output : outputs) {
    const Checksum sums = checksum(output.view);
    char text[128];
    std::snprintf(text, sizeof(text), " | %.*s sum=%.9g abs=%.9g",
                  static_cast<int>(output.name.size()), output.name.data(), sums.sum, sums.abs_sum);
    line += text;
  }
  return line;
}

}  // namespace tilefmha::cli
