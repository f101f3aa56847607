// wgmma (sm_90a): a warpgroup (4 warps, 128 threads) multiplies a 64xK16 A tile by a K16xN B
// tile into fp32 accumulators held in registers, asynchronously. Operands in shared memory are
// described by 64-bit matrix descriptors; A may instead come from registers (the _rs form,
// used for P·V where P is the softmax output already in registers).
//
// Accumulator layout for m64nN (thread t of the warpgroup, warp w = t / 32, lane l = t % 32),
// per 8-column chunk j in [0, N/8):
//   acc[4j + 0..1] = C[16w + l/4    ][8j + 2(l%4) + 0..1]
//   acc[4j + 2..3] = C[16w + l/4 + 8][8j + 2(l%4) + 0..1]
// Sequence: wgmma_fence(); wgmma_m64k16_*(...) for each k-slice; wgmma_commit_group();
// wgmma_wait_group<0>() before the accumulators are read.
#pragma once

#include "tile/numeric_types.h"

namespace tilefmha::tile {

// Swizzle mode field of a descriptor (bits 62..63). 128-byte swizzle matches TMA's
// CU_TENSOR_MAP_SWIZZLE_128B, the bank-conflict-free layout for 64-element bf16/fp16 rows.
enum class SmemSwizzle : u32 { none = 0, bytes128 = 1, bytes64 = 2, bytes32 = 3 };

// Shared-memory matrix descriptor:
//   bits  0..13 start address >> 4      bits 16..29 leading-dimension byte offset >> 4
//   bits 32..45 stride-dimension byte offset >> 4   bits 49..51 base offset (0: tiles are
//   aligned to the swizzle pattern, 1024 bytes for 128B)   bits 62..63 swizzle mode.
TILEFMHA_DEVICE u64 make_smem_descriptor(u32 smem_address, u32 leading_byte_offset,
                                         u32 stride_byte_offset, SmemSwizzle swizzle) {
  u64 descriptor = 0;
  descriptor |= u64((smem_address & 0x3FFFFu) >> 4);
  descriptor |= u64((leading_byte_offset & 0x3FFFFu) >> 4) << 16;
  descriptor |= u64((stride_byte_offset & 0x3FFFFu) >> 4) << 32;
  descriptor |= u64(static_cast<u32>(swizzle)) << 62;
  return descriptor;
}

// K-major tile with 128-byte rows (64 fp16/bf16 elements) in 128B-swizzled 8-row atoms, as TMA
// writes it: consecutive 8-row groups are 1024 bytes apart; the leading offset is unused for
// swizzled K-major layouts and encoded as 1 by convention.
TILEFMHA_DEVICE u64 make_smem_descriptor_k_major_sw128(u32 smem_address) {
  return make_smem_descriptor(smem_address, 16u, 1024u, SmemSwizzle::bytes128);
}

// M-/N-major tile (the transposed operand, e.g. V stored [keys, hdim] as B of P·V) in
// 128B-swizzled atoms of 8 k-rows x 64 elements: consecutive 8-row groups along K are 1024 bytes
// apart, and `atom_column_stride_bytes` separates consecutive 64-element blocks along M/N
// (unused when the tile is 64 wide).
TILEFMHA_DEVICE u64 make_smem_descriptor_mn_major_sw128(u32 smem_address,
                                                        u32 atom_column_stride_bytes) {
  return make_smem_descriptor(smem_address, atom_column_stride_bytes, 1024u, SmemSwizzle::bytes128);
}

// Moves the start address by `bytes` (a multiple of 16): 32 bytes to the next k16 slice of a
// K-major 128B-swizzled tile (the hardware applies the swizzle to the full address), 2048
// bytes (16 rows of 128 bytes) to the next k16 slice of an M/N-major one.
TILEFMHA_DEVICE u64 advance_smem_descriptor(u64 descriptor, u32 bytes) {
  return descriptor + u64(bytes >> 4);
}

}  // namespace tilefmha::tile

#if defined(TILEFMHA_HAS_SM90A)

namespace tilefmha::tile {

TILEFMHA_DEVICE void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}

TILEFMHA_DEVICE void wgmma_commit_group() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}

