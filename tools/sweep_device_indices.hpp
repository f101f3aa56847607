// The index arrays of a sweep row's device problem (seqstarts, key lengths, page tables) moved
// into device memory, as a serving engine keeps them. Left in host vectors, every timed run
// would first upload them (a page table of page size 1 is one entry per key), which a decode
// kernel's time cannot hide.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "jit/module.hpp"
#include "tilefmha/problem.hpp"

namespace tilefmha::cli {

// Copies one index array where the kernels read it and returns that address.
using PlaceIndices = std::function<const void*(std::span<const std::byte> array)>;

// `problem` with each non-empty host index vector placed by `place` into DeviceIndexArrays and
// emptied. A paged group-mode problem also gets its key counts (from seqstart_k) as key lengths:
// validate() needs them per sequence and does not count a device seqstart_k.
Problem with_placed_indices(Problem problem, const PlaceIndices& place);

class DeviceIndexCopies {
 public:
  // `device_problem`: tensors already in device memory (runtime::DeviceMirror), index arrays in
  // host vectors. Needs a current CUDA context; the copies live as long as this object.
  explicit DeviceIndexCopies(const Problem& device_problem);

  const Problem& problem() const { return problem_; }

 private:
  std::vector<std::unique_ptr<jit::DeviceBuffer>> buffers_;
  Problem problem_;
};

}  // namespace tilefmha::cli
