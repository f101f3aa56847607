// Row-major walks over strided views (core/tensor_iteration.hpp).
#include "core/tensor_iteration.hpp"

#include <gtest/gtest.h>

#include <utility>
#include <vector>

#include "tilefmha/error.hpp"

namespace tilefmha {
namespace {

TensorView view_of(std::vector<int64_t> shape, std::vector<int64_t> stride) {
  static float storage;
  TensorView view;
  view.data = &storage;
  view.dtype = DType::fp32;
  view.rank = static_cast<int>(shape.size());
  for (int d = 0; d < view.rank; ++d) {
    view.shape[d] = shape[d];
    view.stride[d] = stride[d];
  }
  return view;
}

TEST(TensorIteration, VisitsPaddedAndBroadcastViewsInRowMajorOrder) {
  // [2, 3] rows 5 apart; then the same with the rows broadcast (stride 0).
  std::vector<std::pair<int64_t, int64_t>> seen;
  for_each_element(view_of({2, 3}, {5, 1}),
                   [&](int64_t linear, int64_t offset) { seen.emplace_back(linear, offset); });
  const std::vector<std::pair<int64_t, int64_t>> padded = {{0, 0}, {1, 1}, {2, 2},
                                                           {3, 5}, {4, 6}, {5, 7}};
  EXPECT_EQ(seen, padded);
  seen.clear();
  for_each_element(view_of({2, 3}, {0, 1}),
                   [&](int64_t linear, int64_t offset) { seen.emplace_back(linear, offset); });
  const std::vector<std::pair<int64_t, int64_t>> broadcast = {{0, 0}, {1, 1}, {2, 2},
                                                              {3, 0}, {4, 1}, {5, 2}};
  EXPECT_EQ(seen, broadcast);
}

TEST(TensorIteration, EmptyShapeVisitsNothing) {
  int visits = 0;
  for_each_element(view_of({2, 0, 3}, {0, 3, 1}), [&](int64_t, int64_t) { ++visits; });
  EXPECT_EQ(visits, 0);
}

TEST(TensorIteration, PairsFollowEachViewsStrides) {
  // The same logical [2, 2, 2] in bshd-like (contiguous) and transposed (dims 1 and 2 swapped)
  // memory: each element's two offsets name the same (i, j, k).
  const TensorView packed = view_of({2, 2, 2}, {4, 2, 1});
  const TensorView swapped = view_of({2, 2, 2}, {4, 1, 2});
  std::vector<std::pair<int64_t, int64_t>> seen;
  for_each_element_pair(packed, swapped, [&](int64_t a, int64_t b) { seen.emplace_back(a, b); });
  const std::vector<std::pair<int64_t, int64_t>> expected = {{0, 0}, {1, 2}, {2, 1}, {3, 3},
                                                             {4, 4}, {5, 6}, {6, 5}, {7, 7}};
  EXPECT_EQ(seen, expected);
}

TEST(TensorIteration, PairOfDifferentShapesIsRefusedNamingBoth) {
  try {
    for_each_element_pair(view_of({2, 3}, {3, 1}), view_of({3, 2}, {2, 1}),
                          [](int64_t, int64_t) {});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("[2, 3]"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("[3, 2]"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tilefmha
