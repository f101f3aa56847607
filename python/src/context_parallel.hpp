// tilefmha.distributed's engine half: the zigzag ring schedule and packed shard maps of
// tilefmha/context_parallel.hpp, as plain Python values, so the PyTorch driver and the C++
// entry walk one schedule.
#pragma once

#include <pybind11/pybind11.h>

namespace tilefmha::python {

// Adds ring_schedule(world, rank, causal, packed) -> [(source_rank, [(queries, keys, causal)])]
// with parts named "all" / "front" / "back", and packed_shards(cu_seqlens, world) -> dict of
// local_seqstarts, half_seqstarts, front_rows, back_rows.
void register_context_parallel(pybind11::module_& module);

}  // namespace tilefmha::python
