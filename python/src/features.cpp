#include "features.hpp"

#include <string>

#include "tilefmha/error.hpp"

namespace tilefmha::python {
namespace py = pybind11;

namespace {

constexpr size_t kScalarFeatureCount = 12;

}  // namespace

ScalarFeatures read_scalar_features(const py::tuple& values) {
  if (values.size() != kScalarFeatureCount)
    throw Error(ErrorKind::invalid_argument,
                "scalar features: expected " + std::to_string(kScalarFeatureCount) +
                    " values (tilefmha._features.scalar_features), got " +
                    std::to_string(values.size()));
  ScalarFeatures f;
  f.mask = parse_enum<MaskKind>(py::cast<std::string>(values[0]));
  f.align = parse_enum<MaskAlign>(py::cast<std::string>(values[1]));
  f.window_left = py::cast<int64_t>(values[2]);
  f.window_right = py::cast<int64_t>(values[3]);
  f.sink_tokens = py::cast<int64_t>(values[4]);
  if (!values[5].is_none()) f.scale = py::cast<double>(values[5]);
  f.softcap = py::cast<double>(values[6]);
  f.dropout_p = py::cast<double>(values[7]);
  f.seed = py::cast<uint64_t>(values[8]);
  f.offset = py::cast<uint64_t>(values[9]);
  f.num_splits = py::cast<int64_t>(values[10]);
  f.accumulate = py::cast<bool>(values[11]);
  return f;
}

void apply(ProblemBuilder& builder, const ScalarFeatures& f) {
  switch (f.mask) {
    case MaskKind::none: break;
    case MaskKind::causal: builder.causal(f.align); break;
    case MaskKind::window: builder.window(f.window_left, f.window_right, f.align); break;
  }
  builder.sink_tokens(f.sink_tokens);
  if (f.scale) builder.scale(*f.scale);
  builder.softcap(f.softcap);
  // p = 0 keeps the problem free of dropout whatever seed and offset say (they key no plan).
  if (f.dropout_p != 0.0) builder.dropout(f.dropout_p, f.seed, f.offset);
  // The split count alone: partials attached before (split.o_acc / lse_acc) stay attached.
  const SplitKv& split = builder.peek().split;
  builder.splits(f.num_splits, split.o_acc, split.lse_acc);
  builder.accumulate(f.accumulate);
}

}  // namespace tilefmha::python
