// Where the sequence of one CTA lives: its lengths and its first token in the Q/O and K/V views,
// for batch mode (every sequence alike, optional per-sequence key counts) and group mode
// (prefix sums of varlen sequences packed along the seq dim of batch entry 0).
#pragma once

#include "fmha/fwd_params.h"
#include "tile/device.h"

namespace tilefmha::fmha {

struct SeqInfo {
  int len_q;
  int len_k;
  long long q_start;     // seq index of query 0 in the Q/O views
  long long k_start;     // seq index of key 0 in the K/V views
  long long view_batch;  // batch index in the views (0 in group mode)

  template <bool GroupMode>
  TILEFMHA_DEVICE static SeqInfo make(const FwdParams& p, int b) {
    SeqInfo info;
    if constexpr (GroupMode) {
      info.q_start = p.seqstart_q[b];
      info.len_q = int(p.seqstart_q[b + 1] - info.q_start);
      // A paged cache (batch prefill) has no key prefix sums: its keys start at page slot 0
      // and seqlen_k_per_batch gives their count.
      info.k_start = p.seqstart_k != nullptr ? p.seqstart_k[b] : 0;
      info.len_k = p.seqstart_k != nullptr ? int(p.seqstart_k[b + 1] - info.k_start) : 0;
      info.view_batch = 0;
    } else {
      info.q_start = 0;
      info.k_start = 0;
      info.len_q = int(p.seqlen_q);
      info.len_k = int(p.seqlen_k);
      info.view_batch = b;
    }
    if (p.seqlen_k_per_batch != nullptr) info.len_k = int(p.seqlen_k_per_batch[b]);
    return info;
  }

  // Query head h's operands in this sequence: Q from query row m_begin, K and V (the head's KV
  // head) from key 0.
  template <class T>
  struct Operands {
    const T* q;
    const T* k;
    const T* v;
  };
  template <class T>
  TILEFMHA_DEVICE Operands<T> operands(const FwdParams& p, int h, int m_begin) const {
    const long long kv_head = h / p.head_group;
    return {static_cast<const T*>(p.q) + view_batch * p.q_strides.batch +
                (q_start + m_begin) * p.q_strides.seq + h * p.q_strides.head,
            static_cast<const T*>(p.k) + view_batch * p.k_strides.batch +
                k_start * p.k_strides.seq + kv_head * p.k_strides.head,
            static_cast<const T*>(p.v) + view_batch * p.v_strides.batch +
                k_start * p.v_strides.seq + kv_head * p.v_strides.head};
  }
};

}  // namespace tilefmha::fmha
