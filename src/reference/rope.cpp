#include "reference/rope.hpp"

#include <cmath>

#include "core/numeric.hpp"

namespace tilefmha::reference::detail {

void apply_rope(const AppendKv& spec, int64_t position, double* row) {
  if (spec.rope == RopeKind::none) return;
  const int64_t half = spec.rotary_dim / 2;
  for (int64_t f = 0; f < half; ++f) {
    double c, s;
    if (spec.rope_theta > 0) {
      const double angle =
          static_cast<double>(position) *
          std::pow(spec.rope_theta, -2.0 * static_cast<double>(f) / spec.rotary_dim);
      c = std::cos(angle);
      s = std::sin(angle);
    } else {
      c = numeric::load(spec.rope_cos, {position, f});
      s = numeric::load(spec.rope_sin, {position, f});
    }
    const int64_t first = spec.rope == RopeKind::interleaved ? 2 * f : f;
    const int64_t second = spec.rope == RopeKind::interleaved ? 2 * f + 1 : f + half;
    const double x1 = row[first];
    const double x2 = row[second];
    row[first] = x1 * c - x2 * s;
    row[second] = x2 * c + x1 * s;
  }
}

}  // namespace tilefmha::reference::detail
