// A kernel set named the way users name one: a sweep config enumerated under a profile and
// filters, split by whether codegen implements each kernel. `tilefmha build` and `bench` compile
// it; the Python package's warmup() compiles it ahead of first use (precompile.hpp).
#pragma once

#include <string>
#include <vector>

#include "enumerate/enumerator.hpp"
#include "tilefmha/kernel_config.hpp"

namespace tilefmha::runtime {

struct KernelSelection {
  std::string config;  // sweep config name or path
  Arch arch = Arch::sm90;
  std::string profile = "full";
  std::vector<std::string> filters;       // each must hold
  std::vector<std::string> filter_files;  // one expression per line
};

struct NotImplemented {
  KernelConfig config;
  std::string reason;  // codegen's message, naming the field and value
};

struct SelectedKernels {
  std::string description;  // "sweep config fwd (variant fwd), arch sm90, profile full"
  int64_t enumerated = 0;
  std::vector<KernelConfig> supported;          // codegen implements them, in enumeration order
  std::vector<NotImplemented> not_implemented;  // check_supported threw not_supported
};

// Loads the sweep config, profile and filters (Error invalid_argument / io on bad input, before
// any work) and enumerates for `arch`.
SelectedKernels select_kernels(const KernelSelection& selection);

// Splits already-enumerated configs the same way.
void split_by_support(const std::vector<KernelConfig>& configs, SelectedKernels& out);

}  // namespace tilefmha::runtime
