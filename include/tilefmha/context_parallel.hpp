// Context parallelism: attention over a sequence sharded across the ranks of a group.
//
// Sharding is zigzag, for causal load balance: the sequence (in packed varlen input, every
// document on its own) is cut into 2N equal chunks for N ranks, and rank r holds chunk r (its
// "front" half) followed by chunk 2N-1-r (its "back" half). Under a causal mask every rank then
// does the same work at every ring step.
//
// The ring: at step i rank r holds the K/V shard of rank (r - i) mod N, computes the blocks the
// schedule lists against it, and passes the shard on to rank r + 1 while the next one arrives
// from rank r - 1. Each block yields a partial attention state (O, LSE) for its query rows; the
// partials of a row are merged with merge_states. The backward walks the same schedule with the
// merged O and LSE, keeps dQ local and sends dK/dV around the ring with the K/V shard.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tilefmha::context_parallel {

// A part of a rank's local shard (its queries, or the K/V shard it holds at a step).
enum class Part : uint8_t {
  all,    // the whole shard: front then back, which is position order in batch mode
  front,  // chunk r of the shard's owner r
  back,   // chunk 2N-1-r
};

const char* part_name(Part part);

// One attention call of a ring step: the queries of one part against the keys of one part,
// causal (top-left, the two parts being of equal length and aligned) or with no mask.
struct Block {
  Part queries = Part::all;
  Part keys = Part::all;
  bool causal = false;

  bool operator==(const Block&) const = default;
};

struct RingStep {
  int source_rank = 0;        // the rank whose K/V shard this step computes against
  std::vector<Block> blocks;  // may be empty (no query of this rank sees those keys)
};

// The N steps of rank `rank` in a ring of `world` ranks. In batch mode (`packed` false) a part
// `all` is position order, so a step needs one block; packed varlen input holds every
// document's front chunks before its back chunks only per document, so blocks there name
// `front` and `back` only (up to three per step). Throws Error (invalid_argument) naming the
// bad argument.
std::vector<RingStep> ring_schedule(int world, int rank, bool causal, bool packed);

// Zigzag shards of packed varlen input. `global_seqstarts` are the documents' prefix sums over
// the whole sequence; every document's length must be a multiple of 2 * world (the error
// names the first that is not). The local shard of a rank holds, per document, its front
// chunk then its back chunk; `local_seqstarts` are the prefix sums of the local shard, and
// `half_seqstarts` those of its packed front part (every document's front chunk, in document
// order), which are also those of its packed back part.
struct PackedShards {
  std::vector<int64_t> local_seqstarts;
  std::vector<int64_t> half_seqstarts;  // of the packed front part, equal to the back part's
  // Row of the local shard each packed front (back) row comes from.
  std::vector<int64_t> front_rows;
  std::vector<int64_t> back_rows;
};

PackedShards packed_shards(const std::vector<int64_t>& global_seqstarts, int world);

// Rows [begin, end) of the global sequence (of one document, in varlen) that rank `rank`'s
// front and back chunks hold, for a sequence of `length` tokens.
struct ChunkRange {
  int64_t begin = 0;
  int64_t end = 0;
};
ChunkRange front_chunk(int64_t length, int world, int rank);
ChunkRange back_chunk(int64_t length, int world, int rank);

}  // namespace tilefmha::context_parallel
