#include "sweep_device_indices.hpp"

namespace tilefmha::cli {
namespace {

template <class Index>
const Index* place_vector(std::vector<Index>& values, const PlaceIndices& place) {
  if (values.empty()) return nullptr;
  const void* placed = place(std::as_bytes(std::span(values)));
  values.clear();  // a device array replaces its host vector, which must then be empty
  return static_cast<const Index*>(placed);
}

}  // namespace

Problem with_placed_indices(Problem p, const PlaceIndices& place) {
  if (p.is_paged() && p.mode == Mode::group && p.seqlen_k_per_batch.empty()) {
    // Collected aside: key_length reads seqlen_k_per_batch as soon as it has an entry.
    std::vector<int64_t> lengths;
    for (int64_t b = 0; b < p.batch; ++b) lengths.push_back(p.key_length(b));
    p.seqlen_k_per_batch = std::move(lengths);
  }
  DeviceIndexArrays& d = p.device_indices;
  d.seqstart_q = place_vector(p.seqstart_q, place);
  d.seqstart_k = place_vector(p.seqstart_k, place);
  d.seqlen_k = place_vector(p.seqlen_k_per_batch, place);
  d.block_table = place_vector(p.paged.block_table, place);
  d.page_indptr = place_vector(p.paged.page_indptr, place);
  d.page_indices = place_vector(p.paged.page_indices, place);
  return p;
}

DeviceIndexCopies::DeviceIndexCopies(const Problem& device_problem) {
  problem_ = with_placed_indices(device_problem, [this](std::span<const std::byte> array) {
    auto buffer = std::make_unique<jit::DeviceBuffer>(static_cast<int64_t>(array.size()));
    buffer->copy_from_host(array);
    buffers_.push_back(std::move(buffer));
    return reinterpret_cast<const void*>(buffers_.back()->address());
  });
}

}  // namespace tilefmha::cli
