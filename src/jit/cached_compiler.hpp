// compile_kernel behind the on-disk cache: a hit skips NVRTC entirely; a corrupt entry is
// reported, removed and rebuilt.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "jit/compiler.hpp"
#include "jit/kernel_cache.hpp"

namespace tilefmha::jit {

enum class CacheOutcome {
  hit,      // served from the cache
  miss,     // compiled, then stored
  rebuilt,  // the entry was corrupt: compiled again and replaced
  uncached  // compiled without a cache
};

const char* to_string(CacheOutcome outcome);

struct CachedKernel {
  std::vector<char> cubin;
  CacheOutcome outcome = CacheOutcome::uncached;
  std::string note;  // corruption detail and/or compiler warnings; empty when clean
  double seconds = 0;
};

// `cache` may be null (always compiles). Errors are those of compile_kernel and, for a cache
// that cannot be written, Error(io).
CachedKernel compile_cached(std::string_view name, std::string_view source,
                            const CompileOptions& options, const KernelCache* cache);

}  // namespace tilefmha::jit
