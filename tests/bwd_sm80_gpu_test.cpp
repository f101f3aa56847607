// The GPU backward (bwd_dot_do_o, bwd_dq_dk_dv on sm80_mma, bwd_convert_dq) through the public
// Engine, one plan of three stages with D and the dQ accumulator in plan workspace: dQ, dK and
// dV against the CPU reference (reference::backward) on fresh random inputs, outputs poisoned
// (NaN bytes) before each run. Cases: head dims 64, 128, 160, 256 and (192, 128), bf16 and fp16,
// causal top-left and bottom-right, a window with sink tokens, GQA 4:1, soft cap, varlen with an
// empty sequence, ragged lengths (77 x 130), deterministic mode giving bitwise-identical
// repeats, ALiBi, an elementwise bias with dBias (stored, and broadcast summed with atomics) and
// dropout. Skipped without a GPU, driver or NVRTC.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/numeric.hpp"
#include "core/tensor_iteration.hpp"
#include "jit/module.hpp"
#include "runtime/device_mirror.hpp"
#include "runtime/tolerance.hpp"
#include "support/forward_problems.hpp"
#include "support/gpu_availability.hpp"
#include "support/gpu_problem.hpp"
#include "tilefmha/engine.hpp"
#include "tilefmha/reference.hpp"

