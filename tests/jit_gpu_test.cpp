// GPU tests of the JIT path and the tile primitives: NVRTC compile, load through the
// dlopen'd driver, launch, and compare with a CPU computation. Skipped (reported as skipped)
// where no driver or GPU is present. Inputs are small multiples of 1/8, exact in fp16 and
// bf16, so every product and fp32 sum is exact and the results must match bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/numeric.hpp"
#include "jit/build_pipeline.hpp"
#include "jit/compiler.hpp"
#include "jit/cuda_driver.hpp"
#include "jit/module.hpp"
#include "jit/tensor_map.hpp"
#include "tilefmha/error.hpp"

namespace tilefmha::jit {
namespace {

constexpr const char* mma_source = R"(
#include "tile/all.h"
using namespace tilefmha::tile;

// One warp, four routes to one 16x16x8 product, so every ldmatrix form is checked:
//   route 0: A by ldmatrix_x4,             B by ldmatrix_x2 of B^T
//   route 1: A by ldmatrix_x4,             B by ldmatrix_x2_trans of row-major B
//   route 2: A by ldmatrix_x4_trans of A^T, B by two ldmatrix_x1 of B^T
//   route 3: A by ldmatrix_x4,             B by two ldmatrix_x1_trans of row-major B
// A's rows at or past valid_rows are zero-filled by cp.async (not route 2, which reads A^T).
template <class T>
TILEFMHA_DEVICE void mma_routes(const T* a, const T* a_t, const T* b_t, const T* b, float* c,
                                int valid_rows) {
  __shared__ alignas(128) T sa[16 * 16];
  __shared__ alignas(128) T sat[16 * 16];
  __shared__ alignas(128) T sbt[8 * 16];
  __shared__ alignas(128) T sb[16 * 8];
  const int lane = threadIdx.x;
  const int row = lane / 2, half = lane % 2;
  cp_async_cg_16(shared_address(sa + row * 16 + half * 8), a + row * 16 + half * 8,
                 row < valid_rows);
  cp_async_cg_16(shared_address(sat + row * 16 + half * 8), a_t + row * 16 + half * 8, true);
  if (lane < 16) {
    cp_async_cg_16(shared_address(sbt + row * 16 + half * 8), b_t + row * 16 + half * 8, true);
  } else {
    cp_async_cg_16(shared_address(sb + (lane - 16) * 8), b + (lane - 16) * 8, true);
  }
  cp_async_commit_group();
  cp_async_wait_group<0>();
  __syncwarp();

  const int tile = lane / 8, r = lane % 8, tile2 = tile % 2;
  u32 a_frag[4], at_frag[4], b_frag[2], bt_frag[2], b1[2], bt1[2];
  ldmatrix_x4(shared_address(sa + ((tile % 2) * 8 + r) * 16 + (tile / 2) * 8), a_frag);
  ldmatrix_x4_trans(shared_address(sat + ((tile / 2) * 8 + r) * 16 + (tile % 2) * 8), at_frag);
  ldmatrix_x2(shared_address(sbt + r * 16 + tile2 * 8), b_frag);
  ldmatrix_x2_trans(shared_address(sb + (tile2 * 8 + r) * 8), bt_frag);
  ldmatrix_x1(shared_address(sbt + r * 16), b1[0]);
  ldmatrix_x1(shared_address(sbt + r * 16 + 8), b1[1]);
  ldmatrix_x1_trans(shared_address(sb + r * 8), bt1[0]);
  ldmatrix_x1_trans(shared_address(sb + (8 + r) * 8), bt1[1]);

  float acc[4][4] = {};
  mma_m16n8k16<T>(acc[0], a_frag, b_frag);
  mma_m16n8k16<T>(acc[1], a_frag, bt_frag);
  mma_m16n8k16<T>(acc[2], at_frag, b1);
  mma_m16n8k16<T>(acc[3], a_frag, bt1);
  const int g = lane / 4, p = lane % 4;
  for (int route = 0; route < 4; ++route) {
    float* out = c + route * 16 * 8;
    out[g * 8 + 2 * p] = acc[route][0];
    out[g * 8 + 2 * p + 1] = acc[route][1];
    out[(g + 8) * 8 + 2 * p] = acc[route][2];
    out[(g + 8) * 8 + 2 * p + 1] = acc[route][3];
  }
}

extern "C" __global__ void mma_f16(const half_t* a, const half_t* a_t, const half_t* b_t,
                                   const half_t* b, float* c, int valid_rows) {
  mma_routes(a, a_t, b_t, b, c, valid_rows);
}

extern "C" __global__ void mma_bf16(const bfloat16_t* a, const bfloat16_t* a_t,
                                    const bfloat16_t* b_t, const bfloat16_t* b, float* c,
                                    int valid_rows) {
  mma_routes(a, a_t, b_t, b, c, valid_rows);
}

// One warp: reductions, exp2 and the 16-bit conversions of in[lane].
extern "C" __global__ void numerics(const float* in, float* out, unsigned* packed) {
  const int lane = threadIdx.x;
  const float x = in[lane];
  out[0 * 32 + lane] = quad_max(x);
  out[1 * 32 + lane] = quad_sum(x);
  out[2 * 32 + lane] = warp_max(x);
  out[3 * 32 + lane] = warp_sum(x);
  out[4 * 32 + lane] = exp2_approx(x);
  out[5 * 32 + lane] = to_float(to_half(x));
  out[6 * 32 + lane] = to_float(to_bfloat16(x));
  packed[lane] = pack_half2(x, -x);
  packed[32 + lane] = pack_bfloat162(x, 2.0f * x);
  float lo, hi;
  unpack_half2(packed[lane], lo, hi);
  out[7 * 32 + lane] = lo;
  out[8 * 32 + lane] = hi;
  unpack_bfloat162(packed[32 + lane], lo, hi);
  out[9 * 32 + lane] = lo;
  out[10 * 32 + lane] = hi;
}
)";

// sm_90a only: TMA loads with mbarrier completion, wgmma from shared memory (K-major A and B;
// K-major A with N-major V) and from registers, and a TMA store round trip.
constexpr const char* wgmma_source = R"(
#include "tile/all.h"
using namespace tilefmha::tile;

extern "C" __global__ void __launch_bounds__(128, 1)
wgmma_tile(const __grid_constant__ TensorMap a_map, const __grid_constant__ TensorMap bt_map,
           const __grid_constant__ TensorMap v_map, const __grid_constant__ TensorMap copy_map,
           const bfloat16_t* a_global, float* c_ss, float* c_rs, float* c_v, unsigned* misaligned) {
  __shared__ alignas(1024) bfloat16_t sa[64 * 64];
  __shared__ alignas(1024) bfloat16_t sbt[64 * 64];
  __shared__ alignas(1024) bfloat16_t sv[64 * 128];
  __shared__ alignas(8) u64 barrier;
  const u32 bar = shared_address(&barrier);
  const int tid = threadIdx.x;
  if (tid == 0) {
    misaligned[0] = (shared_address(sa) | shared_address(sbt) | shared_address(sv)) & 1023u;
    tma_prefetch_descriptor(&a_map);
    mbarrier_init(bar, 1);
    mbarrier_init_fence();
  }
  __syncthreads();
  if (tid == 0) {
    mbarrier_arrive_expect_tx(bar, 2 * (64 * 64 * 2) + 64 * 128 * 2);
    tma_load_2d(shared_address(sa), &a_map, bar, 0, 0);
    tma_load_2d(shared_address(sbt), &bt_map, bar, 0, 0);
    tma_load_2d(shared_address(sv), &v_map, bar, 0, 0);               // columns 0..63
    tma_load_2d(shared_address(sv + 64 * 64), &v_map, bar, 64, 0);    // columns 64..127
  }
  mbarrier_wait(bar, 0);

  // Register A fragments for the _rs form: warp w holds rows 16w..16w+15, mma.sync layout.
  const int warp = tid / 32, lane = tid % 32, g = lane / 4, p = lane % 4;
  u32 a_frag[4][4];
  for (int ks = 0; ks < 4; ++ks) {
    const bfloat16_t* base = a_global + (16 * warp) * 64 + 16 * ks;
    auto pair = [&](int r, int c) {
      return u32(base[r * 64 + c].bits) | (u32(base[r * 64 + c + 1].bits) << 16);
    };
    a_frag[ks][0] = pair(g, 2 * p);
    a_frag[ks][1] = pair(g + 8, 2 * p);
    a_frag[ks][2] = pair(g, 2 * p + 8);
    a_frag[ks][3] = pair(g + 8, 2 * p + 8);
  }

  float acc_ss[32], acc_rs[32], acc_v[64];
  for (int i = 0; i < 32; ++i) acc_ss[i] = acc_rs[i] = 0.f;
  for (int i = 0; i < 64; ++i) acc_v[i] = 0.f;
  const u64 desc_a = make_smem_descriptor_k_major_sw128(shared_address(sa));
  const u64 desc_bt = make_smem_descriptor_k_major_sw128(shared_address(sbt));
  const u64 desc_v = make_smem_descriptor_mn_major_sw128(shared_address(sv), 64 * 64 * 2);
  wgmma_fence_registers(acc_ss);
  wgmma_fence_registers(acc_rs);
  wgmma_fence_registers(acc_v);
  wgmma_fence();
#pragma unroll
  for (int ks = 0; ks < 4; ++ks) {
    wgmma_m64k16_ss<64, bfloat16_t>(acc_ss, advance_smem_descriptor(desc_a, 32 * ks),
                                    advance_smem_descriptor(desc_bt, 32 * ks), ks > 0);
    wgmma_m64k16_rs<64, bfloat16_t>(acc_rs, a_frag[ks], advance_smem_descriptor(desc_bt, 32 * ks),
                                    ks > 0);
    wgmma_m64k16_ss<128, bfloat16_t, 0, 1>(acc_v, advance_smem_descriptor(desc_a, 32 * ks),
                                           advance_smem_descriptor(desc_v, 2048 * ks), ks > 0);
  }
  wgmma_commit_group();
  wgmma_wait_group<0>();
  wgmma_fence_registers(acc_ss);
  wgmma_fence_registers(acc_rs);
  wgmma_fence_registers(acc_v);

  const int row = 16 * warp + g;
  for (int j = 0; j < 8; ++j) {
    const int col = 8 * j + 2 * p;
    c_ss[row * 64 + col] = acc_ss[4 * j];
    c_ss[row * 64 + col + 1] = acc_ss[4 * j + 1];
    c_ss[(row + 8) * 64 + col] = acc_ss[4 * j + 2];
    c_ss[(row + 8) * 64 + col + 1] = acc_ss[4 * j + 3];
    c_rs[row * 64 + col] = acc_rs[4 * j];
    c_rs[row * 64 + col + 1] = acc_rs[4 * j + 1];
    c_rs[(row + 8) * 64 + col] = acc_rs[4 * j + 2];
    c_rs[(row + 8) * 64 + col + 1] = acc_rs[4 * j + 3];
  }
  for (int j = 0; j < 16; ++j) {
    const int col = 8 * j + 2 * p;
    c_v[row * 128 + col] = acc_v[4 * j];
    c_v[row * 128 + col + 1] = acc_v[4 * j + 1];
    c_v[(row + 8) * 128 + col] = acc_v[4 * j + 2];
    c_v[(row + 8) * 128 + col + 1] = acc_v[4 * j + 3];
  }

  // sa holds A swizzled; the TMA store writes it back unswizzled.
  __syncthreads();
  if (tid == 0) {
    tma_store_2d(&copy_map, shared_address(sa), 0, 0);
    tma_store_commit_group();
    tma_store_wait_group<0>();
  }
}
)";

