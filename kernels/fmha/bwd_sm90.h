// The Hopper warp-specialized backward kernel (bwd_dq_dk_dv, sm_90a). One CTA per (block of keys,
// KV head, sequence), key blocks numbered fastest; dK and dV of its keys stay in registers for
// the whole CTA, summed over every query head of the GQA group and every query block the mask
// lets see the keys, and are written once, without atomics. Up to hdim 128 a block has 128 keys,
// 64 per consumer; at hdim 256 it has 64, and the consumers split dK/dV's and dQ's columns
// instead (fmha/bwd_sm90_shape.h).
//   * warpgroup 0 is the producer: one thread loads K and V once, then Q and dO per query block
//     into an mbarrier-guarded ring (TMA); its warp 1 stages the block's LSE (in log2 units) and
//     D = rowsum(dO * O) into the same ring slot;
//   * warpgroups 1 and 2 are consumers, 64 keys each (hdim 256: the same 64). Per query block,
//     on wgmma:
//       S^T = K Q^T and dP^T = V dO^T (both operands in shared memory),
//       P^T = exp2(S^T - LSE), dS^T = P^T (dP^T - D) ds/d(dot) in registers,
//       dV += P^T dO and dK += dS^T Q (P^T, dS^T as register A operands; dO, Q N-major),
//     then both write dS^T to shared memory, and dQ = dS K (dS^T through an M-major descriptor)
//     is split between them by 64x64 tiles and left in shared memory;
//   * the producer's warp 2 adds each block's dQ to the fp32 accumulator with one bulk add
//     reduction; in deterministic mode the key blocks seeing a query block take turns in a
//     fixed order (a counter per query block: highest key block first, the order CTAs take
//     key blocks; unmasked on a cooperative grid of whole heads, the order of staggered walks,
//     Sm90BwdStagger), so every run sums in the same order.
// Visibility is the forward's mask hook (fmha/mask.h), the logit the sm80 kernel's (BwdLogit).
#pragma once

#include "fmha/bwd_params.h"
#include "fmha/bwd_row_stats.h"
#include "fmha/bwd_sm80.h"
#include "fmha/bwd_sm90_epilogue.h"
#include "fmha/bwd_sm90_params.h"
#include "fmha/bwd_sm90_shape.h"
#include "fmha/fwd_sm90_pipeline.h"
#include "fmha/mask.h"
#include "fmha/seq_info.h"
#include "tile/async_proxy.h"
#include "tile/fast_math.h"
#include "tile/gpu_semaphore.h"
#include "tile/mbarrier.h"
#include "tile/named_barrier.h"
#include "tile/numeric_types.h"
#include "tile/setmaxnreg.h"
#include "tile/tma.h"
#include "tile/wgmma.h"

namespace tilefmha::fmha {

template <class Element_, int HdimQ, int HdimV, int BlockM, int Stages, bool GroupMode, class Mask_,
          bool SoftCap_, bool Deterministic, bool Persistent>
struct Sm90BwdTraits {
  using Element = Element_;
  using Mask = Mask_;
  static constexpr int kHdimQ = HdimQ;
  static constexpr int kHdimV = HdimV;
  static constexpr int kBlockM = BlockM;
  static constexpr int kBlockN = sm90_bwd_block_n(HdimQ);
  // hdim 256: both consumers own the block's 64 keys, each half of dK's and dV's columns.
  static constexpr bool kSplitColumns = sm90_bwd_splits_columns(HdimQ);
  static constexpr int kGroupKeyStride = kSplitColumns ? 0 : kSm90BwdKeysPerGroup;
  static constexpr int kGroupHdimQ = kSplitColumns ? HdimQ / kSm90BwdConsumerGroups : HdimQ;
  static constexpr int kGroupHdimV = kSplitColumns ? HdimV / kSm90BwdConsumerGroups : HdimV;
  static constexpr int kStages = Stages;
  static constexpr bool kGroupMode = GroupMode;
  static constexpr bool kSoftCap = SoftCap_;
  static constexpr bool kDeterministic = Deterministic;
  // A persistent grid: each CTA walks several tiles (sm90_bwd_for_each_tile); otherwise one CTA
  // per tile, with no looping code (the loop's state spilled in the producer roles and cost
  // 3-10% on long shapes).
  static constexpr bool kPersistent = Persistent;
  // Under a mask the work of a key block depends on its place (causal: key block n sees the query
  // blocks from its diagonal on), so a persistent CTA takes a head's key blocks in mirrored
  // pairs, n then blocks - 1 - n: every pair holds about the same work, and the second tile's
  // K, V and first Q/dO load while the first stores dK and dV. Deterministic, the higher key
  // block of a pair goes first, the order of the turns (sm90_bwd_for_each_tile says why that
  // cannot deadlock).
  static constexpr bool kMirroredPairs = Persistent && !tile::same_type<Mask_, NoMask>::value;
  // Deterministic and unmasked on a persistent grid: the host launches whole heads per wave,
  // cooperatively (codegen::bwd_sm90_staggered_grid), and a head's key blocks start their walks
  // at staggered query blocks, so their turns at a query block come about one block apart
  // instead of all at once (sm90_bwd_stagger). A grid of fewer CTAs than a head's key blocks
  // cannot hold a head, and keeps the turns in launch order.
  static constexpr bool kStaggerable =
      Persistent && Deterministic && tile::same_type<Mask_, NoMask>::value;
  static constexpr Sm90BwdSmemLayout kSmem = sm90_bwd_smem_layout(HdimQ, HdimV, BlockM, Stages);
  // dQ is written over the consumed Q/dO stage (rows of the first half over Q, of the second
  // over dO), which the dQ writer hands back to the producer.
  static constexpr bool kDqInStage = kSmem.dq_buffers == 0;
  static constexpr int kDqRing = kDqInStage ? Stages : kSmem.dq_buffers;
  // dK and dV complete before the dQ GEMM is issued: split columns, so that dQ's registers are
  // never live beside P^T's and dS^T's (ptxas would spill); dQ over the stage, so that no wgmma
  // still reads the stage's Q and dO when dQ overwrites them.
  static constexpr bool kKeyGradientsBeforeDq = kSplitColumns || kDqInStage;
  static constexpr int kQPanelBytes = BlockM * kSm90RowBytes;   // a 64-column panel of Q, dO
  static constexpr int kKPanelBytes = kBlockN * kSm90RowBytes;  // of K, V and dS^T
  // dQ = dS K in 64 x 64 tiles (query rows x hdim_q columns), dealt to the two consumers.
  static constexpr int kDqRowTiles = BlockM / 64;
  static constexpr int kDqTiles = kDqRowTiles * (HdimQ / 64);
  static constexpr int kDqTilesPerGroup = kDqTiles / kSm90BwdConsumerGroups;

