// RingAttention::forward on the GPU: the problems of distributed/ring_forward.hpp run by the
// engine on the caller's stream, the K/V shards exchanged by NCCL on the object's own stream.
//
// Step i computes against kv(i): the local shard at step 0, then receive buffer (i - 1) % 2.
// Exchange i (i < world - 1) sends kv(i) to rank + 1 and receives kv(i + 1) from rank - 1 into
// buffer i % 2, which held kv(i - 1): so exchange i waits for step i - 1's blocks (event
// `computed`), and step i waits for exchange i - 1 (event `exchanged`). Step i's blocks and
// exchange i run at the same time.
#include "tilefmha/ring_attention.hpp"

#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "distributed/nccl_library.hpp"
#include "distributed/ring_forward.hpp"
#include "jit/module.hpp"
#include "tilefmha/error.hpp"

namespace tilefmha {

using distributed::KvShard;
using distributed::RingShape;

struct RingAttention::State {
  State(Engine& engine_in, void* comm_in)
      : engine(engine_in),
        nccl(distributed::nccl_library()),
        comm(static_cast<distributed::NcclComm>(comm_in)),
        topology(distributed::ring_topology(nccl, comm_in, engine_in.device())),
        context(engine_in.device()) {}

  ~State() {
    // Queued work may still read the buffers: wait for it before they are freed.
    try {
      context.make_current();
      context.synchronize();
    } catch (const Error&) {
    }
  }

  // Sizes the workspace for `shape` and `slots` partial states, reusing it when it fits.
  void reserve(const RingShape& shape, int slots) {
    if (workspace_shape == shape && slots <= workspace_slots) return;
    if (workspace_shape) context.synchronize();  // the old buffers may still be in use
    for (auto& buffer : kv) buffer.reset();
    o_states.reset();
    lse_states.reset();
    workspace_shape.reset();
    if (topology.world > 1)
      for (auto& buffer : kv)
        buffer = std::make_unique<jit::DeviceBuffer>(distributed::kv_shard_bytes(shape));
    o_states = std::make_unique<jit::DeviceBuffer>(distributed::state_o_bytes(shape, slots));
    lse_states = std::make_unique<jit::DeviceBuffer>(distributed::state_lse_bytes(shape, slots));
    workspace_shape = shape;
    workspace_slots = slots;
  }

  int64_t workspace_bytes() const {
    int64_t bytes = 0;
    for (const auto& buffer : kv)
      if (buffer) bytes += buffer->bytes();
    if (o_states) bytes += o_states->bytes();
    if (lse_states) bytes += lse_states->bytes();
    return bytes;
  }

  // Queues exchange: `send` to the next rank, the previous rank's shard into `receive`.
  void exchange(const RingShape& shape, const KvShard& send, const KvShard& receive) {
    const int next = (topology.rank + 1) % topology.world;
    const int previous = (topology.rank + topology.world - 1) % topology.world;
    void* stream = comm_stream.handle();
    const auto k_bytes = static_cast<size_t>(shape.k_bytes());
    const auto v_bytes = static_cast<size_t>(shape.v_bytes());
    using distributed::check_nccl;
    using distributed::nccl_uint8;
    check_nccl(nccl, nccl.group_start(), "ncclGroupStart");
    try {
      check_nccl(nccl, nccl.send(send.k.data, k_bytes, nccl_uint8, next, comm, stream),
                 "ncclSend(k)");
      check_nccl(nccl, nccl.send(send.v.data, v_bytes, nccl_uint8, next, comm, stream),
                 "ncclSend(v)");
      check_nccl(nccl, nccl.recv(receive.k.data, k_bytes, nccl_uint8, previous, comm, stream),
                 "ncclRecv(k)");
      check_nccl(nccl, nccl.recv(receive.v.data, v_bytes, nccl_uint8, previous, comm, stream),
                 "ncclRecv(v)");
    } catch (const Error&) {
      nccl.group_end();  // close the group; the first error is the one to report
      throw;
    }
    check_nccl(nccl, nccl.group_end(), "ncclGroupEnd");
  }

