// The device-independent half of RingAttention::forward: validation of the views, the ring's
// topology from the communicator, where each block's partial state lives, and the forward and
// merge problems over views of the shard, of the K/V shard held at a step and of the partial
// states. The GPU path runs these problems with the engine; the CPU tests run the same problems
// with the reference on host views, which checks the whole layout without a GPU.
#pragma once

#include <cstdint>
#include <vector>

#include "distributed/nccl_library.hpp"
#include "tilefmha/context_parallel.hpp"
#include "tilefmha/merge_states.hpp"
#include "tilefmha/problem.hpp"
#include "tilefmha/ring_attention.hpp"

namespace tilefmha::distributed {

// The shape of one rank's shard (RingForward's views).
struct RingShape {
  DType dtype = DType::bf16;
  int64_t batch = 0;
  int64_t seq_local = 0;
  int64_t nhead_q = 0;
  int64_t nhead_k = 0;
  int64_t hdim = 0;
  int64_t hdim_v = 0;

  bool operator==(const RingShape&) const = default;
  int64_t half() const { return seq_local / 2; }
  int64_t k_bytes() const;  // one K shard, contiguous
  int64_t v_bytes() const;
};

// Checks every view of `args` (in `space`) and returns the shape; throws
// Error(invalid_argument) naming the field: a missing or misplaced view, a dtype other than
// fp16/bf16 (LSE fp32), mismatching shapes, nhead_k not dividing nhead_q, an odd or empty
// seq_local, non-contiguous K/V, a negative or non-finite scale.
RingShape validate_ring_forward(const RingForward& args, MemorySpace space);

struct RingTopology {
  int rank = 0;
  int world = 0;
};

// Rank and size of `comm` through `api` (ncclCommUserRank, ncclCommCount). Throws Error naming
// the call when it fails, the communicator when it is null, and both numbers when the rank lies
// outside [0, world). When `device` >= 0 and the library has ncclCommCuDevice, the
// communicator's device must be `device` (the engine's).
RingTopology ring_topology(const NcclApi& api, void* comm, int device = -1);

// A block of the schedule and the partial-state slot its O and LSE go to.
struct SlotBlock {
  context_parallel::Block block;
  int slot = 0;
};

// Slots [begin, end): the partial states that one half of the query rows merges.
struct SlotRange {
  int begin = 0;
  int end = 0;
  int count() const { return end - begin; }
  bool operator==(const SlotRange&) const = default;
};

// One slot per block. Slots are numbered so that the states covering each half of the query
// rows are consecutive: blocks of the front queries only, then of all queries, then of the back
// queries only. So the front rows merge slots [0, front-only + all) and the back rows the rest
// of the all-blocks' slots and the back-only ones.
struct RingLayout {
  std::vector<context_parallel::RingStep> steps;
  std::vector<std::vector<SlotBlock>> blocks;  // per step, in the schedule's order
  int slots = 0;
  SlotRange front;
  SlotRange back;
};
RingLayout ring_layout(int world, int rank, bool causal);

// The partial states: O in memory [slots, batch, seq_local, nhead_q, hdim_v] of the shard's
// dtype, LSE fp32 [slots, batch, nhead_q, seq_local]. A block writes the rows of its queries'
// part in its slot.
struct RingStates {
  void* o = nullptr;
  void* lse = nullptr;
  MemorySpace space = MemorySpace::device;
  int slots = 0;
};
int64_t state_o_bytes(const RingShape& shape, int slots);
int64_t state_lse_bytes(const RingShape& shape, int slots);

// A K/V shard of `shape` at `base`: K, then V at the next 256-byte boundary, both contiguous
// bshd (the layout forward requires of the local shard). kv_shard_bytes is the whole span.
struct KvShard {
  TensorView k;
  TensorView v;
};
int64_t kv_shard_bytes(const RingShape& shape);
KvShard kv_shard(const RingShape& shape, void* base, MemorySpace space);

// Rows of `part` of a logical [batch, seq_local, heads, dim] view: all, the front half
// [0, seq_local/2) or the back half [seq_local/2, seq_local).
TensorView part_rows(const TensorView& view, context_parallel::Part part);

// The fwd problem of one block: args.q's rows of its queries against `kv`'s rows of its keys,
// causal (top-left) or not, writing O and LSE into its slot's rows. Validated (built).
Problem block_problem(const RingShape& shape, const RingForward& args, const KvShard& kv,
                      const SlotBlock& block, const RingStates& states);

// The merges that write args.o (and args.lse when set): one over all rows when both halves
// merge the same slots, else one per half.
std::vector<MergeStates> ring_merges(const RingShape& shape, const RingLayout& layout,
                                     const RingForward& args, const RingStates& states);

}  // namespace tilefmha::distributed