  static_assert(tile::same_type<Element, tile::half_t>::value ||
                    tile::same_type<Element, tile::bfloat16_t>::value,
                "sm90_ws backward computes on fp16 or bf16");
  static_assert(HdimQ % 64 == 0 && HdimV % 64 == 0, "whole 128-byte panels");
  static_assert(BlockM % 64 == 0, "query blocks of whole 64-row dQ tiles");
  static_assert(kDqTiles % kSm90BwdConsumerGroups == 0, "dQ tiles split evenly");
  static_assert(kGroupHdimQ % 64 == 0 && kGroupHdimV % 64 == 0, "whole panels per consumer");
  static_assert(kDqRing <= 2, "two dq_full barriers");
  static_assert(!kDqInStage || kSmem.dq_bytes == kSmem.q_stage_bytes + kSmem.do_stage_bytes,
                "a stage holds the dQ tile");
};

// Shared-window addresses of the mbarriers: K/V landed, then per ring stage the query block
// landed (TMA bytes plus the 32 lanes that stage LSE and D) and released (every consumer warp),
// then the dQ tile's hand-off between the consumers and the dQ writer, then K/V released.
template <int Stages>
struct Sm90BwdBarriers {
  tile::u32 base;
  static constexpr int kRowLanes = 32;

  TILEFMHA_DEVICE tile::u32 kv_full() const { return base; }
  TILEFMHA_DEVICE tile::u32 q_full(int stage) const { return base + 8u * (1 + stage); }
  TILEFMHA_DEVICE tile::u32 q_empty(int stage) const { return base + 8u * (1 + Stages + stage); }
  // The consumers are done with the tile's K and V (every consumer warp arrives), so the next
  // tile's may load.
  TILEFMHA_DEVICE tile::u32 kv_empty() const { return base + 8u * (5 + 2 * Stages); }

  // The block's dQ is in shared memory (every consumer thread arrives), and read out again (the
  // dQ writer arrives).
  TILEFMHA_DEVICE tile::u32 dq_full(int buffer) const {
    return base + 8u * (1 + 2 * Stages + buffer);
  }
  TILEFMHA_DEVICE tile::u32 dq_empty(int buffer) const {
    return base + 8u * (3 + 2 * Stages + buffer);
  }

  // `stage_releasers`: the consumer warps, or the dQ writer alone where dQ is written over the
  // stage.
  TILEFMHA_DEVICE void init(int consumer_warps, int stage_releasers) const {
    tile::mbarrier_init(kv_full(), 1);
    tile::mbarrier_init(kv_empty(), consumer_warps);
    for (int stage = 0; stage < Stages; ++stage) {
      tile::mbarrier_init(q_full(stage), 1 + kRowLanes);
      tile::mbarrier_init(q_empty(stage), stage_releasers);
    }
    for (int buffer = 0; buffer < 2; ++buffer) {
      tile::mbarrier_init(dq_full(buffer), consumer_warps * 32);
      tile::mbarrier_init(dq_empty(buffer), 1);
    }
    tile::mbarrier_init_fence();
  }
};

constexpr tile::u32 kSm90BwdDsBarrier = 1;  // named barrier: both consumers wrote dS^T

// Shared-window addresses of the two halves of a block's dQ tile (rows [0, block_m / 2) and
// the rest): a dQ buffer of its own, or the consumed stage's Q and dO tiles.
struct Sm90BwdDqTile {
  tile::u32 halves[2];
};

template <class Traits>
TILEFMHA_DEVICE Sm90BwdDqTile sm90_bwd_dq_tile(tile::u32 smem, int slot) {
  if constexpr (Traits::kDqInStage) {
    return {{smem + Traits::kSmem.q_offset + tile::u32(slot * Traits::kSmem.q_stage_bytes),
             smem + Traits::kSmem.do_offset + tile::u32(slot * Traits::kSmem.do_stage_bytes)}};
  } else {
    const tile::u32 base =
        smem + Traits::kSmem.dq_offset + tile::u32(slot * Traits::kSmem.dq_bytes);
    return {{base, base + tile::u32(Traits::kBlockM / 2 * Traits::kSmem.dq_row_bytes)}};
  }
}

// The mbarriers: after the LSE and D rows, or with Sm90BwdSmemLayout::barriers_in_gap in the
// alignment gap below the tiles where it holds them (the window is 16-byte aligned, so the gap is
// a multiple of 16).
template <class Traits>
TILEFMHA_DEVICE tile::u32 sm90_bwd_barrier_base(tile::u32 window, tile::u32 smem) {
  constexpr Sm90BwdSmemLayout kLayout = Traits::kSmem;  // (a copy: device code cannot bind the
                                                        // static member by reference)
  return smem + tile::u32(sm90_bwd_barrier_position(kLayout, Traits::kStages, int(smem - window)));
}

// One tile of work: a key block of one KV head of one sequence. `rows_written`: batch mode
// writes dK/dV rows up to seqlen_k (zeros past a shorter per-sequence key count), as the
// reference does; group mode writes the sequence's keys only.
struct Sm90BwdTile {
  int n_block;
  int kv_head;
  int batch;
  SeqInfo seq;
  int key_begin;
  int rows_written;
};

// The staggered walk of an unmasked head with `key_blocks` key blocks over `query_blocks` query
// blocks: key block n starts at query block n * query_blocks / key_blocks and wraps around, so
// at any query block the key blocks arrive in a fixed rotation of decreasing n, consecutive ones
// about query_blocks / key_blocks blocks apart (one at a time where the walks start together).
// The turns follow arrival: a key block waits only for those that reached the query block in
// earlier steps of their walks (or at the same step, with a higher n), so the lowest waiting
// (step, -n) always has its turn and, with every key block of the head resident, nothing waits
// forever.
struct Sm90BwdStagger {
  int key_blocks;
  int query_blocks;

