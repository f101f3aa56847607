// RingAttention over NCCL on the GPUs of one process, against a single-GPU forward of the whole
// sequence. One thread per GPU, each with its own context, Engine and RingAttention over a
// communicator of ncclCommInitAll; every rank gets the zigzag shard of fresh random bf16 inputs
// (batch 2, about 4096 tokens, 8 query heads over 2 K/V heads, hdim 128), runs the forward twice
// (the second call reuses the workspace) into poisoned (NaN) O and LSE, and the gathered output
// must match Engine's forward of the whole sequence on GPU 0 within bf16 tolerance, LSE within
// 1e-3, causal and not. Skipped (with the reason) without a GPU, driver or NVRTC, with fewer than
// two GPUs, or when NCCL does not load ($TILEFMHA_NCCL_LIBRARY, else libnccl.so.2 on the
// loader path, e.g. the nvidia-nccl wheel's nvidia/nccl/lib/libnccl.so.2).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "core/numeric.hpp"
#include "distributed/nccl_library.hpp"
#include "jit/cuda_driver.hpp"
#include "jit/module.hpp"
#include "runtime/device_mirror.hpp"
#include "runtime/tolerance.hpp"
#include "support/gpu_availability.hpp"
#include "support/host_tensor.hpp"
#include "support/tensor_pool.hpp"
#include "tilefmha/context_parallel.hpp"
#include "tilefmha/engine.hpp"
#include "tilefmha/error.hpp"
#include "tilefmha/ring_attention.hpp"

namespace tilefmha {
namespace {

using testing::HostTensor;
using testing::TensorPool;

constexpr int kMaxWorld = 8;
constexpr int64_t kBatch = 2, kHeadsQ = 8, kHeadsK = 2, kDim = 128;
// A rank thread that has not finished by then is stuck (a peer failed mid-exchange): the test
// aborts rather than hang.
constexpr auto kRingTimeout = std::chrono::minutes(8);

// Why the test cannot run here; empty when it can (then `gpus` is the visible GPU count).
std::string skip_reason(int& gpus) {
  if (std::string why = testing::gpu_skip_reason(); !why.empty()) return why;
  jit::check_cuda(jit::cuda_driver().device_get_count(&gpus), "cuDeviceGetCount");
  if (gpus < 2)
    return "ring attention over NCCL needs at least 2 visible GPUs; the driver reports " +
           std::to_string(gpus);
  try {
    const distributed::NcclApi& nccl = distributed::nccl_library();
    if (nccl.comm_init_all == nullptr || nccl.comm_destroy == nullptr)
      return "NCCL library " + nccl.library_path + " lacks ncclCommInitAll or ncclCommDestroy";
  } catch (const Error& error) {
    return error.what();
  }
  return {};
}

// One communicator per GPU 0..world-1, destroyed at the end of the scope.
class Communicators {
 public:
  explicit Communicators(int world) : nccl_(distributed::nccl_library()), comms_(world) {
    std::vector<int> devices(static_cast<size_t>(world));
    for (int d = 0; d < world; ++d) devices[static_cast<size_t>(d)] = d;
    distributed::check_nccl(nccl_, nccl_.comm_init_all(comms_.data(), world, devices.data()),
                            "ncclCommInitAll");
  }
  ~Communicators() {
    for (distributed::NcclComm comm : comms_)
      if (comm != nullptr) nccl_.comm_destroy(comm);
  }
  Communicators(const Communicators&) = delete;
  Communicators& operator=(const Communicators&) = delete;
  void* operator[](int rank) const { return comms_[static_cast<size_t>(rank)]; }

