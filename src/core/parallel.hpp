// Work spread over every core: the CPU reference's only source of parallelism.
#pragma once

#include <cstdint>
#include <functional>

namespace tilefmha {

// Threads used by parallel_for: $TILEFMHA_THREADS when set, else every hardware thread.
int worker_count();

// Calls body(i) for i in [0, count) on worker_count() threads with dynamic scheduling.
// The first exception thrown by any body is rethrown on the caller after all threads join.
void parallel_for(int64_t count, const std::function<void(int64_t)>& body);

}  // namespace tilefmha
