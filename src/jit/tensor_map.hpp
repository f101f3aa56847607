// Host-side TMA descriptors: cuTensorMapEncodeTiled through the dlopen'd driver. The result is
// passed by value to a kernel parameter declared `const __grid_constant__ TensorMap`
// (kernels/tile/tma.h).
#pragma once

#include <cstdint>
#include <vector>

#include "jit/cuda_driver.hpp"

namespace tilefmha::jit {

// Values of CUtensorMapDataType.
enum class TensorMapElement : int { uint8 = 0, fp16 = 6, fp32 = 7, bf16 = 9 };
// Values of CUtensorMapSwizzle; must match the shared-memory descriptor's swizzle.
enum class TensorMapSwizzle : int { none = 0, bytes32 = 1, bytes64 = 2, bytes128 = 3 };

struct TiledTensorMapSpec {
  TensorMapElement element = TensorMapElement::bf16;
  CUdeviceptr global_address = 0;       // 16-byte aligned
  std::vector<uint64_t> dims;           // elements per dimension, innermost first (rank 1..5)
  std::vector<uint64_t> strides_bytes;  // of dims[1..], multiples of 16 (rank - 1 entries)
  std::vector<uint32_t> box;            // elements copied per dimension, each 1..256
  TensorMapSwizzle swizzle = TensorMapSwizzle::bytes128;
};

// Throws Error(invalid_argument) naming the field for an inconsistent spec, Error(runtime)
// when the driver rejects it or has no TMA.
CuTensorMap encode_tiled_tensor_map(const TiledTensorMapSpec& spec);

}  // namespace tilefmha::jit
