// `tilefmha run --backend gpu --validate` end to end on the GPU: fresh random inputs, outputs
// poisoned on the device, every element compared with the CPU reference.
#include <gtest/gtest.h>

#include <cmath>
#include <regex>
#include <string>

#include "jit/cuda_driver.hpp"
#include "jit/module.hpp"
#include "support/run_cli.hpp"

using tilefmha::testing::run_cli;

namespace {

// Runs with --validate --explain and returns the output (the plan, the summary line).
std::string validated_output(const std::string& flags) {
  const auto result = run_cli("run --backend gpu --validate --explain " + flags);
  EXPECT_EQ(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find("validation passed"), std::string::npos) << result.output;
  return result.output;
}

void expect_validates(const std::string& flags) {
  if (const auto why = tilefmha::jit::gpu_unavailable_reason(); !why.empty()) GTEST_SKIP() << why;
  validated_output(flags);
}

}  // namespace

// The forward issue's shape list, through each tensor-core pipeline and through the
// dispatcher's own choice: decode (sq = 1), tiny and ragged lengths, GQA 7:1, both causal
// alignments with sq != sk, bshd and bhsd.
TEST(CliGpu, ForwardShapeListOnEveryPipeline) {
  const char* shapes[] = {
      "--seqlen-q 1 --seqlen-k 1000 --nhead-q 14 --nhead-k 2",
      "--seqlen-q 17 --seqlen-k 17 --causal top_left",
      "--seqlen-q 1000 --seqlen-k 700 --nhead-q 7 --nhead-k 1 --causal bottom_right --lse",
      "--seqlen-q 300 --seqlen-k 1000 --causal top_left --layout bhsd --lse",
  };
  for (const char* pipeline : {"", "--pipeline sm80_mma ", "--pipeline sm90_ws "})
    for (const char* shape : shapes) expect_validates(std::string(pipeline) + shape);
}

TEST(CliGpu, PortableHeadDims) {
  expect_validates("--seqlen-q 130 --hdim-q 96 --causal top_left");
  expect_validates("--seqlen-q 130 --hdim-q 72 --nhead-q 7 --nhead-k 1");
}

// The backward (forward, then the three backward stages as one plan) against the CPU
// reference's dQ, dK, dV: GQA with bottom-right causal and ragged lengths, varlen with an empty
// sequence in fp16, a window with sink tokens and a soft cap in deterministic mode.
TEST(CliGpu, BackwardOnThePortablePath) {
  expect_validates(
      "--family bwd --seqlen-q 77 --seqlen-k 130 --nhead-q 8 --nhead-k 2 --hdim-q 128 "
      "--causal bottom_right");
  expect_validates(
      "--family bwd --dtype fp16 --mode group --seqlens-q 5,0,130 --seqlens-k 9,4,200 "
      "--causal top_left --hdim-q 64");
  expect_validates(
      "--family bwd --seqlen-q 100 --seqlen-k 160 --window 32,4 --sink-tokens 2 --softcap 20 "
      "--hdim-q 64 --deterministic");
}

TEST(CliGpu, PlainBf16) {
  expect_validates("--seqlen-q 256 --hdim-q 128 --input-seed 1");
}
TEST(CliGpu, CausalBottomRightRagged) {
  expect_validates("--seqlen-q 100 --seqlen-k 300 --causal bottom_right --lse --input-seed 2");
}
TEST(CliGpu, Fp16GqaBhsd) {
  expect_validates("--dtype fp16 --nhead-q 14 --nhead-k 2 --seqlen-q 77 --layout bhsd --hdim-q 64");
}
TEST(CliGpu, GroupModeWithEmptySequence) {
  expect_validates("--mode group --seqlens-q 5,0,130 --seqlens-k 9,4,200 --causal top_left --lse");
}
TEST(CliGpu, WindowSinkSoftcapAlibi) {
  expect_validates("--seqlen-q 300 --window 64,0 --sink-tokens 4 --softcap 30 --bias alibi");
}
TEST(CliGpu, DropoutAndSinkLogit) {
  expect_validates("--seqlen-q 200 --dropout 0.2 --seed 7 --sink-logit 1.5 --lse");
}
TEST(CliGpu, HdimSeventyTwoAndAsymmetric) {
  expect_validates("--seqlen-q 130 --hdim-q 72");
  expect_validates("--seqlen-q 130 --hdim-q 192 --hdim-v 128");
}
// fp32 runs on the accurate CUDA-core pipeline (2e-5 tolerance): chosen by the dispatcher for
// a padded head dim with GQA and a bottom-right causal mask, and named explicitly with dropout,
// a sink logit and bhsd.
TEST(CliGpu, Fp32OnCudaCores) {
  expect_validates(
      "--dtype fp32 --seqlen-q 130 --seqlen-k 200 --nhead-q 6 --nhead-k 2 --hdim-q 72 "
      "--causal bottom_right --lse");
  expect_validates(
      "--dtype fp32 --pipeline simt_f32 --seqlen-q 77 --dropout 0.1 --seed 3 --sink-logit 0.5 "
      "--layout bhsd --lse");
}