std::string target_for(int compute_capability) {
  return compute_capability == 90 ? "sm_90a" : "sm_" + std::to_string(compute_capability);
}

// Exact small values: multiples of 1/4 or 1/2 in [-2, 2].
double a_value(int m, int k) {
  return ((m * 7 + k * 3) % 9 - 4) / 4.0;
}
double b_value(int k, int n) {
  return ((k * 11 + n * 5) % 7 - 3) / 2.0;
}
double v_value(int k, int n) {
  return ((k * 3 + n * 13) % 11 - 5) / 4.0;
}

template <class T>
std::span<const std::byte> bytes_of(const std::vector<T>& values) {
  return std::as_bytes(std::span<const T>(values));
}

template <class T>
std::vector<T> download(const DeviceBuffer& buffer, size_t count) {
  std::vector<T> values(count);
  buffer.copy_to_host(std::as_writable_bytes(std::span<T>(values)));
  return values;
}

DeviceBuffer upload(std::span<const std::byte> bytes) {
  DeviceBuffer buffer(static_cast<int64_t>(bytes.size()));
  buffer.copy_from_host(bytes);
  return buffer;
}

// Runs everywhere: the device sources of this file compile for every target they serve.
TEST(JitGpuSources, CompileWithoutAGpu) {
  for (const char* arch : {"sm_80", "sm_86", "sm_89", "sm_90a"}) {
    CompileOptions options;
    options.arch = arch;
    EXPECT_FALSE(compile_kernel("mma_tile", mma_source, options).cubin.empty()) << arch;
  }
  CompileOptions hopper;
  hopper.arch = "sm_90a";
  const CompiledKernel wgmma = compile_kernel("wgmma_tile", wgmma_source, hopper);
  EXPECT_FALSE(wgmma.cubin.empty());
  // Registers must suffice: a serialized wgmma would hide a layout problem behind slowness.
  EXPECT_EQ(wgmma.log.find("serialized"), std::string::npos) << wgmma.log;
}

class JitGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string reason = gpu_unavailable_reason();
    if (!reason.empty()) GTEST_SKIP() << reason;
    context_ = std::make_unique<GpuContext>(0);
    compute_capability_ = context_->compute_capability();
    if (compute_capability_ < 80) GTEST_SKIP() << "needs sm_80 or newer";
  }

  LoadedModule compile_and_load(const std::string& name, const char* source) {
    CompileOptions options;
    options.arch = target_for(compute_capability_);
    return LoadedModule(compile_kernel(name, source, options).cubin);
  }

  std::unique_ptr<GpuContext> context_;
  int compute_capability_ = 0;
};

void run_mma_routes(const LoadedModule& module, const char* kernel, bool bf16) {
  auto encode = [&](double value) {
    return bf16 ? numeric::float_to_bf16(value) : numeric::float_to_half(value);
  };
  std::vector<uint16_t> a(256), a_t(256), b_t(128), b(128);
  for (int m = 0; m < 16; ++m) {
    for (int k = 0; k < 16; ++k) a[m * 16 + k] = a_t[k * 16 + m] = encode(a_value(m, k));
  }
  for (int k = 0; k < 16; ++k) {
    for (int n = 0; n < 8; ++n) b[k * 8 + n] = b_t[n * 16 + k] = encode(b_value(k, n));
  }
  DeviceBuffer a_device = upload(bytes_of(a)), a_t_device = upload(bytes_of(a_t));
  DeviceBuffer b_t_device = upload(bytes_of(b_t)), b_device = upload(bytes_of(b));
  DeviceBuffer c_device(4 * 128 * sizeof(float));
  c_device.fill_bytes(0xFF);
  int valid_rows = 13;
  CUdeviceptr pointers[] = {a_device.address(), a_t_device.address(), b_t_device.address(),
                            b_device.address(), c_device.address()};
  void* arguments[] = {&pointers[0], &pointers[1], &pointers[2],
                       &pointers[3], &pointers[4], &valid_rows};
  LaunchShape shape;
  shape.block[0] = 32;
  launch_kernel(module.function(kernel), shape, arguments);
  const std::vector<float> c = download<float>(c_device, 4 * 128);

  for (int route = 0; route < 4; ++route) {
    for (int m = 0; m < 16; ++m) {
      for (int n = 0; n < 8; ++n) {
        double expected = 0;
        if (route == 2 || m < valid_rows) {
          for (int k = 0; k < 16; ++k) expected += a_value(m, k) * b_value(k, n);
        }
        EXPECT_EQ(c[route * 128 + m * 8 + n], static_cast<float>(expected))
            << kernel << " route " << route << " C[" << m << "][" << n << "]";
      }
    }
  }
}

