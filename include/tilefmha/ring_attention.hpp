// Ring attention (context parallelism, tilefmha/context_parallel.hpp) over an NCCL communicator:
// the forward of one rank of a ring whose ranks each hold a zigzag shard of the sequence.
//
// NCCL is no build dependency: the library is loaded at run time, from $TILEFMHA_NCCL_LIBRARY
// or else "libnccl.so.2" on the loader path, on first use (a missing library is an Error naming
// both). The caller owns the communicator (an ncclComm_t of any size, one rank per GPU) and
// passes it as an opaque pointer; its rank and size are this object's rank and world.
//
//   tilefmha::Engine engine({.device = local_gpu});
//   tilefmha::RingAttention ring(engine, comm);      // comm: ncclComm_t on local_gpu
//   ring.forward({.q = q, .k = k, .v = v, .o = o, .lse = lse, .causal = true}, stream);
//
// Each rank calls forward with its own shard, in the same order as every other rank (the K/V
// shards travel around the ring with ncclSend / ncclRecv). The shard of rank r holds chunks r
// and 2N-1-r of the 2N equal chunks of every sequence, concatenated along seq, so seq_local (the
// shard's length) is even and its halves are [0, seq_local/2) and [seq_local/2, seq_local).
//
// Forward only: the backward of ring attention is left to the Python package, which walks the
// same schedule with the merged O and LSE.
#pragma once

#include <cstdint>
#include <memory>

#include "tilefmha/engine.hpp"
#include "tilefmha/tensor.hpp"

namespace tilefmha {

// The tensors of one rank's forward, all device views in batch mode (no varlen), fp16 or bf16.
struct RingForward {
  // This rank's zigzag shard: q [batch, seq_local, nhead_q, hdim]; k and v
  // [batch, seq_local, nhead_k, hdim] and [..., hdim_v], contiguous (row-major bshd), because
  // they are sent as they lie. nhead_k may divide nhead_q (GQA: only the K/V heads travel).
  TensorView q, k, v;
  // The merged output [batch, seq_local, nhead_q, hdim_v] in q's dtype (any strides, last dim
  // contiguous) and, when set, LSE fp32 [batch, nhead_q, seq_local] (natural log).
  TensorView o;
  TensorView lse;
  bool causal = false;  // causal over the global sequence (top-left)
  double scale = 0.0;   // softmax scale; 0 = 1 / sqrt(hdim)
};

class RingAttention {
 public:
  // Loads NCCL and reads this rank and the world size from `nccl_comm` (an ncclComm_t created
  // on engine's device). Throws Error naming the library path and TILEFMHA_NCCL_LIBRARY when
  // NCCL does not load, and naming the call when the communicator is null or unusable.
  RingAttention(Engine& engine, void* nccl_comm);
  ~RingAttention();
  RingAttention(const RingAttention&) = delete;
  RingAttention& operator=(const RingAttention&) = delete;

  int rank() const;
  int world() const;

  // Queues this rank's ring forward on `stream` (a CUstream / cudaStream_t of engine's device;
  // null: the legacy default stream) and returns without waiting: compute runs on `stream`,
  // the K/V exchange on the object's own stream, ordered by events, so step i's blocks overlap
  // the transfer of step i+1's shard. `stream` is ordered after every send, so the caller may
  // reuse q, k and v once it has passed. Throws Error naming the field for invalid views
  // (including an odd seq_local) before anything is queued.
  //
  // The workspace (two K/V receive buffers, one partial O per block and their LSEs) is the
  // object's, allocated at the first call of a shape and reused by later calls of that shape; a
  // call of another shape synchronizes the device and reallocates. Calls of one object must
  // come from one thread at a time; the engine's device context is made current on it.
  void forward(const RingForward& args, void* stream = nullptr);

  // Device bytes of the workspace now held (0 before the first forward).
  int64_t workspace_bytes() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace tilefmha
