// Ring attention without a GPU or NCCL: the run-time loading of NCCL (a missing library names
// its path and TILEFMHA_NCCL_LIBRARY), the topology read from a communicator (through a
// stand-in NCCL API: null, failing, out-of-range and wrong-device communicators), validation
// of RingForward naming the field (odd seq_local among them), the partial-state slots, and the
// forward's own problems (block forwards and merges over views of the shard, the held K/V shard
// and the partial states) run on host views by the CPU reference for every rank of simulated
// rings, against the reference forward of the whole sequence.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "core/numeric.hpp"
#include "distributed/nccl_library.hpp"
#include "distributed/ring_forward.hpp"
#include "runtime/tolerance.hpp"
#include "support/host_tensor.hpp"
#include "support/tensor_pool.hpp"
#include "tilefmha/context_parallel.hpp"
#include "tilefmha/error.hpp"
#include "tilefmha/reference.hpp"

namespace tilefmha {
namespace {

using context_parallel::Part;
using distributed::NcclApi;
using distributed::NcclComm;
using distributed::NcclResult;
using testing::HostTensor;
using testing::TensorPool;

// Sets an environment variable for the scope, restoring the previous value after.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (old_)
      setenv(name_, old_->c_str(), 1);
    else
      unsetenv(name_);
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// Runs `body`, which must throw tilefmha::Error, and returns its message and field.
template <class Body>
Error error_of(Body&& body) {
  try {
    body();
  } catch (const Error& error) {
    return error;
  }
  ADD_FAILURE() << "no Error thrown";
  return Error(ErrorKind::runtime, "");
}

TEST(NcclLibrary, MissingLibraryNamesThePathAndTheVariable) {
  const distributed::NcclLoad load = distributed::load_nccl_library("/nonexistent/libnccl.so.2");
  EXPECT_NE(load.failure.find("/nonexistent/libnccl.so.2"), std::string::npos) << load.failure;
  EXPECT_NE(load.failure.find("TILEFMHA_NCCL_LIBRARY"), std::string::npos) << load.failure;

  const ScopedEnv env("TILEFMHA_NCCL_LIBRARY", "/nonexistent/dir/libnccl-test.so");
  EXPECT_EQ(distributed::nccl_library_path(), "/nonexistent/dir/libnccl-test.so");
  const Error error = error_of([] { distributed::nccl_library(); });
  EXPECT_EQ(error.kind(), ErrorKind::runtime);
  const std::string text = error.what();
  EXPECT_NE(text.find("/nonexistent/dir/libnccl-test.so"), std::string::npos) << text;
  EXPECT_NE(text.find("TILEFMHA_NCCL_LIBRARY"), std::string::npos) << text;
}

TEST(NcclLibrary, DefaultNameWithoutTheVariable) {
  const ScopedEnv env("TILEFMHA_NCCL_LIBRARY", "");
  EXPECT_EQ(distributed::nccl_library_path(), "libnccl.so.2");
}

// A library that loads but is not NCCL: the first missing entry is named.
TEST(NcclLibrary, LibraryWithoutTheEntriesIsUnusable) {
  const distributed::NcclLoad load = distributed::load_nccl_library("libm.so.6");
  ASSERT_FALSE(load.failure.empty());
  EXPECT_NE(load.failure.find("ncclGetErrorString"), std::string::npos) << load.failure;
  EXPECT_NE(load.failure.find("unusable"), std::string::npos) << load.failure;
}

// A stand-in NCCL: the communicator pointer is a FakeComm that says what to answer.
struct FakeComm {
  NcclResult count_result = 0;
  int count = 2;
  int rank = 0;
  int device = 0;
};
FakeComm* fake(NcclComm comm) {
  return reinterpret_cast<FakeComm*>(comm);
}

NcclApi fake_api(bool with_device) {
  NcclApi api{};
  api.get_error_string = [](NcclResult result) {
    return result == 5 ? "invalid usage (stand-in)" : "stand-in error";
  };
  api.comm_count = [](NcclComm comm, int* count) {
    *count = fake(comm)->count;
    return fake(comm)->count_result;
  };
  api.comm_user_rank = [](NcclComm comm, int* rank) {
    *rank = fake(comm)->rank;
    return 0;
  };
  if (with_device)
    api.comm_cu_device = [](NcclComm comm, int* device) {
      *device = fake(comm)->device;
      return 0;
    };
  return api;
}

TEST(RingTopology, ReadsRankAndWorld) {
  FakeComm comm{0, 4, 3, 1};
  const distributed::RingTopology topology = distributed::ring_topology(fake_api(true), &comm, 1);
  EXPECT_EQ(topology.rank, 3);
  EXPECT_EQ(topology.world, 4);
  // Without ncclCommCuDevice in the library the device is not checked.
  EXPECT_EQ(distributed::ring_topology(fake_api(false), &comm, 0).rank, 3);
}

TEST(RingTopology, NullCommunicator) {
  const Error error = error_of([] { distributed::ring_topology(fake_api(true), nullptr); });
  EXPECT_EQ(error.field(), "nccl_comm");
  EXPECT_NE(std::string(error.what()).find("null"), std::string::npos) << error.what();
}

TEST(RingTopology, FailingCallIsNamedWithNcclsText) {
  FakeComm comm{5, 2, 0, 0};
  const Error error = error_of([&] { distributed::ring_topology(fake_api(true), &comm); });
  const std::string text = error.what();
  EXPECT_NE(text.find("ncclCommCount failed: invalid usage (stand-in)"), std::string::npos) << text;
  EXPECT_NE(text.find("ncclResult_t 5"), std::string::npos) << text;
}

TEST(RingTopology, RankOutsideTheWorld) {
  for (int rank : {2, -1}) {
    FakeComm comm{0, 2, rank, 0};
    const Error error = error_of([&] { distributed::ring_topology(fake_api(true), &comm); });
    const std::string text = error.what();
    EXPECT_EQ(error.field(), "nccl_comm");
    EXPECT_NE(text.find("rank " + std::to_string(rank)), std::string::npos) << text;
    EXPECT_NE(text.find("world = 2"), std::string::npos) << text;
  }
  FakeComm empty{0, 0, 0, 0};
  const Error error = error_of([&] { distributed::ring_topology(fake_api(true), &empty); });
  EXPECT_NE(std::string(error.what()).find("0 ranks"), std::string::npos) << error.what();
}

TEST(RingTopology, CommunicatorOfAnotherDevice) {
  FakeComm comm{0, 2, 1, 1};
  const Error error = error_of([&] { distributed::ring_topology(fake_api(true), &comm, 0); });
  const std::string text = error.what();
  EXPECT_NE(text.find("CUDA device 1"), std::string::npos) << text;
  EXPECT_NE(text.find("engine runs on device 0"), std::string::npos) << text;
}

// Views of a valid shard: no memory behind them (validation reads none).
struct Shard {
  int64_t batch = 2, seq = 16, nhead_q = 8, nhead_k = 2, hdim = 64;
  std::byte storage[16]{};
  RingForward args(MemorySpace space = MemorySpace::device) {
    RingForward args;
    args.q = bshd(storage, DType::bf16, batch, seq, nhead_q, hdim, space);
    args.k = bshd(storage, DType::bf16, batch, seq, nhead_k, hdim, space);
    args.v = bshd(storage, DType::bf16, batch, seq, nhead_k, hdim, space);
    args.o = bshd(storage, DType::bf16, batch, seq, nhead_q, hdim, space);
    args.lse = contiguous_view(storage, DType::fp32, {batch, nhead_q, seq}, space);
    return args;
  }
};

// Expects validation to fail naming `field`, with `words` in the message.
void expect_invalid(const RingForward& args, const std::string& field, const std::string& words) {
  const Error error =
      error_of([&] { distributed::validate_ring_forward(args, MemorySpace::device); });
  EXPECT_EQ(error.kind(), ErrorKind::invalid_argument);
  EXPECT_EQ(error.field(), field) << error.what();
  EXPECT_NE(std::string(error.what()).find(words), std::string::npos) << error.what();
}

TEST(RingForwardValidation, AcceptsAValidShard) {
  Shard shard;
  const distributed::RingShape shape =
      distributed::validate_ring_forward(shard.args(), MemorySpace::device);
  EXPECT_EQ(shape.seq_local, 16);
  EXPECT_EQ(shape.nhead_k, 2);
  EXPECT_EQ(shape.half(), 8);
  EXPECT_EQ(shape.k_bytes(), 2 * 16 * 2 * 64 * 2);
  RingForward no_lse = shard.args();
  no_lse.lse = {};
  EXPECT_NO_THROW(distributed::validate_ring_forward(no_lse, MemorySpace::device));
}

TEST(RingForwardValidation, OddOrEmptySeqLocal) {
  Shard odd;
  odd.seq = 15;
  expect_invalid(odd.args(), "q", "seq_local = 15 is odd");
  Shard empty;
  empty.seq = 0;
  expect_invalid(empty.args(), "q", "seq_local = 0");
}

TEST(RingForwardValidation, NamesTheField) {
  Shard shard;
  RingForward args = shard.args();
  args.o = {};
  expect_invalid(args, "o", "o is missing");

  args = shard.args();
  args.v.space = MemorySpace::host;
  expect_invalid(args, "v", "v.space is host");

  args = shard.args();
  args.q.dtype = args.k.dtype = args.v.dtype = args.o.dtype = DType::fp32;
  expect_invalid(args, "q", "fp16 or bf16");

  args = shard.args();
  args.k.dtype = DType::fp16;
  expect_invalid(args, "k", "k.dtype = fp16");

  args = shard.args();
  args.lse.dtype = DType::bf16;
  expect_invalid(args, "lse", "lse.dtype = bf16");

  args = shard.args();
  args.lse.shape[2] = 8;
  expect_invalid(args, "lse", "lse.shape = [2, 8, 8]");

  args = shard.args();
  args.v.shape[1] = 8;
  expect_invalid(args, "v", "v.shape = [2, 8, 2, 64]");

  args = shard.args();
  args.o.shape[2] = 2;
  expect_invalid(args, "o", "[batch, seq_local, nhead_q, hdim_v]");

  Shard gqa;
  gqa.nhead_k = 3;
  expect_invalid(gqa.args(), "k", "nhead_k = 3 does not divide nhead_q = 8");

  args = shard.args();
  args.scale = -1;
  expect_invalid(args, "scale", "scale");
  args.scale = NAN;
  expect_invalid(args, "scale", "scale");
}

TEST(RingForwardValidation, KeysAndValuesMustBeContiguous) {
  Shard shard;
  RingForward args = shard.args();
  args.k = bhsd(shard.storage, DType::bf16, 2, 16, 2, 64, MemorySpace::device);
  expect_invalid(args, "k", "k must be contiguous");
  args = shard.args();
  args.v.stride[1] += 8;  // padded rows
  expect_invalid(args, "v", "v.stride[1]");
}

TEST(RingLayout, EachHalfMergesExactlyTheStatesThatCoverIt) {
  for (int world = 1; world <= 6; ++world)
    for (int rank = 0; rank < world; ++rank)
      for (bool causal : {false, true}) {
        SCOPED_TRACE("world " + std::to_string(world) + " rank " + std::to_string(rank) +
                     (causal ? " causal" : ""));
        const distributed::RingLayout layout = distributed::ring_layout(world, rank, causal);
        ASSERT_EQ(layout.blocks.size(), static_cast<size_t>(world));
        std::vector<int> seen(static_cast<size_t>(layout.slots), 0);
        for (const auto& step : layout.blocks)
          for (const distributed::SlotBlock& b : step) {
            ASSERT_GE(b.slot, 0);
            ASSERT_LT(b.slot, layout.slots);
            ++seen[static_cast<size_t>(b.slot)];
            const bool front = b.block.queries != Part::back;
            const bool back = b.block.queries != Part::front;
            EXPECT_EQ(front, b.slot >= layout.front.begin && b.slot < layout.front.end);
            EXPECT_EQ(back, b.slot >= layout.back.begin && b.slot < layout.back.end);
          }
        for (int count : seen) EXPECT_EQ(count, 1);  // one block per slot
        // Causal: the front rows see the own shard and the earlier ranks' fronts only.
        EXPECT_EQ(layout.front.count(), causal ? rank + 1 : world);
        EXPECT_EQ(layout.back.count(), world);
      }
}

// One rank's tensors in a simulated ring, in host memory.
struct HostRank {
  HostTensor q, k, v, o, lse, o_states, lse_states;
  std::vector<std::byte> received[2];
};

HostTensor zigzag_shard(const TensorView& global, int world, int rank) {
  const int64_t batch = global.shape[0], seq = global.shape[1], heads = global.shape[2],
                dim = global.shape[3];
  HostTensor shard(global.dtype, {batch, seq / world, heads, dim});
  const context_parallel::ChunkRange chunks[2] = {context_parallel::front_chunk(seq, world, rank),
                                                  context_parallel::back_chunk(seq, world, rank)};
  for (int64_t b = 0; b < batch; ++b) {
    int64_t row = 0;
    for (const auto& chunk : chunks)
      for (int64_t s = chunk.begin; s < chunk.end; ++s, ++row)
        for (int64_t h = 0; h < heads; ++h)
          for (int64_t d = 0; d < dim; ++d)
            shard.set({b, row, h, d}, numeric::load(global, {b, s, h, d}));
  }
  return shard;
}

void poison(HostTensor& tensor) {
  tensor.fill(NAN);
}

// The ring forward of every rank, run by the reference on host views through the same problems
// the GPU path runs, against the reference forward of the whole sequence.
void check_simulated_ring(DType dtype, int world, bool causal, double scale) {
  SCOPED_TRACE(std::string(to_string(dtype)) + " world " + std::to_string(world) +
               (causal ? " causal" : " full"));
  const int64_t batch = 2, nhead_q = 4, nhead_k = 2, hdim = 32, hdim_v = 16;
  const int64_t seq = 2 * world * 6;
  TensorPool pool(100 + world);
  const TensorView q = pool.uniform(dtype, {batch, seq, nhead_q, hdim}, -2, 2);
  const TensorView k = pool.uniform(dtype, {batch, seq, nhead_k, hdim}, -2, 2);
  const TensorView v = pool.uniform(dtype, {batch, seq, nhead_k, hdim_v}, -1, 1);
  HostTensor o(dtype, {batch, seq, nhead_q, hdim_v});
  HostTensor lse(DType::fp32, {batch, nhead_q, seq});
  ProblemBuilder whole(Family::fwd);
  whole.dtype(dtype)
      .shape(batch, nhead_q, nhead_k, seq, seq, hdim, hdim_v)
      .q(q)
      .k(k)
      .v(v)
      .o(o.view())
      .lse(lse.view());
  if (causal) whole.causal();
  if (scale > 0) whole.scale(scale);
  reference::run(whole.build());

  std::vector<HostRank> ranks(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) {
    HostRank& rank = ranks[static_cast<size_t>(r)];
    rank.q = zigzag_shard(q, world, r);
    rank.k = zigzag_shard(k, world, r);
    rank.v = zigzag_shard(v, world, r);
    rank.o = HostTensor(dtype, {batch, seq / world, nhead_q, hdim_v});
    rank.lse = HostTensor(DType::fp32, {batch, nhead_q, seq / world});
    poison(rank.o);
    poison(rank.lse);
  }
  const auto args_of = [&](HostRank& rank) {
    RingForward args;
    args.q = rank.q.view();
    args.k = rank.k.view();
    args.v = rank.v.view();
    args.o = rank.o.view();
    args.lse = rank.lse.view();
    args.causal = causal;
    args.scale = scale;
    return args;
  };
  for (int r = 0; r < world; ++r) {
    HostRank& rank = ranks[static_cast<size_t>(r)];
    const RingForward args = args_of(rank);
    const distributed::RingShape shape =
        distributed::validate_ring_forward(args, MemorySpace::host);
    const distributed::RingLayout layout = distributed::ring_layout(world, r, causal);
    rank.o_states = HostTensor(dtype, {layout.slots, batch, shape.seq_local, nhead_q, hdim_v});
    rank.lse_states = HostTensor(DType::fp32, {layout.slots, batch, nhead_q, shape.seq_local});
    poison(rank.o_states);
    poison(rank.lse_states);
    const distributed::RingStates states{rank.o_states.view().data, rank.lse_states.view().data,
                                         MemorySpace::host, layout.slots};
    for (auto& buffer : rank.received)
      buffer.assign(static_cast<size_t>(distributed::kv_shard_bytes(shape)), std::byte{0xFF});
    for (int i = 0; i < world; ++i) {
      const int source = layout.steps[static_cast<size_t>(i)].source_rank;
      ASSERT_EQ(source, (r - i + world) % world);
      distributed::KvShard held{args.k, args.v};
      if (i > 0) {  // what exchange i - 1 received: the source rank's local shard
        held = distributed::kv_shard(shape, rank.received[(i - 1) % 2].data(), MemorySpace::host);
        const HostRank& from = ranks[static_cast<size_t>(source)];
        std::memcpy(held.k.data, from.k.view().data, static_cast<size_t>(shape.k_bytes()));
        std::memcpy(held.v.data, from.v.view().data, static_cast<size_t>(shape.v_bytes()));
      }
      for (const distributed::SlotBlock& block : layout.blocks[static_cast<size_t>(i)])
        reference::run(distributed::block_problem(shape, args, held, block, states));
    }
    for (const MergeStates& merge : distributed::ring_merges(shape, layout, args, states))
      reference::splitkv_combine(merge_states_problem(merge));

    // Row t of the shard is global row front.begin + t (front half) or back.begin + t - half.
    const context_parallel::ChunkRange front = context_parallel::front_chunk(seq, world, r);
    const context_parallel::ChunkRange back = context_parallel::back_chunk(seq, world, r);
    const runtime::Tolerance tolerance = runtime::output_tolerance(dtype);
    runtime::Agreement o_agreement, lse_agreement;
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t t = 0; t < shape.seq_local; ++t) {
        const int64_t g = t < shape.half() ? front.begin + t : back.begin + t - shape.half();
        for (int64_t h = 0; h < nhead_q; ++h) {
          for (int64_t d = 0; d < hdim_v; ++d)
            o_agreement.add(rank.o.at({b, t, h, d}), o.at({b, g, h, d}), tolerance);
          lse_agreement.add(rank.lse.at({b, h, t}), lse.at({b, h, g}), runtime::kLseTolerance);
        }
      }
    EXPECT_EQ(o_agreement.mismatches, 0)
        << "rank " << r << ": O max abs error " << o_agreement.max_abs_error;
    EXPECT_EQ(lse_agreement.mismatches, 0)
        << "rank " << r << ": LSE max abs error " << lse_agreement.max_abs_error;
  }
}

TEST(SimulatedRing, MatchesTheWholeSequence) {
  for (int world : {1, 2, 3, 4})
    for (bool causal : {false, true}) {
      check_simulated_ring(DType::fp16, world, causal, 0.0);
      check_simulated_ring(DType::bf16, world, causal, 0.3);
    }
}

}  // namespace
}  // namespace tilefmha
