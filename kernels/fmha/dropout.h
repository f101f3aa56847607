// Dropout hooks, applied to the softmax numerators after the row sums took them (the sum uses
// undropped values); the 1 / (1 - p) scale is folded into the epilogue's normalization.
// PhiloxDropout draws the word of element (b, h, i, j) exactly as common/philox.h's
// dropout_word does, so the CPU reference drops the same elements.
#pragma once

#include "common/philox.h"
#include "fmha/fwd_params.h"
#include "tile/device.h"

namespace tilefmha::fmha {

struct NoDropout {
  static constexpr bool kEnabled = false;
  TILEFMHA_DEVICE NoDropout(const FwdParams&, int, int) {}
  TILEFMHA_DEVICE void apply_pair(float&, float&, int, int) const {}
  TILEFMHA_DEVICE float keep_scale() const { return 1.0f; }
};

struct PhiloxDropout {
  static constexpr bool kEnabled = true;
  unsigned int key0, key1, offset_lo, head_index;
  unsigned int threshold;
  float scale;

  TILEFMHA_DEVICE PhiloxDropout(const FwdParams& p, int b, int h)
      : key0(static_cast<unsigned int>(p.dropout_seed)),
        key1(static_cast<unsigned int>(p.dropout_seed >> 32) ^
             static_cast<unsigned int>(p.dropout_offset >> 32)),
        offset_lo(static_cast<unsigned int>(p.dropout_offset)),
        head_index(static_cast<unsigned int>(b * p.nhead_q + h)),
        threshold(p.dropout_threshold),
        scale(p.dropout_keep_scale) {}

  // Elements (i, j) and (i, j + 1), j even: both words come from one Philox call, whose four
  // outputs serve keys 4 * (j / 4) .. + 3.
  TILEFMHA_DEVICE void apply_pair(float& first, float& second, int i, int j) const {
    const philox::Word4 counter = {static_cast<unsigned int>(j >> 2), static_cast<unsigned int>(i),
                                   head_index, offset_lo};
    const philox::Word4 r = philox::philox4x32_10(counter, key0, key1);
    const bool upper = (j & 2) != 0;
    if (!philox::dropout_keep(upper ? r.z : r.x, threshold)) first = 0.0f;
    if (!philox::dropout_keep(upper ? r.w : r.y, threshold)) second = 0.0f;
  }
  TILEFMHA_DEVICE float keep_scale() const { return scale; }
};

}  // namespace tilefmha::fmha
