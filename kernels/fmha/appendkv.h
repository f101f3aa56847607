// Append-KV (family fwd_appendkv, pipeline appendkv): writes the new K (rotated by RoPE when
// asked) and V tokens into a contiguous or paged cache at key seqlen_k[b] + t, and rotates Q in
// place, in one launch, exactly as reference::append_kv (rotation in fp32 instead of double).
// Memory-bound, so the layout serves the loads:
//   * one "row" is one (token, head) of K, V or Q. A thread group of kLanes adjacent lanes of
//     one warp moves a "run": up to kRunHeads consecutive heads of one token and kind (the
//     host's codegen::appendkv_runs picks the run lengths; a token's last run may be shorter).
//     The launch's groups are the K runs, then the V runs, then the Q runs, so one 1-D grid
//     covers all three;
//   * every row of a run has the same RoPE position, so a lane forms its cos and sin once
//     (fmha/appendkv_rope.h; the angle is double-precision work, as costly as the bytes when it
//     was paid per element) and applies them to each head of the run;
//   * a group's lanes each hold every kLanes-th chunk of 16 bytes of a row, so they move whole
//     contiguous segments in 16-byte accesses (element by element where a pointer, stride or
//     head dim does not allow it); a lane loads the chunks of kHeadBatch heads before it stores
//     any, so several loads are in flight per lane while the angles are formed;
//   * chunks move as raw bytes: only the dims RoPE rotates are widened to fp32, rotated and
//     rounded back (fp8: round to nearest even, saturating, as numeric::store), so V, unrotated
//     K and the dims past rotary_dim are byte copies, and an fp8 cache (one per-tensor scale
//     shared with the new tokens and Q, so rotating codes is rotating values) is moved as codes;
//   * half-rotated RoPE pairs dim f with f + rotary_dim / 2, which another lane holds: it comes by
//     shuffle where a lane holds one chunk of a row and the half is whole chunks, else it is read
//     again from the row. Every lane rotates a batch's chunks before any lane of the warp writes
//     that batch (one __syncwarp per batch, the same count for every lane of the warp), which
//     keeps the in-place rotation of Q race-free;
//   * block 0 also writes seqlen_k[b] + seqlen_knew for an attention stage that follows;
//   * a quantizing append (fp16/bf16 new tokens into an fp8 pool with per-page scales) takes
//     its own path, a group per page segment: fmha/appendkv_quantize.h.
#pragma once

#include "fmha/appendkv_chunk.h"
#include "fmha/appendkv_params.h"
#include "fmha/appendkv_quantize.h"
#include "fmha/appendkv_rope.h"
#include "tile/device.h"
#include "tile/numeric_types.h"

namespace tilefmha::fmha {

template <class Element_, int Hdim, int Warps, bool Paged, RopeMode Rope, bool Quantize = false>
struct AppendKvTraits {
  using Element = Element_;  // float, tile::half_t, tile::bfloat16_t or an fp8 code type
  static constexpr int kHdim = Hdim;
  static constexpr int kVector = 16 / int(sizeof(Element));
  static constexpr int kChunksPerRow = (Hdim + kVector - 1) / kVector;
  // The smallest power of two of lanes covering a row's chunks, at most a warp.
  static constexpr int lanes_for(int chunks) {
    int lanes = 1;
    while (lanes < chunks && lanes < 32) lanes *= 2;
    return lanes;
  }
  // A quantizing append's lanes each move a span of its 16-bit new tokens (8 elements in 16
  // bytes, fmha/appendkv_quantize.h), so its groups have twice the lanes of an fp8 copy's.
  static constexpr int kLaneElements = Quantize ? 8 : kVector;
  static constexpr int kLanes = lanes_for((Hdim + kLaneElements - 1) / kLaneElements);
  static constexpr int kChunksPerLane = (kChunksPerRow + kLanes - 1) / kLanes;
  static constexpr int kThreads = Warps * 32;
  static constexpr int kGroupsPerCta = kThreads / kLanes;
  static constexpr bool kPaged = Paged;
  static constexpr RopeMode kRope = Rope;
  // 16-bit new tokens quantized into an fp8 paged cache with per-page scales
  // (fmha/appendkv_quantize.h).
  static constexpr bool kQuantize = Quantize;
  // Heads one group moves (codegen::appendkv_runs assumes the same): a plain copy too, so that a
  // lane has a run's loads in flight together and its index math and page lookup are paid once
  // per run rather than per head (one head per group: 78% of copy bandwidth into page-16 pools).
  static constexpr int kRunHeads = kAppendKvRunHeads;
  // Heads loaded before any is stored: about kAppendKvRunHeads chunks in flight per lane.
  static constexpr int kHeadBatch = kRunHeads / kChunksPerLane > 0 ? kRunHeads / kChunksPerLane : 1;
  static constexpr int kBatches = (kRunHeads + kHeadBatch - 1) / kHeadBatch;

