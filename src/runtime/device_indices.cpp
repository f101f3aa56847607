#include "runtime/device_indices.hpp"

#include <span>

namespace tilefmha::runtime {

DeviceIndexVectors::DeviceIndexVectors(const Problem& host) {
  pointers_.seqstart_q = upload(host.seqstart_q);
  pointers_.seqstart_k = upload(host.seqstart_k);
  pointers_.seqlen_k_per_batch = upload(host.seqlen_k_per_batch);
}

const int64_t* DeviceIndexVectors::upload(const std::vector<int64_t>& values) {
  if (values.empty()) return nullptr;
  auto buffer =
      std::make_unique<jit::DeviceBuffer>(static_cast<int64_t>(values.size() * sizeof(int64_t)));
  buffer->copy_from_host(std::as_bytes(std::span(values)));
  buffers_.push_back(std::move(buffer));
  return reinterpret_cast<const int64_t*>(buffers_.back()->address());
}

}  // namespace tilefmha::runtime
