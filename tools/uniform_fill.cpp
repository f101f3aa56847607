#include "uniform_fill.hpp"

#include <algorithm>
#include <random>

#include "core/numeric.hpp"
#include "core/parallel.hpp"

namespace tilefmha::cli {

void fill_uniform(std::vector<std::byte>& bytes, DType dtype, int64_t elements, uint64_t seed,
                  double range) {
  bytes.resize(static_cast<size_t>(elements * dtype_size(dtype)));
  constexpr int64_t kChunk = int64_t{1} << 20;
  // One generator per chunk, seeded by (seed, chunk): the data does not depend on threads.
  parallel_for((elements + kChunk - 1) / kChunk, [&](int64_t chunk) {
    std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(chunk));
    std::uniform_real_distribution<double> uniform(-range, range);
    const int64_t end = std::min(elements, (chunk + 1) * kChunk);
    for (int64_t e = chunk * kChunk; e < end; ++e)
      numeric::store(bytes.data(), dtype, e, uniform(rng));
  });
}

}  // namespace tilefmha::cli
