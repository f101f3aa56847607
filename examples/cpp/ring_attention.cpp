// Ring attention (context parallelism) over NCCL: the sequence is cut into 2N chunks for N GPUs,
// rank r holds chunks r and 2N-1-r (zigzag, so causal work is even), and K/V shards travel
// around the ring while every rank attends its queries to each shard in turn. The CPU part
// prints the shards and each rank's schedule and checks that the shards cover the sequence once.
// Where two or more GPUs and NCCL are present ($TILEFMHA_NCCL_LIBRARY, else libnccl.so.2), every
// GPU runs tilefmha::RingAttention on its shard from its own thread, and the gathered output is
// checked against the formula over the whole sequence, causal.
#include "tilefmha/ring_attention.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "distributed/nccl_library.hpp"
#include "example_support.hpp"
#include "jit/cuda_driver.hpp"
#include "jit/module.hpp"
#include "jit/nvrtc_api.hpp"
#include "tilefmha/context_parallel.hpp"
#include "tilefmha/engine.hpp"
#include "tilefmha/error.hpp"

using namespace tilefmha;
namespace cp = tilefmha::context_parallel;

namespace {

constexpr int64_t kBatch = 1, kHeadsQ = 4, kHeadsK = 2, kDim = 64, kChunk = 64;

// Global row of row t of rank r's shard: its front chunk, then its back chunk.
int64_t global_row(int64_t t, int64_t seq, int world, int rank) {
  return t < kChunk ? cp::front_chunk(seq, world, rank).begin + t
                    : cp::back_chunk(seq, world, rank).begin + t - kChunk;
}

// Prints each rank's chunks and blocks; returns whether the shards hold every row exactly once.
bool show_shards(int world, int64_t seq) {
  std::vector<int> held(static_cast<size_t>(seq), 0);
  for (int r = 0; r < world; ++r) {
    const cp::ChunkRange front = cp::front_chunk(seq, world, r),
                         back = cp::back_chunk(seq, world, r);
    std::printf("rank %d holds rows [%lld, %lld) and [%lld, %lld); steps:", r,
                static_cast<long long>(front.begin), static_cast<long long>(front.end),
                static_cast<long long>(back.begin), static_cast<long long>(back.end));
    for (const cp::RingStep& step : cp::ring_schedule(world, r, /*causal=*/true, false)) {
      std::printf("  K/V of %d:", step.source_rank);
      for (const cp::Block& b : step.blocks)
        std::printf(" %s x %s%s", cp::part_name(b.queries), cp::part_name(b.keys),
                    b.causal ? " causal" : "");
    }
    std::printf("\n");
    for (int64_t t = 0; t < 2 * kChunk; ++t)
      ++held[static_cast<size_t>(global_row(t, seq, world, r))];
  }
  return std::all_of(held.begin(), held.end(), [](int count) { return count == 1; });
}

// Why the GPU part cannot run here; empty when it can.
std::string gpu_part_unavailable(int& gpus) {
  std::string why = jit::gpu_unavailable_reason();
  if (!why.empty()) return why;
  try {
    jit::nvrtc_api();
    jit::check_cuda(jit::cuda_driver().device_get_count(&gpus), "cuDeviceGetCount");
    if (gpus < 2) return "ring attention needs 2 GPUs; found " + std::to_string(gpus);
    const distributed::NcclApi& nccl = distributed::nccl_library();
    if (nccl.comm_init_all == nullptr || nccl.comm_destroy == nullptr)
      return nccl.library_path + " lacks ncclCommInitAll or ncclCommDestroy";
  } catch (const Error& error) {
    return error.what();
  }
  return {};
}

// Copies rows of a [batch, seq, heads, dim] host tensor between the global sequence and rank
// `rank`'s shard (to_shard: global -> shard).
void copy_shard(examples::HostBuffer& global, std::vector<std::byte>& shard, int world, int rank,
                bool to_shard) {
  const int64_t seq = global.view.shape[1];
  const int64_t row = global.view.shape[2] * global.view.shape[3] * dtype_size(global.view.dtype);
  shard.resize(static_cast<size_t>(kBatch * 2 * kChunk * row));
  for (int64_t b = 0; b < kBatch; ++b)
    for (int64_t t = 0; t < 2 * kChunk; ++t) {
      std::byte* local = shard.data() + (b * 2 * kChunk + t) * row;
      std::byte* whole = global.bytes.data() + (b * seq + global_row(t, seq, world, rank)) * row;
      if (to_shard)
        std::memcpy(local, whole, static_cast<size_t>(row));
      else
        std::memcpy(whole, local, static_cast<size_t>(row));
    }
}

// One rank: its GPU's engine and RingAttention on its shard, O written back into x.o's rows.
void run_rank(int rank, int world, void* comm, examples::BshdBuffers& x, std::string& error) try {
  const jit::GpuContext context(rank);
  EngineOptions options;
  options.device = rank;
  Engine engine(options);
  RingAttention ring(engine, comm);  // rank and world come from the communicator

  std::vector<std::byte> q, k, v, o;
  copy_shard(x.q, q, world, rank, true);
  copy_shard(x.k, k, world, rank, true);
  copy_shard(x.v, v, world, rank, true);
  const auto upload = [](const std::vector<std::byte>& bytes) {
    auto buffer = std::make_unique<jit::DeviceBuffer>(static_cast<int64_t>(bytes.size()));
    buffer->copy_from_host(bytes);
    return buffer;
  };
  const auto q_device = upload(q), k_device = upload(k), v_device = upload(v);
  jit::DeviceBuffer o_device(static_cast<int64_t>(q.size()));
  const auto at = [](const jit::DeviceBuffer& buffer) {
    return reinterpret_cast<void*>(buffer.address());
  };

  RingForward args;
  const int64_t local = 2 * kChunk;
  args.q = bshd(at(*q_device), DType::bf16, kBatch, local, kHeadsQ, kDim, MemorySpace::device);
  args.k = bshd(at(*k_device), DType::bf16, kBatch, local, kHeadsK, kDim, MemorySpace::device);
  args.v = bshd(at(*v_device), DType::bf16, kBatch, local, kHeadsK, kDim, MemorySpace::device);
  args.o = bshd(at(o_device), DType::bf16, kBatch, local, kHeadsQ, kDim, MemorySpace::device);
  args.causal = true;
  const jit::Stream stream;
  ring.forward(args, stream.handle());
  stream.synchronize();
  o.resize(q.size());
  o_device.copy_to_host(o);
  copy_shard(x.o, o, world, rank, false);  // ranks write disjoint rows
} catch (const std::exception& e) {
  error = e.what();
}

}  // namespace

