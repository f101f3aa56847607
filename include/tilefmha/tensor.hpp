// Non-owning strided tensor views. Sizes, strides and offsets are 64-bit and in elements.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "tilefmha/types.hpp"

namespace tilefmha {

// Where the memory a view points at lives; the CPU reference needs host memory.
enum class MemorySpace : uint8_t { host, device };

inline constexpr int kMaxRank = 5;

struct TensorView {
  void* data = nullptr;
  DType dtype = DType::fp32;
  MemorySpace space = MemorySpace::host;
  int rank = 0;
  std::array<int64_t, kMaxRank> shape{};
  std::array<int64_t, kMaxRank> stride{};  // elements; 0 broadcasts that dimension

  bool empty() const { return data == nullptr; }
  int64_t numel() const;
  // Offset in elements of a multi-index of exactly `rank` entries.
  int64_t offset(std::initializer_list<int64_t> index) const;
  // The largest element offset reachable plus one: how many elements the memory must hold.
  // numel() and extent() throw Error(invalid_argument) when the count overflows int64.
  int64_t extent() const;
};

// extent() in bytes, or nullopt when it overflows int64 (a negative size counts as overflow):
// the non-throwing form, for checks that name the field themselves.
std::optional<int64_t> extent_bytes(const TensorView& view);

// "[2, 128, 8, 64]": a shape as error messages print it.
std::string shape_text(std::span<const int64_t> dims);
std::string shape_text(const TensorView& view);  // its first `rank` dims

// A contiguous (row-major) view of `shape`.
TensorView contiguous_view(void* data, DType dtype, std::initializer_list<int64_t> shape,
                           MemorySpace space = MemorySpace::host);

// Q/K/V/O views use the logical order [batch, seq, head, dim] whatever the memory order.
// bshd: memory [batch, seq, head, dim]; bhsd: memory [batch, head, seq, dim].
TensorView bshd(void* data, DType dtype, int64_t batch, int64_t seq, int64_t heads, int64_t dim,
                MemorySpace space = MemorySpace::host);
TensorView bhsd(void* data, DType dtype, int64_t batch, int64_t seq, int64_t heads, int64_t dim,
                MemorySpace space = MemorySpace::host);

}  // namespace tilefmha
