#include "jit/dynamic_library.hpp"

#include <dlfcn.h>

namespace tilefmha::jit {

LibraryHandle open_first_library(const std::vector<std::string>& candidates) {
  LibraryHandle library;
  for (const std::string& candidate : candidates) {
    // RTLD_LOCAL keeps the CUDA symbols out of the global namespace of the host process.
    void* handle = dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle != nullptr) {
      library.handle = handle;
      library.path = candidate;
      return library;
    }
    const char* reason = dlerror();
    library.failures += "\n  " + candidate + ": " + (reason != nullptr ? reason : "not found");
  }
  return library;
}

void* find_symbol(const LibraryHandle& library, const char* symbol, std::string& failure) {
  dlerror();
  void* address = dlsym(library.handle, symbol);
  if (address == nullptr) {
    const char* reason = dlerror();
    failure = std::string("symbol ") + symbol + " missing from " + library.path +
              (reason != nullptr ? std::string(": ") + reason : std::string());
  }
  return address;
}

}  // namespace tilefmha::jit
