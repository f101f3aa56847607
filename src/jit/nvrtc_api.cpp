#include "jit/nvrtc_api.hpp"

#include <cstdlib>
#include <vector>

#include "jit/dynamic_library.hpp"
#include "tilefmha/error.hpp"

namespace tilefmha::jit {
namespace {

std::vector<std::string> nvrtc_candidates() {
  if (const char* chosen = std::getenv("TILEFMHA_NVRTC_LIBRARY"); chosen != nullptr && *chosen) {
    return {chosen};
  }
  std::vector<std::string> candidates = {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"};
  // Toolkits installed off the loader path: $CUDA_HOME, $CUDA_PATH, the conventional prefix,
  // and the toolkit this library was built against.
  for (const char* variable : {"CUDA_HOME", "CUDA_PATH"}) {
    if (const char* root = std::getenv(variable); root != nullptr && *root) {
      candidates.push_back(std::string(root) + "/lib64/libnvrtc.so");
    }
  }
  candidates.push_back("/usr/local/cuda/lib64/libnvrtc.so");
#ifdef TILEFMHA_CUDA_TOOLKIT_LIBRARY_DIR
  candidates.push_back(std::string(TILEFMHA_CUDA_TOOLKIT_LIBRARY_DIR) + "/libnvrtc.so");
#endif
  return candidates;
}

template <class Function>
bool bind(const LibraryHandle& library, const char* symbol, Function& slot, std::string& failure) {
  slot = reinterpret_cast<Function>(find_symbol(library, symbol, failure));
  return slot != nullptr;
}

struct NvrtcLoad {
  NvrtcApi api;
  std::string failure;  // empty when the API is usable
};

NvrtcLoad load_nvrtc() {
  NvrtcLoad load;
  const LibraryHandle library = open_first_library(nvrtc_candidates());
  if (library.handle == nullptr) {
    load.failure =
        "NVRTC not found: JIT compilation unavailable (set TILEFMHA_NVRTC_LIBRARY to the path "
        "of libnvrtc.so). Tried:" +
        library.failures;
    return load;
  }
  NvrtcApi& api = load.api;
  std::string& failure = load.failure;
  const bool bound = bind(library, "nvrtcVersion", api.version, failure) &&
                     bind(library, "nvrtcCreateProgram", api.create_program, failure) &&
                     bind(library, "nvrtcDestroyProgram", api.destroy_program, failure) &&
                     bind(library, "nvrtcCompileProgram", api.compile_program, failure) &&
                     bind(library, "nvrtcGetProgramLogSize", api.get_program_log_size, failure) &&
                     bind(library, "nvrtcGetProgramLog", api.get_program_log, failure) &&
                     bind(library, "nvrtcGetCUBINSize", api.get_cubin_size, failure) &&
                     bind(library, "nvrtcGetCUBIN", api.get_cubin, failure) &&
                     bind(library, "nvrtcGetPTXSize", api.get_ptx_size, failure) &&
                     bind(library, "nvrtcGetPTX", api.get_ptx, failure) &&
                     bind(library, "nvrtcGetErrorString", api.get_error_string, failure);
  if (!bound) {
    failure = "NVRTC unusable: " + failure;
    return load;
  }
  api.library_path = library.path;
  if (api.version(&api.major, &api.minor) != 0) {
    failure = "NVRTC unusable: nvrtcVersion failed in " + library.path;
  }
  return load;
}

}  // namespace

const NvrtcApi& nvrtc_api() {
  static const NvrtcLoad load = load_nvrtc();
  if (!load.failure.empty()) throw Error(ErrorKind::runtime, load.failure);
  return load.api;
}

std::string nvrtc_version_string() {
  const NvrtcApi& api = nvrtc_api();
  return std::to_string(api.major) + "." + std::to_string(api.minor);
}

}  // namespace tilefmha::jit
