#include "dlpack_views.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <string>

#include "tilefmha/error.hpp"

namespace tilefmha::python {
namespace py = pybind11;

namespace {

// The DLPack ABI (dlpack.h, versions 0.x and 1.x), declared here so that no header is needed.
struct DLDevice {
  int32_t device_type;
  int32_t device_id;
};
struct DLDataType {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
};
struct DLTensor {
  void* data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t* shape;
  int64_t* strides;  // in elements; null means compact row-major
  uint64_t byte_offset;
};
struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(DLManagedTensor*);
};
struct DLPackVersion {
  uint32_t major;
  uint32_t minor;
};
struct DLManagedTensorVersioned {
  DLPackVersion version;
  void* manager_ctx;
  void (*deleter)(DLManagedTensorVersioned*);
  uint64_t flags;
  DLTensor dl_tensor;
};

constexpr int32_t kDLCUDA = 2;
constexpr int32_t kDLCUDAManaged = 13;
constexpr uint8_t kDLInt = 0, kDLUInt = 1, kDLFloat = 2, kDLBfloat = 4;
// DLPack 1.1's fp8 codes: the OCP formats PyTorch's float8_e4m3fn and float8_e5m2 export.
constexpr uint8_t kDLFloat8_e4m3fn = 10, kDLFloat8_e5m2 = 12;
constexpr uint64_t kDLFlagReadOnly = 1;

[[noreturn]] void bad_argument(const std::string& message) {
  throw Error(ErrorKind::invalid_argument, message);
}

DType dtype_of(const DLDataType& t, const std::string& field) {
  if (t.lanes == 1) {
    if (t.code == kDLFloat && t.bits == 32) return DType::fp32;
    if (t.code == kDLFloat && t.bits == 16) return DType::fp16;
    if (t.code == kDLBfloat && t.bits == 16) return DType::bf16;
    if (t.code == kDLFloat8_e4m3fn && t.bits == 8) return DType::fp8_e4m3;
    if (t.code == kDLFloat8_e5m2 && t.bits == 8) return DType::fp8_e5m2;
    if (t.code == kDLInt && t.bits == 32) return DType::int32;
    if (t.code == kDLInt && t.bits == 64) return DType::int64;
    if (t.code == kDLUInt && t.bits == 8) return DType::uint8;
  }
  bad_argument(field + ": DLPack dtype (code " + std::to_string(t.code) + ", " +
               std::to_string(t.bits) + " bits, " + std::to_string(t.lanes) +
               " lanes) is not supported (float32, float16, bfloat16, float8_e4m3fn, "
               "float8_e5m2)");
}

}  // namespace

DeviceTensor device_view(const py::capsule& capsule, std::string_view field, bool writable) {
  const std::string name(field);
  const char* capsule_name = PyCapsule_GetName(capsule.ptr());
  const DLTensor* tensor = nullptr;
  if (capsule_name && std::strcmp(capsule_name, "dltensor") == 0) {
    tensor =
        &static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule.ptr(), "dltensor"))->dl_tensor;
  } else if (capsule_name && std::strcmp(capsule_name, "dltensor_versioned") == 0) {
    const auto* managed = static_cast<DLManagedTensorVersioned*>(
        PyCapsule_GetPointer(capsule.ptr(), "dltensor_versioned"));
    if (managed->version.major != 1)
      bad_argument(name + ": DLPack version " + std::to_string(managed->version.major) +
                   " is not supported (1.x)");
    if (writable && (managed->flags & kDLFlagReadOnly))
      bad_argument(name + " is a read-only tensor but tilefmha writes into it");
    tensor = &managed->dl_tensor;
  } else {
    bad_argument(name + ": expected an unconsumed DLPack capsule, got one named '" +
                 std::string(capsule_name ? capsule_name : "") + "'");
  }
  if (tensor->device.device_type != kDLCUDA && tensor->device.device_type != kDLCUDAManaged)
    bad_argument(name + " lives on DLPack device type " +
                 std::to_string(tensor->device.device_type) +
                 ", not on a CUDA device; the GPU backend needs CUDA tensors");
  if (tensor->ndim < 0 || tensor->ndim > kMaxRank)
    bad_argument(name + " has " + std::to_string(tensor->ndim) + " dimensions; at most " +
                 std::to_string(kMaxRank) + " are supported");

  DeviceTensor result;
  result.device_ordinal = tensor->device.device_id;
  TensorView& view = result.view;
  view.dtype = dtype_of(tensor->dtype, name);
  view.space = MemorySpace::device;
  view.rank = tensor->ndim;
  int64_t row_major = 1;
  for (int d = view.rank - 1; d >= 0; --d) {
    view.shape[d] = tensor->shape[d];
    view.stride[d] = tensor->strides ? tensor->strides[d] : row_major;
    row_major *= tensor->shape[d];
  }
  view.data = static_cast<char*>(tensor->data) + tensor->byte_offset;
  return result;
}

DeviceTensor device_view(uintptr_t data, std::string_view dtype, const std::vector<int64_t>& shape,
                         const std::vector<int64_t>& strides, int device, std::string_view field) {
  const std::string name(field);
  struct Named {
    std::string_view name;
    DType dtype;
  };
  static constexpr Named kDtypes[] = {
      {"float32", DType::fp32},         {"float16", DType::fp16},
      {"bfloat16", DType::bf16},        {"float8_e4m3fn", DType::fp8_e4m3},
      {"float8_e5m2", DType::fp8_e5m2}, {"int32", DType::int32},
      {"int64", DType::int64},          {"uint8", DType::uint8}};
  DeviceTensor result;
  TensorView& view = result.view;
  const auto* found = std::find_if(std::begin(kDtypes), std::end(kDtypes),
                                   [&](const Named& entry) { return entry.name == dtype; });
  if (found == std::end(kDtypes))
    bad_argument(name + ".dtype = " + std::string(dtype) +
                 " is not supported (float32, float16, bfloat16, float8_e4m3fn, "
                 "float8_e5m2)");
  if (shape.size() != strides.size())
    bad_argument(name + ": " + std::to_string(shape.size()) + " sizes but " +
                 std::to_string(strides.size()) + " strides");
  if (shape.size() > static_cast<size_t>(kMaxRank))
    bad_argument(name + " has " + std::to_string(shape.size()) + " dimensions; at most " +
                 std::to_string(kMaxRank) + " are supported");
  if (device < 0) bad_argument(name + " is not on a CUDA device; the GPU backend needs one");
  result.device_ordinal = device;
  view.dtype = found->dtype;
  view.space = MemorySpace::device;
  view.rank = static_cast<int>(shape.size());
  for (int d = 0; d < view.rank; ++d) {
    view.shape[d] = shape[d];
    view.stride[d] = strides[d];
  }
  view.data = reinterpret_cast<void*>(data);
  return result;
}

}  // namespace tilefmha::python
