// The compile-time identity of one sm90_ws forward kernel, generated from a KernelConfig:
// element type, head dims, tile, stages, the mask and logits hooks, and the consumer schedule.
#pragma once

#include "fmha/dropout.h"
#include "fmha/fwd_sm90_shape.h"
#include "fmha/logits.h"
#include "tile/numeric_types.h"

namespace tilefmha::fmha {

template <class Element_, int HdimQ, int HdimV, int BlockM, int BlockN, int Stages, bool GroupMode,
          class Mask_, class Logits_, class Dropout_, bool StoreLse, bool SinkLogit,
          Sm90Schedule Schedule, bool Persistent>
struct Sm90FwdTraits {
  using Element = Element_;
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
  // Persistent: a CTA loops over tiles (grid of at most one CTA per SM); else it runs exactly
  // one tile (grid of one CTA per tile) and keeps no state across tiles.
  static constexpr bool kPersistent = Persistent;
  static constexpr bool kOverlap = Schedule != Sm90Schedule::serial;
  static constexpr bool kPingpong = Schedule == Sm90Schedule::pingpong && kConsumerGroups > 1;
  // Register reallocation pays only when one warpgroup's registers can feed another's.
  static constexpr bool kReallocateRegisters = kConsumerGroups > 1;
  static constexpr int kProducerRegisters = sm90_producer_registers(kConsumerGroups);
  static constexpr int kConsumerRegisters = sm90_consumer_registers(kConsumerGroups);

  // Plain scaling folds into the exponent (one FFMA per element: exp2(s * c - max * c));
  // any other logits transform is applied element by element before the softmax.
  static constexpr bool kFusedScale =
      tile::same_type<Logits_, fmha::Logits<PlainScale, NoBias>>::value;

  static constexpr Sm90SmemLayout kSmem = sm90_smem_layout(HdimQ, HdimV, BlockM, BlockN, Stages);
  static constexpr int kQBytes = BlockM * HdimQ * 2;
  static constexpr int kQPanelBytes = BlockM * kSm90RowBytes;
  static constexpr int kKPanelBytes = BlockN * kSm90RowBytes;
  static constexpr int kVPanelBytes = BlockN * kSm90RowBytes;

  static_assert(tile::same_type<Element, tile::half_t>::value ||
                    tile::same_type<Element, tile::bfloat16_t>::value,
                "sm90_ws computes on fp16 or bf16");
  static_assert(HdimQ % kSm90PanelElements == 0 && HdimQ <= 256,
                "hdim_q must be a multiple of 64 up to 256 (whole swizzled panels)");
  static_assert(HdimV % kSm90PanelElements == 0 && HdimV <= 256,
                "hdim_v must be a multiple of 64 up to 256 (whole swizzled panels)");
  static_assert(BlockM % kSm90WarpgroupRows == 0 && kConsumerGroups >= 1 &&
                    kConsumerGroups <= kSm90MaxConsumerGroups,
                "block_m must be 64, 128 or 192");
  static_assert(BlockN % 16 == 0 && BlockN >= 16 && BlockN <= 256,
                "block_n must be a multiple of 16 in 16..256 (wgmma N and TMA box)");
  static_assert(Stages >= 1 && Stages <= 4, "stages must be 1..4");
};

}  // namespace tilefmha::fmha
