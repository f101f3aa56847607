#include "distributed/ring_forward.hpp"

#include <cmath>
#include <string>

#include "tilefmha/error.hpp"

namespace tilefmha::distributed {
namespace {

using context_parallel::Part;

[[noreturn]] void fail(const std::string& message, const std::string& field) {
  throw Error(ErrorKind::invalid_argument, "ring attention: " + message, field);
}

void require_present(const TensorView& view, const std::string& field, int rank,
                     MemorySpace space) {
  if (view.empty()) fail(field + " is missing (null data)", field);
  if (view.space != space)
    fail(field + ".space is " + (view.space == MemorySpace::host ? "host" : "device") +
             " but these views must be in " + (space == MemorySpace::host ? "host" : "device") +
             " memory",
         field);
  if (view.rank != rank)
    fail(field + ".rank = " + std::to_string(view.rank) + ", expected " + std::to_string(rank),
         field);
}

void require_shape(const TensorView& view, const std::string& field, const std::string& names,
                   std::initializer_list<int64_t> dims) {
  int d = 0;
  bool same = true;
  for (int64_t dim : dims) same = same && view.shape[d++] == dim;
  if (!same)
    fail(field + ".shape = " + shape_text(view) + " does not match " + names + " = " +
             shape_text(std::span<const int64_t>(dims.begin(), dims.size())),
         field);
}

void require_dtype(const TensorView& view, const std::string& field, DType dtype) {
  if (view.dtype != dtype)
    fail(field + ".dtype = " + std::string(to_string(view.dtype)) + " but it must be " +
             std::string(to_string(dtype)) + (field == "lse" ? "" : ", like q"),
         field);
}

// K and V travel as one run of bytes each, so they must be row-major bshd.
void require_contiguous(const TensorView& view, const std::string& field) {
  int64_t expected = 1;
  for (int d = view.rank - 1; d >= 0; --d) {
    if (view.shape[d] > 1 && view.stride[d] != expected)
      fail(field + ".stride[" + std::to_string(d) + "] = " + std::to_string(view.stride[d]) +
               ", expected " + std::to_string(expected) + ": " + field +
               " must be contiguous [batch, seq_local, nhead_k, dim] (row-major), since the ring "
               "sends it as it lies",
           field);
    expected *= view.shape[d];
  }
}

int64_t state_rows(const RingShape& shape) {
  return shape.batch * shape.seq_local * shape.nhead_q;
}

int64_t align256(int64_t bytes) {
  return (bytes + 255) / 256 * 256;
}

// Rows [begin, begin + count) along `dim` of `view`.
TensorView slice(TensorView view, int dim, int64_t begin, int64_t count) {
  view.data = static_cast<char*>(view.data) + begin * view.stride[dim] * dtype_size(view.dtype);
  view.shape[dim] = count;
  return view;
}

int64_t part_begin(const RingShape& shape, Part part) {
  return part == Part::back ? shape.half() : 0;
}
int64_t part_length(const RingShape& shape, Part part) {
  return part == Part::all ? shape.seq_local : shape.half();
}

// O of slot `slot` as a logical [batch, seq_local, nhead_q, hdim_v] view.
TensorView slot_o(const RingShape& shape, const RingStates& states, int slot) {
  char* base = static_cast<char*>(states.o) +
               int64_t{slot} * state_rows(shape) * shape.hdim_v * dtype_size(shape.dtype);
  return contiguous_view(base, shape.dtype,
                         {shape.batch, shape.seq_local, shape.nhead_q, shape.hdim_v}, states.space);
}

// LSE of slot `slot` as a [batch, nhead_q, seq_local] view.
TensorView slot_lse(const RingShape& shape, const RingStates& states, int slot) {
  char* base = static_cast<char*>(states.lse) + int64_t{slot} * state_rows(shape) * 4;
  return contiguous_view(base, DType::fp32, {shape.batch, shape.nhead_q, shape.seq_local},
                         states.space);
}

// The merge of slots `range` over the query rows [begin, begin + rows).
MergeStates merge_rows(const RingShape& shape, const RingForward& args, const RingStates& states,
                       SlotRange range, int64_t begin, int64_t rows) {
  MergeStates merge;
  // O states: memory [slot, batch, seq, head, dim], seen in the logical order
  // [state, batch, head, seq, dim].
  TensorView o = slot_o(shape, states, range.begin);
  o = slice(o, 1, begin, rows);
  merge.o_states = o;
  merge.o_states.rank = 5;
  merge.o_states.shape = {range.count(), shape.batch, shape.nhead_q, rows, shape.hdim_v};
  merge.o_states.stride = {state_rows(shape) * shape.hdim_v, o.stride[0], o.stride[2], o.stride[1],
                           1};
  TensorView lse = slice(slot_lse(shape, states, range.begin), 2, begin, rows);
  merge.lse_states = lse;
  merge.lse_states.rank = 4;
  merge.lse_states.shape = {range.count(), shape.batch, shape.nhead_q, rows, 0};
  merge.lse_states.stride = {state_rows(shape), lse.stride[0], lse.stride[1], 1, 0};
  merge.o = slice(args.o, 1, begin, rows);
  if (!args.lse.empty()) merge.lse = slice(args.lse, 2, begin, rows);
  return merge;
}

}  // namespace

int64_t RingShape::k_bytes() const {
  return batch * seq_local * nhead_k * hdim * dtype_size(dtype);
}
int64_t RingShape::v_bytes() const {
  return batch * seq_local * nhead_k * hdim_v * dtype_size(dtype);
}

RingShape validate_ring_forward(const RingForward& args, MemorySpace space) {
  require_present(args.q, "q", 4, space);
  require_present(args.k, "k", 4, space);
  require_present(args.v, "v", 4, space);
  require_present(args.o, "o", 4, space);
  if (args.q.dtype != DType::fp16 && args.q.dtype != DType::bf16)
    fail("q.dtype = " + std::string(to_string(args.q.dtype)) +
             " but ring attention takes fp16 or bf16",
         "q");
  require_dtype(args.k, "k", args.q.dtype);
  require_dtype(args.v, "v", args.q.dtype);
  require_dtype(args.o, "o", args.q.dtype);

  RingShape shape;
  shape.dtype = args.q.dtype;
  shape.batch = args.q.shape[0];
  shape.seq_local = args.q.shape[1];
  shape.nhead_q = args.q.shape[2];
  shape.hdim = args.q.shape[3];
  shape.nhead_k = args.k.shape[2];
  shape.hdim_v = args.v.shape[3];
  if (shape.batch < 1 || shape.nhead_q < 1 || shape.hdim < 1)
    fail("q.shape = " + shape_text(args.q) + " is empty", "q");
  if (shape.seq_local < 1)
    fail("q.shape[1] = seq_local = " + std::to_string(shape.seq_local) +
             ": the shard holds no token (zigzag shards hold 2 chunks of seq / (2 * world))",
         "q");
  if (shape.seq_local % 2 != 0)
    fail("q.shape[1] = seq_local = " + std::to_string(shape.seq_local) +
             " is odd: a zigzag shard is its front and back chunks, of equal length, so the "
             "global sequence must be a multiple of 2 * world",
         "q");
  if (shape.nhead_k < 1 || shape.nhead_q % shape.nhead_k != 0)
    fail("k.shape[2] = nhead_k = " + std::to_string(shape.nhead_k) +
             " does not divide nhead_q = " + std::to_string(shape.nhead_q),
         "k");
  if (shape.hdim_v < 1) fail("v.shape[3] = hdim_v = 0: v is empty", "v");
  const std::string kv_names = "[batch, seq_local, nhead_k, ";
  require_shape(args.k, "k", kv_names + "hdim]",
                {shape.batch, shape.seq_local, shape.nhead_k, shape.hdim});
  require_shape(args.v, "v", kv_names + "hdim_v]",
                {shape.batch, shape.seq_local, shape.nhead_k, shape.hdim_v});
  require_shape(args.o, "o", "[batch, seq_local, nhead_q, hdim_v]",
                {shape.batch, shape.seq_local, shape.nhead_q, shape.hdim_v});
  require_contiguous(args.k, "k");
  require_contiguous(args.v, "v");
  if (!args.lse.empty()) {
    require_present(args.lse, "lse", 3, space);
    require_dtype(args.lse, "lse", DType::fp32);
    require_shape(args.lse, "lse", "[batch, nhead_q, seq_local]",
                  {shape.batch, shape.nhead_q, shape.seq_local});
  }
  if (!std::isfinite(args.scale) || args.scale < 0)
    fail("scale = " + std::to_string(args.scale) + " must be positive (or 0 for 1 / sqrt(hdim))",
         "scale");
  return shape;
}

RingTopology ring_topology(const NcclApi& api, void* comm, int device) {
  if (comm == nullptr)
    throw Error(ErrorKind::invalid_argument,
                "ring attention: nccl_comm is null (pass the rank's ncclComm_t)", "nccl_comm");
  NcclComm handle = static_cast<NcclComm>(comm);
  RingTopology topology;
  check_nccl(api, api.comm_count(handle, &topology.world), "ncclCommCount");
  check_nccl(api, api.comm_user_rank(handle, &topology.rank), "ncclCommUserRank");
  if (topology.world < 1)
    throw Error(ErrorKind::invalid_argument,
                "ring attention: ncclCommCount says the communicator has " +
                    std::to_string(topology.world) + " ranks",
                "nccl_comm");
  if (topology.rank < 0 || topology.rank >= topology.world)
    throw Error(ErrorKind::invalid_argument,
                "ring attention: ncclCommUserRank says rank " + std::to_string(topology.rank) +
                    " but ncclCommCount says world = " + std::to_string(topology.world) +
                    ": the rank must lie in [0, world)",
                "nccl_comm");
  if (device >= 0 && api.comm_cu_device != nullptr) {
    int comm_device = -1;
    check_nccl(api, api.comm_cu_device(handle, &comm_device), "ncclCommCuDevice");
    if (comm_device != device)
      throw Error(ErrorKind::invalid_argument,
                  "ring attention: nccl_comm (rank " + std::to_string(topology.rank) +
                      ") was made on CUDA device " + std::to_string(comm_device) +
                      " but the engine runs on device " + std::to_string(device),
                  "nccl_comm");
  }
  return topology;
}

RingLayout ring_layout(int world, int rank, bool causal) {
  RingLayout layout;
  layout.steps = context_parallel::ring_schedule(world, rank, causal, /*packed=*/false);
  // Count the blocks of each query part, then number them front-only, all, back-only.
  int counts[3] = {0, 0, 0};  // front, all, back
  auto group = [](Part part) { return part == Part::front ? 0 : part == Part::all ? 1 : 2; };
  for (const auto& step : layout.steps)
    for (const auto& block : step.blocks) ++counts[group(block.queries)];
  int next[3] = {0, counts[0], counts[0] + counts[1]};
  layout.blocks.resize(layout.steps.size());
  for (size_t i = 0; i < layout.steps.size(); ++i)
    for (const auto& block : layout.steps[i].blocks)
      layout.blocks[i].push_back({block, next[group(block.queries)]++});
  layout.slots = counts[0] + counts[1] + counts[2];
  layout.front = {0, counts[0] + counts[1]};
  layout.back = {counts[0], layout.slots};
  // Every query row sees its own key at the rank's own step, so neither half is ever empty.
  if (layout.front.count() == 0 || layout.back.count() == 0)
    throw Error(ErrorKind::runtime, "ring attention: the schedule of rank " + std::to_string(rank) +
                                        " of " + std::to_string(world) +
                                        " leaves a half of the queries without a block");
  return layout;
}

int64_t state_o_bytes(const RingShape& shape, int slots) {
  return int64_t{slots} * state_rows(shape) * shape.hdim_v * dtype_size(shape.dtype);
}

int64_t state_lse_bytes(const RingShape& shape, int slots) {
  return int64_t{slots} * state_rows(shape) * 4;
}

int64_t kv_shard_bytes(const RingShape& shape) {
  return align256(shape.k_bytes()) + shape.v_bytes();
}

KvShard kv_shard(const RingShape& shape, void* base, MemorySpace space) {
  char* bytes = static_cast<char*>(base);
  return {bshd(bytes, shape.dtype, shape.batch, shape.seq_local, shape.nhead_k, shape.hdim, space),
          bshd(bytes + align256(shape.k_bytes()), shape.dtype, shape.batch, shape.seq_local,
               shape.nhead_k, shape.hdim_v, space)};
}

TensorView part_rows(const TensorView& view, Part part) {
  const int64_t half = view.shape[1] / 2;
  switch (part) {
    case Part::all: return view;
    case Part::front: return slice(view, 1, 0, half);
    case Part::back: return slice(view, 1, half, half);
  }
  return view;
}

Problem block_problem(const RingShape& shape, const RingForward& args, const KvShard& kv,
                      const SlotBlock& slot_block, const RingStates& states) {
  const context_parallel::Block& block = slot_block.block;
  const int64_t rows = part_length(shape, block.queries);
  const int64_t begin = part_begin(shape, block.queries);
  ProblemBuilder builder(Family::fwd);
  builder.dtype(shape.dtype)
      .shape(shape.batch, shape.nhead_q, shape.nhead_k, rows, part_length(shape, block.keys),
             shape.hdim, shape.hdim_v)
      .q(part_rows(args.q, block.queries))
      .k(part_rows(kv.k, block.keys))
      .v(part_rows(kv.v, block.keys))
      .o(slice(slot_o(shape, states, slot_block.slot), 1, begin, rows))
      .lse(slice(slot_lse(shape, states, slot_block.slot), 2, begin, rows));
  if (block.causal) builder.causal(MaskAlign::top_left);
  if (args.scale > 0) builder.scale(args.scale);
  return builder.build();
}

std::vector<MergeStates> ring_merges(const RingShape& shape, const RingLayout& layout,
                                     const RingForward& args, const RingStates& states) {
  if (layout.front == layout.back)
    return {merge_rows(shape, args, states, layout.front, 0, shape.seq_local)};
  return {merge_rows(shape, args, states, layout.front, 0, shape.half()),
          merge_rows(shape, args, states, layout.back, shape.half(), shape.half())};
}

}  // namespace tilefmha::distributed
