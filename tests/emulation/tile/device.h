// Host stand-in for kernels/tile/device.h (see tests/emulation/README.md): CUDA's built-in
// names as thread-locals and plain functions.
#pragma once

#include <barrier>
#include <cmath>
#include <cstring>

#define TILEFMHA_DEVICE inline
// The host conversions of numeric_types.h stand in for sm_89's fp8 cvt instructions.
#define TILEFMHA_HAS_SM89 1
#define __device__
#define __forceinline__
// The emulation runs blocks one after another, so a block's shared arrays can be statics.
#define __shared__ static

struct EmulatedIndex {
  unsigned x = 0, y = 0, z = 0;
};
inline thread_local EmulatedIndex threadIdx, blockIdx;
// The barrier of the calling thread's warp.
inline thread_local std::barrier<>* emulated_warp = nullptr;

inline void __syncwarp(unsigned = 0xFFFFFFFFu) {
  emulated_warp->arrive_and_wait();
}

// The calling thread's warp's 32 exchange slots, for __shfl_sync and __all_sync.
inline thread_local unsigned* emulated_warp_slots = nullptr;

// Every lane of the warp posts `value` in its slot, then `read` reads the slots, which stay
// unchanged until every lane has read (the hardware's exchanges among a warp's lanes).
template <class Read>
auto emulated_exchange(unsigned value, Read read) {
  emulated_warp_slots[threadIdx.x % 32] = value;
  emulated_warp->arrive_and_wait();
  const auto result = read(emulated_warp_slots);
  emulated_warp->arrive_and_wait();
  return result;
}

// Lane `source` of the calling lane's `width`-lane segment's value (the hardware's
// shfl.sync.idx).
inline unsigned __shfl_sync(unsigned, unsigned value, int source, int width = 32) {
  const unsigned segment = (threadIdx.x % 32) & ~unsigned(width - 1);
  return emulated_exchange(value, [&](const unsigned* slots) {
    return slots[segment + unsigned(source) % unsigned(width)];
  });
}

// Whether `predicate` holds on every lane of the warp (the hardware's vote.sync.all).
inline int __all_sync(unsigned, int predicate) {
  return emulated_exchange(predicate != 0, [](const unsigned* slots) {
    int all = 1;
    for (int lane = 0; lane < 32; ++lane) all = all && slots[lane] != 0;
    return all;
  });
}

// Whether `predicate` holds on any lane of the warp (the hardware's vote.sync.any).
inline int __any_sync(unsigned, int predicate) {
  return emulated_exchange(predicate != 0, [](const unsigned* slots) {
    int any = 0;
    for (int lane = 0; lane < 32; ++lane) any = any || slots[lane] != 0;
    return any;
  });
}

struct uint4 {
  unsigned x, y, z, w;
};
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) {
  return {x, y, z, w};
}
struct float4 {
  float x, y, z, w;
};
inline float4 make_float4(float x, float y, float z, float w) {
  return {x, y, z, w};
}
struct uint2 {
  unsigned x, y;
};
inline uint2 make_uint2(unsigned x, unsigned y) {
  return {x, y};
}
// The hardware's approximate sine and cosine, exact on the host.
inline void __sincosf(float x, float* s, float* c) {
  *s = std::sin(x);
  *c = std::cos(x);
}
inline float __uint_as_float(unsigned bits) {
  float value;
  std::memcpy(&value, &bits, 4);
  return value;
}
inline unsigned __float_as_uint(float value) {
  unsigned bits;
  std::memcpy(&bits, &value, 4);
  return bits;
}

namespace tilefmha::tile {

using u16 = unsigned short;
using u32 = unsigned int;
using u64 = unsigned long long;

template <class A, class B>
struct same_type {
  static constexpr bool value = false;
};
template <class A>
struct same_type<A, A> {
  static constexpr bool value = true;
};

inline float bits_as_float(u32 bits) {
  return __uint_as_float(bits);
}
inline u32 float_as_bits(float value) {
  return __float_as_uint(value);
}

}  // namespace tilefmha::tile
