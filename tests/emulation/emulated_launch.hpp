// Runs a kernel over a grid on the host against this directory's stand-ins (README.md): block
// after block (so `__shared__` arrays can be statics), one std::thread per CUDA thread, with a
// std::barrier and 32 exchange slots per warp for __syncwarp and __shfl_sync.
#pragma once

#include <barrier>
#include <memory>
#include <thread>
#include <vector>

#include "tile/device.h"

namespace tilefmha::emulation {

// Calls `kernel()` on every thread of `blocks` blocks of `threads` threads (a multiple of 32),
// with threadIdx.x and blockIdx.x set.
template <class Kernel>
void run_grid(unsigned blocks, unsigned threads, Kernel kernel) {
  for (unsigned block = 0; block < blocks; ++block) {
    std::vector<std::unique_ptr<std::barrier<>>> warps;
    for (unsigned w = 0; w < threads / 32; ++w)
      warps.push_back(std::make_unique<std::barrier<>>(32));
    std::vector<unsigned> slots(threads);
    std::vector<std::thread> pool;
    for (unsigned t = 0; t < threads; ++t)
      pool.emplace_back([&, t] {
        threadIdx = {t, 0, 0};
        blockIdx = {block, 0, 0};
        emulated_warp = warps[t / 32].get();
        emulated_warp_slots = slots.data() + t / 32 * 32;
        kernel();
      });
    for (std::thread& thread : pool) thread.join();
  }
}

}  // namespace tilefmha::emulation