namespace tilefmha {
namespace {

using testing::gpu_skip_reason;
using testing::kUnwritten;
using testing::TensorPool;

// A host view's bytes in device memory (the view re-pointed there); outputs start poisoned.
struct DeviceView {
  std::unique_ptr<jit::DeviceBuffer> buffer;
  TensorView view;
};

DeviceView to_device(const TensorView& host, bool poison) {
  const int64_t bytes = host.extent() * dtype_size(host.dtype);
  DeviceView out{std::make_unique<jit::DeviceBuffer>(std::max<int64_t>(bytes, 1)), host};
  if (poison)
    out.buffer->fill_bytes(runtime::kPoisonByte);
  else if (bytes > 0)
    out.buffer->copy_from_host(std::span(static_cast<const std::byte*>(host.data), bytes));
  out.view.data = reinterpret_cast<void*>(out.buffer->address());
  out.view.space = MemorySpace::device;
  return out;
}

void download(const DeviceView& device, const TensorView& host) {
  const int64_t bytes = host.extent() * dtype_size(host.dtype);
  if (bytes > 0) device.buffer->copy_to_host(std::span(static_cast<std::byte*>(host.data), bytes));
}

// A forward problem's host inputs, its reference O and LSE, a random dO, and the reference's
// gradients: everything the GPU backward needs and must reproduce.
struct BackwardCase {
  Problem host;  // family bwd_dq_dk_dv, host views; dq/dk/dv hold the reference's gradients
  TensorView gpu_dq, gpu_dk, gpu_dv;  // host buffers the GPU results are downloaded into
  TensorView gpu_dbias;               // and dBias's, when the case has one
};

TensorView like(TensorPool& pool, const TensorView& v) {
  return pool.filled(v.dtype, {v.shape[0], v.shape[1], v.shape[2], v.shape[3]}, kUnwritten);
}

// dBias storage like `bias`: dense over the dims the bias keeps, zero strides where it
// broadcasts (as the Python front end allocates it).
TensorView dbias_like(TensorPool& pool, const TensorView& bias, DType dtype) {
  auto kept = [&](int d) { return bias.stride[d] == 0 ? int64_t{1} : bias.shape[d]; };
  TensorView view = pool.filled(dtype, {kept(0), kept(1), kept(2), kept(3)}, kUnwritten);
  for (int d = 0; d < 4; ++d) {
    if (bias.stride[d] != 0) continue;
    view.shape[d] = bias.shape[d];
    view.stride[d] = 0;
  }
  return view;
}

// A bias shared along the dims where `shape` exceeds the storage `kept` (zero strides).
TensorView broadcast_bias(TensorPool& pool, DType dtype, std::initializer_list<int64_t> kept,
                          std::initializer_list<int64_t> shape) {
  TensorView bias = pool.uniform(dtype, kept, -2, 2);
  int d = 0;
  for (int64_t extent : shape) {
    if (bias.shape[d] != extent) {
      bias.shape[d] = extent;
      bias.stride[d] = 0;
    }
    ++d;
  }
  return bias;
}

// No dBias unless `dbias` names its dtype.
BackwardCase make_case(TensorPool& pool, Problem forward, bool deterministic,
                       std::optional<DType> dbias = std::nullopt) {
  reference::forward(forward);
  BackwardCase c;
  Problem& p = c.host;
  p = forward;
  p.family = Family::bwd_dq_dk_dv;
  p.bwd.deterministic = deterministic;
  const auto& o = forward.o.shape;
  p.bwd.d_o = pool.uniform(forward.out_dtype, {o[0], o[1], o[2], o[3]}, -1, 1);
  p.bwd.dq = like(pool, forward.q);
  p.bwd.dk = like(pool, forward.k);
  p.bwd.dv = like(pool, forward.v);
  if (dbias) p.bwd.dbias = dbias_like(pool, forward.bias, *dbias);
  Problem with_scratch = p;
  with_scratch.bwd.d = pool.filled(
      DType::fp32, {forward.lse.shape[0], forward.lse.shape[1], forward.lse.shape[2]}, kUnwritten);
  with_scratch.bwd.dq_acc = pool.filled(
      DType::fp32, {forward.q.shape[0], forward.q.shape[1], forward.q.shape[2], forward.q.shape[3]},
      kUnwritten);
  reference::backward(with_scratch);
  c.gpu_dq = like(pool, p.bwd.dq);
  c.gpu_dk = like(pool, p.bwd.dk);
  c.gpu_dv = like(pool, p.bwd.dv);
  if (dbias) c.gpu_dbias = dbias_like(pool, forward.bias, *dbias);
  return c;
}

// Gradients sum many products: the bound scales with the largest reference magnitude.
int64_t mismatches(const char* name, const TensorView& expected, const TensorView& actual,
                   DType dtype) {
  double largest = 0;
  int64_t rows = 0;
  for_each_element(expected, [&](int64_t, int64_t offset) {
    largest = std::max(largest, std::fabs(numeric::load(expected.data, expected.dtype, offset)));
    ++rows;
  });
  const runtime::Tolerance tolerance = runtime::gradient_tolerance(dtype, largest);
  const runtime::Agreement agreement =
      testing::compare(expected, actual, tolerance.atol, tolerance.rtol);
  std::printf("    %s: max abs err %.3e (largest %.3e) over %lld, %lld mismatches\n", name,
              agreement.max_abs_error, largest, static_cast<long long>(agreement.compared),
              static_cast<long long>(agreement.mismatches));
  return agreement.mismatches + (agreement.compared == rows ? 0 : 1);
}

class BwdSm80Gpu : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!gpu_skip_reason().empty()) return;
    // The portable kernels only: sm80_mma runs on every arch the engine supports.
    // Without the restriction an sm_90 device would plan sm90_ws kernels instead.
    EngineOptions options;
    options.pipeline = Pipeline::sm80_mma;
    engine_ = std::make_unique<Engine>(options);
  }
  static void TearDownTestSuite() { engine_.reset(); }
  void SetUp() override {
    if (const std::string why = gpu_skip_reason(); !why.empty()) GTEST_SKIP() << why;
    context_ = std::make_unique<jit::GpuContext>(0);
  }

  // Runs the GPU backward of `c` (fresh device copies, poisoned gradients) and downloads the
  // gradients into c.gpu_*; returns the plan's stage count.
  int64_t run_on_gpu(BackwardCase& c) {
    const Problem& h = c.host;
    std::vector<DeviceView> inputs;
    Problem d = h;
    for (TensorView* view :
         {&d.q, &d.k, &d.v, &d.o, &d.lse, &d.sink_logits, &d.bias, &d.alibi_slopes, &d.bwd.d_o}) {
      if (view->empty()) continue;
      inputs.push_back(to_device(*view, false));
      *view = inputs.back().view;
    }
    DeviceView dq = to_device(h.bwd.dq, true), dk = to_device(h.bwd.dk, true),
               dv = to_device(h.bwd.dv, true);
    d.bwd.dq = dq.view;
    d.bwd.dk = dk.view;
    d.bwd.dv = dv.view;
    std::optional<DeviceView> dbias;
    if (!h.bwd.dbias.empty()) {
      dbias = to_device(h.bwd.dbias, true);
      d.bwd.dbias = dbias->view;
    }
    const EnginePlan plan = engine_->plan(d);
    std::printf("  %s\n%s", d.describe().c_str(), plan.explanation().c_str());
    engine_->run(plan, d);
    context_->synchronize();
    download(dq, c.gpu_dq);
    download(dk, c.gpu_dk);
    download(dv, c.gpu_dv);
    if (dbias) download(*dbias, c.gpu_dbias);
    return plan.num_stages();
  }

  void expect_matches_reference(TensorPool& pool, Problem forward, bool deterministic = false,
                                std::optional<DType> dbias = std::nullopt) {
    BackwardCase c = make_case(pool, std::move(forward), deterministic, dbias);
    EXPECT_EQ(run_on_gpu(c), 3);
    const DType dtype = c.host.dtype;
    EXPECT_EQ(mismatches("dq", c.host.bwd.dq, c.gpu_dq, dtype), 0);
    EXPECT_EQ(mismatches("dk", c.host.bwd.dk, c.gpu_dk, dtype), 0);
    EXPECT_EQ(mismatches("dv", c.host.bwd.dv, c.gpu_dv, dtype), 0);
    // dBias is computed in the inputs' precision whatever its storage dtype.
    if (dbias) {
      EXPECT_EQ(mismatches("dbias", c.host.bwd.dbias, c.gpu_dbias, dtype), 0);
    }
  }

  static std::unique_ptr<Engine> engine_;
  std::unique_ptr<jit::GpuContext> context_;
};

