#include "run_files.hpp"

#include <cstring>

#include "core/numeric.hpp"
#include "core/tensor_iteration.hpp"
#include "tilefmha/error.hpp"

namespace tilefmha::cli {
namespace {

int64_t element_count(const std::vector<int64_t>& shape) {
  int64_t count = 1;
  for (int64_t size : shape) count *= size;
  return count;
}

}  // namespace

io::NpyArray view_to_npy(const TensorView& view, DType file_dtype,
                         std::vector<int64_t> file_shape) {
  if (element_count(file_shape) != view.numel())
    throw Error(ErrorKind::invalid_argument,
                "cannot save a view of " + std::to_string(view.numel()) + " elements as shape " +
                    io::shape_string(file_shape));
  io::NpyArray array;
  array.dtype = file_dtype;
  array.shape = std::move(file_shape);
  array.bytes.resize(static_cast<size_t>(view.numel() * dtype_size(file_dtype)));
  for_each_element(view, [&](int64_t linear, int64_t offset) {
    numeric::store(array.bytes.data(), file_dtype, linear,
                   numeric::load(view.data, view.dtype, offset));
  });
  return array;
}

void npy_to_view(const io::NpyArray& array, const TensorView& view) {
  if (array.numel() != view.numel())
    throw Error(ErrorKind::invalid_argument,
                "cannot load an array of shape " + io::shape_string(array.shape) +
                    " into a view of " + std::to_string(view.numel()) + " elements");
  for_each_element(view, [&](int64_t linear, int64_t offset) {
    numeric::store(view.data, view.dtype, offset,
                   numeric::load(array.bytes.data(), array.dtype, linear));
  });
}

std::vector<int64_t> npy_to_integers(const io::NpyArray& array) {
  std::vector<int64_t> values(static_cast<size_t>(array.numel()));
  // Read as integers: a trip through double would round int64 values above 2^53.
  for (size_t i = 0; i < values.size(); ++i) {
    if (array.dtype == DType::int64) {
      std::memcpy(&values[i], array.bytes.data() + i * sizeof(int64_t), sizeof(int64_t));
    } else if (array.dtype == DType::int32) {
      int32_t value;
      std::memcpy(&value, array.bytes.data() + i * sizeof(int32_t), sizeof(int32_t));
      values[i] = value;
    } else {
      values[i] = static_cast<int64_t>(numeric::load(array.bytes.data(), array.dtype, i));
    }
  }
  return values;
}

InputDir::InputDir(std::filesystem::path dir) : dir_(std::move(dir)) {
  std::error_code error;
  if (!std::filesystem::is_directory(dir_, error))
    throw Error(ErrorKind::io, "--load " + dir_.string() + ": not a directory");
}

bool InputDir::has(std::string_view name) const {
  std::error_code error;
  return std::filesystem::exists(dir_ / name, error);
}

std::string InputDir::describe(std::string_view name) const {
  return (dir_ / name).string();
}

const io::NpyArray& InputDir::read(std::string_view name) {
  if (auto found = cache_.find(name); found != cache_.end()) return found->second;
  if (!has(name)) throw Error(ErrorKind::io, describe(name) + ": missing (needed by this run)");
  return cache_.emplace(std::string(name), io::read_npy(dir_ / name)).first->second;
}

const io::NpyArray& InputDir::read_data(std::string_view name, const FileShape& shape) {
  const io::NpyArray& array = read(name);
  if (array.dtype != DType::fp32)
    throw Error(ErrorKind::invalid_argument, describe(name) + ": dtype " +
                                                 std::string(to_string(array.dtype)) +
                                                 ", expected float32 ('<f4')");
  if (array.shape != shape.sizes)
    throw Error(ErrorKind::invalid_argument,
                describe(name) + ": shape " + io::shape_string(array.shape) +
                    " does not match the flags: expected " + io::shape_string(shape.sizes) + " = " +
                    shape.meaning);
  return array;
}

std::vector<int64_t> InputDir::read_integers(std::string_view name) {
  const io::NpyArray& array = read(name);
  if (array.dtype != DType::int32 && array.dtype != DType::int64)
    throw Error(ErrorKind::invalid_argument, describe(name) + ": dtype " +
                                                 std::string(to_string(array.dtype)) +
                                                 ", expected int32 ('<i4') or int64 ('<i8')");
  if (array.shape.size() != 1)
    throw Error(ErrorKind::invalid_argument,
                describe(name) + ": shape " + io::shape_string(array.shape) + ", expected 1-D");
  return npy_to_integers(array);
}

}  // namespace tilefmha::cli
