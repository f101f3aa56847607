#include "tilefmha/tensor.hpp"

#include <limits>
#include <string>

#include "tilefmha/error.hpp"

namespace tilefmha {

std::string shape_text(std::span<const int64_t> dims) {
  std::string text = "[";
  for (size_t d = 0; d < dims.size(); ++d) text += (d ? ", " : "") + std::to_string(dims[d]);
  return text + "]";
}

std::string shape_text(const TensorView& view) {
  return shape_text(std::span<const int64_t>(view.shape.data(), static_cast<size_t>(view.rank)));
}

namespace {

// Products and sums of sizes in int64 overflow silently (undefined behaviour, and a wrapped
// size that later allocates garbage); these fail with the view's shape instead.
int64_t checked_mul(int64_t a, int64_t b, const TensorView& view) {
  int64_t out = 0;
  if (__builtin_mul_overflow(a, b, &out))
    throw Error(ErrorKind::invalid_argument,
                "tensor of shape " + shape_text(view) + " has more elements than int64 holds");
  return out;
}

}  // namespace

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int d = 0; d < rank; ++d) n = checked_mul(n, shape[d], *this);
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

namespace {

// The largest reachable element offset plus one, or nullopt on int64 overflow.
std::optional<int64_t> extent_elements(const TensorView& view) {
  int64_t last = 0;
  for (int d = 0; d < view.rank; ++d) {
    if (view.shape[d] == 0) return 0;
    if (view.shape[d] < 0 || view.stride[d] == std::numeric_limits<int64_t>::min())
      return std::nullopt;
    const int64_t stride = view.stride[d] < 0 ? -view.stride[d] : view.stride[d];
    int64_t step = 0;
    if (__builtin_mul_overflow(view.shape[d] - 1, stride, &step) ||
        __builtin_add_overflow(last, step, &last))
      return std::nullopt;
  }
  if (__builtin_add_overflow(last, 1, &last)) return std::nullopt;
  return last;
}

}  // namespace

int64_t TensorView::extent() const {
  const std::optional<int64_t> elements = extent_elements(*this);
  if (!elements)
    throw Error(ErrorKind::invalid_argument,
                "tensor of shape " + shape_text(*this) + " spans more elements than int64 holds");
  return *elements;
}

std::optional<int64_t> extent_bytes(const TensorView& view) {
  const std::optional<int64_t> elements = extent_elements(view);
  int64_t bytes = 0;
  if (!elements || __builtin_mul_overflow(*elements, dtype_size(view.dtype), &bytes))
    return std::nullopt;
  return bytes;
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
    // The outermost product is never a stride, but it must fit too: it is numel().
    running = checked_mul(running, view.shape[d], view);
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
  // contiguous_view checked batch * seq * heads * dim, so these smaller products fit.
  view.stride = {heads * seq * dim, dim, seq * dim, 1, 0};
  return view;
}

}  // namespace tilefmha
