// The compile-time identity of one sm90_ws forward kernel, generated from a KernelConfig:
// element type, head dims, tile, stages, the mask and logits hooks, and the consumer schedule.
#pragma once

#include "fmha/dropout.h"
#include "fmha/fwd_params.h"
#include "fmha/fwd_sm90_shape.h"
#include "fmha/logits.h"
#include "fmha/mask.h"
#include "fmha/seq_info.h"
#include "fmha/splitkv.h"
#include "tile/numeric_types.h"

namespace tilefmha::fmha {

template <class Element_, int HdimQ, int HdimV, int BlockM, int BlockN, int Stages, bool GroupMode,
          class Mask_, class Logits_, class Dropout_, bool StoreLse, bool SinkLogit,
          Sm90Schedule Schedule, bool Persistent, bool PackGqa = false, bool SplitKv = false,
          bool Paged = false, class Output_ = Element_, Sm90Descale Descale = Sm90Descale::none,
          bool Accumulate = false>
struct Sm90FwdTraits {
  using Element = Element_;  // Q, K and V
  using Output = Output_;    // O: the input type, or bf16/fp16 for fp8 inputs
  using Mask = Mask_;
  using Logits = Logits_;
  using Dropout = Dropout_;

  static constexpr int kHdimQ = HdimQ;
  static constexpr int kHdimV = HdimV;
  static constexpr int kBlockM = BlockM;
  static constexpr int kBlockN = BlockN;
  static constexpr int kStages = Stages;
  static constexpr int kConsumerGroups = sm90_consumer_groups(BlockM);
  static constexpr int kThreads = sm90_threads(BlockM);
  static constexpr int kConsumerWarps = kConsumerGroups * 4;
  static constexpr bool kGroupMode = GroupMode;
  static constexpr bool kStoreLse = StoreLse;
  static constexpr bool kSinkLogit = SinkLogit;
  static constexpr Sm90Schedule kSchedule = Schedule;
  // Persistent: a CTA loops over tiles (grid of at most kCtasPerSm CTAs per SM); else it runs
  // exactly one tile (grid of one CTA per tile) and keeps no state across tiles.
  static constexpr bool kPersistent = Persistent;
  // The g query heads of a KV head share a tile: row r is query position r / g of head r % g.
  static constexpr bool kPackGqa = PackGqa;
  // Split-KV (family fwd_splitkv): tile (query block, head, sequence, split) visits only the
  // keys of its split and writes a partial O (normalized by the split's own sum) and its LSE as
  // fp32 into FwdParams::o_acc / lse_acc instead of O and LSE.
  static constexpr bool kSplitKv = SplitKv;
  // Paged K/V (fwd_pagedkv, batch_prefill, and split partials over pages): a key block is one
  // TMA box per panel at (slot, kv head, page) of the pool's [page, slot, head, dim] map where
  // pages hold whole blocks, else one box per page it spans (pages of 8 keys or more, so every
  // box starts on a whole swizzle atom; the host checks that pages and blocks nest).
  static constexpr bool kPaged = Paged;
  // The epilogue merges into the state O and LSE hold (sm90_merge_previous_state).
  static constexpr bool kAccumulate = Accumulate;
  static constexpr bool kOverlap = Schedule != Sm90Schedule::serial;
  static constexpr bool kPingpong = Schedule == Sm90Schedule::pingpong && kConsumerGroups > 1;

  // Plain scaling folds into the exponent (one FFMA per element: exp2(s * c - max * c));
  // any other logits transform is applied element by element before the softmax.
  static constexpr bool kFusedScale =
      tile::same_type<Logits_, fmha::Logits<PlainScale, NoBias>>::value;

  // FP8 inputs: k32 wgmma slices, 128-element panels, and V transposed in shared memory by
  // three warps of the producer warpgroup (fwd_sm90_transpose.h), since fp8 wgmma reads B
  // K-major only.
  static constexpr bool kFp8 = tile::is_fp8<Element_>::value;
  static constexpr Sm90Descale kDescale = Descale;
  static constexpr int kElementBytes = tile::element_bytes<Element_>();
  static constexpr int kPanelElements = sm90_panel_elements(kElementBytes);
  static constexpr int kTransposerThreads = kFp8 ? 3 * 32 : 0;

