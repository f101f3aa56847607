// Opt-in latency timeline (TILEFMHA_TIMELINE=1 in the engine's environment defines
// TILEFMHA_TIMELINE for its compiles; jit/compiler.hpp): a kernel records the global timer at
// named points, one stamp per CTA and point, and the grid's last CTA prints each point's
// earliest, median and latest time over the CTAs, in nanoseconds after the grid's first entry.
// For kernels of a few microseconds, where a profiler's counters say little about which step
// of the chain the time goes to. Without the define every stamp compiles to nothing.
#pragma once

#include "tile/device.h"

namespace tilefmha::tile {

// Points of the forward kernels (a kernel records those it passes; unrecorded points print as
// absent).
enum TimelinePoint : int {
  kTimelineEntry,        // the CTA's first instruction
  kTimelineSetUp,        // barriers initialized, the CTA's threads past their first barrier
  kTimelineLoadsIssued,  // the producer issued the tile's first K/V block (or combine: waited)
  kTimelineQLanded,      // a consumer saw the Q tile land
  kTimelineFirstK,       // a consumer saw the first K block land
  kTimelineFirstS,       // the first S = Q K^T is in registers
  kTimelineLastV,        // the last V block landed
  kTimelineLastPv,       // the last P V is in registers
  kTimelineStored,       // the CTA's outputs are stored
  // Spare points for a study: placed where it needs them, and taken out again.
  kTimelineProbe0,
  kTimelineProbe1,
  kTimelineProbe2,
  kTimelineProbe3,
  kTimelineProbe4,
  kTimelineProbe5,
  kTimelinePoints
};

#if defined(TILEFMHA_TIMELINE)
constexpr unsigned kTimelineCtas = 4096;
__device__ u64 timeline_stamps[kTimelineCtas][kTimelinePoints];
__device__ unsigned timeline_finished;

TILEFMHA_DEVICE unsigned timeline_cta() {
  return blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
}

TILEFMHA_DEVICE u64 timeline_now() {
  u64 now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  return now;
}

TILEFMHA_DEVICE void timeline_stamp(TimelinePoint point) {
  const unsigned cta = timeline_cta();
  if (cta < kTimelineCtas) timeline_stamps[cta][point] = timeline_now();
}

// Call from every thread of the CTA at its very end; `reporter` names one thread that has the
// registers for it (not one whose warpgroup gave registers back with setmaxnreg). The last CTA to
// arrive prints the summary (a serial sort in one thread: slow, and only after every stamp of the
// grid is taken).
TILEFMHA_DEVICE void timeline_finish(const char* kernel, bool reporter) {
  __syncthreads();
  if (!reporter) return;
  __threadfence();
  const unsigned ctas = gridDim.x * gridDim.y * gridDim.z;
  if (atomicAdd(&timeline_finished, 1u) + 1 != ctas) return;
  __threadfence();
  const unsigned n = ctas < kTimelineCtas ? ctas : kTimelineCtas;
  u64 origin = ~0ull;
  for (unsigned c = 0; c < n; ++c)
    if (timeline_stamps[c][kTimelineEntry] < origin) origin = timeline_stamps[c][kTimelineEntry];
  printf("timeline %s: %u CTAs (ns after the first entry: earliest / median / latest)\n", kernel,
         ctas);
  for (int point = 0; point < kTimelinePoints; ++point) {
    // Insertion sort of this point's stamps; 0 marks a point the CTA did not pass.
    u64 sorted[kTimelineCtas > 512 ? 512 : kTimelineCtas];
    unsigned count = 0;
    for (unsigned c = 0; c < n && count < 512; ++c) {
      const u64 stamp = timeline_stamps[c][point];
      if (stamp == 0) continue;
      unsigned at = count++;
      for (; at > 0 && sorted[at - 1] > stamp; --at) sorted[at] = sorted[at - 1];
      sorted[at] = stamp;
    }
    if (count > 0)
      printf("  point %d: %6llu %6llu %6llu (%u CTAs)\n", point, sorted[0] - origin,
             sorted[count / 2] - origin, sorted[count - 1] - origin, count);
  }
  for (unsigned c = 0; c < n; ++c)
    for (int point = 0; point < kTimelinePoints; ++point) timeline_stamps[c][point] = 0;
  timeline_finished = 0;
  __threadfence();
}
#else
TILEFMHA_DEVICE void timeline_stamp(TimelinePoint) {}
TILEFMHA_DEVICE void timeline_finish(const char*, bool) {}
#endif

}  // namespace tilefmha::tile
