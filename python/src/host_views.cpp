#include "host_views.hpp"

#include <algorithm>
#include <string>

#include "tilefmha/error.hpp"

namespace tilefmha::python {
namespace py = pybind11;

namespace {

[[noreturn]] void bad_argument(const std::string& message) {
  throw Error(ErrorKind::invalid_argument, message);
}

std::string dtype_name(const py::dtype& dtype) {
  return std::string(py::str(py::handle(dtype)));
}

// Read through the Python attributes, not pybind11's struct accessors: NumPy 2 moved the
// descriptor's fields, and the accessors of the pybind11 Debian ships read the NumPy 1 layout.
int64_t dtype_itemsize(const py::dtype& dtype) {
  return py::cast<int64_t>(py::handle(dtype).attr("itemsize"));
}
char dtype_kind(const py::dtype& dtype) {
  return py::cast<std::string>(py::handle(dtype).attr("kind")).at(0);
}

}  // namespace

DType storage_dtype(const py::dtype& dtype, std::string_view field) {
  const char kind = dtype_kind(dtype);
  const int64_t size = dtype_itemsize(dtype);
  if (kind == 'f' && size == 4) return DType::fp32;
  if (kind == 'f' && size == 2) return DType::fp16;
  if (kind == 'u' && size == 2) return DType::bf16;
  if (size == 2 && dtype_name(dtype) == "bfloat16") return DType::bf16;
  // ml_dtypes' fp8 types (kind 'V'); plain uint8 codes are fp8 only when the caller says so.
  if (size == 1 && dtype_name(dtype) == "float8_e4m3fn") return DType::fp8_e4m3;
  if (size == 1 && dtype_name(dtype) == "float8_e5m2") return DType::fp8_e5m2;
  if (kind == 'i' && size == 4) return DType::int32;
  if (kind == 'i' && size == 8) return DType::int64;
  if (kind == 'u' && size == 1) return DType::uint8;
  bad_argument(std::string(field) + ".dtype = " + dtype_name(dtype) +
               " is not supported (float32, float16, bf16 as uint16 bit patterns, or fp8 as "
               "ml_dtypes float8_e4m3fn / float8_e5m2 or uint8 codes)");
}

TensorView host_view(const py::array& array, std::string_view field, bool writable) {
  const std::string name(field);
  if (array.ndim() > kMaxRank)
    bad_argument(name + " has " + std::to_string(array.ndim()) + " dimensions; at most " +
                 std::to_string(kMaxRank) + " are supported");
  if (writable && !array.writeable())
    bad_argument(name + " is a read-only array but tilefmha writes into it");
  TensorView view;
  view.dtype = storage_dtype(array.dtype(), field);
  view.space = MemorySpace::host;
  view.rank = static_cast<int>(array.ndim());
  const int64_t itemsize = dtype_itemsize(array.dtype());
  if (array.size() == 0) {
    // NumPy gives empty arrays all-zero strides, which validation would take for an output
    // broadcast onto one address; no element is addressed, so row-major strides serve.
    int64_t row_major = 1;
    for (int d = view.rank - 1; d >= 0; --d) {
      view.shape[d] = static_cast<int64_t>(array.shape(d));
      view.stride[d] = row_major;
      row_major *= std::max<int64_t>(view.shape[d], 1);
    }
    view.data = const_cast<void*>(array.data());
    return view;
  }
  for (int d = 0; d < view.rank; ++d) {
    view.shape[d] = static_cast<int64_t>(array.shape(d));
    const auto bytes = static_cast<int64_t>(array.strides(d));
    if (bytes % itemsize != 0)
      bad_argument(name + ".stride[" + std::to_string(d) + "] = " + std::to_string(bytes) +
                   " bytes is not a multiple of the element size " + std::to_string(itemsize));
    view.stride[d] = bytes / itemsize;
  }
  // mutable_data would throw on read-only inputs; the engine writes only what `writable` allowed.
  view.data = const_cast<void*>(array.data());
  return view;
}

}  // namespace tilefmha::python