  static constexpr Sm90SmemLayout kSmem =
      sm90_smem_layout(HdimQ, HdimV, BlockM, BlockN, Stages, kElementBytes);
  static constexpr int kCtasPerSm = sm90_ctas_per_sm(BlockM, kSmem.bytes);
  // Register reallocation pays when one warpgroup's registers can feed another's: several
  // consumers, or one consumer whose CTA shares the SM (launched at 128 registers a thread).
  static constexpr bool kReallocateRegisters = kConsumerGroups > 1 || kCtasPerSm > 1;
  static constexpr int kProducerRegisters = sm90_producer_registers(kConsumerGroups, kFp8, HdimV);
  static constexpr int kConsumerRegisters = sm90_consumer_registers(kConsumerGroups, kFp8, HdimV);
  static constexpr int kQBytes = BlockM * HdimQ * kElementBytes;
  static constexpr int kQPanelBytes = BlockM * kSm90RowBytes;
  static constexpr int kKPanelBytes = BlockN * kSm90RowBytes;
  static constexpr int kVPanelBytes = BlockN * kSm90RowBytes;

  static_assert(tile::same_type<Element, tile::half_t>::value ||
                    tile::same_type<Element, tile::bfloat16_t>::value || kFp8,
                "sm90_ws computes on fp16, bf16 or fp8");
  static_assert(kFp8 ? (tile::same_type<Output, tile::bfloat16_t>::value ||
                        tile::same_type<Output, tile::half_t>::value)
                     : tile::same_type<Output, Element>::value,
                "O is the input type, or bf16/fp16 for fp8 inputs");
  static_assert(kFp8 == (Descale != Sm90Descale::none), "fp8 inputs, and only they, descale");
  static_assert(Descale != Sm90Descale::per_page || Paged, "per-page descales need a paged cache");
  static_assert(!kFp8 || BlockN == kSm90Fp8BlockN,
                "fp8 key blocks are 128 keys (one transposed V panel)");
  static_assert(HdimQ % kPanelElements == 0 && HdimQ <= 256,
                "hdim_q must fill whole 128-byte swizzled panels, up to 256");
  static_assert(HdimV % kPanelElements == 0 && HdimV <= 256,
                "hdim_v must fill whole 128-byte swizzled panels, up to 256");
  static_assert(BlockM % kSm90WarpgroupRows == 0 && kConsumerGroups >= 1 &&
                    kConsumerGroups <= kSm90MaxConsumerGroups,
                "block_m must be 64, 128 or 192");
  static_assert(BlockN % 16 == 0 && BlockN >= 16 && BlockN <= 256,
                "block_n must be a multiple of 16 in 16..256 (wgmma N and TMA box)");
  static_assert(Stages >= 1 && Stages <= 4, "stages must be 1..4");
  static_assert(!PackGqa || (!Dropout_::kEnabled && !SinkLogit && !GroupMode &&
                             tile::same_type<Logits_, fmha::Logits<PlainScale, NoBias>>::value),
                "packed GQA tiles hold several heads: no per-head dropout, sink, bias or "
                "ALiBi, and batch mode only");
  static_assert(!SplitKv || (!Dropout_::kEnabled && !SinkLogit && !Persistent &&
                             kSplitKvGranule % BlockN == 0),
                "split-KV partials carry no dropout or sink logit, run one CTA per tile, and "
                "need key blocks that divide the split granule (no block straddles two splits)");
};

// The key blocks a split-KV tile visits: its mask's blocks (KeyBlocks) intersected with the
// split's blocks [first, end). Unlike KeyBlocks, the sink blocks may start past block 0, where
// a split begins inside a long run of sink tokens.
struct Sm90SplitKeyBlocks {
  int sink_first;
  int sink_blocks;
  int window_begin;
  int window_end;

