// Every file under kernels/, embedded into the library at build time (cmake/
// EmbedKernelHeaders.cmake), so NVRTC gets them as in-memory headers and a binary needs no
// source tree at run time. Paths are relative to kernels/ ("tile/mma.h"), which is how device
// code includes them.
#pragma once

#include <span>
#include <string_view>

namespace tilefmha::jit {

struct EmbeddedFile {
  std::string_view path;
  std::string_view contents;
};

// Sorted by path. Defined in the generated embedded_kernel_headers.cpp.
std::span<const EmbeddedFile> embedded_kernel_files();

// The file under `path`, or nullptr.
const EmbeddedFile* find_embedded_kernel_file(std::string_view path);

// Hash of every path and content: part of every cache key, so editing a header invalidates
// the cubins built from it.
const std::string& embedded_kernel_files_hash();

}  // namespace tilefmha::jit
