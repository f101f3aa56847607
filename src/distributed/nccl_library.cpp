#include "distributed/nccl_library.hpp"

#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>

#include "jit/dynamic_library.hpp"
#include "tilefmha/error.hpp"

namespace tilefmha::distributed {
namespace {

template <class Function>
bool bind(const jit::LibraryHandle& library, const char* symbol, Function& slot,
          std::string& failure) {
  slot = reinterpret_cast<Function>(jit::find_symbol(library, symbol, failure));
  return slot != nullptr;
}

std::string where_from() {
  return std::string(" (set ") + kNcclLibraryVariable +
         " to the path of libnccl.so.2, e.g. the one in the nvidia-nccl Python wheel's lib/)";
}

}  // namespace

NcclLoad load_nccl_library(const std::string& library_name) {
  NcclLoad load;
  const jit::LibraryHandle library = jit::open_first_library({library_name});
  if (library.handle == nullptr) {
    load.failure = "NCCL library " + library_name + " did not load: ring attention needs NCCL" +
                   where_from() + "; dlopen said:" + library.failures;
    return load;
  }
  NcclApi& api = load.api;
  std::string& failure = load.failure;
  const bool bound = bind(library, "ncclGetErrorString", api.get_error_string, failure) &&
                     bind(library, "ncclCommCount", api.comm_count, failure) &&
                     bind(library, "ncclCommUserRank", api.comm_user_rank, failure) &&
                     bind(library, "ncclGroupStart", api.group_start, failure) &&
                     bind(library, "ncclGroupEnd", api.group_end, failure) &&
                     bind(library, "ncclSend", api.send, failure) &&
                     bind(library, "ncclRecv", api.recv, failure);
  if (!bound) {
    failure = "NCCL library " + library.path + " (from " + kNcclLibraryVariable + " or the " +
              kNcclDefaultLibrary + " default) is unusable: " + failure +
              "; ncclSend/ncclRecv need NCCL 2.7 or newer";
    return load;
  }
  std::string optional_failure;
  bind(library, "ncclCommCuDevice", api.comm_cu_device, optional_failure);
  bind(library, "ncclGetVersion", api.get_version, optional_failure);
  bind(library, "ncclGetUniqueId", api.get_unique_id, optional_failure);
  bind(library, "ncclCommInitRank", api.comm_init_rank, optional_failure);
  bind(library, "ncclCommInitAll", api.comm_init_all, optional_failure);
  bind(library, "ncclCommDestroy", api.comm_destroy, optional_failure);
  api.library_path = library.path;
  if (api.get_version != nullptr && api.get_version(&api.version) != 0) api.version = 0;
  return load;
}

std::string nccl_library_path() {
  const char* path = std::getenv(kNcclLibraryVariable);
  return path != nullptr && *path != '\0' ? std::string(path) : std::string(kNcclDefaultLibrary);
}

const NcclApi& nccl_library() {
  // One load per path; loaded libraries are never unloaded, so the API stays valid.
  static std::mutex mutex;
  static std::map<std::string, std::unique_ptr<NcclApi>> loaded;
  const std::string path = nccl_library_path();
  const std::lock_guard lock(mutex);
  if (const auto found = loaded.find(path); found != loaded.end()) return *found->second;
  NcclLoad load = load_nccl_library(path);
  if (!load.failure.empty()) throw Error(ErrorKind::runtime, load.failure);
  return *loaded.emplace(path, std::make_unique<NcclApi>(std::move(load.api))).first->second;
}

void check_nccl(const NcclApi& api, NcclResult result, std::string_view call) {
  if (result == 0) return;
  const char* text = api.get_error_string != nullptr ? api.get_error_string(result) : nullptr;
  throw Error(ErrorKind::runtime, std::string(call) +
                                      " failed: " + (text != nullptr ? text : "NCCL error") +
                                      " (ncclResult_t " + std::to_string(result) + ")");
}

}  // namespace tilefmha::distributed
