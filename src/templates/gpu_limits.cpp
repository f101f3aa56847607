#include "templates/gpu_limits.hpp"

#include <string>
#include <utility>

#include "codegen/fwd_sm90.hpp"

namespace tilefmha::templates {

std::optional<Rejection> check_sequence_lengths(const Problem& problem) {
  for (const auto& [field, length] :
       {std::pair{"seqlen_q", problem.seqlen_q}, std::pair{"seqlen_k", problem.seqlen_k}}) {
    if (length >= kMaxKernelSeqLen)
      return Rejection{field, std::string(field) + " = " + std::to_string(length) +
                                  ": the GPU kernels index a sequence's rows and keys in 32 "
                                  "bits and take sequences shorter than 2^30"};
  }
  return std::nullopt;
}

std::optional<Rejection> check_sm90_limits(const KernelConfig& config, const Problem& problem) {
  if (problem.mode == Mode::group) {
    const std::pair<const char*, const TensorView*> views[] = {
        {"q", &problem.q}, {"o", &problem.o}, {"k", &problem.k}, {"v", &problem.v}};
    for (const auto& [field, view] : views) {
      // Paged caches and absent views have no packed rows; rank 4 was validated.
      if (problem.is_paged() && (view == &problem.k || view == &problem.v)) continue;
      if (view->rank == 4 && view->shape[1] >= kMaxTmaRows)
        return Rejection{std::string(field) + ".shape",
                         std::string(field) + ".shape[1] = " + std::to_string(view->shape[1]) +
                             " packed tokens: sm90_ws addresses them with int32 TMA "
                             "coordinates, so total tokens must stay below 2^31"};
    }
  }
  const int64_t splits = config.family == Family::fwd_splitkv ? problem.split.num_splits : 1;
  const std::optional<int64_t> tiles = codegen::sm90_scheduler_tiles(config, problem, splits);
  if (!tiles || *tiles > codegen::kSm90MaxTiles)
    return Rejection{"seqlen_q",
                     "seqlen_q = " + std::to_string(problem.seqlen_q) +
                         ", nhead_q = " + std::to_string(problem.nhead_q) +
                         ", batch = " + std::to_string(problem.batch) + ": " +
                         (tiles ? std::to_string(*tiles) : std::string("more than 2^63")) +
                         " tiles exceed the sm90_ws scheduler's 2^30 (int32 tile numbers)"};
  return std::nullopt;
}

std::optional<Rejection> check_backward_problem(const Problem& problem) {
  if (auto rejection = check_sequence_lengths(problem)) return rejection;
  if (problem.is_paged())
    return Rejection{"page_table",
                     "page_table: backward through a paged KV cache is not supported"};
  if (problem.device_indices.any())
    return Rejection{"seqstart_q",
                     "seqstart_q: the GPU backward takes host index arrays only (device-side "
                     "metadata is not supported by the backward kernels yet)"};
  return std::nullopt;
}

}  // namespace tilefmha::templates
