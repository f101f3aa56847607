// compile_kernel behind the on-disk cache: a hit skips NVRTC entirely; a corrupt entry is
// reported, removed and rebuilt; an entry for another arch is reported and overwritten. The
// cache is only a shortcut, so failing to store a fresh cubin never fails the compile.
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
  rebuilt,  // the entry was corrupt or for another arch: compiled again and replaced
  uncached  // compiled without a cache
};

const char* to_string(CacheOutcome outcome);

struct CachedKernel {
  std::vector<char> cubin;
  CacheOutcome outcome = CacheOutcome::uncached;
  std::string note;  // corruption, arch or store detail and/or compiler warnings; empty when clean
  // Why the fresh cubin was not stored (e.g. a directory sits at the entry's path); empty when
  // it was stored, served from the cache or compiled without one. Also summarized in `note`.
  std::string store_error;
  double seconds = 0;
};

// `cache` may be null (always compiles). Errors are those of compile_kernel; a cubin that
// cannot be stored is still returned, with `store_error` set, and nothing is printed.
CachedKernel compile_cached(std::string_view name, std::string_view source,
                            const CompileOptions& options, const KernelCache* cache);

}  // namespace tilefmha::jit
