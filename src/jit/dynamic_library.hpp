// dlopen-based loading of the CUDA driver and NVRTC, so the library and its binaries start on
// machines that have neither (CI, CPU-only hosts) and fail only when a GPU path is used.
#pragma once

#include <string>
#include <vector>

namespace tilefmha::jit {

struct LibraryHandle {
  void* handle = nullptr;  // stays loaded for the life of the process (never dlclose'd)
  std::string path;        // the candidate that loaded
  std::string failures;    // every candidate tried and dlerror's answer, when none loaded
};

// Tries the candidates in order and returns the first that loads.
LibraryHandle open_first_library(const std::vector<std::string>& candidates);

// The address of `symbol`, or nullptr with `failure` describing why.
void* find_symbol(const LibraryHandle& library, const char* symbol, std::string& failure);

}  // namespace tilefmha::jit