template <int PendingGroups>
TILEFMHA_DEVICE void wgmma_wait_group() {
  static_assert(PendingGroups >= 0 && PendingGroups <= 7, "wgmma.wait_group takes 0..7");
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(PendingGroups) : "memory");
}

// Keeps the compiler from moving accumulator reads/writes across an in-flight wgmma.
template <int Count>
TILEFMHA_DEVICE void wgmma_fence_registers(float (&registers)[Count]) {
  for (int i = 0; i < Count; ++i) asm volatile("" : "+f"(registers[i])::"memory");
}

// Inline asm needs literal operand numbers, and the count of accumulator operands (N/2)
// differs per N, so each N gets its own instantiation of the same statement. Operands:
// accumulators %0..%(N/2-1), then the inputs whose numbers are passed as I0..I6.
#define TILEFMHA_WGMMA_OPS_BLOCK(d, i)                                                            \
  "+f"(d[i + 0]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), \
      "+f"(d[i + 6]), "+f"(d[i + 7])

#define TILEFMHA_WGMMA_ACC_BLOCK_0 "%0, %1, %2, %3, %4, %5, %6, %7"
#define TILEFMHA_WGMMA_ACC_BLOCK_1 "%8, %9, %10, %11, %12, %13, %14, %15"
#define TILEFMHA_WGMMA_ACC_BLOCK_2 "%16, %17, %18, %19, %20, %21, %22, %23"
#define TILEFMHA_WGMMA_ACC_BLOCK_3 "%24, %25, %26, %27, %28, %29, %30, %31"
#define TILEFMHA_WGMMA_ACC_BLOCK_4 "%32, %33, %34, %35, %36, %37, %38, %39"
#define TILEFMHA_WGMMA_ACC_BLOCK_5 "%40, %41, %42, %43, %44, %45, %46, %47"
#define TILEFMHA_WGMMA_ACC_BLOCK_6 "%48, %49, %50, %51, %52, %53, %54, %55"
#define TILEFMHA_WGMMA_ACC_BLOCK_7 "%56, %57, %58, %59, %60, %61, %62, %63"
#define TILEFMHA_WGMMA_ACC_BLOCK_8 "%64, %65, %66, %67, %68, %69, %70, %71"
#define TILEFMHA_WGMMA_ACC_BLOCK_9 "%72, %73, %74, %75, %76, %77, %78, %79"
#define TILEFMHA_WGMMA_ACC_BLOCK_10 "%80, %81, %82, %83, %84, %85, %86, %87"
#define TILEFMHA_WGMMA_ACC_BLOCK_11 "%88, %89, %90, %91, %92, %93, %94, %95"
#define TILEFMHA_WGMMA_ACC_BLOCK_12 "%96, %97, %98, %99, %100, %101, %102, %103"
#define TILEFMHA_WGMMA_ACC_BLOCK_13 "%104, %105, %106, %107, %108, %109, %110, %111"
#define TILEFMHA_WGMMA_ACC_BLOCK_14 "%112, %113, %114, %115, %116, %117, %118, %119"
#define TILEFMHA_WGMMA_ACC_BLOCK_15 "%120, %121, %122, %123, %124, %125, %126, %127"

