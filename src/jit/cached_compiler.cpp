#include "jit/cached_compiler.hpp"

#include <chrono>

namespace tilefmha::jit {

const char* to_string(CacheOutcome outcome) {
  switch (outcome) {
    case CacheOutcome::hit: return "hit";
    case CacheOutcome::miss: return "miss";
    case CacheOutcome::rebuilt: return "rebuilt";
    case CacheOutcome::uncached: return "uncached";
  }
  return "unknown";
}

CachedKernel compile_cached(std::string_view name, std::string_view source,
                            const CompileOptions& options, const KernelCache* cache) {
  const auto start = std::chrono::steady_clock::now();
  CachedKernel result;
  std::string key;
  if (cache != nullptr) {
    key = cache_key(name, source, options);
    CacheRead read = cache->read(key);
    if (read.lookup == CacheLookup::hit) {
      result.cubin = std::move(read.cubin);
      result.outcome = CacheOutcome::hit;
    } else {
      result.outcome =
          read.lookup == CacheLookup::corrupt ? CacheOutcome::rebuilt : CacheOutcome::miss;
      result.note = std::move(read.problem);
    }
  }
  if (result.outcome != CacheOutcome::hit) {
    CompiledKernel compiled = compile_kernel(name, source, options);
    if (!compiled.log.empty()) {
      if (!result.note.empty()) result.note += '\n';
      result.note.append("compiler log:\n").append(compiled.log);
    }
    result.cubin = std::move(compiled.cubin);
    if (cache != nullptr) cache->write(key, result.cubin);
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

}  // namespace tilefmha::jit
