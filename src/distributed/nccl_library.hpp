// NCCL, loaded at run time. tilefmha does not link NCCL (most builds and all CI machines have
// none); ring attention dlopens it on first use, from $TILEFMHA_NCCL_LIBRARY or else
// "libnccl.so.2" on the loader path, and binds only the entries it calls. The declarations below
// are ABI-identical to nccl.h's: its enums are C ints and its handles opaque pointers.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace tilefmha::distributed {

using NcclResult = int;                   // ncclResult_t; 0 is ncclSuccess
using NcclComm = struct NcclCommHandle*;  // ncclComm_t
using NcclStream = void*;                 // cudaStream_t (a CUstream)

// ncclUniqueId: 128 opaque bytes, passed by value to ncclCommInitRank.
struct NcclUniqueId {
  char internal[128];
};

// ncclDataType_t values used here. Ring attention moves K/V as bytes.
constexpr int nccl_uint8 = 1;

// The environment variable naming the library, and the name tried without it.
inline constexpr const char* kNcclLibraryVariable = "TILEFMHA_NCCL_LIBRARY";
inline constexpr const char* kNcclDefaultLibrary = "libnccl.so.2";

struct NcclApi {
  const char* (*get_error_string)(NcclResult result);
  NcclResult (*comm_count)(NcclComm comm, int* count);
  NcclResult (*comm_user_rank)(NcclComm comm, int* rank);
  NcclResult (*group_start)();
  NcclResult (*group_end)();
  NcclResult (*send)(const void* buffer, size_t count, int datatype, int peer, NcclComm comm,
                     NcclStream stream);
  NcclResult (*recv)(void* buffer, size_t count, int datatype, int peer, NcclComm comm,
                     NcclStream stream);
  // The CUDA device a communicator was made on, for checking it against the engine's; null
  // when the library lacks it.
  NcclResult (*comm_cu_device)(NcclComm comm, int* device);
  // Communicator setup, for programs and tests that make their own communicators; null when the
  // library lacks them (ring attention itself never calls them).
  NcclResult (*get_version)(int* version);
  NcclResult (*get_unique_id)(NcclUniqueId* id);
  NcclResult (*comm_init_rank)(NcclComm* comm, int nranks, NcclUniqueId id, int rank);
  NcclResult (*comm_init_all)(NcclComm* comms, int ndev, const int* devices);
  NcclResult (*comm_destroy)(NcclComm comm);

  std::string library_path;
  int version = 0;  // ncclGetVersion's code (e.g. 22703 for 2.27.3); 0 when unknown
};

// Loads `library` and binds the API. Never throws: on failure `failure` says why (naming the
// path, and TILEFMHA_NCCL_LIBRARY) and `api` is unusable. Exposed for tests; use nccl_library().
struct NcclLoad {
  NcclApi api{};
  std::string failure;  // empty on success
};
NcclLoad load_nccl_library(const std::string& library);

// $TILEFMHA_NCCL_LIBRARY when set and not empty, else "libnccl.so.2".
std::string nccl_library_path();

// The library at nccl_library_path(), loaded once per path (thread-safe; a failed load is tried
// again on the next call, so a program may set the variable after a failure). Throws
// Error(runtime) with load_nccl_library's message when it does not load.
const NcclApi& nccl_library();

// Throws Error(runtime) "<call> failed: <NCCL's text> (ncclResult_t N)" unless `result` is
// ncclSuccess.
void check_nccl(const NcclApi& api, NcclResult result, std::string_view call);

}  // namespace tilefmha::distributed
