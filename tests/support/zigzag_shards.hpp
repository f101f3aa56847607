// Test support: zigzag context-parallel shards of a whole-sequence problem, built from the
// schedule API alone (tilefmha/context_parallel.hpp: front_chunk, back_chunk, packed_shards),
// and the row copies that move data between whole-sequence tensors, rank-local shards and the
// parts of a shard that a ring block reads.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "core/numeric.hpp"
#include "support/tensor_pool.hpp"
#include "tilefmha/context_parallel.hpp"
#include "tilefmha/tensor.hpp"

namespace tilefmha::testing {

// How the tokens of a context-parallel problem lie along the seq dim of its [batch, seq, heads,
// dim] tensors: batch mode (`batch` rows of `seqlen` tokens, each sharded on its own) or packed
// varlen (one row of documents, each document sharded on its own). Every rank's shard has the
// same shape, so the parts of a shard do not depend on the rank.
class ZigzagLayout {
 public:
  static ZigzagLayout batch_mode(int world, int64_t batch, int64_t seqlen) {
    if (seqlen % (2 * int64_t{world}) != 0)
      throw std::invalid_argument("seqlen " + std::to_string(seqlen) +
                                  " is not a multiple of 2 * world");
    ZigzagLayout layout;
    layout.world_ = world;
    layout.batch_ = batch;
    layout.seqlen_ = seqlen;
    return layout;
  }
  static ZigzagLayout packed_mode(int world, std::vector<int64_t> global_seqstarts) {
    ZigzagLayout layout;
    layout.world_ = world;
    layout.packed_ = true;
    layout.shards_ = context_parallel::packed_shards(global_seqstarts, world);
    layout.global_seqstarts_ = std::move(global_seqstarts);
    return layout;
  }

  bool packed() const { return packed_; }
  int world() const { return world_; }
  // The batch dim of every tensor: the batch rows, or 1 for packed input.
  int64_t batch() const { return packed_ ? 1 : batch_; }
  // Seq extent of the whole-sequence tensors and of one rank's shard.
  int64_t global_rows() const { return packed_ ? global_seqstarts_.back() : seqlen_; }
  int64_t local_rows() const { return packed_ ? shards_.local_seqstarts.back() : seqlen_ / world_; }
  const std::vector<int64_t>& global_seqstarts() const { return global_seqstarts_; }
  const std::vector<int64_t>& local_seqstarts() const { return shards_.local_seqstarts; }

  // The whole-sequence row of every local row of rank `rank`'s shard: per sequence (document),
  // its front chunk then its back chunk.
  std::vector<int64_t> global_rows_of(int rank) const {
    std::vector<int64_t> rows;
    auto add = [&](int64_t start, const context_parallel::ChunkRange& chunk) {
      for (int64_t t = chunk.begin; t < chunk.end; ++t) rows.push_back(start + t);
    };
    if (!packed_) {
      add(0, context_parallel::front_chunk(seqlen_, world_, rank));
      add(0, context_parallel::back_chunk(seqlen_, world_, rank));
      return rows;
    }
    for (size_t d = 0; d + 1 < global_seqstarts_.size(); ++d) {
      const int64_t start = global_seqstarts_[d];
      const int64_t length = global_seqstarts_[d + 1] - start;
      add(start, context_parallel::front_chunk(length, world_, rank));
      add(start, context_parallel::back_chunk(length, world_, rank));
    }
    return rows;
  }

  // The rows of a shard that a block's part reads, in the order the block sees them, and for
  // packed input the prefix sums of its documents (empty in batch mode).
  struct PartRows {
    std::vector<int64_t> rows;
    std::vector<int64_t> seqstarts;
  };
  PartRows part(context_parallel::Part part) const {
    using context_parallel::Part;
    PartRows out;
    if (packed_) {
      switch (part) {
        case Part::all:
          for (int64_t t = 0; t < local_rows(); ++t) out.rows.push_back(t);
          out.seqstarts = shards_.local_seqstarts;
          break;
        case Part::front:
          out.rows = shards_.front_rows;
          out.seqstarts = shards_.half_seqstarts;
          break;
        case Part::back:
          out.rows = shards_.back_rows;
          out.seqstarts = shards_.half_seqstarts;
          break;
      }
      return out;
    }
    const int64_t half = local_rows() / 2;
    const int64_t begin = part == Part::back ? half : 0;
    const int64_t end = part == Part::front ? half : local_rows();
    for (int64_t t = begin; t < end; ++t) out.rows.push_back(t);
    return out;
  }

 private:
  int world_ = 1;
  bool packed_ = false;
  int64_t batch_ = 1;
  int64_t seqlen_ = 0;
  std::vector<int64_t> global_seqstarts_;
  context_parallel::PackedShards shards_;
};

// Rows `rows` (seq indices) of a [batch, seq, heads, dim] view, copied into a new contiguous
// tensor of the pool in that order (same dtype).
inline TensorView gather_rows(TensorPool& pool, const TensorView& from,
                              const std::vector<int64_t>& rows) {
  const int64_t batch = from.shape[0], heads = from.shape[2], dim = from.shape[3];
  const int64_t count = static_cast<int64_t>(rows.size());
  const TensorView to = pool.filled(from.dtype, {batch, count, heads, dim}, 0);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t t = 0; t < count; ++t)
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t d = 0; d < dim; ++d)
          numeric::store(to, {b, t, h, d}, numeric::load(from, {b, rows[t], h, d}));
  return to;
}

// Row t of the [batch, count, heads, dim] view `from` added into row rows[t] of `to`.
inline void add_rows(const TensorView& to, const std::vector<int64_t>& rows,
                     const TensorView& from) {
  const int64_t batch = from.shape[0], heads = from.shape[2], dim = from.shape[3];
  for (int64_t b = 0; b < batch; ++b)
    for (size_t t = 0; t < rows.size(); ++t)
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t d = 0; d < dim; ++d) {
          const int64_t row = rows[t];
          numeric::store(to, {b, row, h, d},
                         numeric::load(to, {b, row, h, d}) +
                             numeric::load(from, {b, static_cast<int64_t>(t), h, d}));
        }
}

// gather_rows for LSE-like views [batch, heads, seq].
inline TensorView gather_lse_rows(TensorPool& pool, const TensorView& from,
                                  const std::vector<int64_t>& rows) {
  const int64_t batch = from.shape[0], heads = from.shape[1];
  const int64_t count = static_cast<int64_t>(rows.size());
  const TensorView to = pool.filled(from.dtype, {batch, heads, count}, 0);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t t = 0; t < count; ++t)
        numeric::store(to, {b, h, t}, numeric::load(from, {b, h, rows[t]}));
  return to;
}

}  // namespace tilefmha::testing
