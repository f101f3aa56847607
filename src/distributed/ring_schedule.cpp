#include <string>

#include "tilefmha/context_parallel.hpp"
#include "tilefmha/error.hpp"

namespace tilefmha::context_parallel {
namespace {

void require_ring(int world, int rank) {
  if (world < 1)
    throw Error(ErrorKind::invalid_argument,
                "world = " + std::to_string(world) + ": a ring needs at least one rank");
  if (rank < 0 || rank >= world)
    throw Error(ErrorKind::invalid_argument,
                "rank = " + std::to_string(rank) +
                    " is outside the ring of world = " + std::to_string(world));
}

// Causal zigzag, with s the source rank and r this rank: front(r) < back(r) in position, and
// front(s) < front(r) < back(r) < back(s) when s < r (mirrored when s > r). So the own shard is
// causal, an earlier rank's front is seen whole by every query and its back by none, and a later
// rank's shard is seen whole by the back queries only.
std::vector<Block> causal_blocks(int source, int rank, bool packed) {
  if (source == rank) {
    if (!packed) return {{Part::all, Part::all, true}};
    return {{Part::front, Part::front, true},
            {Part::back, Part::front, false},
            {Part::back, Part::back, true}};
  }
  if (source < rank) {
    if (!packed) return {{Part::all, Part::front, false}};
    return {{Part::front, Part::front, false}, {Part::back, Part::front, false}};
  }
  if (!packed) return {{Part::back, Part::all, false}};
  return {{Part::back, Part::front, false}, {Part::back, Part::back, false}};
}

std::vector<Block> full_blocks(bool packed) {
  if (!packed) return {{Part::all, Part::all, false}};
  return {{Part::front, Part::front, false},
          {Part::front, Part::back, false},
          {Part::back, Part::front, false},
          {Part::back, Part::back, false}};
}

}  // namespace

const char* part_name(Part part) {
  switch (part) {
    case Part::all: return "all";
    case Part::front: return "front";
    case Part::back: return "back";
  }
  return "?";
}

std::vector<RingStep> ring_schedule(int world, int rank, bool causal, bool packed) {
  require_ring(world, rank);
  std::vector<RingStep> steps(static_cast<size_t>(world));
  for (int i = 0; i < world; ++i) {
    RingStep& step = steps[static_cast<size_t>(i)];
    step.source_rank = (rank - i + world) % world;
    step.blocks = causal ? causal_blocks(step.source_rank, rank, packed) : full_blocks(packed);
  }
  return steps;
}

ChunkRange front_chunk(int64_t length, int world, int rank) {
  const int64_t chunk = length / (2 * int64_t{world});
  return {rank * chunk, (rank + 1) * chunk};
}

ChunkRange back_chunk(int64_t length, int world, int rank) {
  const int64_t chunk = length / (2 * int64_t{world});
  const int64_t index = 2 * int64_t{world} - 1 - rank;
  return {index * chunk, (index + 1) * chunk};
}

PackedShards packed_shards(const std::vector<int64_t>& global_seqstarts, int world) {
  require_ring(world, 0);
  if (global_seqstarts.empty() || global_seqstarts.front() != 0)
    throw Error(ErrorKind::invalid_argument,
                "cu_seqlens must start with 0 and hold one entry per document plus one");
  const int64_t chunks = 2 * int64_t{world};
  PackedShards shards;
  shards.local_seqstarts.push_back(0);
  shards.half_seqstarts.push_back(0);
  for (size_t d = 0; d + 1 < global_seqstarts.size(); ++d) {
    const int64_t length = global_seqstarts[d + 1] - global_seqstarts[d];
    if (length < 0)
      throw Error(ErrorKind::invalid_argument,
                  "cu_seqlens[" + std::to_string(d + 1) +
                      "] = " + std::to_string(global_seqstarts[d + 1]) + " is below cu_seqlens[" +
                      std::to_string(d) + "] = " + std::to_string(global_seqstarts[d]));
    if (length % chunks != 0)
      throw Error(ErrorKind::invalid_argument,
                  "document " + std::to_string(d) + " has " + std::to_string(length) +
                      " tokens, not a multiple of 2 * world = " + std::to_string(chunks) +
                      ": zigzag sharding cuts every document into 2 * world equal chunks");
    const int64_t half = length / chunks;
    const int64_t start = shards.local_seqstarts.back();
    for (int64_t t = 0; t < half; ++t) shards.front_rows.push_back(start + t);
    for (int64_t t = 0; t < half; ++t) shards.back_rows.push_back(start + half + t);
    shards.local_seqstarts.push_back(start + 2 * half);
    shards.half_seqstarts.push_back(shards.half_seqstarts.back() + half);
  }
  return shards;
}

}  // namespace tilefmha::context_parallel
