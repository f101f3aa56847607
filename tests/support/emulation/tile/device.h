// Host shim of kernels/tile/device.h for the emulated kernel tests (simt_emulator.hpp).
#pragma once

#include <cstdint>
#include <cstring>

#include "simt_emulator.hpp"

#define TILEFMHA_DEVICE inline

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

// Shared "addresses" are byte offsets into the emulated CTA's shared memory.
inline u32 shared_address(const void* pointer) {
  return static_cast<u32>(static_cast<const unsigned char*>(pointer) - ::tilefmha::fmha::shared);
}
inline unsigned char* shared_pointer(u32 address) {
  return ::tilefmha::fmha::shared + address;
}

inline float bits_as_float(u32 bits) {
  float value;
  std::memcpy(&value, &bits, 4);
  return value;
}

inline u32 float_as_bits(float value) {
  u32 bits;
  std::memcpy(&bits, &value, 4);
  return bits;
}

}  // namespace tilefmha::tile