#define TILEFMHA_WGMMA_ACCS_1 TILEFMHA_WGMMA_ACC_BLOCK_0
#define TILEFMHA_WGMMA_ACCS_2 TILEFMHA_WGMMA_ACCS_1 ", " TILEFMHA_WGMMA_ACC_BLOCK_1
#define TILEFMHA_WGMMA_ACCS_3 TILEFMHA_WGMMA_ACCS_2 ", " TILEFMHA_WGMMA_ACC_BLOCK_2
#define TILEFMHA_WGMMA_ACCS_4 TILEFMHA_WGMMA_ACCS_3 ", " TILEFMHA_WGMMA_ACC_BLOCK_3
#define TILEFMHA_WGMMA_ACCS_5 TILEFMHA_WGMMA_ACCS_4 ", " TILEFMHA_WGMMA_ACC_BLOCK_4
#define TILEFMHA_WGMMA_ACCS_6 TILEFMHA_WGMMA_ACCS_5 ", " TILEFMHA_WGMMA_ACC_BLOCK_5
#define TILEFMHA_WGMMA_ACCS_7 TILEFMHA_WGMMA_ACCS_6 ", " TILEFMHA_WGMMA_ACC_BLOCK_6
#define TILEFMHA_WGMMA_ACCS_8 TILEFMHA_WGMMA_ACCS_7 ", " TILEFMHA_WGMMA_ACC_BLOCK_7
#define TILEFMHA_WGMMA_ACCS_9 TILEFMHA_WGMMA_ACCS_8 ", " TILEFMHA_WGMMA_ACC_BLOCK_8
#define TILEFMHA_WGMMA_ACCS_10 TILEFMHA_WGMMA_ACCS_9 ", " TILEFMHA_WGMMA_ACC_BLOCK_9
#define TILEFMHA_WGMMA_ACCS_11 TILEFMHA_WGMMA_ACCS_10 ", " TILEFMHA_WGMMA_ACC_BLOCK_10
#define TILEFMHA_WGMMA_ACCS_12 TILEFMHA_WGMMA_ACCS_11 ", " TILEFMHA_WGMMA_ACC_BLOCK_11
#define TILEFMHA_WGMMA_ACCS_13 TILEFMHA_WGMMA_ACCS_12 ", " TILEFMHA_WGMMA_ACC_BLOCK_12
#define TILEFMHA_WGMMA_ACCS_14 TILEFMHA_WGMMA_ACCS_13 ", " TILEFMHA_WGMMA_ACC_BLOCK_13
#define TILEFMHA_WGMMA_ACCS_15 TILEFMHA_WGMMA_ACCS_14 ", " TILEFMHA_WGMMA_ACC_BLOCK_14
#define TILEFMHA_WGMMA_ACCS_16 TILEFMHA_WGMMA_ACCS_15 ", " TILEFMHA_WGMMA_ACC_BLOCK_15

#define TILEFMHA_WGMMA_OPS_1(d) TILEFMHA_WGMMA_OPS_BLOCK(d, 0)
#define TILEFMHA_WGMMA_OPS_2(d) TILEFMHA_WGMMA_OPS_1(d), TILEFMHA_WGMMA_OPS_BLOCK(d, 8)
#define TILEFMHA_WGMMA_OPS_3(d) TILEFMHA_WGMMA_OPS_2(d), TILEFMHA_WGMMA_OPS_BLOCK(d, 16)
#define TILEFMHA_WGMMA_OPS_4(d) TILEFMHA_WGMMA_OPS_3(d), TILEFMHA_WGMMA_OPS_BLOCK(d, 24)
#define TILEFMHA_WGMMA_OPS_5(d) TILEFMHA_WGMMA_OPS_4(d), TILEFMHA_WGMMA_OPS_BLOCK(d, 32)
#define TILEFMHA_WGMMA_OPS_6(d) TILEFMHA_WGMMA_OPS_5(d), TILEFMHA_WGMMA_OPS_BLOCK(d, 40)
#define TILEFMHA_WGMMA_OPS_7(d) TILEFMHA_WGMMA_OPS_6(d), TILEFMHA_WGMMA_OPS_BLOCK(d, 48)
#define TILEFMHA_WGMMA_OPS_8(d) TILEFMHA_WGMMA_OPS_7(d), TILEFMHA_WGMMA_OPS_BLOCK(d, 56)
#define TILEFMHA_WGMMA_OPS_9(d) TILEFMHA_WGMMA_OPS_8(d), TILEFMHA_WGMMA_OPS_BLOCK(d, 64)
#define TILEFMHA_WGMMA_OPS_10(d) TILEFMHA_WGMMA_OPS_9(d), TILEFMHA_WGMMA_OPS_BLOCK(d, 72)
#define TILEFMHA_WGMMA_OPS_11(d) TILEFMHA_WGMMA_OPS_10(d), TILEFMHA_WGMMA_OPS_BLOCK(d, 80)
#define TILEFMHA_WGMMA_OPS_12(d) TILEFMHA_WGMMA_OPS_11(d), TILEFMHA_WGMMA_OPS_BLOCK(d, 88)
#define TILEFMHA_WGMMA_OPS_13(d) TILEFMHA_WGMMA_OPS_12(d), TILEFMHA_WGMMA_OPS_BLOCK(d, 96)
#define TILEFMHA_WGMMA_OPS_14(d) TILEFMHA_WGMMA_OPS_13(d), TILEFMHA_WGMMA_OPS_BLOCK(d, 104)
#define TILEFMHA_WGMMA_OPS_15(d) TILEFMHA_WGMMA_OPS_14(d), TILEFMHA_WGMMA_OPS_BLOCK(d, 112)
#define TILEFMHA_WGMMA_OPS_16(d) TILEFMHA_WGMMA_OPS_15(d), TILEFMHA_WGMMA_OPS_BLOCK(d, 120)

