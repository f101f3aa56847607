// Philox4x32-10 and the dropout keep rule, shared verbatim by host (CPU reference) and device
// (NVRTC kernels), so both drop exactly the same elements. No includes: NVRTC has no std headers.
#pragma once

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define TILEFMHA_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define TILEFMHA_HOST_DEVICE inline
#endif

namespace tilefmha::philox {

struct Word4 {
  unsigned int x, y, z, w;
};

TILEFMHA_HOST_DEVICE void mulhilo(unsigned int a, unsigned int b, unsigned int& hi,
                                  unsigned int& lo) {
  const unsigned long long product = static_cast<unsigned long long>(a) * b;
  hi = static_cast<unsigned int>(product >> 32);
  lo = static_cast<unsigned int>(product);
}

// Ten rounds of Philox4x32 (Salmon et al., SC'11) with the standard multipliers and Weyl keys.
TILEFMHA_HOST_DEVICE Word4 philox4x32_10(Word4 counter, unsigned int key0, unsigned int key1) {
  for (int round = 0; round < 10; ++round) {
    unsigned int hi0, lo0, hi1, lo1;
    mulhilo(0xD2511F53u, counter.x, hi0, lo0);
    mulhilo(0xCD9E8D57u, counter.z, hi1, lo1);
    counter = {hi1 ^ counter.y ^ key0, lo1, hi0 ^ counter.w ^ key1, lo0};
    key0 += 0x9E3779B9u;
    key1 += 0xBB67AE85u;
  }
  return counter;
}

// The random word of attention element (batch b, query head h, query i, key j), with i and j
// local to sequence b. One Philox call serves four consecutive keys (j / 4 in the counter),
// so a tile of keys costs a quarter call per element.
//   counter = (j / 4, i, b * nhead_q + h, offset_lo),  key = (seed_lo, seed_hi ^ offset_hi)
TILEFMHA_HOST_DEVICE unsigned int dropout_word(unsigned long long seed, unsigned long long offset,
                                               long long b, long long h, long long nhead_q,
                                               long long i, long long j) {
  const Word4 counter = {static_cast<unsigned int>(j >> 2), static_cast<unsigned int>(i),
                         static_cast<unsigned int>(b * nhead_q + h),
                         static_cast<unsigned int>(offset)};
  const Word4 r = philox4x32_10(
      counter, static_cast<unsigned int>(seed),
      static_cast<unsigned int>(seed >> 32) ^ static_cast<unsigned int>(offset >> 32));
  switch (j & 3) {
    case 0: return r.x;
    case 1: return r.y;
    case 2: return r.z;
    default: return r.w;
  }
}

// Element is dropped when its word is below floor(p * 2^32); kept ones are scaled 1 / (1 - p).
TILEFMHA_HOST_DEVICE unsigned int dropout_threshold(double p) {
  const double scaled = p * 4294967296.0;
  return scaled >= 4294967295.0 ? 0xFFFFFFFFu : static_cast<unsigned int>(scaled);
}

TILEFMHA_HOST_DEVICE bool dropout_keep(unsigned int word, unsigned int threshold) {
  return word >= threshold;
}

}  // namespace tilefmha::philox