  TILEFMHA_DEVICE int start(int n_block) const {
    return int((long long)n_block * query_blocks / key_blocks);
  }
  // Key blocks that add to query block m before key block n: the rotation starts at the highest
  // key block whose walk starts at or before m.
  TILEFMHA_DEVICE int turns_before(int n_block, int m) const {
    const long long last = ((long long)(m + 1) * key_blocks - 1) / query_blocks;
    const int first_arrival = last < key_blocks - 1 ? int(last) : key_blocks - 1;
    const int before = first_arrival - n_block;
    return before < 0 ? before + key_blocks : before;
  }
};

// Whether the turns are staggered: Sm90BwdTraits::kStaggerable on a grid that holds a head.
template <class Traits>
TILEFMHA_DEVICE bool sm90_bwd_staggered(const FwdParams& p) {
  if constexpr (Traits::kStaggerable)
    return (long long)gridDim.x >= (p.seqlen_k + Traits::kBlockN - 1) / Traits::kBlockN;
  return false;
}

template <class Traits>
TILEFMHA_DEVICE Sm90BwdStagger sm90_bwd_stagger(const FwdParams& p, const SeqInfo& seq) {
  const KeyBlocks visits =
      typename Traits::Mask(p, seq, 0, Traits::kBlockM).key_blocks(Traits::kBlockN);
  return {visits.window_end, ceil_div(seq.len_q, Traits::kBlockM)};
}

// Calls f(tile) for the CTA's tiles: its own (blockIdx.x), or on a persistent grid every
// gridDim.x-th from it, so the roles of a CTA walk the same tiles in the same order and carry
// their ring positions from one tile to the next. Key blocks vary fastest: the CTAs of one
// (sequence, head) run together and stream the same Q and dO blocks, which L2 then serves once
// to all of them. A persistent grid has no common factor with the key-block count
// (codegen::bwd_sm90_persistent_grid), so a CTA's tiles go through every key block in turn;
// under a mask it deals mirrored pairs of a head's key blocks instead (kMirroredPairs).
// Deterministic, key blocks go from the highest down, the order of every query block's turns
// (sm90_bwd_write_dq): a tile waits only on tiles of lower index, and the lowest unfinished tile
// always runs. Staggered (Sm90BwdTraits::kStaggerable), the grid deals whole heads a wave instead,
// and every key block of a wave's heads is resident by the cooperative launch. Deterministic
// mirrored pairs (high key block first, on a cooperative grid of at least a head's pairs): a turn
// waits only on higher key blocks of its head, so order the tiles by (head, -key block); every
// CTA walks its tiles in that order (its pairs are a grid apart, so in later heads), so the
// lowest unfinished tile's CTA has finished all its earlier ones, and that tile always runs.
template <class Traits, class F>
TILEFMHA_DEVICE void sm90_bwd_for_each_tile(const FwdParams& p, F&& f) {
  // 32-bit: the launch refuses 2^31 tiles or more, and the producer roles' registers are scarce.
  const int key_blocks = int((p.seqlen_k + Traits::kBlockN - 1) / Traits::kBlockN);
  // Staggered turns: a grid of whole heads (codegen::bwd_sm90_staggered_grid), walked a wave of
  // heads at a time; the key-block order within a head does not matter there.
  const bool staggered = sm90_bwd_staggered<Traits>(p);
  auto visit = [&](int index) {
    const int position = index % key_blocks;
    const int rest = index / key_blocks;
    // (Mirrored pairs name their key block themselves.)
    const int n_block = Traits::kDeterministic && !staggered && !Traits::kMirroredPairs
                            ? key_blocks - 1 - position
                            : position;
    const int kv_head = rest % int(p.nhead_k);
    const int batch = rest / int(p.nhead_k);
    const SeqInfo seq = SeqInfo::make<Traits::kGroupMode>(p, batch);
    const int key_begin = n_block * Traits::kBlockN;
    const int rows_written = Traits::kGroupMode
                                 ? seq.len_k
                                 : (int(p.seqlen_k) > seq.len_k ? int(p.seqlen_k) : seq.len_k);
    if (key_begin < rows_written)
      f(Sm90BwdTile{n_block, kv_head, batch, seq, key_begin, rows_written});
  };
  if constexpr (Traits::kMirroredPairs) {
    const int half = (key_blocks + 1) / 2;
    const int pairs = half * int(p.nhead_k) * int(p.batch);
    // One call site of the tile body (two would double the kernel's code): each step is the
    // first or the second tile of a pair. Unsigned: two steps a pair stay below 2^32.
    for (unsigned step = 2u * blockIdx.x; step / 2u < unsigned(pairs);
         step += (step & 1u) ? 2u * gridDim.x - 1u : 1u) {
      const int pair = int(step / 2u), position = pair % half;
      // The higher key block second, or first where turns go highest first; an odd count's
      // middle block stands alone.
      if constexpr (Traits::kDeterministic) {
        if ((step & 1u) && key_blocks - 1 - position == position) continue;
        visit(pair / half * key_blocks + ((step & 1u) ? position : key_blocks - 1 - position));
      } else {
        const int n = (step & 1u) ? key_blocks - 1 - position : position;
        if ((step & 1u) && n == position) continue;
        visit(pair / half * key_blocks + n);
      }
    }
  } else if constexpr (Traits::kPersistent) {
    const int tiles = key_blocks * int(p.nhead_k) * int(p.batch);
    const int stride = staggered ? int(gridDim.x) / key_blocks * key_blocks : int(gridDim.x);
    if (staggered && int(blockIdx.x) >= stride) return;  // (the host sends whole heads)
    for (int index = int(blockIdx.x); index < tiles; index += stride) visit(index);
  } else {
    visit(int(blockIdx.x));
  }
}

// Calls f(head, m_begin, mask, step) for every (query head of the KV head's group, query block)
// that sees the tile's key block, in the order all the roles walk them; `step` counts the visits
// over all the CTA's tiles (the ring positions).
template <class Traits, class F>
TILEFMHA_DEVICE void sm90_bwd_for_each_block(const FwdParams& p, const Sm90BwdTile& tile, int& step,
                                             F&& f) {
  const SeqInfo& seq = tile.seq;
  const int n_block = tile.n_block, kv_head = tile.kv_head;
  const int query_blocks = ceil_div(seq.len_q, Traits::kBlockM);
  // Only the query blocks whose rows may see the key block are tested one by one: under a
  // causal mask, walking past the others cost a 8k-key tile a third more instructions.
  const int key_begin = n_block * Traits::kBlockN;
  const RowRange rows = typename Traits::Mask(p, seq, 0, Traits::kBlockM)
                            .rows_seeing(key_begin, key_begin + Traits::kBlockN - 1);
  const int first = rows.first <= 0 ? 0 : rows.first / Traits::kBlockM;
  const int end = rows.last < 0 ? 0 : rows.last / Traits::kBlockM + 1;
  const int k_begin = first < query_blocks ? first : query_blocks;
  const int k_end = end < query_blocks ? end : query_blocks;
  // Staggered (unmasked, so every query block): the walk starts at the key block's own place.
  int rotation = 0;
  if constexpr (Traits::kStaggerable) {
    const Sm90BwdStagger stagger = sm90_bwd_stagger<Traits>(p, seq);
    if (sm90_bwd_staggered<Traits>(p) && n_block < stagger.key_blocks)
      rotation = stagger.start(n_block);
  }
  const int head_end = (kv_head + 1) * int(p.head_group);
  for (int h = kv_head * int(p.head_group); h < head_end; ++h) {
    for (int i = k_begin; i < k_end; ++i) {
      const int k = i + rotation < k_end ? i + rotation : i + rotation - (k_end - k_begin);
      const int m_begin = k * Traits::kBlockM;
      const typename Traits::Mask mask(p, seq, m_begin, Traits::kBlockM);
      const KeyBlocks visits = mask.key_blocks(Traits::kBlockN);
      if (!(n_block < visits.sink_blocks ||
            (n_block >= visits.window_begin && n_block < visits.window_end)))
        continue;
      f(h, m_begin, mask, step);
      ++step;
    }
  }
}

TILEFMHA_DEVICE const tile::TensorMap* sm90_bwd_map(const Sm90TensorMap& map) {
  return reinterpret_cast<const tile::TensorMap*>(&map);
}

// The producer thread, per tile: K and V, and Q and dO of each visited query block into the
// ring. On a persistent grid K and V wait until the consumers are done with the previous tile's,
// and go right after the first block's Q and dO, which may load while the consumers still work
// on the previous tile.
template <class Traits>
TILEFMHA_DEVICE void sm90_bwd_produce(const Sm90BwdParams& params, tile::u32 smem,
                                      const Sm90BwdBarriers<Traits::kStages>& barriers) {
  const FwdParams& p = params.base.fwd;
  const tile::TensorMap* q_map = sm90_bwd_map(params.q_map);
  const tile::TensorMap* do_map = sm90_bwd_map(params.do_map);
  const tile::TensorMap* k_map = sm90_bwd_map(params.k_map);
  const tile::TensorMap* v_map = sm90_bwd_map(params.v_map);
  int step = 0, tiles = 0;
  sm90_bwd_for_each_tile<Traits>(p, [&](const Sm90BwdTile& t) {
    const int batch = int(t.seq.view_batch);
    bool kv_issued = false;
    auto issue_kv = [&] {
      tile::mbarrier_wait(barriers.kv_empty(), tile::u32(tiles & 1) ^ 1u);
      const int key_row = int(t.seq.k_start) + t.key_begin;
      tile::mbarrier_arrive_expect_tx(barriers.kv_full(),
                                      Traits::kBlockN * (Traits::kHdimQ + Traits::kHdimV) * 2);
#pragma unroll
      for (int panel = 0; panel < Traits::kHdimQ / kSm90PanelElements; ++panel)
        tile::tma_load_4d(smem + Traits::kSmem.k_offset + panel * Traits::kKPanelBytes, k_map,
                          barriers.kv_full(), panel * kSm90PanelElements, key_row, t.kv_head,
                          batch);
#pragma unroll
      for (int panel = 0; panel < Traits::kHdimV / kSm90PanelElements; ++panel)
        tile::tma_load_4d(smem + Traits::kSmem.v_offset + panel * Traits::kKPanelBytes, v_map,
                          barriers.kv_full(), panel * kSm90PanelElements, key_row, t.kv_head,
                          batch);
      kv_issued = true;
    };
    // One tile per CTA: nothing to overlap, K and V first.
    if constexpr (!Traits::kPersistent) issue_kv();
    sm90_bwd_for_each_block<Traits>(
        p, t, step, [&](int h, int m_begin, const auto&, int block_step) {
          const int stage = ring_stage<Traits::kStages>(block_step);
          tile::mbarrier_wait(barriers.q_empty(stage),
                              ring_phase<Traits::kStages>(block_step) ^ 1u);
          tile::mbarrier_arrive_expect_tx(
              barriers.q_full(stage), Traits::kSmem.q_stage_bytes + Traits::kSmem.do_stage_bytes);
          const int row = int(t.seq.q_start) + m_begin;
#pragma unroll
          for (int panel = 0; panel < Traits::kHdimQ / kSm90PanelElements; ++panel)
            tile::tma_load_4d(smem + Traits::kSmem.q_offset + stage * Traits::kSmem.q_stage_bytes +
                                  panel * Traits::kQPanelBytes,
                              q_map, barriers.q_full(stage), panel * kSm90PanelElements, row, h,
                              batch);
#pragma unroll
          for (int panel = 0; panel < Traits::kHdimV / kSm90PanelElements; ++panel)
            tile::tma_load_4d(
                smem + Traits::kSmem.do_offset + stage * Traits::kSmem.do_stage_bytes +
                    panel * Traits::kQPanelBytes,
                do_map, barriers.q_full(stage), panel * kSm90PanelElements, row, h, batch);
          if (!kv_issued) issue_kv();
        });
    // The consumers wait for K and V even where no query block sees them.
    if (!kv_issued) issue_kv();
    ++tiles;
  });
}

// The producer's warp 1: LSE (log2 units; +inf where a row saw no key or lies past the
// sequence, which makes its P exactly 0) and D of each visited query block, into the ring slot.
template <class Traits>
TILEFMHA_DEVICE void sm90_bwd_stage_rows(const BwdParams& bp, unsigned char* shared_base,
                                         const Sm90BwdBarriers<Traits::kStages>& barriers,
                                         int lane) {
  const FwdParams& p = bp.fwd;
  float* const lse_rows = reinterpret_cast<float*>(shared_base + Traits::kSmem.lse_offset);
  float* const d_rows = reinterpret_cast<float*>(shared_base + Traits::kSmem.d_offset);
  int steps = 0;
  sm90_bwd_for_each_tile<Traits>(p, [&](const Sm90BwdTile& t) {
    const SeqInfo& seq = t.seq;
    sm90_bwd_for_each_block<Traits>(p, t, steps, [&](int h, int m_begin, const auto&, int step) {
      const int stage = ring_stage<Traits::kStages>(step);
      tile::mbarrier_wait(barriers.q_empty(stage), ring_phase<Traits::kStages>(step) ^ 1u);
      const long long lse_head = seq.view_batch * p.lse_batch_stride + h * p.lse_head_stride;
      const long long d_head = seq.view_batch * bp.d_batch_stride + h * bp.d_head_stride;
      for (int r = lane; r < Traits::kBlockM; r += 32) {
        const BwdRowStats stats = BwdRowStats::of(bp, seq, lse_head, d_head, m_begin + r);
        lse_rows[stage * Traits::kBlockM + r] = stats.lse2;
        d_rows[stage * Traits::kBlockM + r] = stats.d;
      }
      tile::mbarrier_arrive(barriers.q_full(stage));
    });
  });
}

// The dQ writers, one thread per dQ tile of the ring (warps 2 and 3 of the producer), writer w
// taking the blocks of tile w: each block's dQ tile from shared memory into the fp32
// accumulator with one bulk add reduction, so the consumers never wait on global memory. The
// accumulator is head-major, so a block's rows are contiguous; the copy stops at the sequence's
// last row. Deterministic mode adds in a fixed order: the key blocks that see a query block take
// turns by a counter (BwdParams::dq_semaphores), in a fixed key order. There a writer waits for
// its turn and then for its add to complete before it hands the turn on; with a writer per tile,
// the next block's add waits on its own query block's turn, not behind this one's completion.
template <class Traits>
TILEFMHA_DEVICE void sm90_bwd_write_dq(const BwdParams& bp, tile::u32 smem,
                                       const Sm90BwdBarriers<Traits::kStages>& barriers,
                                       int writer) {
  const FwdParams& p = bp.fwd;
  const long long query_blocks = (p.seqlen_q + Traits::kBlockM - 1) / Traits::kBlockM;
  int steps = 0;
  sm90_bwd_for_each_tile<Traits>(p, [&](const Sm90BwdTile& t) {
    const SeqInfo& seq = t.seq;
    const int batch = t.batch, n_block = t.n_block;
    sm90_bwd_for_each_block<Traits>(
        p, t, steps, [&](int h, int m_begin, const auto& mask, int step) {
          constexpr int kBuffers = Traits::kDqRing;
          const int buffer = ring_stage<kBuffers>(step);
          if (buffer != writer) return;
          tile::mbarrier_wait(barriers.dq_full(buffer), ring_phase<kBuffers>(step));
          float* destination = bp.dq_acc + seq.view_batch * bp.dq_acc_strides.batch +
                               (seq.q_start + m_begin) * bp.dq_acc_strides.seq +
                               h * bp.dq_acc_strides.head;
          const int rows =
              seq.len_q - m_begin < Traits::kBlockM ? seq.len_q - m_begin : Traits::kBlockM;
          // The tile's halves are apart in shared memory where it lies over a Q/dO stage.
          constexpr int kHalfRows = Traits::kBlockM / 2;
          const int first_rows = rows < kHalfRows ? rows : kHalfRows;
          const Sm90BwdDqTile tile = sm90_bwd_dq_tile<Traits>(smem, buffer);
          int* turn = nullptr;
          if constexpr (Traits::kDeterministic) {
            // This key block's turn among those that see the query block: highest key block
            // first. Under a causal or window mask, later key blocks start at later query blocks,
            // so that is the order they reach it (increasing order measured 0.59x the default
            // causal). And CTAs take key blocks in that order (sm90_bwd_for_each_tile), so a turn
            // never waits on a CTA that has not started: turns that did (a stagger of unmasked
            // key blocks, or key blocks launched lowest first) hung once a head had more key
            // blocks than the GPU has SMs (docs/backward.md).
            const KeyBlocks visits = mask.key_blocks(Traits::kBlockN);
            const int sinks_after = visits.sink_blocks - n_block - 1;
            const int window_after =
                visits.window_end -
                (n_block + 1 > visits.window_begin ? n_block + 1 : visits.window_begin);
            int before =
                (sinks_after > 0 ? sinks_after : 0) + (window_after > 0 ? window_after : 0);
            if constexpr (Traits::kStaggerable)
              if (sm90_bwd_staggered<Traits>(p))
                before = sm90_bwd_stagger<Traits>(p, seq).turns_before(n_block,
                                                                       m_begin / Traits::kBlockM);
            turn = bp.dq_semaphores + ((long long)batch * p.nhead_q + h) * query_blocks +
                   m_begin / Traits::kBlockM;
            tile::wait_until_equal(turn, before);
            tile::fence_proxy_async();
          }
          tile::bulk_reduce_add_f32(destination, tile.halves[0],
                                    tile::u32(first_rows * Traits::kSmem.dq_row_bytes));
          if (rows > kHalfRows)
            tile::bulk_reduce_add_f32(destination + kHalfRows * bp.dq_acc_strides.seq,
                                      tile.halves[1],
                                      tile::u32((rows - kHalfRows) * Traits::kSmem.dq_row_bytes));
          tile::tma_store_commit_group();
          // The tile is free once the reduction has read it: where it lay over the block's stage,
          // the stage goes back to the producer.
          tile::tma_store_wait_group_read<0>();
          if constexpr (Traits::kDqInStage)
            tile::mbarrier_arrive(barriers.q_empty(buffer));
          else
            tile::mbarrier_arrive(barriers.dq_empty(buffer));
          if constexpr (Traits::kDeterministic) {
            // The next key block may add once this add is complete in global memory. (Handing
            // the turn on only at the next block, to overlap the completion, measured slower.)
            tile::tma_store_wait_group<0>();
            tile::fence_proxy_async();
            tile::add_release_gpu(turn, 1);
          }
        });
  });
}

// One consumer warpgroup: 64 keys of the block.
template <class Traits>
struct Sm90BwdConsumer {
  using T = typename Traits::Element;
  static constexpr int kBlockM = Traits::kBlockM;
  static constexpr int kQuerySteps = kBlockM / 16;        // k16 slices of dV, dK over queries
  static constexpr int kKeySteps = Traits::kBlockN / 16;  // k16 slices of dQ over keys

