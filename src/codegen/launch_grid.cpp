#include "codegen/launch_grid.hpp"

#include <string>

#include "tilefmha/error.hpp"

namespace tilefmha::codegen {

jit::LaunchShape query_block_grid(const Problem& problem, int block_m, int threads,
                                  int64_t num_splits) {
  constexpr int64_t kMaxGridYZ = 65535;
  if (num_splits < 1)
    throw Error(ErrorKind::invalid_argument,
                "num_splits = " + std::to_string(num_splits) + ": must be at least 1");
  if (problem.nhead_q > kMaxGridYZ)
    throw Error(ErrorKind::not_supported,
                "nhead_q = " + std::to_string(problem.nhead_q) + " exceeds the grid's 65535 heads");
  if (problem.batch > kMaxGridYZ)
    throw Error(ErrorKind::not_supported,
                "batch = " + std::to_string(problem.batch) + " exceeds the grid's 65535 sequences");
  if (problem.batch * num_splits > kMaxGridYZ)
    throw Error(ErrorKind::not_supported, "num_splits = " + std::to_string(num_splits) +
                                              " with batch = " + std::to_string(problem.batch) +
                                              " gives " +
                                              std::to_string(problem.batch * num_splits) +
                                              " (sequence, split) pairs; the grid takes 65535");
  const int64_t query_blocks = (problem.seqlen_q + block_m - 1) / block_m;
  jit::LaunchShape shape;
  // A grid needs one block even when every sequence is empty; such CTAs exit at once.
  shape.grid[0] = static_cast<unsigned>(query_blocks > 0 ? query_blocks : 1);
  shape.grid[1] = static_cast<unsigned>(problem.nhead_q);
  shape.grid[2] = static_cast<unsigned>(problem.batch * num_splits);
  shape.block[0] = static_cast<unsigned>(threads);
  return shape;
}

}  // namespace tilefmha::codegen
