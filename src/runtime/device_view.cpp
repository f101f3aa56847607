#include "runtime/device_view.hpp"

#include "tilefmha/error.hpp"

namespace tilefmha::runtime {

void require_device_view(const TensorView& view, const std::string& field, int rank) {
  if (view.empty()) throw Error(ErrorKind::invalid_problem, field + " is not set");
  if (view.space != MemorySpace::device)
    throw Error(ErrorKind::invalid_problem,
                field + " is in host memory; the GPU kernel needs a device view");
  if (view.rank != rank)
    throw Error(ErrorKind::invalid_problem, field + ".rank = " + std::to_string(view.rank) +
                                                ", expected " + std::to_string(rank));
  if (view.stride[rank - 1] != 1)
    throw Error(ErrorKind::not_supported, field + ".stride[" + std::to_string(rank - 1) +
                                              "] = " + std::to_string(view.stride[rank - 1]) +
                                              ": the GPU kernel needs a contiguous last dim");
}

}  // namespace tilefmha::runtime