// fwd on the GPU is one engine call whose split request is --splits: N > 1 forces N splits
// (partials in the plan's workspace, then the combine), 1 forbids splitting, and the default 0
// lets the engine choose (a decode row over many keys leaves most SMs idle in one pass).
TEST(CliGpu, SplitsAreTheEnginesRequest) {
  if (const auto why = tilefmha::jit::gpu_unavailable_reason(); !why.empty()) GTEST_SKIP() << why;
  const std::string decode = "--seqlen-q 1 --seqlen-k 4000 --nhead-q 8 --nhead-k 2 --lse ";
  const std::string forced = validated_output("--splits 3 " + decode);
  EXPECT_NE(forced.find("split-KV: 3 splits"), std::string::npos) << forced;
  EXPECT_NE(forced.find("splits=3"), std::string::npos) << forced;
  const std::string one_pass = validated_output("--splits 1 " + decode);
  EXPECT_EQ(one_pass.find("split-KV"), std::string::npos) << one_pass;
  const std::string chosen = validated_output(decode);
  EXPECT_NE(chosen.find("split-KV: "), std::string::npos) << chosen;
  // Forced splits through the portable pipeline too, on a prefill shape.
  validated_output(
      "--pipeline sm80_mma --splits 2 --seqlen-q 300 --seqlen-k 900 --causal "
      "bottom_right");
}

// The paged families on sm80_mma's paged kernels: both table forms and layouts, pages smaller
// than a key block (gathered rows) and holding whole blocks, ragged key lengths with GQA.
TEST(CliGpu, PagedDecodeAndBatchPrefill) {
  expect_validates(
      "--family fwd_pagedkv --page-table vllm --page-size 16 -b 3 --seqlen-q 1 "
      "--seqlen-k 300 --seqlens-k 300,17,129 --nhead-q 8 --nhead-k 2 --hdim-q 64 --causal "
      "bottom_right --lse");
  expect_validates(
      "--family fwd_pagedkv --page-table sglang --page-size 128 --kv-layout hnd -b 2 "
      "--seqlen-q 4 --seqlen-k 500 --seqlens-k 500,64 --hdim-q 128 --lse");
  expect_validates(
      "--family batch_prefill --page-table sglang --page-size 1 --mode group "
      "--seqlens-q 5,0,40 --seqlens-k 60,3,40 --nhead-q 4 --nhead-k 1 --causal "
      "bottom_right --lse");
}

// fwd_appendkv on the GPU is one append -> attend plan: the caches (and Q when it rotates) and
// O are each compared with the reference, contiguous and paged, RoPE from tables.
TEST(CliGpu, AppendThenAttend) {
  if (const auto why = tilefmha::jit::gpu_unavailable_reason(); !why.empty()) GTEST_SKIP() << why;
  const std::string out = validated_output(
      "--family fwd_appendkv -b 3 --seqlen-q 4 --seqlen-k 96 --seqlens-k 37,0,70 --nhead-q 8 "
      "--nhead-k 2 --hdim-q 128 --rope half_rotated --rotary-dim 64 --rotate-q --causal "
      "bottom_right");
  EXPECT_NE(out.find("k: max abs err"), std::string::npos) << out;
  EXPECT_NE(out.find("v: max abs err"), std::string::npos) << out;
  EXPECT_NE(out.find("q: max abs err"), std::string::npos) << out;
  expect_validates(
      "--family fwd_appendkv --page-table vllm --page-size 16 -b 3 --seqlen-q 1 --seqlen-k 300 "
      "--seqlens-k 200,17,0 --nhead-q 8 --nhead-k 2 --hdim-q 64 --rope interleaved --causal "
      "bottom_right --lse");
  expect_validates(
      "--family fwd_appendkv --page-table sglang --page-size 1 --kv-layout hnd -b 2 "
      "--seqlen-q 3 --seqlen-k 64 --seqlens-k 10,40 --dtype fp16 --hdim-q 96");
}