  Engine& engine;
  const distributed::NcclApi& nccl;
  distributed::NcclComm comm;
  distributed::RingTopology topology;
  // The engine's device's primary context, current while the members below are made.
  jit::GpuContext context;
  jit::Stream comm_stream;
  jit::Event start{false}, exchanged{false}, computed{false}, finished{false};
  bool finished_recorded = false;

  std::optional<RingShape> workspace_shape;
  int workspace_slots = 0;
  std::unique_ptr<jit::DeviceBuffer> kv[2];
  std::unique_ptr<jit::DeviceBuffer> o_states, lse_states;
};

RingAttention::RingAttention(Engine& engine, void* nccl_comm)
    : state_(std::make_unique<State>(engine, nccl_comm)) {}

RingAttention::~RingAttention() = default;

int RingAttention::rank() const {
  return state_->topology.rank;
}

int RingAttention::world() const {
  return state_->topology.world;
}

int64_t RingAttention::workspace_bytes() const {
  return state_->workspace_bytes();
}

void RingAttention::forward(const RingForward& args, void* stream) {
  State& s = *state_;
  const RingShape shape = distributed::validate_ring_forward(args, MemorySpace::device);
  const distributed::RingLayout layout =
      distributed::ring_layout(s.topology.world, s.topology.rank, args.causal);
  s.context.make_current();
  s.reserve(shape, layout.slots);

  // Every problem is built and planned (kernels compiled) before anything is queued, so an
  // error leaves the other ranks waiting for nothing this rank has half sent.
  const distributed::RingStates states{reinterpret_cast<void*>(s.o_states->address()),
                                       reinterpret_cast<void*>(s.lse_states->address()),
                                       MemorySpace::device, layout.slots};
  auto received = [&](int buffer) {
    return distributed::kv_shard(shape, reinterpret_cast<void*>(s.kv[buffer]->address()),
                                 MemorySpace::device);
  };
  const KvShard local{args.k, args.v};
  struct Planned {
    EnginePlan plan;
    Problem problem;
  };
  const int world = s.topology.world;
  std::vector<std::vector<Planned>> steps(static_cast<size_t>(world));
  for (int i = 0; i < world; ++i) {
    const KvShard held = i == 0 ? local : received((i - 1) % 2);
    for (const distributed::SlotBlock& block : layout.blocks[static_cast<size_t>(i)]) {
      Problem problem = distributed::block_problem(shape, args, held, block, states);
      EnginePlan plan = s.engine.plan(problem);
      steps[static_cast<size_t>(i)].push_back({std::move(plan), std::move(problem)});
    }
  }
  std::vector<Planned> merges;
  for (const MergeStates& merge : distributed::ring_merges(shape, layout, args, states)) {
    Problem problem = merge_states_problem(merge);
    EnginePlan plan = s.engine.plan(problem);
    merges.push_back({std::move(plan), std::move(problem)});
  }

  const auto compute = static_cast<jit::CUstream>(stream);
  const jit::CUstream comm = s.comm_stream.handle();
  s.context.make_current();
  // The previous call's last reads of the workspace (its merges) come first, whatever stream
  // it ran on; then the exchange waits for the inputs the caller queued on `stream`.
  if (s.finished_recorded) s.finished.wait_on(compute);
  s.start.record(compute);
  s.start.wait_on(comm);
  for (int i = 0; i < world; ++i) {
    if (i > 0) s.exchanged.wait_on(compute);  // kv(i) has arrived
    if (i + 1 < world) {
      if (i > 0) s.computed.wait_on(comm);  // step i - 1 no longer reads buffer i % 2
      s.exchange(shape, i == 0 ? local : received((i - 1) % 2), received(i % 2));
      s.exchanged.record(comm);
    }
    for (const Planned& block : steps[static_cast<size_t>(i)])
      s.engine.run(block.plan, block.problem, stream);
    s.computed.record(compute);
  }
  // The last exchange was waited for by the last step, so `stream` is now after every send.
  for (const Planned& merge : merges) s.engine.run(merge.plan, merge.problem, stream);
  s.finished.record(compute);
  s.finished_recorded = true;
}

}  // namespace tilefmha
