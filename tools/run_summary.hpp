// The one-line summary `tilefmha run` prints on success.
#pragma once

#include <string>
#include <vector>

#include "run_spec.hpp"
#include "run_tensors.hpp"

namespace tilefmha::cli {

// Sum and sum of magnitudes of a view's logical elements, accumulated in double: enough to
// tell two runs apart and cheap to compare against outside tools.
struct Checksum {
  double sum = 0.0;
  double abs_sum = 0.0;
};
Checksum checksum(const TensorView& view);

// "<problem> | backend cpu, N threads | T ms | o sum=… abs=… [| dq … | dk … | dv …]"
std::string summary_line(const RunSpec& spec, const std::string& backend, double seconds,
                         const std::vector<NamedView>& outputs);

}  // namespace tilefmha::cli
