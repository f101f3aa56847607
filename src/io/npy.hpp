// NumPy .npy files (format versions 1.0, 2.0 and 3.0): the exchange format of the CLI.
// Only little-endian, C-order arrays of the dtypes below; anything else is rejected with an
// Error(ErrorKind::io) that names the file.
//
//   descr  '<f4' fp32   '<f2' fp16   '<i4' int32   '<i8' int64   '|u1' uint8
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tilefmha/types.hpp"

namespace tilefmha::io {

// An array as stored in a .npy file: element type, shape (rank 0 = a scalar) and the raw
// little-endian C-order element bytes.
struct NpyArray {
  DType dtype = DType::fp32;
  std::vector<int64_t> shape;
  std::vector<std::byte> bytes;

  int64_t numel() const;
};

// Whether a dtype has a .npy descr here.
bool npy_supports(DType dtype);

// Parses the bytes of a whole .npy file; `name` (usually the path) prefixes every error.
NpyArray parse_npy(std::span<const std::byte> file_bytes, std::string_view name);
// The bytes of a .npy file holding `array`: version 1.0, or 2.0 when the header needs it.
std::vector<std::byte> encode_npy(const NpyArray& array);

NpyArray read_npy(const std::filesystem::path& path);
void write_npy(const std::filesystem::path& path, const NpyArray& array);

// "[2, 3, 4]" ("[]" for a scalar): how shapes appear in messages.
std::string shape_string(std::span<const int64_t> shape);

}  // namespace tilefmha::io