std::unique_ptr<Engine> BwdSm80Gpu::engine_;

ProblemBuilder batch(TensorPool& pool, DType dtype, testing::Dims d) {
  return testing::batch_problem(pool, Family::fwd, dtype, d);
}

TEST_F(BwdSm80Gpu, Bf16Hdim64NoMask) {
  TensorPool pool(1);
  expect_matches_reference(pool, batch(pool, DType::bf16, {2, 4, 4, 128, 128, 64, 64}).build());
}

TEST_F(BwdSm80Gpu, Fp16Hdim128CausalTopLeftRagged) {
  TensorPool pool(2);
  expect_matches_reference(pool,
                           batch(pool, DType::fp16, {2, 2, 2, 77, 130, 128, 128}).causal().build());
}

TEST_F(BwdSm80Gpu, Bf16Hdim128CausalBottomRightGqa) {
  TensorPool pool(3);
  expect_matches_reference(pool, batch(pool, DType::bf16, {2, 8, 2, 77, 130, 128, 128})
                                     .causal(MaskAlign::bottom_right)
                                     .build());
}

TEST_F(BwdSm80Gpu, Fp16Hdim64WindowWithSinkTokensGqa) {
  TensorPool pool(4);
  expect_matches_reference(pool, batch(pool, DType::fp16, {1, 8, 2, 200, 260, 64, 64})
                                     .window(40, 8, MaskAlign::bottom_right)
                                     .sink_tokens(4)
                                     .build());
}

TEST_F(BwdSm80Gpu, Bf16Hdim64SoftCapAndScale) {
  TensorPool pool(5);
  expect_matches_reference(
      pool, batch(pool, DType::bf16, {2, 2, 1, 96, 64, 64, 64}).softcap(5.0).scale(0.3).build());
}

TEST_F(BwdSm80Gpu, Fp16Hdim128VarlenWithEmptySequence) {
  TensorPool pool(6);
  // Query lengths 40, 0, 130, 1 over key lengths 35, 20, 200, 64; bottom-right causal, GQA 4:1.
  expect_matches_reference(
      pool, testing::group_problem(pool, Family::fwd, DType::fp16, {0, 40, 40, 170, 171},
                                   {0, 35, 55, 255, 319}, 8, 2, 128, 128)
                .causal(MaskAlign::bottom_right)
                .build());
}

TEST_F(BwdSm80Gpu, Bf16Hdim64VarlenTopLeft) {
  TensorPool pool(7);
  expect_matches_reference(pool,
                           testing::group_problem(pool, Family::fwd, DType::bf16, {0, 0, 100, 229},
                                                  {0, 50, 150, 279}, 4, 1, 64, 64)
                               .causal()
                               .build());
}

// More queries than keys under bottom-right causal: the first rows see no key (no gradient).
// Sink logits are in the forward's LSE, all the backward needs of them.
TEST_F(BwdSm80Gpu, Fp16Hdim64FullyMaskedRowsAndSinkLogits) {
  TensorPool pool(10);
  const TensorView sinks = pool.uniform(DType::fp32, {4}, -1, 1);
  expect_matches_reference(pool, batch(pool, DType::fp16, {2, 4, 2, 150, 77, 64, 64})
                                     .causal(MaskAlign::bottom_right)
                                     .sink_logits(sinks)
                                     .build());
}