// A quantizing append on the GPU (sm_89 or newer): bf16 new tokens into an e4m3 pool with
// per-page scales, the pools' codes within one fp8 step of the reference's and the scales within
// float rounding, each compared; then a decode over that kind of pool with per-page descales.
TEST(CliGpu, QuantizingAppendAndPerPageDecode) {
  if (const auto why = tilefmha::jit::gpu_unavailable_reason(); !why.empty()) GTEST_SKIP() << why;
  if (tilefmha::jit::GpuContext().compute_capability() < 89)
    GTEST_SKIP() << "fp8 append-KV needs an sm_89 or newer GPU";
  const std::string out = validated_output(
      "--family fwd_appendkv --dtype fp8_e4m3 --fp8-scale per_page --page-table vllm "
      "--page-size 16 -b 3 --seqlen-q 19 --seqlen-k 96 --seqlens-k 37,0,70 --nhead-q 8 "
      "--nhead-k 2 --hdim-q 128 --rope half_rotated --rotary-dim 64");
  for (const char* line :
       {"k: max abs err", "v: max abs err", "k_page: max abs err", "v_page: max abs err"})
    EXPECT_NE(out.find(line), std::string::npos) << out;
  if (tilefmha::jit::GpuContext().compute_capability() == 90)
    expect_validates(
        "--family fwd_pagedkv --dtype fp8_e4m3 --fp8-scale per_page --page-size 16 -b 3 "
        "--seqlen-q 1 --seqlen-k 300 --nhead-q 8 --nhead-k 2 --hdim-q 128");
}

// FP8 e4m3/e5m2 codes with bf16 O on sm90_ws (Hopper only), per-tensor and per-block descale
// tables mirrored to the device, validated within the fp8 tolerance: O's atol is bf16's 1.6e-2
// plus 2^-4 x the largest |dequantized V| (the CLI's codes span the type's range and its
// descales bring them within 1.5), LSE 2e-3 + 2^-9 |ref|. GQA, two sequences of a ragged 300
// rows (the last key block and per-block descale block partial), causal.
TEST(CliGpu, Fp8OnHopperWithinTheFp8Tolerance) {
  if (const auto why = tilefmha::jit::gpu_unavailable_reason(); !why.empty()) GTEST_SKIP() << why;
  if (tilefmha::jit::GpuContext().compute_capability() != 90)
    GTEST_SKIP() << "the fp8 kernels need an sm_90 GPU";
  const std::string shape =
      " -b 2 --nhead-q 8 --nhead-k 2 --seqlen-q 300 --hdim-q 128 --causal top_left --lse";
  const std::regex o_line(R"(o: max abs err \S+, max rel err \S+, 0 of (\d+) outside atol (\S+) )");
  for (const char* scale : {"per_tensor", "per_block"}) {
    SCOPED_TRACE(scale);
    const std::string out =
        validated_output(std::string("--dtype fp8_e4m3 --fp8-scale ") + scale + shape);
    EXPECT_NE(out.find("sm90_ws"), std::string::npos) << out;
    EXPECT_NE(out.find("fwd fp8_e4m3"), std::string::npos) << out;
    std::smatch o;
    ASSERT_TRUE(std::regex_search(out, o, o_line)) << out;
    EXPECT_EQ(std::stoll(o[1]), 2 * 300 * 8 * 128) << "every O element compared";
    // The fp8 term is there: random descales put max |V| between about 0.5 and 1.5 (the
    // factors allow for the line's three significant digits).
    const double atol = std::stod(o[2]);
    EXPECT_GT(atol, (1.6e-2 + 0.5 / 16) * 0.99) << out;
    EXPECT_LT(atol, (1.6e-2 + 1.5 / 16) * 1.01) << out;
    EXPECT_NE(out.find("lse: max abs err"), std::string::npos) << out;
    EXPECT_NE(out.find("rtol 0.00195"), std::string::npos) << "LSE rtol 2^-9: " << out;
  }
  validated_output("--dtype fp8_e5m2 --seqlen-q 200 --seqlen-k 333 --causal bottom_right --lse");
  // --backend auto picks the GPU here, and --validate holds it to the same tolerance.
  const auto automatic = run_cli("run --backend auto --validate --dtype fp8_e4m3" + shape);
  EXPECT_EQ(automatic.exit_code, 0) << automatic.output;
  EXPECT_NE(automatic.output.find("| backend gpu "), std::string::npos) << automatic.output;
  EXPECT_NE(automatic.output.find("validation passed"), std::string::npos) << automatic.output;
}