TEST_F(JitGpu, MmaSyncWithLdmatrixAndCpAsyncMatchesCpu) {
  const LoadedModule module = compile_and_load("mma_tile", mma_source);
  run_mma_routes(module, "mma_f16", false);
  run_mma_routes(module, "mma_bf16", true);
}

TEST_F(JitGpu, ReductionsExp2AndConversionsMatchCpu) {
  const LoadedModule module = compile_and_load("numerics", mma_source);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> uniform(-3.f, 3.f);
  std::vector<float> in(32);
  for (float& x : in) x = uniform(rng);
  DeviceBuffer in_device = upload(bytes_of(in));
  DeviceBuffer out_device(11 * 32 * sizeof(float)), packed_device(64 * sizeof(unsigned));
  CUdeviceptr pointers[] = {in_device.address(), out_device.address(), packed_device.address()};
  void* arguments[] = {&pointers[0], &pointers[1], &pointers[2]};
  LaunchShape shape;
  shape.block[0] = 32;
  launch_kernel(module.function("numerics"), shape, arguments);
  const std::vector<float> out = download<float>(out_device, 11 * 32);
  const std::vector<unsigned> packed = download<unsigned>(packed_device, 64);

  double warp_sum = 0;
  float warp_max = in[0];
  for (float x : in) warp_sum += x, warp_max = std::max(warp_max, x);
  for (int lane = 0; lane < 32; ++lane) {
    const int quad = lane / 4 * 4;
    double quad_sum = 0;
    float quad_max = in[quad];
    for (int i = quad; i < quad + 4; ++i) quad_sum += in[i], quad_max = std::max(quad_max, in[i]);
    const float x = in[lane];
    EXPECT_EQ(out[0 * 32 + lane], quad_max) << lane;
    EXPECT_NEAR(out[1 * 32 + lane], quad_sum, 1e-5) << lane;
    EXPECT_EQ(out[2 * 32 + lane], warp_max) << lane;
    EXPECT_NEAR(out[3 * 32 + lane], warp_sum, 1e-4) << lane;
    EXPECT_NEAR(out[4 * 32 + lane], std::exp2(static_cast<double>(x)), 4e-7 * std::exp2(x)) << lane;
    const uint16_t half_bits = numeric::float_to_half(x);
    const uint16_t bf16_bits = numeric::float_to_bf16(x);
    EXPECT_EQ(out[5 * 32 + lane], numeric::half_to_float(half_bits)) << lane;
    EXPECT_EQ(out[6 * 32 + lane], numeric::bf16_to_float(bf16_bits)) << lane;
    EXPECT_EQ(packed[lane], half_bits | (uint32_t{numeric::float_to_half(-x)} << 16)) << lane;
    EXPECT_EQ(packed[32 + lane], bf16_bits | (uint32_t{numeric::float_to_bf16(2.0 * x)} << 16))
        << lane;
    EXPECT_EQ(out[7 * 32 + lane], numeric::half_to_float(half_bits)) << lane;
    EXPECT_EQ(out[8 * 32 + lane], -numeric::half_to_float(half_bits)) << lane;
    EXPECT_EQ(out[9 * 32 + lane], numeric::bf16_to_float(bf16_bits)) << lane;
    EXPECT_EQ(out[10 * 32 + lane], numeric::bf16_to_float(numeric::float_to_bf16(2.0 * x))) << lane;
  }
}