  int group;   // 0 or 1: keys 64 * group ...
  int thread;  // 0..127
  tile::u32 smem;

  TILEFMHA_DEVICE int warp() const { return thread / 32; }
  TILEFMHA_DEVICE int lane() const { return thread % 32; }
  // Key of the block (0..127) of accumulator row r of S^T, dP^T, dK, dV.
  TILEFMHA_DEVICE int key_row(int r) const {
    return group * Traits::kGroupKeyStride + warp() * 16 + lane() / 4 + 8 * r;
  }
  // Column of accumulator element e of 8-column chunk j.
  TILEFMHA_DEVICE int column(int j, int e) const { return 8 * j + 2 * (lane() % 4) + e; }

  // S^T = K Q^T and dP^T = V dO^T, committed as two groups: P^T can start once S^T is done.
  TILEFMHA_DEVICE void issue_scores(float (&st)[kBlockM / 2], float (&dpt)[kBlockM / 2],
                                    int stage) const {
    const tile::u32 keys = tile::u32(group * Traits::kGroupKeyStride * kSm90RowBytes);
    const tile::u64 k_desc =
        tile::make_smem_descriptor_k_major_sw128(smem + Traits::kSmem.k_offset + keys);
    const tile::u64 v_desc =
        tile::make_smem_descriptor_k_major_sw128(smem + Traits::kSmem.v_offset + keys);
    const tile::u64 q_desc = tile::make_smem_descriptor_k_major_sw128(
        smem + Traits::kSmem.q_offset + stage * Traits::kSmem.q_stage_bytes);
    const tile::u64 do_desc = tile::make_smem_descriptor_k_major_sw128(
        smem + Traits::kSmem.do_offset + stage * Traits::kSmem.do_stage_bytes);
#pragma unroll
    for (int step = 0; step < Traits::kHdimQ / 16; ++step) {
      const int panel = step / 4, within = (step % 4) * 32;
      tile::wgmma_m64k16_ss<kBlockM, T>(
          st, tile::advance_smem_descriptor(k_desc, panel * Traits::kKPanelBytes + within),
          tile::advance_smem_descriptor(q_desc, panel * Traits::kQPanelBytes + within), step > 0);
    }
    tile::wgmma_commit_group();
#pragma unroll
    for (int step = 0; step < Traits::kHdimV / 16; ++step) {
      const int panel = step / 4, within = (step % 4) * 32;
      tile::wgmma_m64k16_ss<kBlockM, T>(
          dpt, tile::advance_smem_descriptor(v_desc, panel * Traits::kKPanelBytes + within),
          tile::advance_smem_descriptor(do_desc, panel * Traits::kQPanelBytes + within), step > 0);
    }
    tile::wgmma_commit_group();
  }

