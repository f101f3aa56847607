// Split-KV forward (partials per key chunk, sink logit excluded) and the combine that merges
// them and adds the sink logit once.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/numeric.hpp"
#include "reference/forward_rows.hpp"
#include "tilefmha/reference.hpp"
#include "tilefmha/validate.hpp"

namespace tilefmha::reference {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

void require_split_views(const Problem& problem) {
  detail::require_host_view(problem.split.o_acc, "split.o_acc");
  detail::require_host_view(problem.split.lse_acc, "split.lse_acc");
}

}  // namespace

void forward_splitkv(const Problem& problem) {
  validate(problem);
  detail::require_host_view(problem.q, "q");
  detail::require_host_view(problem.k, "k");
  detail::require_host_view(problem.v, "v");
  require_split_views(problem);
  const TensorView& o_acc = problem.split.o_acc;
  const TensorView& lse_acc = problem.split.lse_acc;
  const int64_t num_splits = problem.split.num_splits;

  detail::parallel_over_heads(problem, [&](int64_t b, int64_t h, int64_t row_begin,
                                           int64_t row_end) {
    detail::store_dropout_random_values(problem, b, h, row_begin, row_end);
    const detail::HeadRows rows = detail::gather_head(problem, b, h);
    detail::RowAttention attention(problem, b, h, rows);
    const int64_t keys = rows.k.length;
    const int64_t chunk = splitkv_chunk(keys, num_splits);
    std::vector<double> out(problem.hdim_v);
    for (int64_t s = 0; s < num_splits; ++s) {
      const int64_t key_begin = std::min(s * chunk, keys);
      const int64_t key_end = std::min(key_begin + chunk, keys);
      for (int64_t i = row_begin; i < row_end; ++i) {
        const double lse = attention.attend(i, key_begin, key_end, /*with_sink=*/false, out.data());
        const detail::RowIndex row = detail::query_row(problem, b, i);
        const int64_t base = o_acc.offset({s, row.batch, h, row.seq, 0});
        for (int64_t d = 0; d < problem.hdim_v; ++d)
          numeric::store(o_acc.data, o_acc.dtype, base + d * o_acc.stride[4], out[d]);
        numeric::store(lse_acc, {s, row.batch, h, row.seq}, lse);
      }
    }
  });
}

void splitkv_combine(const Problem& problem) {
  validate(problem);
  require_split_views(problem);
  detail::require_host_view(problem.o, "o");
  if (problem.return_lse) detail::require_host_view(problem.lse, "lse");
  const TensorView& o_acc = problem.split.o_acc;
  const TensorView& lse_acc = problem.split.lse_acc;
  const int64_t num_splits = problem.split.num_splits;
  const bool has_sink = detail::has_sink_logit(problem);

  detail::parallel_over_heads(
      problem, [&](int64_t b, int64_t h, int64_t row_begin, int64_t row_end) {
        const double sink = has_sink ? detail::sink_logit(problem, h) : kNegInf;
        std::vector<double> split_lse(num_splits);
        std::vector<double> out(problem.hdim_v);
        for (int64_t i = row_begin; i < row_end; ++i) {
          const detail::RowIndex row = detail::query_row(problem, b, i);
          double max_lse = sink;
          for (int64_t s = 0; s < num_splits; ++s) {
            split_lse[s] = numeric::load(lse_acc, {s, row.batch, h, row.seq});
            max_lse = detail::max_keeping_nan(max_lse, split_lse[s]);
          }
          std::fill(out.begin(), out.end(), 0.0);
          if (max_lse == kNegInf) {
            detail::store_output_row(problem, b, h, i, out.data(), kNegInf);
            continue;
          }
          double total = has_sink ? std::exp(sink - max_lse) : 0.0;
          for (double l : split_lse) total += std::exp(l - max_lse);
          const double lse = max_lse + std::log(total);
          for (int64_t s = 0; s < num_splits; ++s) {
            // An empty split's partial carries no weight; skipping it also keeps an unwritten
            // (garbage) partial from turning 0 * NaN into NaN.
            if (split_lse[s] == kNegInf) continue;
            const double weight = std::exp(split_lse[s] - lse);
            const int64_t base = o_acc.offset({s, row.batch, h, row.seq, 0});
            for (int64_t d = 0; d < problem.hdim_v; ++d)
              out[d] += weight * numeric::load(o_acc.data, o_acc.dtype, base + d * o_acc.stride[4]);
          }
          detail::store_output_row(problem, b, h, i, out.data(), lse);
        }
      });
}

}  // namespace tilefmha::reference