template <int N>
struct WgmmaM64K16;

// clang-format off
#define TILEFMHA_WGMMA_SS(N, BLOCKS, TYPE, I0, I1, I2, I3, I4)                                 \
  asm volatile(                                                                                \
      "{\n .reg .pred accumulate;\n setp.ne.b32 accumulate, " I2 ", 0;\n"                      \
      " wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TYPE "." TYPE                         \
      " {" TILEFMHA_WGMMA_ACCS_##BLOCKS "}, " I0 ", " I1 ", accumulate, 1, 1, " I3 ", " I4     \
      ";\n}\n"                                                                                 \
      : TILEFMHA_WGMMA_OPS_##BLOCKS(d)                                                         \
      : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(TransA), "n"(TransB))

#define TILEFMHA_WGMMA_RS(N, BLOCKS, TYPE, I0, I1, I2, I3, I4, I5, I6)                         \
  asm volatile(                                                                                \
      "{\n .reg .pred accumulate;\n setp.ne.b32 accumulate, " I5 ", 0;\n"                      \
      " wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TYPE "." TYPE                         \
      " {" TILEFMHA_WGMMA_ACCS_##BLOCKS "}, {" I0 ", " I1 ", " I2 ", " I3 "}, " I4             \
      ", accumulate, 1, 1, " I6 ";\n}\n"                                                       \
      : TILEFMHA_WGMMA_OPS_##BLOCKS(d)                                                         \
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d), "n"(TransB))


// FP8 (k32): no transpose operands, since both operands must be K-major; the type pair is
// spelled as A's then B's.
#define TILEFMHA_WGMMA_SS_K32(N, BLOCKS, TYPES, I0, I1, I2)                                    \
  asm volatile(                                                                                \
      "{\n .reg .pred accumulate;\n setp.ne.b32 accumulate, " I2 ", 0;\n"                      \
      " wgmma.mma_async.sync.aligned.m64n" #N "k32.f32." TYPES                                 \
      " {" TILEFMHA_WGMMA_ACCS_##BLOCKS "}, " I0 ", " I1 ", accumulate, 1, 1;\n}\n"            \
      : TILEFMHA_WGMMA_OPS_##BLOCKS(d)                                                         \
      : "l"(desc_a), "l"(desc_b), "r"(scale_d))

#define TILEFMHA_WGMMA_RS_K32(N, BLOCKS, TYPES, I0, I1, I2, I3, I4, I5)                        \
  asm volatile(                                                                                \
      "{\n .reg .pred accumulate;\n setp.ne.b32 accumulate, " I5 ", 0;\n"                      \
      " wgmma.mma_async.sync.aligned.m64n" #N "k32.f32." TYPES                                 \
      " {" TILEFMHA_WGMMA_ACCS_##BLOCKS "}, {" I0 ", " I1 ", " I2 ", " I3 "}, " I4             \
      ", accumulate, 1, 1;\n}\n"                                                               \
      : TILEFMHA_WGMMA_OPS_##BLOCKS(d)                                                         \
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d))
// clang-format on

template <int N>
struct WgmmaM64K32;

