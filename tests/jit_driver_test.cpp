// The run-time CUDA driver loader: a clean "unavailable" error where libcuda is absent.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <string>

#include "jit/cuda_driver.hpp"
#include "jit/module.hpp"
#include "jit/tensor_map.hpp"
#include "tilefmha/error.hpp"

namespace tilefmha::jit {
namespace {

bool libcuda_present() {
  void* handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) return false;
  dlclose(handle);
  return true;
}

TEST(JitDriver, MissingLibraryGivesAClearReason) {
  const CudaDriverLoad load = load_cuda_driver("libcuda_not_installed_here.so.1");
  EXPECT_NE(load.failure.find("no CUDA driver found (libcuda_not_installed_here.so.1): GPU "
                              "backend unavailable"),
            std::string::npos)
      << load.failure;
}

TEST(JitDriver, ReportsUnavailableWithoutLibcuda) {
  if (libcuda_present()) GTEST_SKIP() << "libcuda.so.1 is installed on this machine";
  try {
    cuda_driver();
    FAIL() << "cuda_driver() succeeded without libcuda.so.1";
  } catch (const Error& error) {
    EXPECT_EQ(error.kind(), ErrorKind::runtime);
    EXPECT_NE(std::string(error.what())
                  .find("no CUDA driver found (libcuda.so.1): GPU backend unavailable"),
              std::string::npos)
        << error.what();
  }
  EXPECT_NE(gpu_unavailable_reason().find("no CUDA driver found"), std::string::npos);
}

TEST(JitDriver, GpuObjectsFailCleanlyWithoutLibcuda) {
  if (libcuda_present()) GTEST_SKIP() << "libcuda.so.1 is installed on this machine";
  auto expect_unavailable = [](auto&& action) {
    try {
      action();
      ADD_FAILURE() << "a GPU call succeeded without a driver";
    } catch (const Error& error) {
      EXPECT_EQ(error.kind(), ErrorKind::runtime);
      EXPECT_NE(std::string(error.what()).find("GPU backend unavailable"), std::string::npos);
    }
  };
  expect_unavailable([] { GpuContext context(0); });
  expect_unavailable([] { DeviceBuffer buffer(256); });
  expect_unavailable([] { LoadedModule module(std::vector<char>(16, 1)); });
}

TEST(JitDriver, TensorMapSpecIsValidatedBeforeTheDriver) {
  TiledTensorMapSpec spec;
  spec.global_address = 4096;
  spec.dims = {64, 64};
  spec.strides_bytes = {100};  // not a multiple of 16
  spec.box = {64, 64};
  try {
    encode_tiled_tensor_map(spec);
    FAIL() << "a misaligned stride was accepted";
  } catch (const Error& error) {
    EXPECT_EQ(error.kind(), ErrorKind::invalid_argument);
    EXPECT_NE(std::string(error.what()).find("strides_bytes[0] = 100"), std::string::npos);
  }
  spec.strides_bytes = {128};
  spec.box = {128, 64};  // 256 bytes of bf16 across a 128-byte swizzle
  EXPECT_THROW(encode_tiled_tensor_map(spec), Error);
}

}  // namespace
}  // namespace tilefmha::jit
