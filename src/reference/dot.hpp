// The dot product of the CPU reference's gathered rows (forward logits, backward dP and dS),
// which dominates its running time.
#pragma once

#include <cstdint>

namespace tilefmha::reference::detail {

// Four independent partial sums: a single running sum is one long dependency chain, which
// makes the reference several times slower on long sequences. Inline: it runs once per
// (query, key) pair.
inline double dot(const double* a, const double* b, int64_t n) {
  double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  int64_t d = 0;
  for (; d + 4 <= n; d += 4) {
    s0 += a[d] * b[d];
    s1 += a[d + 1] * b[d + 1];
    s2 += a[d + 2] * b[d + 2];
    s3 += a[d + 3] * b[d + 3];
  }
  for (; d < n; ++d) s0 += a[d] * b[d];
  return (s0 + s1) + (s2 + s3);
}

}  // namespace tilefmha::reference::detail
