// A host emulation of the CUDA execution model for the kernel headers' tests without a GPU: one
// CTA at a time, each CUDA thread a fiber (ucontext) on the calling OS thread, switched at
// __syncthreads() and at warp-collective operations (mma.sync, ldmatrix, shfl), which the shim
// headers of tests/support/emulation/tile/ implement on top of warp_sync(). Slow, exact about
// data movement and fragment layouts, and single-threaded, so atomics are plain adds.
//
// Only for tests: the kernels/ headers compile on the host against these shims when
// tests/support/emulation comes before kernels/ in the include path.
#pragma once

#include <ucontext.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace tilefmha::emulation {

struct Dim3 {
  unsigned x = 0, y = 0, z = 0;
};

// 32-bit values one lane posts for a warp collective.
struct LaneSlot {
  uint32_t u[8];
  float f[8];
};

class Cta {
 public:
  static constexpr size_t kStackBytes = 256 * 1024;

  Cta(Dim3 grid, Dim3 block_index, unsigned threads) : grid_(grid), block_(block_index) {
    fibers_.resize(threads);
    slots_.resize((threads + 31) / 32 * 32);
  }

  // Runs `kernel` on every thread of the CTA until all return. Throws on a deadlock (threads
  // waiting at different barriers).
  void run(const std::function<void()>& kernel) {
    kernel_ = &kernel;
    Cta* previous = current_cta();
    current_cta() = this;
    for (size_t t = 0; t < fibers_.size(); ++t) {
      Fiber& f = fibers_[t];
      f.stack = std::make_unique<char[]>(kStackBytes);
      getcontext(&f.context);
      f.context.uc_stack.ss_sp = f.stack.get();
      f.context.uc_stack.ss_size = kStackBytes;
      f.context.uc_link = &scheduler_;
      makecontext(&f.context, reinterpret_cast<void (*)()>(&Cta::entry), 1, static_cast<int>(t));
    }
    // Each warp runs as far as it can (to a __syncthreads or its end) before the next one
    // starts, in ascending warp order between one pair of barriers and descending between the
    // next: a read of shared memory that no barrier orders after another warp's write then
    // sees stale data in one of the two orders.
    const size_t warps = (fibers_.size() + 31) / 32;
    for (int phase = 0;; ++phase) {
      bool progress = false;
      for (size_t i = 0; i < warps; ++i) {
        const size_t w = phase % 2 == 0 ? i : warps - 1 - i;
        for (;;) {
          for (size_t t = w * 32; t < std::min(fibers_.size(), w * 32 + 32); ++t) {
            Fiber& f = fibers_[t];
            if (f.done || f.wait != Wait::none) continue;
            current_ = static_cast<int>(t);
            swapcontext(&scheduler_, &f.context);
            progress = true;
          }
          if (!release_warp(w)) break;
          progress = true;
        }
      }
      if (all_done()) break;
      if (release_barrier()) progress = true;
      if (!progress) {
        current_cta() = previous;
        throw std::runtime_error("emulated CTA deadlocked: threads wait at different barriers");
      }
    }
    current_cta() = previous;
  }

  static Cta*& current_cta() {
    static Cta* cta = nullptr;
    return cta;
  }

  Dim3 thread_index() const { return {static_cast<unsigned>(current_), 0, 0}; }
  Dim3 block_index() const { return block_; }
  Dim3 grid_dim() const { return grid_; }
  Dim3 block_dim() const { return {static_cast<unsigned>(fibers_.size()), 1, 1}; }

  void sync_threads() { wait(Wait::cta); }

  // cp.async: a copy lands only when its thread waits for its group (cp.async.wait_group), so a
  // kernel that reads a tile before waiting for it reads stale shared memory.
  void async_copy(unsigned char* destination, const void* source, bool in_bounds) {
    fibers_[current_].open_group.push_back({destination, source, in_bounds});
  }
  void async_commit() {
    Fiber& f = fibers_[current_];
    f.groups.push_back(std::move(f.open_group));
    f.open_group.clear();
  }
  void async_wait(int pending_groups) {
    Fiber& f = fibers_[current_];
    while (static_cast<int>(f.groups.size()) > pending_groups) {
      for (const Copy& copy : f.groups.front()) {
        if (copy.in_bounds)
          std::memcpy(copy.destination, copy.source, 16);
        else
          std::memset(copy.destination, 0, 16);
      }
      f.groups.erase(f.groups.begin());
    }
  }
  void sync_warp() { wait(Wait::warp); }
  LaneSlot& slot(int thread) { return slots_[thread]; }

