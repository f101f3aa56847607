// The row walk of the memory-bound backward kernels (bwd_dot_do_o, bwd_convert_dq): a row is one
// (batch, position, head) of a [batch, seq, head, dim] view; rows are numbered head-fastest, so
// consecutive warps read neighbouring heads of one token, which sit next to each other in
// memory. Group mode packs its sequences as batch 1 with seq the total token count.
#pragma once

#include "fmha/bwd_params.h"
#include "tile/numeric_types.h"
#include "tile/warp_reduce.h"

namespace tilefmha::fmha {

struct BwdRow {
  long long batch, seq, head;

  TILEFMHA_DEVICE static BwdRow of(long long row, const BwdParams& p) {
    const long long heads = p.fwd.nhead_q;
    const long long token = row / heads;
    return {token / p.row_seqlen, token % p.row_seqlen, row - token * heads};
  }
  TILEFMHA_DEVICE long long offset(const TokenStrides& strides) const {
    return batch * strides.batch + seq * strides.seq + head * strides.head;
  }
};

// A row's 16-byte chunks spread over a power-of-two group of lanes, so that a warp works on
// 32 / lanes rows at once: with a whole warp per row, a 64-column row kept 24 of 32 lanes idle
// and the row kernels ran at half the memory bandwidth of the 256-column ones.
struct RowLanes {
  int lanes;  // lanes per row: the smallest power of two >= the row's chunks, at most 32
  int rows;   // rows per warp: 32 / lanes
  int group;  // this lane's row within the warp's rows
  int sub;    // this lane's place within its row's lanes

  TILEFMHA_DEVICE static RowLanes of(long long chunks, int lane) {
    int lanes = 1;
    while (lanes < chunks && lanes < 32) lanes *= 2;
    return {lanes, 32 / lanes, lane / lanes, lane & (lanes - 1)};
  }
  // The sum over this lane's row group. Every lane of the warp must call it (shfl.sync over the
  // full warp), whether or not its row exists.
  TILEFMHA_DEVICE float row_sum(float value) const {
    for (int lane_mask = lanes / 2; lane_mask >= 1; lane_mask /= 2)
      value += tile::shuffle_xor(value, lane_mask);
    return value;
  }
};

// Eight 16-bit values (one 16-byte load) widened to fp32.
template <class T>
TILEFMHA_DEVICE void load8(const T* source, float (&out)[8]) {
  const uint4 chunk = *reinterpret_cast<const uint4*>(source);
  tile::unpack2<T>(chunk.x, out[0], out[1]);
  tile::unpack2<T>(chunk.y, out[2], out[3]);
  tile::unpack2<T>(chunk.z, out[4], out[5]);
  tile::unpack2<T>(chunk.w, out[6], out[7]);
}

template <class T>
TILEFMHA_DEVICE void store8(T* target, const float (&in)[8]) {
  uint4 chunk;
  chunk.x = tile::pack2<T>(in[0], in[1]);
  chunk.y = tile::pack2<T>(in[2], in[3]);
  chunk.z = tile::pack2<T>(in[4], in[5]);
  chunk.w = tile::pack2<T>(in[6], in[7]);
  *reinterpret_cast<uint4*>(target) = chunk;
}

}  // namespace tilefmha::fmha
