// FP8 dequantization in the sm90 consumer. A stored value x is code * descale; the scores of a
// key block are S = (Q codes . K codes) * q_descale(row) * k_descale(block), and its V rows
// carry v_descale(block). Per tensor, the host folded Q's and K's descales into the softmax
// scale and only V's remains, multiplied into O at the end. Per block (128 tokens of one head,
// the size of an fp8 key block), each row's Q descale is read once per tile and each block's
// K descale scales its scores before the logits hooks and the softmax.
//
// V's descale changes from block to block, but O accumulates P V over blocks in registers. O is
// therefore kept in units of the current block's V descale: before a block's P V is added, O
// is rescaled by previous / current (folded into the softmax's correction factor), and the
// epilogue multiplies by the last unit. A block whose descale is 0 adds nothing (its P is
// zeroed) and keeps the unit, so no division by zero arises.
#pragma once

#include "fmha/fwd_params.h"
#include "fmha/fwd_sm90_shape.h"
#include "fmha/seq_info.h"

namespace tilefmha::fmha {

template <class Traits>
struct Sm90Descaler {
  static constexpr bool kPerBlock = Traits::kDescale == Sm90Descale::per_block;

  const float* k_scales;  // this (sequence, KV head)'s per-block K descales
  const float* v_scales;
  long long k_block_stride, v_block_stride;
  float q_row[2];  // the Q descale of the thread's two accumulator rows

  // `rows`/`heads`: sequence-relative query position and query head of the thread's rows.
  TILEFMHA_DEVICE Sm90Descaler(const FwdParams& p, const SeqInfo& seq, int sequence, int kv_head,
                               const int (&rows)[2], const int (&heads)[2]) {
    if constexpr (kPerBlock) {
      k_scales = p.fp8_k_block + sequence * p.fp8_k_block_strides.batch +
                 kv_head * p.fp8_k_block_strides.head;
      v_scales = p.fp8_v_block + sequence * p.fp8_v_block_strides.batch +
                 kv_head * p.fp8_v_block_strides.head;
      k_block_stride = p.fp8_k_block_strides.block;
      v_block_stride = p.fp8_v_block_strides.block;
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        // Rows past the sequence end compute garbage that is never stored; they read the last
        // row's descale so the table is never read past its end.
        const int row = rows[r] < seq.len_q ? rows[r] : (seq.len_q > 0 ? seq.len_q - 1 : 0);
        q_row[r] = p.fp8_q_block[sequence * p.fp8_q_block_strides.batch +
                                 heads[r] * p.fp8_q_block_strides.head +
                                 (row / kSm90Fp8BlockN) * p.fp8_q_block_strides.block];
      }
    }
  }

  // The unit O starts in: V's per-tensor descale (applied once, at the end), else 1.
  TILEFMHA_DEVICE static float initial_unit(const FwdParams& p) {
    return Traits::kDescale == Sm90Descale::per_tensor ? p.fp8_v_descale : 1.0f;
  }

  // Scores of key block `block` (the block index is its 128-token descale block) from code
  // products to dequantized products.
  template <int Columns>
  TILEFMHA_DEVICE void scores(float (&s)[Columns / 2], int block) const {
    if constexpr (kPerBlock) {
      const float k = k_scales[block * k_block_stride];
      const float factor[2] = {q_row[0] * k, q_row[1] * k};
#pragma unroll
      for (int j = 0; j < Columns / 8; ++j) {
#pragma unroll
        for (int i = 0; i < 4; ++i) s[4 * j + i] *= factor[i / 2];
      }
    }
  }

  // Moves O's unit to block `block`'s V descale: multiplies the O correction by old / new unit.
  // Returns false where the block's descale is 0 (its P must be zeroed; the unit stays).
  TILEFMHA_DEVICE bool enter_v_block(int block, float& unit, float (&correction)[2]) const {
    if constexpr (kPerBlock) {
      const float v = v_scales[block * v_block_stride];
      if (v == 0.0f) return false;
      const float ratio = unit / v;
      correction[0] *= ratio;
      correction[1] *= ratio;
      unit = v;
    }
    return true;
  }
};

}  // namespace tilefmha::fmha