#define TILEFMHA_DEFINE_WGMMA_M64K16(N, BLOCKS, I0, I1, I2, I3, I4, I5, I6)                  \
  template <>                                                                                \
  struct WgmmaM64K16<N> {                                                                    \
    template <class T, int TransA, int TransB>                                               \
    static TILEFMHA_DEVICE void ss(float (&d)[N / 2], u64 desc_a, u64 desc_b, u32 scale_d) { \
      if constexpr (same_type<T, half_t>::value) {                                           \
        TILEFMHA_WGMMA_SS(N, BLOCKS, "f16", I0, I1, I2, I3, I4);                             \
      } else {                                                                               \
        TILEFMHA_WGMMA_SS(N, BLOCKS, "bf16", I0, I1, I2, I3, I4);                            \
      }                                                                                      \
    }                                                                                        \
    template <class T, int TransB>                                                           \
    static TILEFMHA_DEVICE void rs(float (&d)[N / 2], const u32 (&a)[4], u64 desc_b,         \
                                   u32 scale_d) {                                            \
      if constexpr (same_type<T, half_t>::value) {                                           \
        TILEFMHA_WGMMA_RS(N, BLOCKS, "f16", I0, I1, I2, I3, I4, I5, I6);                     \
      } else {                                                                               \
        TILEFMHA_WGMMA_RS(N, BLOCKS, "bf16", I0, I1, I2, I3, I4, I5, I6);                    \
      }                                                                                      \
    }                                                                                        \
  };                                                                                         \
  template <>                                                                                \
  struct WgmmaM64K32<N> {                                                                    \
    template <class TA, class TB>                                                            \
    static TILEFMHA_DEVICE void ss(float (&d)[N / 2], u64 desc_a, u64 desc_b, u32 scale_d) { \
      if constexpr (same_type<TA, float_e5m2_t>::value) {                                    \
        TILEFMHA_WGMMA_SS_K32(N, BLOCKS, "e5m2.e5m2", I0, I1, I2);                           \
      } else {                                                                               \
        TILEFMHA_WGMMA_SS_K32(N, BLOCKS, "e4m3.e4m3", I0, I1, I2);                           \
      }                                                                                      \
    }                                                                                        \
    template <class TA, class TB>                                                            \
    static TILEFMHA_DEVICE void rs(float (&d)[N / 2], const u32 (&a)[4], u64 desc_b,         \
                                   u32 scale_d) {                                            \
      if constexpr (same_type<TB, float_e5m2_t>::value) {                                    \
        TILEFMHA_WGMMA_RS_K32(N, BLOCKS, "e4m3.e5m2", I0, I1, I2, I3, I4, I5);               \
      } else {                                                                               \
        TILEFMHA_WGMMA_RS_K32(N, BLOCKS, "e4m3.e4m3", I0, I1, I2, I3, I4, I5);               \
      }                                                                                      \
    }                                                                                        \
  };

TILEFMHA_DEFINE_WGMMA_M64K16(16, 1, "%8", "%9", "%10", "%11", "%12", "%13", "%14")
TILEFMHA_DEFINE_WGMMA_M64K16(32, 2, "%16", "%17", "%18", "%19", "%20", "%21", "%22")
TILEFMHA_DEFINE_WGMMA_M64K16(48, 3, "%24", "%25", "%26", "%27", "%28", "%29", "%30")
TILEFMHA_DEFINE_WGMMA_M64K16(64, 4, "%32", "%33", "%34", "%35", "%36", "%37", "%38")
TILEFMHA_DEFINE_WGMMA_M64K16(80, 5, "%40", "%41", "%42", "%43", "%44", "%45", "%46")
TILEFMHA_DEFINE_WGMMA_M64K16(96, 6, "%48", "%49", "%50", "%51", "%52", "%53", "%54")
TILEFMHA_DEFINE_WGMMA_M64K16(112, 7, "%56", "%57", "%58", "%59", "%60", "%61", "%62")
TILEFMHA_DEFINE_WGMMA_M64K16(128, 8, "%64", "%65", "%66", "%67", "%68", "%69", "%70")
TILEFMHA_DEFINE_WGMMA_M64K16(144, 9, "%72", "%73", "%74", "%75", "%76", "%77", "%78")
TILEFMHA_DEFINE_WGMMA_M64K16(160, 10, "%80", "%81", "%82", "%83", "%84", "%85", "%86")
TILEFMHA_DEFINE_WGMMA_M64K16(176, 11, "%88", "%89", "%90", "%91", "%92", "%93", "%94")
TILEFMHA_DEFINE_WGMMA_M64K16(192, 12, "%96", "%97", "%98", "%99", "%100", "%101", "%102")
TILEFMHA_DEFINE_WGMMA_M64K16(208, 13, "%104", "%105", "%106", "%107", "%108", "%109", "%110")
TILEFMHA_DEFINE_WGMMA_M64K16(224, 14, "%112", "%113", "%114", "%115", "%116", "%117", "%118")
TILEFMHA_DEFINE_WGMMA_M64K16(240, 15, "%120", "%121", "%122", "%123", "%124", "%125", "%126")
TILEFMHA_DEFINE_WGMMA_M64K16(256, 16, "%128", "%129", "%130", "%131", "%132", "%133", "%134")

