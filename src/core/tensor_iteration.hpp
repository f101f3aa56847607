// Walking the logical elements of strided views: the one place that turns a row-major element
// number into a memory offset, for the CLI's file conversions, result comparisons and tests.
#pragma once

#include <cstdint>
#include <functional>

#include "tilefmha/tensor.hpp"

namespace tilefmha {

// Calls visit(linear, offset) for every logical element of `view` in row-major order: linear
// counts elements, offset is the element's position in the view's memory.
void for_each_element(const TensorView& view,
                      const std::function<void(int64_t linear, int64_t offset)>& visit);

// Calls visit(offset_a, offset_b) for every logical element of two views of the same shape, in
// row-major order: the positions of one logical element in each view's memory (the strides may
// differ). Throws Error(invalid_argument) naming both shapes when they differ.
void for_each_element_pair(const TensorView& a, const TensorView& b,
                           const std::function<void(int64_t offset_a, int64_t offset_b)>& visit);

}  // namespace tilefmha