TEST_F(JitGpu, TmaMbarrierAndWgmmaMatchCpu) {
  if (compute_capability_ != 90) GTEST_SKIP() << "wgmma needs sm_90a";
  const LoadedModule module = compile_and_load("wgmma_tile", wgmma_source);
  std::vector<uint16_t> a(64 * 64), bt(64 * 64), v(64 * 128);
  for (int m = 0; m < 64; ++m) {
    for (int k = 0; k < 64; ++k) a[m * 64 + k] = numeric::float_to_bf16(a_value(m, k));
  }
  for (int n = 0; n < 64; ++n) {
    for (int k = 0; k < 64; ++k) bt[n * 64 + k] = numeric::float_to_bf16(b_value(k, n));
  }
  for (int k = 0; k < 64; ++k) {
    for (int n = 0; n < 128; ++n) v[k * 128 + n] = numeric::float_to_bf16(v_value(k, n));
  }
  DeviceBuffer a_device = upload(bytes_of(a)), bt_device = upload(bytes_of(bt));
  DeviceBuffer v_device = upload(bytes_of(v)), copy_device(64 * 64 * 2);
  DeviceBuffer c_ss_device(64 * 64 * 4), c_rs_device(64 * 64 * 4), c_v_device(64 * 128 * 4);
  DeviceBuffer misaligned_device(4);
  copy_device.fill_bytes(0);

  auto map_2d = [](const DeviceBuffer& buffer, uint64_t columns, uint64_t rows) {
    TiledTensorMapSpec spec;
    spec.element = TensorMapElement::bf16;
    spec.global_address = buffer.address();
    spec.dims = {columns, rows};
    spec.strides_bytes = {columns * 2};
    spec.box = {64, 64};
    spec.swizzle = TensorMapSwizzle::bytes128;
    return encode_tiled_tensor_map(spec);
  };
  CuTensorMap a_map = map_2d(a_device, 64, 64), bt_map = map_2d(bt_device, 64, 64);
  CuTensorMap v_map = map_2d(v_device, 128, 64), copy_map = map_2d(copy_device, 64, 64);
  CUdeviceptr pointers[] = {a_device.address(), c_ss_device.address(), c_rs_device.address(),
                            c_v_device.address(), misaligned_device.address()};
  void* arguments[] = {&a_map,       &bt_map,      &v_map,       &copy_map,   &pointers[0],
                       &pointers[1], &pointers[2], &pointers[3], &pointers[4]};
  LaunchShape shape;
  shape.block[0] = 128;
  launch_kernel(module.function("wgmma_tile"), shape, arguments);
  context_->synchronize();

  EXPECT_EQ(download<unsigned>(misaligned_device, 1)[0], 0u) << "shared tiles not 1024-aligned";
  EXPECT_EQ(download<uint16_t>(copy_device, 64 * 64), a) << "TMA load + store round trip";
  const std::vector<float> c_ss = download<float>(c_ss_device, 64 * 64);
  const std::vector<float> c_rs = download<float>(c_rs_device, 64 * 64);
  const std::vector<float> c_v = download<float>(c_v_device, 64 * 128);
  int wrong_ss = 0, wrong_rs = 0, wrong_v = 0;
  for (int m = 0; m < 64; ++m) {
    for (int n = 0; n < 64; ++n) {
      double expected = 0;
      for (int k = 0; k < 64; ++k) expected += a_value(m, k) * b_value(k, n);
      wrong_ss += c_ss[m * 64 + n] != static_cast<float>(expected);
      wrong_rs += c_rs[m * 64 + n] != static_cast<float>(expected);
    }
    for (int n = 0; n < 128; ++n) {
      double expected = 0;
      for (int k = 0; k < 64; ++k) expected += a_value(m, k) * v_value(k, n);
      wrong_v += c_v[m * 128 + n] != static_cast<float>(expected);
    }
  }
  EXPECT_EQ(wrong_ss, 0) << "wgmma ss (K-major A and B) of 4096";
  EXPECT_EQ(wrong_rs, 0) << "wgmma rs (register A) of 4096";
  EXPECT_EQ(wrong_v, 0) << "wgmma ss with N-major B of 8192";
}