  TILEFMHA_DEVICE int count() const { return sink_blocks + (window_end - window_begin); }
  TILEFMHA_DEVICE int block(int step) const {
    return step < sink_blocks ? sink_first + step : window_begin + (step - sink_blocks);
  }
};

// The query rows of a tile: block_m rows of one head, or with packed GQA block_m / g query
// positions of the g heads of one KV head (tile row r: position r / g, head r % g). Where g does
// not divide block_m (64-row tiles only), the rows past g x (block_m / g) hold no query: Q's box
// leaves them unloaded, and they get a position past every sequence's end, so that no epilogue,
// mask or merge takes them for a query.
template <class Traits>
struct Sm90TileRows {
  static constexpr int kNoPosition = 1 << 30;
  int group;    // g when packed, else 1
  int count;    // query positions the tile covers
  int q_begin;  // its first query position (sequence-relative)

  TILEFMHA_DEVICE Sm90TileRows(const FwdParams& p, int m_block)
      : group(Traits::kPackGqa ? int(p.head_group) : 1),
        count(Traits::kBlockM / group),
        q_begin(m_block * count) {}

  // Whether the tile starts past its sequence's end (both roles skip it), and the key blocks it
  // visits: the producer loads exactly the blocks the consumers compute.
  TILEFMHA_DEVICE bool past_end(const SeqInfo& seq) const { return q_begin >= seq.len_q; }
  TILEFMHA_DEVICE KeyBlocks key_blocks(const FwdParams& p, const SeqInfo& seq) const {
    return typename Traits::Mask(p, seq, q_begin, count).key_blocks(Traits::kBlockN);
  }
  // The blocks of split `split` in split-KV mode (the mask's blocks otherwise): split chunks are
  // multiples of kSplitKvGranule keys, so whole blocks fall into one split, and the mask (whose
  // bottom-right diagonal follows the sequence's whole key count) needs no change.
  TILEFMHA_DEVICE auto visited_blocks(const FwdParams& p, const SeqInfo& seq, int split) const {
    if constexpr (Traits::kSplitKv) {
      constexpr int kBlockN = Traits::kBlockN;
      const KeyBlocks mask = key_blocks(p, seq);
      const SplitKeyRange range = split_key_range(seq.len_k, p.num_splits, split);
      const int first = range.begin / kBlockN;
      // An empty split (past the keys) visits nothing, even where len_k ends mid-block.
      const int end = range.end > range.begin ? ceil_div(range.end, kBlockN) : first;
      const int sink_end = mask.sink_blocks < end ? mask.sink_blocks : end;
      const int window_begin = mask.window_begin > first ? mask.window_begin : first;
      const int window_end = mask.window_end < end ? mask.window_end : end;
      return Sm90SplitKeyBlocks{first, sink_end > first ? sink_end - first : 0, window_begin,
                                window_end > window_begin ? window_end : window_begin};
    } else {
      return key_blocks(p, seq);
    }
  }

  TILEFMHA_DEVICE int position(int tile_row) const {
    if constexpr (Traits::kPackGqa)
      return tile_row < group * count ? q_begin + tile_row / group : kNoPosition;
    else
      return q_begin + tile_row;
  }
  // The tile rows that hold a query: rows 0 to query_rows - 1.
  TILEFMHA_DEVICE int query_rows(const SeqInfo& seq) const {
    const int positions = seq.len_q - q_begin < count ? seq.len_q - q_begin : count;
    return group * positions;
  }
  // The rows Q's box loads: block_m, or g x positions when packed.
  TILEFMHA_DEVICE int loaded_rows() const {
    return Traits::kPackGqa ? group * count : Traits::kBlockM;
  }
  // The query head of tile row r, given the tile's head (its KV head when packed).
  TILEFMHA_DEVICE int head(int tile_head, int tile_row) const {
    return Traits::kPackGqa ? tile_head * group + tile_row % group : tile_head;
  }
};

}  // namespace tilefmha::fmha
