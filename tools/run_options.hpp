// The flags of `tilefmha run`, as typed: names are parsed into enums later (run_spec), so that
// this file only says what the command line accepts.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tilefmha::cli {

// Defaults that size the quick start: a few seconds on two cores with the CPU reference.
inline constexpr int64_t kDefaultSeqlen = 1024;
inline constexpr int64_t kDefaultPageSize = 16;

struct RunOptions {
  std::string family = "fwd";
  std::string dtype = "bf16";
  std::optional<std::string> out_dtype;
  std::optional<int64_t> batch;
  int64_t nhead_q = 8;
  std::optional<int64_t> nhead_k;   // default nhead_q
  std::optional<int64_t> seqlen_q;  // default kDefaultSeqlen
  std::optional<int64_t> seqlen_k;  // default seqlen_q
  int64_t hdim_q = 128;
  std::optional<int64_t> hdim_v;  // default hdim_q
  std::string layout = "bshd";
  std::optional<std::string> mode;
  std::vector<int64_t> seqlens_q;
  std::vector<int64_t> seqlens_k;

  std::optional<std::string> causal;
  std::vector<int64_t> window;              // {left, right} when given
  std::optional<std::string> window_align;  // default top_left
  int64_t sink_tokens = 0;
  std::optional<double> scale;
  double softcap = 0.0;
  std::optional<std::string> bias;
  std::optional<double> sink_logit;
  bool lse = false;
  bool deterministic = false;  // backward: bitwise-reproducible dQ

  double dropout = 0.0;
  std::optional<uint64_t> seed;    // default 0
  std::optional<uint64_t> offset;  // default 0

  std::optional<int64_t> splits;  // default 1; 0 (the engine chooses) for fwd on the GPU
  std::optional<std::string> page_table;
  std::optional<int64_t> page_size;      // default kDefaultPageSize
  std::optional<std::string> kv_layout;  // default nhd
  std::optional<std::string> fp8_scale;  // default per_tensor
  // fwd_appendkv into an fp8 pool with per_page scales (a quantizing append): the new tokens'
  // 16-bit dtype, default bf16.
  std::optional<std::string> new_dtype;

  // fwd_appendkv
  std::optional<int64_t> seqlen_knew;  // default seqlen_q
  std::optional<std::string> rope;     // default none
  std::optional<int64_t> rotary_dim;   // default hdim_q
  bool rotate_q = false;

  std::string backend = "cpu";
  bool validate = false;                // gpu: compare with the CPU reference
  bool explain = false;                 // gpu: print the dispatcher's choice
  std::optional<std::string> pipeline;  // gpu: only kernels of this pipeline
  uint64_t input_seed = 0;
  std::optional<std::string> load_dir;
  std::optional<std::string> save_dir;
  std::optional<int> threads;
};

// Registers every flag of `run` on `command`, writing parsed values into `options`, and the
// file contract as the help footer.
void add_run_options(CLI::App& command, RunOptions& options);

}  // namespace tilefmha::cli