TEST_F(BwdSm80Gpu, DeterministicRepeatsAreBitIdentical) {
  TensorPool pool(8);
  BackwardCase c = make_case(
      pool, batch(pool, DType::bf16, {2, 8, 2, 77, 300, 128, 128}).causal().build(), true);
  run_on_gpu(c);
  const DType dtype = c.host.dtype;
  EXPECT_EQ(mismatches("dq", c.host.bwd.dq, c.gpu_dq, dtype), 0);
  EXPECT_EQ(mismatches("dk", c.host.bwd.dk, c.gpu_dk, dtype), 0);
  EXPECT_EQ(mismatches("dv", c.host.bwd.dv, c.gpu_dv, dtype), 0);
  auto bytes = [](const TensorView& v) {
    const auto* begin = static_cast<const std::byte*>(v.data);
    return std::vector<std::byte>(begin, begin + v.extent() * dtype_size(v.dtype));
  };
  const auto first_dq = bytes(c.gpu_dq), first_dk = bytes(c.gpu_dk), first_dv = bytes(c.gpu_dv);
  for (int repeat = 0; repeat < 3; ++repeat) {
    run_on_gpu(c);
    EXPECT_EQ(bytes(c.gpu_dq), first_dq) << "repeat " << repeat;
    EXPECT_EQ(bytes(c.gpu_dk), first_dk) << "repeat " << repeat;
    EXPECT_EQ(bytes(c.gpu_dv), first_dv) << "repeat " << repeat;
  }
}

// Head dims past 128: dK and dV split in two column parts (two warps per 16 keys).
TEST_F(BwdSm80Gpu, Bf16Hdim256CausalBottomRightGqa) {
  TensorPool pool(11);
  expect_matches_reference(pool, batch(pool, DType::bf16, {2, 8, 2, 77, 130, 256, 256})
                                     .causal(MaskAlign::bottom_right)
                                     .build());
}

TEST_F(BwdSm80Gpu, Fp16Hdim192x128VarlenDeterministic) {
  TensorPool pool(12);
  expect_matches_reference(pool,
                           testing::group_problem(pool, Family::fwd, DType::fp16, {0, 40, 40, 170},
                                                  {0, 35, 55, 255}, 4, 2, 192, 128)
                               .causal()
                               .build(),
                           true);
}

TEST_F(BwdSm80Gpu, Bf16Hdim160WindowSoftCap) {
  TensorPool pool(13);
  expect_matches_reference(
      pool,
      batch(pool, DType::bf16, {2, 4, 4, 100, 150, 160, 160}).window(30, 5).softcap(4.0).build());
}

// ALiBi (no gradient for the slopes): per-head slopes with GQA and bottom-right causal; per
// (sequence, head) slopes in group mode with head dim 256.
TEST_F(BwdSm80Gpu, Fp16AlibiPerHeadGqaCausal) {
  TensorPool pool(21);
  expect_matches_reference(pool, batch(pool, DType::fp16, {2, 8, 2, 77, 130, 64, 64})
                                     .causal(MaskAlign::bottom_right)
                                     .alibi(pool.uniform(DType::fp32, {8}, 0.05, 0.5))
                                     .build());
}

TEST_F(BwdSm80Gpu, Bf16AlibiPerSequenceVarlenHdim256) {
  TensorPool pool(22);
  expect_matches_reference(pool,
                           testing::group_problem(pool, Family::fwd, DType::bf16, {0, 40, 40, 170},
                                                  {0, 35, 55, 255}, 4, 2, 256, 256)
                               .alibi(pool.uniform(DType::fp32, {3, 4}, 0.05, 0.3))
                               .build(),
                           true);
}

// An elementwise bias with dBias: per (sequence, head) in fp32 (one store per element); shared
// by sequences and heads in bf16 with an fp32 dBias (atomics); broadcast over queries with the
// (192, 128) column split; group mode with a bf16 dBias and deterministic dQ.
TEST_F(BwdSm80Gpu, Fp16BiasWithDbiasCausalGqa) {
  TensorPool pool(23);
  expect_matches_reference(pool,
                           batch(pool, DType::fp16, {2, 8, 2, 77, 130, 128, 128})
                               .causal()
                               .bias(pool.uniform(DType::fp32, {2, 8, 77, 130}, -2, 2))
                               .build(),
                           false, DType::fp32);
}

