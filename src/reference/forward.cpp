// Forward attention (fwd, fwd_pagedkv, batch_prefill): the paged families differ only in how
// K/V rows are gathered, which access.hpp hides.
#include <vector>

#include "reference/forward_rows.hpp"
#include "tilefmha/reference.hpp"
#include "tilefmha/validate.hpp"

namespace tilefmha::reference {

void forward(const Problem& problem) {
  validate(problem);
  detail::require_host_view(problem.q, "q");
  detail::require_host_view(problem.k, "k");
  detail::require_host_view(problem.v, "v");
  detail::require_host_view(problem.o, "o");
  if (problem.return_lse) detail::require_host_view(problem.lse, "lse");

  detail::parallel_over_heads(problem, [&](int64_t b, int64_t h, int64_t begin, int64_t end) {
    detail::store_dropout_random_values(problem, b, h, begin, end);
    const detail::HeadRows rows = detail::gather_head(problem, b, h);
    detail::RowAttention attention(problem, b, h, rows);
    std::vector<double> out(problem.hdim_v);
    for (int64_t i = begin; i < end; ++i) {
      const double lse = attention.attend(i, 0, rows.k.length, /*with_sink=*/true, out.data());
      detail::store_output_row(problem, b, h, i, out.data(), lse);
    }
  });
}

}  // namespace tilefmha::reference