  static_assert(tile::same_type<Element, float>::value ||
                    tile::same_type<Element, tile::half_t>::value ||
                    tile::same_type<Element, tile::bfloat16_t>::value ||
                    tile::is_fp8<Element>::value,
                "append-KV moves fp32, fp16, bf16 or fp8");
#if !defined(TILEFMHA_HAS_SM89)
  static_assert(!tile::is_fp8<Element>::value,
                "fp8 append-KV needs sm_89 or newer (cvt to and from e4m3x2 / e5m2x2)");
#endif
  static_assert(kLanes * kChunksPerLane >= kChunksPerRow, "a row's lanes cover its chunks");
  static_assert(!Quantize || (tile::is_fp8<Element>::value && Paged),
                "a quantizing append writes an fp8 paged cache");
  static_assert(kBatches * kHeadBatch >= kRunHeads, "a group's batches cover its run");
};

namespace appendkv {

enum class RunKind { key, value, query };

// What one group moves: `heads` rows of one token and kind (K and Q rotate, V does not), head
// j's row at source + j * source_head (to target + j * target_head; equal for Q, rotated in
// place), their head dim and RoPE position. heads = 0: a group past the last run, which
// still takes part in its warp's barriers. The position and target depend on the sequence's key
// count (and, paged, its page-table entry): two dependent global reads, read by find_position
// and used by find_target where their latencies overlap the run's loads (move_run).
template <class T>
struct Run {
  const T* source = nullptr;
  T* target = nullptr;  // Q: the source; K/V: set by find_target
  long long source_head = 0;
  long long target_head = 0;
  int heads = 0;
  int dim = 0;
  bool vector = false;
  long long position = 0;  // set by find_position
  RunKind kind = RunKind::key;
  long long sequence = 0;  // b
  long long row = 0;       // the new token t, or the query row i
  long long first_head = 0;
  long long key = 0;   // cache key of a K/V run: seqlen_k[b] + t (find_position)
  long long page = 0;  // its page in a paged cache (find_position)
};

// The run's RoPE position, its cache key and (paged) page id: new K/V token t goes to cache key
// seqlen_k[b] + t, query row i rotates at position seqlen_k[b] + i. The page id is read here but
// used only by find_target, so that its read overlaps whatever comes between.
template <class Traits>
TILEFMHA_DEVICE void find_position(const AppendKvParams& p, Run<typename Traits::Element>& run) {
  if (run.heads == 0) return;
  const long long b = run.sequence;
  run.key = p.seqlen_k[b] + run.row;
  run.position = run.key + (p.position_offsets != nullptr ? p.position_offsets[b] : 0);
  if constexpr (Traits::kPaged) {
    if (run.kind != RunKind::query) {
      const long long first = p.page_indptr != nullptr ? p.page_indptr[b] : b * p.page_table_stride;
      run.page = p.page_table[first + run.key / p.page_size];
    }
  }
}

// Where a K/V run's rows go: at their cache key, one page lookup for the run (its heads share
// the token's page and slot). Q rows stay where they are.
template <class Traits>
TILEFMHA_DEVICE void find_target(const AppendKvParams& p, Run<typename Traits::Element>& run) {
  using T = typename Traits::Element;
  if (run.heads == 0 || run.kind == RunKind::query) return;
  const bool is_k = run.kind == RunKind::key;
  const TokenStrides& to = is_k ? p.k_strides : p.v_strides;
  const long long offset = Traits::kPaged ? run.page * to.batch + (run.key % p.page_size) * to.seq
                                          : run.sequence * to.batch + run.key * to.seq;
  run.target = static_cast<T*>(is_k ? p.k : p.v) + offset + run.first_head * to.head;
}

template <class Traits>
TILEFMHA_DEVICE void move_run(const AppendKvParams& p, Run<typename Traits::Element> run,
                              int lane) {
  using T = typename Traits::Element;
  constexpr int kVector = Traits::kVector;
  constexpr int kLanes = Traits::kLanes;
  constexpr int kChunks = Traits::kChunksPerLane;
  constexpr int kBatch = Traits::kHeadBatch;
  constexpr bool kRotates = Traits::kRope != RopeMode::none;
  constexpr bool kHalf = Traits::kRope == RopeMode::half_rotated;
  const int rotary = int(p.rotary_dim);
  const bool rotates = kRotates && run.kind != RunKind::value;

  // A rotating run needs its position for the angles, which come right after the first loads:
  // its lookups go first (the paged target's page id is then used only at the stores). A plain
  // copy reads them after its first loads, so that the loads' latency covers theirs.
  if constexpr (kRotates) find_position<Traits>(p, run);
  LaneAngles<Traits> angles;
#pragma unroll 1
  for (int batch = 0; batch < Traits::kBatches; ++batch) {
    // Zeroed only so that no path reads an unset chunk in the compiler's eyes (the guards below
    // skip the chunks a lane does not load); the stores fold away.
    Chunk x[kBatch][kChunks] = {};
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int head = batch * kBatch + j;
      if (head >= run.heads) {
        // Heads ascend, so a copy stops at the first past the run. Rotating kernels keep the
        // loop's shape: with `break` ptxas spilled the half-rotated paged kernel (80 registers),
        // with `continue` an fp8 copy on sm_89 (AppendKvCodegen's compile tests).
        if constexpr (kRotates)
          continue;
        else
          break;
      }
      const T* source = run.source + head * run.source_head;
#pragma unroll
      for (int c = 0; c < kChunks; ++c) {
        const int d = (c * kLanes + lane) * kVector;
        if (d >= run.dim) continue;
        load_chunk<T, kVector>(source + d, run.vector, run.dim - d, x[j][c]);
      }
    }
    if (batch == 0) {
      if constexpr (!kRotates) find_position<Traits>(p, run);
      if constexpr (kRotates) {
        if (rotates) angles.compute(p, run.position, run.dim, lane);
      }
      find_target<Traits>(p, run);
    }

    if constexpr (kRotates) {
      // Every chunk rotates before any is stored: half-rotated partners come from the other
      // lanes' registers or, where they cannot, from the source row, which Q (rotated in place)
      // overwrites only after the __syncwarp below.
#pragma unroll
      for (int j = 0; j < kBatch; ++j) {
        const int head = batch * kBatch + j;
        const bool wanted = head < run.heads && rotates;
#pragma unroll
        for (int c = 0; c < kChunks; ++c) {
          const int d = (c * kLanes + lane) * kVector;
          Chunk partner{{0, 0, 0, 0}};
          if constexpr (kHalf)
            partner = half_partner<Traits>(x[j][c], run.source + head * run.source_head, wanted,
                                           run.vector, run.dim, d, rotary, lane);
          if (wanted && d < run.dim && d < rotary)
            rotate_chunk<Traits>(rotary, d, x[j][c], partner, angles.cosine[c], angles.sine[c]);
        }
      }
      if constexpr (kHalf) __syncwarp();
    }

#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int head = batch * kBatch + j;
      if (head >= run.heads) continue;
      T* target = run.target + head * run.target_head;
#pragma unroll
      for (int c = 0; c < kChunks; ++c) {
        const int d = (c * kLanes + lane) * kVector;
        if (d >= run.dim) continue;
        store_chunk<T, kVector>(target + d, run.vector, run.dim - d, x[j][c]);
      }
    }
  }
}

