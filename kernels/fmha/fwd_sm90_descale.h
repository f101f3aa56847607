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
//
// Per page (paged caches; pages of 8 keys or more, so an 8-column accumulator chunk lies in one
// page): where a page holds whole blocks, K's and V's descales are per block as above. Smaller
// pages give each chunk its own: K's scale the chunk's scores, and V's, which differ within a
// block, scale P itself before it is rounded to e4m3: P_j times v_j / v_max, v_max the block's
// largest, which then becomes O's unit (so the scaled P stays within [0, 1] and keeps its
// relative precision). Keys past the sequence's end read no table entry.
#pragma once

#include "fmha/fwd_params.h"
#include "fmha/fwd_sm90_shape.h"
#include "fmha/paged_kv.h"
#include "fmha/seq_info.h"

namespace tilefmha::fmha {

template <class Traits>
struct Sm90Descaler {
  static constexpr bool kPerBlock = Traits::kDescale == Sm90Descale::per_block;
  static constexpr bool kPerPage = Traits::kDescale == Sm90Descale::per_page;
  static constexpr int kBlockN = Traits::kBlockN;
  static constexpr int kChunks = kBlockN / 8;

  const float* k_scales;  // this (sequence, KV head)'s K descales: per block, or the page pool's
  const float* v_scales;
  long long k_block_stride, v_block_stride;  // per block: between blocks; per page: between pages
  float q_row[2];  // per block: the Q descale of the thread's two accumulator rows
  PagedKeys keys;  // per page: the sequence's pages
  int len_k;

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
    if constexpr (kPerPage) {
      k_scales = p.fp8_k_page + kv_head * p.fp8_page_head_stride;
      v_scales = p.fp8_v_page + kv_head * p.fp8_page_head_stride;
      k_block_stride = v_block_stride = p.fp8_page_stride;
      keys = PagedKeys::make(p, sequence);
      len_k = seq.len_k;
    }
  }

  // The unit O starts in: V's per-tensor descale (applied once, at the end), else 1.
  TILEFMHA_DEVICE static float initial_unit(const FwdParams& p) {
    return Traits::kDescale == Sm90Descale::per_tensor ? p.fp8_v_descale : 1.0f;
  }

  // Per page: whether pages hold whole blocks (one descale per block).
  TILEFMHA_DEVICE bool whole_pages() const {
    return keys.page_size >= kBlockN;
  }
  // Per page: the descale in `table` of the page holding key `key` (which must exist).
  TILEFMHA_DEVICE float page_scale(const float* table, int key) const {
    return table[keys.pages[key / int(keys.page_size)] * k_block_stride];
  }

  // Scores of key block `block` from code products to dequantized products (per block: the
  // block index is its 128-token descale block).
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
    if constexpr (kPerPage) {
      const int key_begin = block * kBlockN;
      if (whole_pages()) {
        const float k = page_scale(k_scales, key_begin);
#pragma unroll
        for (int i = 0; i < Columns / 2; ++i) s[i] *= k;
      } else {
#pragma unroll
        for (int j = 0; j < Columns / 8; ++j) {
          const int key = key_begin + 8 * j;
          const float k = key < len_k ? page_scale(k_scales, key) : 1.0f;
#pragma unroll
          for (int i = 0; i < 4; ++i) s[4 * j + i] *= k;
        }
      }
    }
  }

  // Moves O's unit to block `block`'s V descale: multiplies the O correction by old / new unit
  // (per page with pages smaller than the block: scales P, `s`, by each chunk's share of the
  // block's largest descale first). Returns false where the block's descale is 0 (its P must be
  // zeroed; the unit stays).
  template <int Columns>
  TILEFMHA_DEVICE bool enter_v_block(float (&s)[Columns / 2], int block, float& unit,
                                     float (&correction)[2]) const {
    float v = 1.0f;
    if constexpr (kPerBlock) v = v_scales[block * v_block_stride];
    if constexpr (kPerPage) {
      const int key_begin = block * kBlockN;
      if (whole_pages()) {
        v = page_scale(v_scales, key_begin);
      } else {
        float chunk[Columns / 8];
        v = 0.0f;
#pragma unroll
        for (int j = 0; j < Columns / 8; ++j) {
          const int key = key_begin + 8 * j;
          chunk[j] = key < len_k ? page_scale(v_scales, key) : 0.0f;
          v = v > chunk[j] ? v : chunk[j];
        }
        if (v == 0.0f) return false;
        const float inverse = 1.0f / v;
#pragma unroll
        for (int j = 0; j < Columns / 8; ++j) {
#pragma unroll
          for (int i = 0; i < 4; ++i) s[4 * j + i] *= chunk[j] * inverse;
        }
      }
    }
    if constexpr (kPerBlock || kPerPage) {
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