// acc (+)= A·B for one k16 slice, both operands in shared memory. N is a multiple of 16 in
// [16, 256]; T is half_t or bfloat16_t. TransA/TransB = 0 for K-major operands, 1 for M-major
// A / N-major B (e.g. V stored [keys, hdim] used as B of P·V). accumulate = false overwrites.
template <int N, class T, int TransA = 0, int TransB = 0>
TILEFMHA_DEVICE void wgmma_m64k16_ss(float (&acc)[N / 2], u64 desc_a, u64 desc_b, bool accumulate) {
  static_assert(same_type<T, half_t>::value || same_type<T, bfloat16_t>::value,
                "wgmma_m64k16_ss takes half_t or bfloat16_t");
  static_assert(TransA == 0 || TransA == 1, "TransA is 0 or 1");
  static_assert(TransB == 0 || TransB == 1, "TransB is 0 or 1");
  WgmmaM64K16<N>::template ss<T, TransA, TransB>(acc, desc_a, desc_b, accumulate ? 1u : 0u);
}

// As above with A from registers in the mma.sync A-fragment layout of each warp's 16 rows.
template <int N, class T, int TransB = 0>
TILEFMHA_DEVICE void wgmma_m64k16_rs(float (&acc)[N / 2], const u32 (&a)[4], u64 desc_b,
                                     bool accumulate) {
  static_assert(same_type<T, half_t>::value || same_type<T, bfloat16_t>::value,
                "wgmma_m64k16_rs takes half_t or bfloat16_t");
  static_assert(TransB == 0 || TransB == 1, "TransB is 0 or 1");
  WgmmaM64K16<N>::template rs<T, TransB>(acc, a, desc_b, accumulate ? 1u : 0u);
}

// FP8: acc (+)= A·B for one k32 slice (32 bytes of K, like a 16-bit k16 slice), both operands
// K-major in shared memory. TA/TB: float_e4m3_t or float_e5m2_t, the same for both.
template <int N, class TA, class TB>
TILEFMHA_DEVICE void wgmma_m64k32_ss(float (&acc)[N / 2], u64 desc_a, u64 desc_b, bool accumulate) {
  static_assert(is_fp8<TA>::value && same_type<TA, TB>::value,
                "wgmma_m64k32_ss takes two float_e4m3_t or two float_e5m2_t operands");
  WgmmaM64K32<N>::template ss<TA, TB>(acc, desc_a, desc_b, accumulate ? 1u : 0u);
}

// FP8 with A (e4m3) from registers: per warp, register q of a thread (lane l) holds the 4 bytes
// of row l/4 + 8 (q % 2) at K columns 4 (l % 4) + 16 (q / 2) + 0..3, low byte first.
template <int N, class TA, class TB>
TILEFMHA_DEVICE void wgmma_m64k32_rs(float (&acc)[N / 2], const u32 (&a)[4], u64 desc_b,
                                     bool accumulate) {
  static_assert(same_type<TA, float_e4m3_t>::value && is_fp8<TB>::value,
                "wgmma_m64k32_rs takes an e4m3 register A and an fp8 B");
  WgmmaM64K32<N>::template rs<TA, TB>(acc, a, desc_b, accumulate ? 1u : 0u);
}

}  // namespace tilefmha::tile

#endif  // TILEFMHA_HAS_SM90A