 private:
  const distributed::NcclApi& nccl_;
  std::vector<distributed::NcclComm> comms_;
};

std::span<std::byte> bytes_of(HostTensor& tensor) {
  return {static_cast<std::byte*>(tensor.view().data),
          static_cast<size_t>(tensor.elements() * dtype_size(tensor.view().dtype))};
}

// Global row of row `t` of rank `rank`'s shard.
int64_t global_row(int64_t t, int64_t seq, int world, int rank) {
  const int64_t half = seq / world / 2;
  return t < half ? context_parallel::front_chunk(seq, world, rank).begin + t
                  : context_parallel::back_chunk(seq, world, rank).begin + t - half;
}

// Rank `rank`'s zigzag shard of a [batch, seq, heads, dim] host view.
HostTensor shard_of(const TensorView& global, int world, int rank) {
  const int64_t batch = global.shape[0], seq = global.shape[1], heads = global.shape[2],
                dim = global.shape[3];
  const int64_t local = seq / world;
  HostTensor shard(global.dtype, {batch, local, heads, dim});
  const int64_t row_bytes = heads * dim * dtype_size(global.dtype);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t t = 0; t < local; ++t)
      std::memcpy(static_cast<char*>(shard.view().data) + (b * local + t) * row_bytes,
                  static_cast<const char*>(global.data) +
                      (b * seq + global_row(t, seq, world, rank)) * row_bytes,
                  static_cast<size_t>(row_bytes));
  return shard;
}

struct RankOutput {
  HostTensor o, lse;
};

// What one rank thread brings back: per case and repeat, O and LSE of its shard.
struct RankResult {
  std::string error;
  std::vector<RankOutput> outputs;  // [case * 2 + repeat]
  std::vector<int64_t> workspace_bytes;
};

struct Inputs {
  const TensorView* q;
  const TensorView* k;
  const TensorView* v;
};

void run_rank(int rank, int world, void* comm, const Inputs& global, const std::vector<bool>& cases,
              RankResult& result) {
  const jit::GpuContext context(rank);
  EngineOptions options;
  options.device = rank;
  Engine engine(options);
  RingAttention ring(engine, comm);
  if (ring.rank() != rank || ring.world() != world)
    throw Error(ErrorKind::runtime, "the communicator says rank " + std::to_string(ring.rank()) +
                                        " of " + std::to_string(ring.world()));
  HostTensor q = shard_of(*global.q, world, rank);
  HostTensor k = shard_of(*global.k, world, rank);
  HostTensor v = shard_of(*global.v, world, rank);
  const int64_t local = q.view().shape[1];
  jit::DeviceBuffer q_device(bytes_of(q).size()), k_device(bytes_of(k).size()),
      v_device(bytes_of(v).size());
  q_device.copy_from_host(bytes_of(q));
  k_device.copy_from_host(bytes_of(k));
  v_device.copy_from_host(bytes_of(v));
  const auto device = [](const jit::DeviceBuffer& buffer) {
    return reinterpret_cast<void*>(buffer.address());
  };
  jit::DeviceBuffer o_device(kBatch * local * kHeadsQ * kDim * 2);
  jit::DeviceBuffer lse_device(kBatch * kHeadsQ * local * 4);

  RingForward args;
  args.q = bshd(device(q_device), DType::bf16, kBatch, local, kHeadsQ, kDim, MemorySpace::device);
  args.k = bshd(device(k_device), DType::bf16, kBatch, local, kHeadsK, kDim, MemorySpace::device);
  args.v = bshd(device(v_device), DType::bf16, kBatch, local, kHeadsK, kDim, MemorySpace::device);
  args.o = bshd(device(o_device), DType::bf16, kBatch, local, kHeadsQ, kDim, MemorySpace::device);
  args.lse = contiguous_view(device(lse_device), DType::fp32, {kBatch, kHeadsQ, local},
                             MemorySpace::device);
  const jit::Stream stream;
  for (bool causal : cases) {
    args.causal = causal;
    for (int repeat = 0; repeat < 2; ++repeat) {
      // Poisoned on the ring's stream: a non-blocking stream does not wait for the legacy one.
      o_device.fill_bytes_async(runtime::kPoisonByte, stream.handle());
      lse_device.fill_bytes_async(runtime::kPoisonByte, stream.handle());
      ring.forward(args, stream.handle());
      stream.synchronize();
      result.workspace_bytes.push_back(ring.workspace_bytes());
      RankOutput& out = result.outputs.emplace_back();
      out.o = HostTensor(DType::bf16, {kBatch, local, kHeadsQ, kDim});
      out.lse = HostTensor(DType::fp32, {kBatch, kHeadsQ, local});
      o_device.copy_to_host(bytes_of(out.o));
      lse_device.copy_to_host(bytes_of(out.lse));
    }
  }
}

// Runs every rank on its own thread; aborts the process when one is stuck past kRingTimeout.
std::vector<RankResult> run_ring(int world, const Inputs& global, const std::vector<bool>& cases) {
  const Communicators comms(world);
  std::vector<RankResult> results(static_cast<size_t>(world));
  std::mutex mutex;
  std::condition_variable done;
  int finished = 0;
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world; ++rank)
    threads.emplace_back([&, rank] {
      RankResult& result = results[static_cast<size_t>(rank)];
      try {
        run_rank(rank, world, comms[rank], global, cases, result);
      } catch (const std::exception& error) {
        result.error = error.what();
      }
      const std::lock_guard lock(mutex);
      ++finished;
      done.notify_all();
    });
  {
    std::unique_lock lock(mutex);
    if (!done.wait_for(lock, kRingTimeout, [&] { return finished == world; })) {
      std::fprintf(stderr, "ring attention: %d of %d ranks still running after %lld s\n",
                   world - finished, world,
                   static_cast<long long>(
                       std::chrono::duration_cast<std::chrono::seconds>(kRingTimeout).count()));
      for (const RankResult& result : results)
        if (!result.error.empty()) std::fprintf(stderr, "  %s\n", result.error.c_str());
      std::abort();
    }
  }
  for (std::thread& thread : threads) thread.join();
  return results;
}

