// Programmatic dependent launch (sm_90+, griddepcontrol): a kernel launched with it
// (jit::LaunchShape::programmatic_dependency) may start while the stream's previous kernel still
// runs, so its launch overlaps that kernel's tail; it must wait before touching global memory.
// Elsewhere (older arches, or a launch without the attribute) both are no-ops.
#pragma once

#include "tile/device.h"

namespace tilefmha::tile {

// Blocks until every grid this one depends on has completed and its writes are visible.
TILEFMHA_DEVICE void wait_for_previous_grid() {
#if defined(TILEFMHA_HAS_SM90)
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

// Lets the stream's next grid, if launched with programmatic dependency, be scheduled once every
// CTA of this grid has signalled or exited. Its CTAs then wait (above) on this grid's end.
TILEFMHA_DEVICE void allow_dependent_grid_launch() {
#if defined(TILEFMHA_HAS_SM90)
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

}  // namespace tilefmha::tile