  // Waits for S^T and dP^T (the two groups issue_scores committed, the last ones pending) and
  // turns them into P^T = exp2(S^T - LSE) (masked: 0) and dS^T = P^T (dP^T - D) ds/d(dot).
  // Columns are queries, rows keys. Without a soft cap, P^T is computed while dP^T still runs;
  // with one, ds/d(dot) varies per element and would need another tile of registers to wait.
  // kMasked instantiates the per-element test only for the blocks a mask cuts: as a select
  // behind a runtime flag it ran on every block and cost causal shapes a fifth of their time.
  template <bool kMasked, class Logit, class Mask>
  TILEFMHA_DEVICE void gradients_of_scores(float (&st)[kBlockM / 2], float (&dpt)[kBlockM / 2],
                                           const Logit& logit, const Mask& mask, int m_begin,
                                           int key_begin, const float* lse2, const float* d) const {
    if constexpr (Traits::kSoftCap) {
      tile::wgmma_wait_group<0>();
      tile::wgmma_fence_registers(st);
      tile::wgmma_fence_registers(dpt);
    } else {
      tile::wgmma_wait_group<1>();
      tile::wgmma_fence_registers(st);
    }
    float d_dot = 0.0f;
#pragma unroll
    for (int j = 0; j < kBlockM / 8; ++j) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const float row_lse2 = lse2[column(j, e)];
        const float row_d = Traits::kSoftCap ? d[column(j, e)] : 0.0f;
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const int index = 4 * j + 2 * r + e;
          const float s2 = logit.logit2(st[index], d_dot);
          const bool visible =
              !kMasked || mask.visible(m_begin + column(j, e), key_begin + key_row(r));
          st[index] = visible ? tile::exp2_approx(s2 - row_lse2) : 0.0f;
          if constexpr (Traits::kSoftCap) dpt[index] = st[index] * (dpt[index] - row_d) * d_dot;
        }
      }
    }
    if constexpr (!Traits::kSoftCap) {
      // Without a soft cap, ds/d(dot) is the scale for every element.
      tile::wgmma_wait_group<0>();
      tile::wgmma_fence_registers(dpt);
#pragma unroll
      for (int j = 0; j < kBlockM / 8; ++j) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float row_d = d[column(j, e)];
#pragma unroll
          for (int r = 0; r < 2; ++r) {
            const int index = 4 * j + 2 * r + e;
            dpt[index] = st[index] * (dpt[index] - row_d) * d_dot;
          }
        }
      }
    }
  }

  // dV += P^T dO and dK += dS^T Q, the A operands from registers, dO and Q read N-major.
  // Split columns: this warpgroup's panels of dO and Q only.
  TILEFMHA_DEVICE void issue_key_gradients(float (&dk)[Traits::kGroupHdimQ / 2],
                                           float (&dv)[Traits::kGroupHdimV / 2],
                                           const tile::u32 (&p)[kQuerySteps][4],
                                           const tile::u32 (&ds)[kQuerySteps][4], int stage) const {
    const int do_panels = Traits::kSplitColumns ? group * Traits::kGroupHdimV / 64 : 0;
    const int q_panels = Traits::kSplitColumns ? group * Traits::kGroupHdimQ / 64 : 0;
    const tile::u64 do_desc = tile::make_smem_descriptor_mn_major_sw128(
        smem + Traits::kSmem.do_offset + stage * Traits::kSmem.do_stage_bytes +
            do_panels * Traits::kQPanelBytes,
        Traits::kQPanelBytes);
    const tile::u64 q_desc = tile::make_smem_descriptor_mn_major_sw128(
        smem + Traits::kSmem.q_offset + stage * Traits::kSmem.q_stage_bytes +
            q_panels * Traits::kQPanelBytes,
        Traits::kQPanelBytes);
#pragma unroll
    for (int step = 0; step < kQuerySteps; ++step)
      tile::wgmma_m64k16_rs<Traits::kGroupHdimV, T, 1>(
          dv, p[step], tile::advance_smem_descriptor(do_desc, step * 16 * kSm90RowBytes), true);
#pragma unroll
    for (int step = 0; step < kQuerySteps; ++step)
      tile::wgmma_m64k16_rs<Traits::kGroupHdimQ, T, 1>(
          dk, ds[step], tile::advance_smem_descriptor(q_desc, step * 16 * kSm90RowBytes), true);
    tile::wgmma_commit_group();
  }

  // This warpgroup's rows of dS^T into the 128B-swizzled [key][query] tile: register q of
  // slice `step` holds accumulator chunk 2 step + q / 2, row half q % 2. Split columns: both
  // warpgroups hold the same dS^T, and each stores half of its query columns.
  TILEFMHA_DEVICE void store_ds(const tile::u32 (&ds)[kQuerySteps][4], tile::u32 buffer) const {
    constexpr int kStepsPerGroup = kQuerySteps / kSm90BwdConsumerGroups;
#pragma unroll
    for (int step = 0; step < kQuerySteps; ++step) {
      // (A compile-time step: a register array indexed at run time would go to local memory.)
      if (Traits::kSplitColumns && step / kStepsPerGroup != group) continue;
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const int key = key_row(q % 2);
        const int query = column(2 * step + q / 2, 0);
        const int panel = query / kSm90PanelElements;
        const int byte = (query % kSm90PanelElements) * 2;
        const tile::u32 address = buffer + panel * Traits::kKPanelBytes + key * kSm90RowBytes +
                                  ((((byte / 16) ^ (key % 8)) * 16) | (byte % 16));
        asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(address), "r"(ds[step][q]) : "memory");
      }
    }
  }

  // dQ tiles of this warpgroup: tile t = group + 2 i covers query rows 64 (t % row tiles) and
  // hdim_q columns 64 (t / row tiles).
  TILEFMHA_DEVICE void issue_dq(float (&dq)[Traits::kDqTilesPerGroup][32], tile::u32 buffer) const {
#pragma unroll
    for (int i = 0; i < Traits::kDqTilesPerGroup; ++i) {
      const int t = group + kSm90BwdConsumerGroups * i;
      const int rows = t % Traits::kDqRowTiles, cols = t / Traits::kDqRowTiles;
      const tile::u64 ds_desc = tile::make_smem_descriptor_mn_major_sw128(
          buffer + rows * Traits::kKPanelBytes, Traits::kKPanelBytes);
      const tile::u64 k_desc = tile::make_smem_descriptor_mn_major_sw128(
          smem + Traits::kSmem.k_offset + cols * Traits::kKPanelBytes, Traits::kKPanelBytes);
#pragma unroll
      for (int step = 0; step < kKeySteps; ++step) {
        const tile::u32 advance = step * 16 * kSm90RowBytes;
        tile::wgmma_m64k16_ss<64, T, 1, 1>(dq[i], tile::advance_smem_descriptor(ds_desc, advance),
                                           tile::advance_smem_descriptor(k_desc, advance),
                                           step > 0);
      }
    }
    tile::wgmma_commit_group();
  }

  // This warpgroup's dQ tiles into the shared dQ tile: row r is packed row first_row + r, its
  // 8-float chunks swizzled by that row's index (fmha::BwdParams::dq_acc_swizzled).
  TILEFMHA_DEVICE void store_dq(const float (&dq)[Traits::kDqTilesPerGroup][32],
                                long long first_row, const Sm90BwdDqTile& tile) const {
    constexpr int kHalfRows = Traits::kBlockM / 2;
#pragma unroll
    for (int i = 0; i < Traits::kDqTilesPerGroup; ++i) {
      const int t = group + kSm90BwdConsumerGroups * i;
      const int row_tile = t % Traits::kDqRowTiles, col_tile = t / Traits::kDqRowTiles;
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int row = row_tile * 64 + warp() * 16 + lane() / 4 + 8 * r;
        const int key = int((first_row + row) & 7);
        // A tile of its own is contiguous: its halves need no select.
        const tile::u32 row_address =
            Traits::kDqInStage ? (row < kHalfRows ? tile.halves[0] : tile.halves[1]) +
                                     tile::u32((row % kHalfRows) * Traits::kSmem.dq_row_bytes)
                               : tile.halves[0] + tile::u32(row * Traits::kSmem.dq_row_bytes);
        const tile::u32 base = row_address + tile::u32(col_tile * 64 * 4);
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          const tile::u32 address = base + tile::u32(((j ^ key) * 8 + 2 * (lane() % 4)) * 4);
          asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(address),
                       "f"(dq[i][4 * j + 2 * r]), "f"(dq[i][4 * j + 2 * r + 1])
                       : "memory");
        }
      }
    }
  }
};