// Engine's forward of the whole sequence on GPU 0: O [batch, seq, heads, dim] and LSE.
RankOutput whole_sequence(const Inputs& global, bool causal) {
  const int64_t seq = global.q->shape[1];
  RankOutput out{HostTensor(DType::bf16, {kBatch, seq, kHeadsQ, kDim}),
                 HostTensor(DType::fp32, {kBatch, kHeadsQ, seq})};
  ProblemBuilder builder(Family::fwd);
  builder.dtype(DType::bf16)
      .shape(kBatch, kHeadsQ, kHeadsK, seq, seq, kDim, kDim)
      .q(*global.q)
      .k(*global.k)
      .v(*global.v)
      .o(out.o.view())
      .lse(out.lse.view());
  if (causal) builder.causal();
  const Problem host = builder.build();
  const jit::GpuContext context(0);
  Engine engine;
  const runtime::DeviceMirror mirror(host);  // outputs poisoned
  const jit::Stream stream;
  engine.run(mirror.device_problem(), stream.handle());
  stream.synchronize();
  mirror.copy_outputs_to(host);
  return out;
}

TEST(RingNcclGpu, MatchesOneGpuForwardOfTheWholeSequence) {
  int gpus = 0;
  if (const std::string why = skip_reason(gpus); !why.empty()) GTEST_SKIP() << why;
  const int world = std::min(gpus, kMaxWorld);
  // Chunks of a multiple of 64 tokens, about 4096 tokens in all.
  const int64_t chunk = std::max<int64_t>(64, 4096 / (2 * world) / 64 * 64);
  const int64_t seq = 2 * world * chunk;
  std::printf("world %d, seq %lld (chunks of %lld), NCCL %s\n", world, static_cast<long long>(seq),
              static_cast<long long>(chunk), distributed::nccl_library().library_path.c_str());

  TensorPool pool(2024);
  const TensorView q = pool.uniform(DType::bf16, {kBatch, seq, kHeadsQ, kDim}, -1, 1);
  const TensorView k = pool.uniform(DType::bf16, {kBatch, seq, kHeadsK, kDim}, -1, 1);
  const TensorView v = pool.uniform(DType::bf16, {kBatch, seq, kHeadsK, kDim}, -1, 1);
  const Inputs global{&q, &k, &v};
  const std::vector<bool> cases = {false, true};

  const std::vector<RankResult> results = run_ring(world, global, cases);
  for (int rank = 0; rank < world; ++rank)
    ASSERT_TRUE(results[static_cast<size_t>(rank)].error.empty())
        << "rank " << rank << ": " << results[static_cast<size_t>(rank)].error;

  const runtime::Tolerance o_tolerance = runtime::output_tolerance(DType::bf16);
  const runtime::Tolerance lse_tolerance{1e-3, 0.0};
  for (size_t c = 0; c < cases.size(); ++c) {
    const RankOutput expected = whole_sequence(global, cases[c]);
    for (int repeat = 0; repeat < 2; ++repeat) {
      SCOPED_TRACE(std::string(cases[c] ? "causal" : "full") + ", call " +
                   std::to_string(repeat + 1));
      runtime::Agreement o, lse;
      for (int rank = 0; rank < world; ++rank) {
        const RankOutput& got = results[static_cast<size_t>(rank)].outputs[c * 2 + repeat];
        const int64_t local = got.o.view().shape[1];
        for (int64_t b = 0; b < kBatch; ++b)
          for (int64_t t = 0; t < local; ++t) {
            const int64_t g = global_row(t, seq, world, rank);
            for (int64_t h = 0; h < kHeadsQ; ++h) {
              for (int64_t d = 0; d < kDim; ++d)
                o.add(got.o.at({b, t, h, d}), expected.o.at({b, g, h, d}), o_tolerance);
              lse.add(got.lse.at({b, h, t}), expected.lse.at({b, h, g}), lse_tolerance);
            }
          }
      }
      std::printf("  %s call %d: O max abs error %.2e, LSE %.2e over %lld rows\n",
                  cases[c] ? "causal" : "full", repeat + 1, o.max_abs_error, lse.max_abs_error,
                  static_cast<long long>(lse.compared));
      EXPECT_EQ(o.compared, kBatch * seq * kHeadsQ * kDim);
      EXPECT_EQ(o.mismatches, 0) << "O max abs error " << o.max_abs_error;
      EXPECT_EQ(lse.mismatches, 0) << "LSE max abs error " << lse.max_abs_error;
    }
  }
  // The same shape reuses the workspace: its size never changes after the first call.
  for (const RankResult& result : results) {
    ASSERT_FALSE(result.workspace_bytes.empty());
    EXPECT_GT(result.workspace_bytes.front(), 0);
    for (int64_t bytes : result.workspace_bytes) EXPECT_EQ(bytes, result.workspace_bytes.front());
  }
}

}  // namespace
}  // namespace tilefmha
