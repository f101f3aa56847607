#include "reference/backward_dsink.hpp"

#include <cmath>
#include <vector>

#include "core/numeric.hpp"
#include "core/parallel.hpp"
#include "reference/access.hpp"

namespace tilefmha::reference::detail {

void write_dsink(const Problem& p) {
  // One task per head sums its sequences in order: no races, and the same bits on every run
  // whatever the thread count.
  parallel_for(p.nhead_q, [&](int64_t h) {
    const double sink = sink_logit(p, h);
    double sum = 0.0;
    for (int64_t b = 0; b < p.batch; ++b) {
      for (int64_t i = 0; i < p.query_length(b); ++i) {
        const double lse = numeric::load(p.lse.data, p.lse.dtype, lse_offset(p, p.lse, b, h, i));
        if (std::isinf(lse) && lse < 0) continue;
        const double d =
            numeric::load(p.bwd.d.data, p.bwd.d.dtype, lse_offset(p, p.bwd.d, b, h, i));
        sum += std::exp(sink - lse) * d;
      }
    }
    numeric::store(p.bwd.dsink, {h}, -sum);
  });
}

}  // namespace tilefmha::reference::detail
