#include "runtime/checked_indices.hpp"

#include <string>
#include <vector>

#include "tilefmha/error.hpp"
#include "tilefmha/validate.hpp"

namespace tilefmha::runtime {
namespace {

template <class T>
std::vector<T> download(const T* device, int64_t count, const char* field) {
  if (count < 0)
    throw Error(ErrorKind::invalid_argument,
                std::string(field) + " would have " + std::to_string(count) + " entries");
  std::vector<T> host(static_cast<size_t>(count));
  if (count > 0)
    jit::check_cuda(
        jit::cuda_driver().memcpy_dtoh(host.data(), reinterpret_cast<jit::CUdeviceptr>(device),
                                       host.size() * sizeof(T)),
        std::string("cuMemcpyDtoH (") + field + ")");
  return host;
}

}  // namespace

Problem with_host_indices(const Problem& problem, jit::CUstream stream) {
  jit::check_cuda(jit::cuda_driver().stream_synchronize(stream), "cuStreamSynchronize");
  Problem host = problem;
  DeviceIndexArrays& d = host.device_indices;
  const int64_t starts = problem.batch + 1;
  if (d.seqstart_q) host.seqstart_q = download(d.seqstart_q, starts, "device_indices.seqstart_q");
  if (d.seqstart_k) host.seqstart_k = download(d.seqstart_k, starts, "device_indices.seqstart_k");
  if (d.seqlen_k)
    host.seqlen_k_per_batch = download(d.seqlen_k, problem.batch, "device_indices.seqlen_k");
  PagedKv& paged = host.paged;
  if (d.block_table)
    paged.block_table = download(d.block_table, problem.batch * paged.max_pages_per_seq,
                                 "device_indices.block_table");
  if (d.page_indptr) {
    paged.page_indptr = download(d.page_indptr, starts, "device_indices.page_indptr");
    // The offsets decide how many ids to read, so they are checked before the ids are: they
    // must rise from 0, and no sequence may list more pages than the pool holds.
    const std::vector<int64_t>& indptr = paged.page_indptr;
    for (int64_t b = 0; b < problem.batch + 1; ++b) {
      const int64_t previous = b == 0 ? 0 : indptr[b - 1];
      const int64_t pages = indptr[b] - previous;
      if (pages < 0 || (b > 0 && pages > paged.num_pages))
        throw Error(ErrorKind::invalid_problem,
                    "checked device index arrays: page_indptr[" + std::to_string(b) +
                        "] = " + std::to_string(indptr[b]) + " after " + std::to_string(previous) +
                        (pages < 0 ? " (offsets must rise from 0)"
                                   : " lists more pages than the pool's " +
                                         std::to_string(paged.num_pages)),
                    "paged.page_indptr");
    }
    if (d.page_indices)
      paged.page_indices = download(d.page_indices, indptr.back(), "device_indices.page_indices");
  }
  d = DeviceIndexArrays{};
  return host;
}

void check_device_indices(const Problem& problem, jit::CUstream stream) {
  const Problem host = with_host_indices(problem, stream);
  try {
    validate(host);
  } catch (const Error& error) {
    throw Error(error.kind(), std::string("checked device index arrays: ") + error.what(),
                error.field());
  }
}

}  // namespace tilefmha::runtime
