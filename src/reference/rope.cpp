#include "reference/rope.hpp"

#include "core/numeric.hpp"

namespace tilefmha::reference::detail {

void apply_rope(const AppendKv& spec, int64_t position, double* row) {
  if (spec.rope == RopeKind::none) return;
  const int64_t half = spec.rotary_dim / 2;
  for (int64_t f = 0; f < half; ++f) {
    const double c = numeric::load(spec.rope_cos, {position, f});
    const double s = numeric::load(spec.rope_sin, {position, f});
    const int64_t first = spec.rope == RopeKind::interleaved ? 2 * f : f;
    const int64_t second = spec.rope == RopeKind::interleaved ? 2 * f + 1 : f + half;
    const double x1 = row[first];
    const double x2 = row[second];
    row[first] = x1 * c - x2 * s;
    row[second] = x2 * c + x1 * s;
  }
}

}  // namespace tilefmha::reference::detail