TEST_F(JitGpu, PipelineLoadsEachCompiledModule) {
  std::vector<BuildJob> jobs;
  for (int i = 0; i < 3; ++i) {
    const std::string name = "fill_" + std::to_string(i);
    jobs.push_back({name, "extern \"C\" __global__ void " + name +
                              "(int* out) { out[threadIdx.x] = " + std::to_string(100 * i) +
                              " + threadIdx.x; }"});
  }
  BuildOptions options;
  options.compile.arch = target_for(compute_capability_);
  options.workers = 2;
  options.show_progress = false;
  std::vector<std::pair<std::string, LoadedModule>> loaded;
  const BuildReport report = build_kernels(jobs, options, nullptr, [&](BuildResult& result) {
    context_->make_current();
    loaded.emplace_back(result.name, LoadedModule(result.cubin));
  });
  ASSERT_EQ(report.summary.counts.failures, 0) << report.failure_report();
  ASSERT_EQ(loaded.size(), 3u);
  for (auto& [name, module] : loaded) {
    DeviceBuffer out(32 * sizeof(int));
    CUdeviceptr pointer = out.address();
    void* arguments[] = {&pointer};
    LaunchShape shape;
    shape.block[0] = 32;
    launch_kernel(module.function(name), shape, arguments);
    const std::vector<int> values = download<int>(out, 32);
    const int base = 100 * (name.back() - '0');
    for (int lane = 0; lane < 32; ++lane) EXPECT_EQ(values[lane], base + lane) << name;
  }
}

TEST_F(JitGpu, UnknownKernelNameIsARuntimeErrorNamingIt) {
  const LoadedModule module = compile_and_load("numerics", mma_source);
  try {
    module.function("no_such_kernel_x");
    FAIL() << "found a kernel that does not exist";
  } catch (const Error& error) {
    EXPECT_EQ(error.kind(), ErrorKind::runtime);
    EXPECT_NE(std::string(error.what()).find("no_such_kernel_x"), std::string::npos);
  }
}

}  // namespace
}  // namespace tilefmha::jit
