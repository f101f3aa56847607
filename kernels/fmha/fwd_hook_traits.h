// What the sm80_mma and simt_f32 forward kernels take alike from a KernelConfig: the feature hooks
// (mask, logits transform, dropout), group mode, padding predicates and the outputs beside O.
// Each pipeline's traits derive from it and add their tile.
#pragma once

#include "fmha/fwd_shape.h"

namespace tilefmha::fmha {

template <int HdimQ, int HdimV, bool GroupMode, bool PadSeqlenQ, bool PadSeqlenK, bool PadHdimQ,
          bool PadHdimV, class Mask_, class Logits_, class Dropout_, bool StoreLse, bool SinkLogit>
struct FwdHookTraits {
  using Mask = Mask_;
  using Logits = Logits_;
  using Dropout = Dropout_;

  static constexpr int kDq = padded_head_dim(HdimQ);
  static constexpr int kDv = padded_head_dim(HdimV);

  static constexpr bool kGroupMode = GroupMode;
  static constexpr bool kPadSeqlenQ = PadSeqlenQ;
  static constexpr bool kPadSeqlenK = PadSeqlenK;
  // A padded tile dim always needs the predicate, whatever the flag says.
  static constexpr bool kPadHdimQ = PadHdimQ || kDq != HdimQ;
  static constexpr bool kPadHdimV = PadHdimV || kDv != HdimV;
  static constexpr bool kStoreLse = StoreLse;
  static constexpr bool kSinkLogit = SinkLogit;
};

}  // namespace tilefmha::fmha
