#include "core/tensor_iteration.hpp"

#include <array>
#include <string>

#include "tilefmha/error.hpp"

namespace tilefmha {
namespace {

using Strides = std::array<int64_t, kMaxRank>;

// Calls visit(offset_a, offset_b) for every index of `shape` in row-major order, the offsets
// taken with strides a and b. An odometer: bump the last dimension, carry into the ones
// before it.
template <class Visit>
void walk(const TensorView& shape, const Strides& a, const Strides& b, Visit&& visit) {
  const int64_t count = shape.numel();
  if (count == 0) return;
  std::array<int64_t, kMaxRank> index{};
  int64_t offset_a = 0, offset_b = 0;
  for (int64_t n = 0; n < count; ++n) {
    visit(offset_a, offset_b);
    for (int d = shape.rank - 1; d >= 0; --d) {
      ++index[d];
      offset_a += a[d];
      offset_b += b[d];
      if (index[d] < shape.shape[d]) break;
      offset_a -= index[d] * a[d];
      offset_b -= index[d] * b[d];
      index[d] = 0;
    }
  }
}

// Strides of the packed row-major layout of the view's shape: offsets in it count elements.
Strides row_major(const TensorView& view) {
  Strides stride{};
  int64_t running = 1;
  for (int d = view.rank - 1; d >= 0; --d) {
    stride[d] = running;
    running *= view.shape[d];
  }
  return stride;
}

bool same_shape(const TensorView& a, const TensorView& b) {
  if (a.rank != b.rank) return false;
  for (int d = 0; d < a.rank; ++d)
    if (a.shape[d] != b.shape[d]) return false;
  return true;
}

}  // namespace

void for_each_element(const TensorView& view,
                      const std::function<void(int64_t linear, int64_t offset)>& visit) {
  walk(view, view.stride, row_major(view),
       [&](int64_t offset, int64_t linear) { visit(linear, offset); });
}

void for_each_element_pair(const TensorView& a, const TensorView& b,
                           const std::function<void(int64_t offset_a, int64_t offset_b)>& visit) {
  if (!same_shape(a, b))
    throw Error(ErrorKind::invalid_argument,
                "views of shapes " + shape_text(a) + " and " + shape_text(b) + " differ in shape");
  walk(a, a.stride, b.stride, visit);
}

}  // namespace tilefmha