int main() {
  int gpus = 0;
  const std::string why = gpu_part_unavailable(gpus);
  const int world = why.empty() ? std::min(gpus, 8) : 2;
  const int64_t seq = 2 * world * kChunk;
  bool ok = show_shards(world, seq);
  std::printf("zigzag shards hold every row once: %s\n", ok ? "ok" : "FAILED");
  if (!why.empty()) {
    std::printf("GPU part skipped: %s\n", why.c_str());
    return ok ? 0 : 1;
  }

  examples::BshdBuffers x(DType::bf16, DType::bf16, kBatch, seq, seq, kHeadsQ, kHeadsK, kDim);
  x.fill_inputs(7);
  // One communicator per GPU, made together; a program with one process per GPU would use
  // ncclGetUniqueId and ncclCommInitRank instead.
  const distributed::NcclApi& nccl = distributed::nccl_library();
  std::vector<distributed::NcclComm> comms(static_cast<size_t>(world));
  std::vector<int> devices(static_cast<size_t>(world));
  for (int d = 0; d < world; ++d) devices[static_cast<size_t>(d)] = d;
  distributed::check_nccl(nccl, nccl.comm_init_all(comms.data(), world, devices.data()),
                          "ncclCommInitAll");
  std::vector<std::string> errors(static_cast<size_t>(world));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back(run_rank, r, world, comms[static_cast<size_t>(r)], std::ref(x),
                         std::ref(errors[static_cast<size_t>(r)]));
  for (std::thread& thread : threads) thread.join();
  for (distributed::NcclComm comm : comms) nccl.comm_destroy(comm);
  for (int r = 0; r < world; ++r)
    if (!errors[static_cast<size_t>(r)].empty()) {
      std::printf("rank %d failed: %s\n", r, errors[static_cast<size_t>(r)].c_str());
      ok = false;
    }
  if (!ok) return 1;

  // Causal over the whole sequence: query i sees keys 0..i. bf16 output: a few bf16 units.
  const examples::MaxError error = examples::formula_error(x, [](int64_t i) { return i + 1; });
  return error.report("ring attention on the GPUs vs formula", 2e-2) ? 0 : 1;
}