 private:
  enum class Wait { none, warp, cta };
  struct Copy {
    unsigned char* destination;
    const void* source;
    bool in_bounds;
  };
  struct Fiber {
    std::vector<Copy> open_group;
    std::vector<std::vector<Copy>> groups;
    ucontext_t context;
    std::unique_ptr<char[]> stack;
    bool done = false;
    Wait wait = Wait::none;
  };

  static void entry(int thread) {
    Cta& cta = *current_cta();
    (*cta.kernel_)();
    cta.fibers_[thread].done = true;
    // Returning resumes uc_link: the scheduler.
  }

  void wait(Wait kind) {
    Fiber& f = fibers_[current_];
    f.wait = kind;
    swapcontext(&f.context, &scheduler_);
  }

  bool all_done() const {
    for (const Fiber& f : fibers_)
      if (!f.done) return false;
    return true;
  }

  // Releases warp w's rendezvous once all 32 lanes wait there.
  bool release_warp(size_t w) {
    const size_t end = std::min(fibers_.size(), w * 32 + 32);
    for (size_t t = w * 32; t < end; ++t)
      if (fibers_[t].done || fibers_[t].wait != Wait::warp) return false;
    for (size_t t = w * 32; t < end; ++t) fibers_[t].wait = Wait::none;
    return true;
  }

  // Releases the CTA barrier once every live thread waits there (exited threads count as
  // arrived, as on the hardware).
  bool release_barrier() {
    bool anyone = false;
    for (const Fiber& f : fibers_) {
      if (f.done) continue;
      if (f.wait != Wait::cta) return false;
      anyone = true;
    }
    if (!anyone) return false;
    for (Fiber& f : fibers_) f.wait = Wait::none;
    return true;
  }

  Dim3 grid_, block_;
  std::vector<Fiber> fibers_;
  std::vector<LaneSlot> slots_;
  ucontext_t scheduler_;
  int current_ = -1;
  const std::function<void()>* kernel_ = nullptr;
};

inline Cta& cta() {
  return *Cta::current_cta();
}

// Launches `kernel` on every CTA of `grid`, one after another.
inline void launch(Dim3 grid, unsigned threads, const std::function<void()>& kernel) {
  for (unsigned z = 0; z < grid.z; ++z)
    for (unsigned y = 0; y < grid.y; ++y)
      for (unsigned x = 0; x < grid.x; ++x) {
        Cta block(grid, {x, y, z}, threads);
        block.run(kernel);
      }
}

// The emulated CTA's shared memory (one CTA runs at a time).
inline constexpr size_t kSharedBytes = 232448;

}  // namespace tilefmha::emulation

// The dynamic shared memory the kernels declare as `extern __shared__ unsigned char shared[]`
// inside namespace tilefmha::fmha.
namespace tilefmha::fmha {
extern unsigned char shared[];
}

// CUDA built-ins the kernel headers use.
#define __device__
#define __global__
#define __forceinline__
#define __shared__
#define __align__(n)
#define threadIdx (::tilefmha::emulation::cta().thread_index())
#define blockIdx (::tilefmha::emulation::cta().block_index())
#define gridDim (::tilefmha::emulation::cta().grid_dim())
#define blockDim (::tilefmha::emulation::cta().block_dim())

inline void __syncthreads() {
  ::tilefmha::emulation::cta().sync_threads();
}

struct float2 {
  float x, y;
};
struct float4 {
  float x, y, z, w;
};
struct uint4 {
  unsigned x, y, z, w;
};
inline float2 make_float2(float x, float y) {
  return {x, y};
}
inline float4 make_float4(float x, float y, float z, float w) {
  return {x, y, z, w};
}
// One OS thread runs every fiber, and fibers switch only at barriers: a plain add is atomic.
inline float atomicAdd(float* address, float value) {
  const float old = *address;
  *address = old + value;
  return old;
}