// The run of K (or V) group `group` (V groups follow the K groups): heads
// [h, h + k_run) of new token t of sequence b.
template <class Traits>
TILEFMHA_DEVICE Run<typename Traits::Element> key_value_run(const AppendKvParams& p,
                                                            long long group) {
  using T = typename Traits::Element;
  const bool is_k = group < p.k_groups;
  const long long g = is_k ? group : group - p.k_groups;
  const long long runs = (p.nhead_k + p.k_run - 1) / p.k_run;
  const long long h = g % runs * p.k_run;
  const long long bt = g / runs;
  const long long t = bt % p.seqlen_knew;
  const long long b = bt / p.seqlen_knew;
  const TokenStrides& from = is_k ? p.k_new_strides : p.v_new_strides;
  const TokenStrides& to = is_k ? p.k_strides : p.v_strides;
  const void* source = is_k ? p.k_new : p.v_new;
  void* target = is_k ? p.k : p.v;
  Run<T> run;
  run.heads = int(p.k_run < p.nhead_k - h ? p.k_run : p.nhead_k - h);
  run.dim = int(is_k ? p.hdim_q : p.hdim_v);
  run.source = static_cast<const T*>(source) + b * from.batch + t * from.seq + h * from.head;
  run.source_head = from.head;
  run.target_head = to.head;
  // Paged rows are as aligned as the pool's page, slot and head strides.
  run.vector = vectorizable<Traits::kVector>(source, from, run.dim) &&
               vectorizable<Traits::kVector>(target, to, run.dim);
  run.kind = is_k ? RunKind::key : RunKind::value;
  run.sequence = b;
  run.row = t;
  run.first_head = h;
  return run;
}

