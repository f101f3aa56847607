#include "context_parallel.hpp"

#include <pybind11/stl.h>

#include <tuple>
#include <vector>

#include "tilefmha/context_parallel.hpp"

namespace py = pybind11;

namespace tilefmha::python {
namespace {

using BlockTuple = std::tuple<std::string, std::string, bool>;
using StepTuple = std::pair<int, std::vector<BlockTuple>>;

std::vector<StepTuple> ring_schedule(int world, int rank, bool causal, bool packed) {
  std::vector<StepTuple> steps;
  for (const auto& step : context_parallel::ring_schedule(world, rank, causal, packed)) {
    std::vector<BlockTuple> blocks;
    for (const auto& block : step.blocks)
      blocks.emplace_back(context_parallel::part_name(block.queries),
                          context_parallel::part_name(block.keys), block.causal);
    steps.emplace_back(step.source_rank, std::move(blocks));
  }
  return steps;
}

py::dict packed_shards(const std::vector<int64_t>& global_seqstarts, int world) {
  const auto shards = context_parallel::packed_shards(global_seqstarts, world);
  py::dict result;
  result["local_seqstarts"] = shards.local_seqstarts;
  result["half_seqstarts"] = shards.half_seqstarts;
  result["front_rows"] = shards.front_rows;
  result["back_rows"] = shards.back_rows;
  return result;
}

}  // namespace

void register_context_parallel(py::module_& module) {
  module.def("ring_schedule", &ring_schedule, py::arg("world"), py::arg("rank"), py::arg("causal"),
             py::arg("packed"),
             "The ring steps of one rank: [(source_rank, [(queries, keys, causal), ...])].");
  module.def("packed_shards", &packed_shards, py::arg("cu_seqlens"), py::arg("world"),
             "Zigzag shard maps of packed varlen input (local and half prefix sums, front and "
             "back rows of the local shard).");
}

}  // namespace tilefmha::python
