#include "tilefmha/tensor.hpp"

#include "tilefmha/error.hpp"

namespace tilefmha {

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int d = 0; d < rank; ++d) n *= shape[d];
  return n;
}

int64_t TensorView::offset(std::initializer_list<int64_t> index) const {
  if (static_cast<int>(index.size()) != rank)
    throw Error(ErrorKind::invalid_argument, "tensor index of rank " +
                                                 std::to_string(index.size()) +
                                                 " used on a view of rank " + std::to_string(rank));
  int64_t off = 0;
  int d = 0;
  for (int64_t i : index) off += i * stride[d++];
  return off;
}

int64_t TensorView::extent() const {
  int64_t last = 0;
  for (int d = 0; d < rank; ++d) {
    if (shape[d] == 0) return 0;
    last += (shape[d] - 1) * (stride[d] < 0 ? -stride[d] : stride[d]);
  }
  return last + 1;
}

TensorView contiguous_view(void* data, DType dtype, std::initializer_list<int64_t> shape,
                           MemorySpace space) {
  if (shape.size() > static_cast<size_t>(kMaxRank))
    throw Error(ErrorKind::invalid_argument,
                "tensor rank " + std::to_string(shape.size()) + " exceeds the maximum of 5");
  TensorView view;
  view.data = data;
  view.dtype = dtype;
  view.space = space;
  view.rank = static_cast<int>(shape.size());
  int d = 0;
  for (int64_t s : shape) view.shape[d++] = s;
  int64_t running = 1;
  for (d = view.rank - 1; d >= 0; --d) {
    view.stride[d] = running;
    running *= view.shape[d];
  }
  return view;
}

TensorView bshd(void* data, DType dtype, int64_t batch, int64_t seq, int64_t heads, int64_t dim,
                MemorySpace space) {
  return contiguous_view(data, dtype, {batch, seq, heads, dim}, space);
}

TensorView bhsd(void* data, DType dtype, int64_t batch, int64_t seq, int64_t heads, int64_t dim,
                MemorySpace space) {
  TensorView view = contiguous_view(data, dtype, {batch, seq, heads, dim}, space);
  view.stride = {heads * seq * dim, dim, seq * dim, 1, 0};
  return view;
}

}  // namespace tilefmha