// The run of Q group `group`: heads [h, h + q_run) of query row i of sequence b, rotated in
// place.
template <class Traits>
TILEFMHA_DEVICE Run<typename Traits::Element> query_run(const AppendKvParams& p, long long group) {
  using T = typename Traits::Element;
  const long long runs = (p.nhead_q + p.q_run - 1) / p.q_run;
  const long long h = group % runs * p.q_run;
  const long long bi = group / runs;
  const long long i = bi % p.seqlen_q;
  const long long b = bi / p.seqlen_q;
  T* q = static_cast<T*>(p.q) + b * p.q_strides.batch + i * p.q_strides.seq + h * p.q_strides.head;
  Run<T> run;
  run.heads = int(p.q_run < p.nhead_q - h ? p.q_run : p.nhead_q - h);
  run.dim = int(p.hdim_q);
  run.source = q;
  run.target = q;
  run.source_head = p.q_strides.head;
  run.target_head = p.q_strides.head;
  run.vector = vectorizable<Traits::kVector>(p.q, p.q_strides, run.dim);
  run.kind = RunKind::query;
  run.sequence = b;
  run.row = i;
  run.first_head = h;
  return run;
}

}  // namespace appendkv

template <class Traits>
TILEFMHA_DEVICE void append_kv(const AppendKvParams& p) {
  using T = typename Traits::Element;
  const int lane = int(threadIdx.x) % Traits::kLanes;
  const long long group =
      (long long)blockIdx.x * Traits::kGroupsPerCta + threadIdx.x / Traits::kLanes;

  if (blockIdx.x == 0 && p.seqlen_k_after != nullptr) {
    for (long long b = threadIdx.x; b < p.batch; b += Traits::kThreads)
      p.seqlen_k_after[b] = p.seqlen_k[b] + p.seqlen_knew;
  }

  if constexpr (Traits::kQuantize) {
    appendkv::quantize_segment<Traits>(p, group, lane);
    return;
  }
  // Groups past the last run still reach the warp barriers in move_run, with nothing to move.
  const long long kv_groups = 2 * p.k_groups;
  appendkv::Run<T> run;
  if (group < kv_groups) {
    run = appendkv::key_value_run<Traits>(p, group);
  } else if (group < kv_groups + p.q_groups) {
    run = appendkv::query_run<Traits>(p, group - kv_groups);
  }
  appendkv::move_run<Traits>(p, run, lane);
}

}  // namespace tilefmha::fmha
