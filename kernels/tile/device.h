// Shared spellings for the tile primitives. Every header under kernels/ is compiled by NVRTC
// with no include path and no std headers, so the few type helpers needed live here.
#pragma once

#define TILEFMHA_DEVICE __device__ __forceinline__

// fp8 conversions (cvt to and from e4m3x2 / e5m2x2) exist from sm_89 (Ada) on.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
#define TILEFMHA_HAS_SM89 1
#endif
// sm_90 instructions (TMA, mbarrier transaction counts, async proxy fences) exist on every
// Hopper target; wgmma and setmaxnreg exist only on the arch-specific sm_90a target.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define TILEFMHA_HAS_SM90 1
#endif
#if defined(TILEFMHA_HAS_SM90) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define TILEFMHA_HAS_SM90A 1
#endif

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

// 32-bit shared-window address of a generic pointer into shared memory: the operand form that
// ldmatrix, cp.async, mbarrier, TMA and wgmma descriptors expect.
TILEFMHA_DEVICE u32 shared_address(const void* pointer) {
  u32 address;
  asm("{\n .reg .u64 window;\n cvta.to.shared.u64 window, %1;\n cvt.u32.u64 %0, window;\n}\n"
      : "=r"(address)
      : "l"(pointer));
  return address;
}

TILEFMHA_DEVICE float bits_as_float(u32 bits) {
  float value;
  asm("mov.b32 %0, %1;" : "=f"(value) : "r"(bits));
  return value;
}

TILEFMHA_DEVICE u32 float_as_bits(float value) {
  u32 bits;
  asm("mov.b32 %0, %1;" : "=r"(bits) : "f"(value));
  return bits;
}

}  // namespace tilefmha::tile
