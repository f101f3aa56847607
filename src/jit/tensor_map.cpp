#include "jit/tensor_map.hpp"

#include <string>

#include "tilefmha/error.hpp"

namespace tilefmha::jit {
namespace {

int64_t element_bytes(TensorMapElement element) {
  switch (element) {
    case TensorMapElement::uint8: return 1;
    case TensorMapElement::fp16:
    case TensorMapElement::bf16: return 2;
    case TensorMapElement::fp32: return 4;
  }
  throw Error(ErrorKind::invalid_argument,
              "tensor map element " + std::to_string(static_cast<int>(element)) + " unknown");
}

int64_t swizzle_bytes(TensorMapSwizzle swizzle) {
  switch (swizzle) {
    case TensorMapSwizzle::none: return 0;
    case TensorMapSwizzle::bytes32: return 32;
    case TensorMapSwizzle::bytes64: return 64;
    case TensorMapSwizzle::bytes128: return 128;
  }
  return 0;
}

void validate(const TiledTensorMapSpec& spec) {
  const size_t rank = spec.dims.size();
  auto fail = [](const std::string& message) { throw Error(ErrorKind::invalid_argument, message); };
  if (rank < 1 || rank > 5) fail("tensor map rank " + std::to_string(rank) + " not in [1, 5]");
  if (spec.box.size() != rank) {
    fail("tensor map box has " + std::to_string(spec.box.size()) + " entries, rank is " +
         std::to_string(rank));
  }
  if (spec.strides_bytes.size() != rank - 1) {
    fail("tensor map strides_bytes has " + std::to_string(spec.strides_bytes.size()) +
         " entries, expected rank - 1 = " + std::to_string(rank - 1));
  }
  if (spec.global_address % 16 != 0) fail("tensor map global_address is not 16-byte aligned");
  for (size_t d = 0; d + 1 < rank; ++d) {
    if (spec.strides_bytes[d] % 16 != 0) {
      fail("tensor map strides_bytes[" + std::to_string(d) +
           "] = " + std::to_string(spec.strides_bytes[d]) + " is not a multiple of 16");
    }
  }
  for (size_t d = 0; d < rank; ++d) {
    if (spec.box[d] < 1 || spec.box[d] > 256) {
      fail("tensor map box[" + std::to_string(d) + "] = " + std::to_string(spec.box[d]) +
           " not in [1, 256]");
    }
  }
  const int64_t inner_bytes = spec.box[0] * element_bytes(spec.element);
  const int64_t swizzle_span = swizzle_bytes(spec.swizzle);
  if (swizzle_span > 0 && inner_bytes > swizzle_span) {
    fail("tensor map box[0] spans " + std::to_string(inner_bytes) + " bytes, more than the " +
         std::to_string(swizzle_span) + "-byte swizzle");
  }
}

}  // namespace

CuTensorMap encode_tiled_tensor_map(const TiledTensorMapSpec& spec) {
  validate(spec);
  const CudaDriverApi& api = cuda_driver();
  if (api.tensor_map_encode_tiled == nullptr) {
    throw Error(ErrorKind::runtime, "cuTensorMapEncodeTiled missing from " + api.library_path +
                                        ": the driver predates TMA (CUDA 12)");
  }
  const std::vector<uint32_t> element_strides(spec.dims.size(), 1);
  CuTensorMap map{};
  constexpr int interleave_none = 0, l2_promotion_128b = 2, oob_fill_zero = 0;
  check_cuda(api.tensor_map_encode_tiled(
                 &map, static_cast<int>(spec.element), static_cast<unsigned>(spec.dims.size()),
                 reinterpret_cast<void*>(spec.global_address), spec.dims.data(),
                 spec.strides_bytes.data(), spec.box.data(), element_strides.data(),
                 interleave_none, static_cast<int>(spec.swizzle), l2_promotion_128b, oob_fill_zero),
             "cuTensorMapEncodeTiled");
  return map;
}

}  // namespace tilefmha::jit
