// The benchmark shape matrix as data (bench/fa3_sweep.json): the FlashAttention-3 protocol
// (total tokens and hidden size fixed, heads = hidden / hdim, batch = tokens / seqlen), the
// head dims, lengths and causal settings to run, and the measured anchors to compare with.
//   {"description": "...", "protocol": {"total_tokens": 16384, "hidden": 2048},
//    "dtype": "bf16", "hdim": [64, 128, 256], "seqlen": [512, ...], "causal": [false, true],
//    "anchors": {"source": "...", "card": "...", "dtype": "bf16", "unit": "TFLOP/s",
//                "columns": ["hdim", "seqlen", "causal", "fa2", "cudnn"],
//                "rows": [[64, 512, false, 246, 342], ...]}}
// Every key is read strictly: a misspelled one is an error naming it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "tilefmha/types.hpp"

namespace tilefmha::cli {

struct AnchorRow {
  int64_t hdim = 0;
  int64_t seqlen = 0;
  bool causal = false;
  double fa2_tflops = 0;    // FlashAttention-2 (PyTorch SDPA flash backend)
  double cudnn_tflops = 0;  // cuDNN fused attention (PyTorch SDPA cudnn backend)
};

struct BenchSweep {
  std::string source;  // file path
  std::string description;
  int64_t total_tokens = 0;
  int64_t hidden = 0;
  DType dtype = DType::bf16;
  std::vector<int64_t> hdims;
  std::vector<int64_t> seqlens;
  std::vector<bool> causal;
  std::string anchor_source;
  std::string anchor_card;
  DType anchor_dtype = DType::bf16;
  std::vector<AnchorRow> anchors;

  // The anchor measured for this shape, when the table has one for `dtype`.
  std::optional<AnchorRow> anchor(int64_t hdim, int64_t seqlen, bool causal, DType dtype) const;
};

// Throws Error(io) for a missing file and Error(invalid_argument) naming the key for bad data.
BenchSweep load_bench_sweep(const std::filesystem::path& path);

// One forward problem of the sweep (batch mode, nhead_q = nhead_k, seqlen_q = seqlen_k).
struct BenchShape {
  int64_t batch = 0;
  int64_t nhead = 0;
  int64_t seqlen = 0;
  int64_t hdim = 0;
  bool causal = false;
  DType dtype = DType::bf16;

  // 4 * b * h * sq * sk * d, halved for causal: TFLOP/s as FlashAttention and cuDNN count them
  // (the anchors' convention).
  double flops() const;
  std::string label() const;  // "hdim 128 seqlen 2048 causal b8 h16"
};

// The command line's narrowing of the sweep; empty lists keep the sweep's values.
struct ShapeSelection {
  std::vector<int64_t> hdims;
  std::vector<int64_t> seqlens;
  std::string causal = "sweep";  // "both", "yes", "no", or "sweep" (the file's list)
  std::optional<DType> dtype;
};

// Shapes in the order hdim, seqlen, causal (no before yes). Throws Error(invalid_argument)
// naming the value for an hdim that does not divide the hidden size, a non-positive length, a
// causal word other than both/yes/no or a dtype other than fp16/bf16/fp8_e4m3 (fp8 shapes read
// e4m3 codes with per-tensor descales and write bf16 O).
std::vector<BenchShape> expand_shapes(const BenchSweep& sweep, const ShapeSelection& selection);

}  // namespace tilefmha::cli