TEST_F(BwdSm80Gpu, Bf16BroadcastBiasDbiasSumsOverBatchAndHeads) {
  TensorPool pool(24);
  expect_matches_reference(
      pool,
      batch(pool, DType::bf16, {2, 4, 2, 100, 150, 64, 64})
          .bias(broadcast_bias(pool, DType::bf16, {1, 1, 100, 150}, {2, 4, 100, 150}))
          .build(),
      false, DType::fp32);
}

TEST_F(BwdSm80Gpu, Bf16QueryBroadcastBiasHdim192x128) {
  TensorPool pool(25);
  expect_matches_reference(
      pool,
      batch(pool, DType::bf16, {2, 2, 2, 90, 140, 192, 128})
          .causal(MaskAlign::bottom_right)
          .bias(broadcast_bias(pool, DType::fp32, {2, 2, 1, 140}, {2, 2, 90, 140}))
          .build(),
      false, DType::fp32);
}

TEST_F(BwdSm80Gpu, Fp16VarlenBiasDbiasWindowDeterministic) {
  TensorPool pool(26);
  expect_matches_reference(pool,
                           testing::group_problem(pool, Family::fwd, DType::fp16, {0, 40, 40, 170},
                                                  {0, 35, 55, 255}, 4, 2, 96, 96)
                               .window(30, 8)
                               .bias(pool.uniform(DType::bf16, {3, 4, 130, 200}, -2, 2))
                               .build(),
                           true, DType::bf16);
}

// Dropout replays the forward's Philox stream (same seed and offset).
TEST_F(BwdSm80Gpu, Fp16DropoutCausalGqa) {
  TensorPool pool(27);
  expect_matches_reference(pool, batch(pool, DType::fp16, {2, 8, 2, 77, 130, 128, 128})
                                     .causal(MaskAlign::bottom_right)
                                     .dropout(0.2, 0x1234567890ABCDEFull, 77)
                                     .build());
}

TEST_F(BwdSm80Gpu, Bf16DropoutVarlenHdim256Deterministic) {
  TensorPool pool(28);
  expect_matches_reference(pool,
                           testing::group_problem(pool, Family::fwd, DType::bf16, {0, 40, 40, 170},
                                                  {0, 35, 55, 255}, 4, 2, 256, 256)
                               .causal(MaskAlign::bottom_right)
                               .dropout(0.3, 99, 1ull << 40)
                               .build(),
                           true);
}

// (The enumeration profiles have no soft-capped kernel with bias and dropout: the emulation
// test covers that combination.)
TEST_F(BwdSm80Gpu, Bf16DropoutBiasDbiasCausal) {
  TensorPool pool(29);
  expect_matches_reference(pool,
                           batch(pool, DType::bf16, {2, 4, 4, 96, 128, 64, 64})
                               .causal(MaskAlign::bottom_right)
                               .bias(pool.uniform(DType::bf16, {2, 4, 96, 128}, -2, 2))
                               .dropout(0.15, 5, 6)
                               .build(),
                           false, DType::bf16);
}

// What the GPU backward does not implement is refused when planning: a broadcast dBias is
// summed with fp32 atomics, so a bf16 one has no kernel.
TEST_F(BwdSm80Gpu, UnsupportedFeaturesAreRefusedByName) {
  TensorPool pool(9);
  BackwardCase c =
      make_case(pool,
                batch(pool, DType::bf16, {2, 2, 2, 64, 64, 64, 64})
                    .bias(broadcast_bias(pool, DType::bf16, {1, 2, 64, 64}, {2, 2, 64, 64}))
                    .build(),
                false, DType::bf16);
  Problem d = c.host;
  std::vector<DeviceView> keep;
  for (TensorView* view : {&d.q, &d.k, &d.v, &d.o, &d.lse, &d.bias, &d.bwd.d_o, &d.bwd.dq,
                           &d.bwd.dk, &d.bwd.dv, &d.bwd.dbias}) {
    keep.push_back(to_device(*view, false));
    *view = keep.back().view;
  }
  try {
    engine_->plan(d);
    FAIL() << "a bf16 broadcast dBias planned";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::no_kernel);
    EXPECT_NE(std::string(e.what()).find("dbias"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tilefmha
