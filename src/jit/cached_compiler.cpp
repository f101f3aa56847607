#include "jit/cached_compiler.hpp"

#include <chrono>
#include <exception>

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
    CacheRead read = cache->read(key, options.arch);
    switch (read.lookup) {
      case CacheLookup::hit:
        result.cubin = std::move(read.cubin);
        result.outcome = CacheOutcome::hit;
        break;
      case CacheLookup::corrupt:
      case CacheLookup::wrong_arch: result.outcome = CacheOutcome::rebuilt; break;
      case CacheLookup::miss: result.outcome = CacheOutcome::miss; break;
    }
    result.note = std::move(read.problem);
  }
  if (result.outcome != CacheOutcome::hit) {
    CompiledKernel compiled = compile_kernel(name, source, options);
    if (!compiled.log.empty()) {
      if (!result.note.empty()) result.note += '\n';
      result.note.append("compiler log:\n").append(compiled.log);
    }
    result.cubin = std::move(compiled.cubin);
    if (cache != nullptr) {
      try {
        cache->write(key, result.cubin);
      } catch (const std::exception& error) {
        // Returned rather than printed: build_kernels shows notes per kernel, and a library
        // should not write to stderr behind its caller's back.
        result.store_error = error.what();
        if (!result.note.empty()) result.note += '\n';
        result.note.append("not stored in the kernel cache: ").append(result.store_error);
      }
    }
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

}  // namespace tilefmha::jit