template <class Traits>
TILEFMHA_DEVICE void bwd_sm90(const Sm90BwdParams& params) {
#if defined(TILEFMHA_HAS_SM90A)
  using T = typename Traits::Element;
  using Consumer = Sm90BwdConsumer<Traits>;
  constexpr int kBlockM = Traits::kBlockM;
  const BwdParams& bp = params.base;
  const FwdParams& p = bp.fwd;
  extern __shared__ __align__(1024) unsigned char shared[];
  const tile::u32 window = tile::shared_address(shared);
  const tile::u32 smem = (window + (kSm90AtomBytes - 1)) & ~tile::u32(kSm90AtomBytes - 1);
  unsigned char* const shared_base = shared + (smem - window);
  const Sm90BwdBarriers<Traits::kStages> barriers{sm90_bwd_barrier_base<Traits>(window, smem)};

  constexpr int kConsumerWarps = kSm90BwdConsumerGroups * 4;
  if (threadIdx.x == 0) barriers.init(kConsumerWarps, Traits::kDqInStage ? 1 : kConsumerWarps);
  __syncthreads();
  const int warpgroup = threadIdx.x / 128;

  if (warpgroup == 0) {
    tile::warpgroup_registers_decrease<kSm90BwdProducerRegisters>();
    if (threadIdx.x == 0) {
      sm90_bwd_produce<Traits>(params, smem, barriers);
    } else if (threadIdx.x / 32 == 1) {
      sm90_bwd_stage_rows<Traits>(bp, shared_base, barriers, threadIdx.x % 32);
    } else if (const int writer = int(threadIdx.x / 32) - 2;
               threadIdx.x % 32 == 0 && writer < Traits::kDqRing) {
      sm90_bwd_write_dq<Traits>(bp, smem, barriers, writer);
    }
    return;
  }

  tile::warpgroup_registers_increase<kSm90BwdConsumerRegisters>();
  const Consumer consumer{warpgroup - 1, int(threadIdx.x % 128), smem};
  const BwdLogit<Traits::kSoftCap> logit(p);
  const float* const lse_rows =
      reinterpret_cast<const float*>(shared_base + Traits::kSmem.lse_offset);
  const float* const d_rows = reinterpret_cast<const float*>(shared_base + Traits::kSmem.d_offset);
  int steps = 0, tiles = 0;
  sm90_bwd_for_each_tile<Traits>(p, [&](const Sm90BwdTile& t) {
    const SeqInfo& seq = t.seq;
    const int key_begin = t.key_begin;
    float dk[Traits::kGroupHdimQ / 2];
    float dv[Traits::kGroupHdimV / 2];
#pragma unroll
    for (int i = 0; i < Traits::kGroupHdimQ / 2; ++i) dk[i] = 0.0f;
#pragma unroll
    for (int i = 0; i < Traits::kGroupHdimV / 2; ++i) dv[i] = 0.0f;
    // The TMA of K and V completes before the tile ends, even where no query block sees them.
    tile::mbarrier_wait(barriers.kv_full(), tile::u32(tiles & 1));

    sm90_bwd_for_each_block<Traits>(p, t, steps, [&](int, int m_begin, const auto& mask, int step) {
      const int stage = ring_stage<Traits::kStages>(step);
      tile::mbarrier_wait(barriers.q_full(stage), ring_phase<Traits::kStages>(step));
      float st[kBlockM / 2];
      float dpt[kBlockM / 2];
      tile::wgmma_fence();
      consumer.issue_scores(st, dpt, stage);
      const float* const lse2 = lse_rows + stage * kBlockM;
      const float* const d = d_rows + stage * kBlockM;
      if (mask.block_needs_mask(key_begin, Traits::kBlockN))
        consumer.template gradients_of_scores<true>(st, dpt, logit, mask, m_begin, key_begin, lse2,
                                                    d);
      else
        consumer.template gradients_of_scores<false>(st, dpt, logit, mask, m_begin, key_begin, lse2,
                                                     d);
      tile::u32 p_frag[Consumer::kQuerySteps][4];
      tile::u32 ds_frag[Consumer::kQuerySteps][4];
#pragma unroll
      for (int s = 0; s < Consumer::kQuerySteps; ++s) {
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          p_frag[s][q] = tile::pack2<T>(st[8 * s + 2 * q], st[8 * s + 2 * q + 1]);
          ds_frag[s][q] = tile::pack2<T>(dpt[8 * s + 2 * q], dpt[8 * s + 2 * q + 1]);
        }
      }

      tile::wgmma_fence();
      consumer.issue_key_gradients(dk, dv, p_frag, ds_frag, stage);
      const tile::u32 ds_buffer =
          smem + Traits::kSmem.ds_offset + (step % kSm90BwdDsBuffers) * Traits::kSmem.ds_bytes;
      consumer.store_ds(ds_frag, ds_buffer);
      // Where dK and dV complete first, the barrier below also says that neither warpgroup
      // reads the stage's Q and dO any more.
      if constexpr (Traits::kKeyGradientsBeforeDq) tile::wgmma_wait_group<0>();
      // wgmma reads shared memory through the async proxy; both halves of dS^T must be written.
      tile::fence_proxy_async_shared();
      tile::named_barrier_sync(kSm90BwdDsBarrier, kSm90BwdConsumerGroups * 128);
      float dq[Traits::kDqTilesPerGroup][32];
      if constexpr (Traits::kKeyGradientsBeforeDq) tile::wgmma_fence();
      consumer.issue_dq(dq, ds_buffer);
      tile::wgmma_wait_group<0>();
#pragma unroll
      for (int i = 0; i < Traits::kDqTilesPerGroup; ++i) tile::wgmma_fence_registers(dq[i]);
      constexpr int kDqRing = Traits::kDqRing;
      const int dq_slot = ring_stage<kDqRing>(step);
      if constexpr (!Traits::kDqInStage) {
        // dV/dK and dQ are done: the stage's Q, dO, LSE and D are free. Then wait until the
        // dQ writer has read the previous block's rows out (the bulk copies read through the
        // async proxy).
        if (consumer.lane() == 0) tile::mbarrier_arrive(barriers.q_empty(stage));
        tile::mbarrier_wait(barriers.dq_empty(dq_slot), ring_phase<kDqRing>(step) ^ 1u);
      }
      consumer.store_dq(dq, seq.q_start + m_begin, sm90_bwd_dq_tile<Traits>(smem, dq_slot));
      tile::fence_proxy_async_shared();
      tile::mbarrier_arrive(barriers.dq_full(dq_slot));
    });
    // Every wgmma that read K or V has completed (each block waits for its dQ GEMM): the next
    // tile's may load while this one's dK and dV are stored.
    if constexpr (Traits::kPersistent)
      if (consumer.lane() == 0) tile::mbarrier_arrive(barriers.kv_empty());
    tile::wgmma_fence_registers(dk);
    tile::wgmma_fence_registers(dv);

    // Epilogue: this warpgroup's dK and dV rows (split: its columns of them) in the output dtype.
    // Rows past the sequence's keys saw P = dS = 0 and hold zeros.
    const int group_columns_q = Traits::kSplitColumns ? consumer.group * Traits::kGroupHdimQ : 0;
    const int group_columns_v = Traits::kSplitColumns ? consumer.group * Traits::kGroupHdimV : 0;
    T* dk_out = static_cast<T*>(bp.dk) + seq.view_batch * bp.dk_strides.batch +
                (seq.k_start + key_begin) * bp.dk_strides.seq + t.kv_head * bp.dk_strides.head +
                group_columns_q;
    T* dv_out = static_cast<T*>(bp.dv) + seq.view_batch * bp.dv_strides.batch +
                (seq.k_start + key_begin) * bp.dv_strides.seq + t.kv_head * bp.dv_strides.head +
                group_columns_v;
    if constexpr (Traits::kPersistent || Traits::kDeterministic) {
      // Whole 16-byte chunks through the warp's part of the next block's dS^T buffer
      // (fmha/bwd_sm90_epilogue.h says where this pays).
      const Sm90BwdEpilogue<Traits> epilogue{consumer.group, consumer.warp(), consumer.lane()};
      const tile::u32 scratch =
          smem + Traits::kSmem.ds_offset + (steps % kSm90BwdDsBuffers) * Traits::kSmem.ds_bytes;
      const int rows_left = t.rows_written - key_begin;
      epilogue.template store<Traits::kGroupHdimQ>(dk, dk_out, bp.dk_strides.seq, rows_left,
                                                   scratch);
      epilogue.template store<Traits::kGroupHdimV>(dv, dv_out, bp.dv_strides.seq, rows_left,
                                                   scratch);
    } else {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int key = consumer.key_row(r);
        if (key_begin + key >= t.rows_written) continue;
#pragma unroll
        for (int j = 0; j < Traits::kGroupHdimQ / 8; ++j)
          *reinterpret_cast<tile::u32*>(dk_out + key * bp.dk_strides.seq + consumer.column(j, 0)) =
              tile::pack2<T>(dk[4 * j + 2 * r], dk[4 * j + 2 * r + 1]);
#pragma unroll
        for (int j = 0; j < Traits::kGroupHdimV / 8; ++j)
          *reinterpret_cast<tile::u32*>(dv_out + key * bp.dv_strides.seq + consumer.column(j, 0)) =
              tile::pack2<T>(dv[4 * j + 2 * r], dv[4 * j + 2 * r + 1]);
      }
    }
    ++tiles;
  });
#endif
}

}  // namespace tilefmha::fmha
