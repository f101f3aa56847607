#include "core/parallel.hpp"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace tilefmha {

int worker_count() {
  if (const char* env = std::getenv("TILEFMHA_THREADS")) {
    const int requested = std::atoi(env);
    if (requested > 0) return requested;
  }
  return std::max(1u, std::thread::hardware_concurrency());
}

void parallel_for(int64_t count, const std::function<void(int64_t)>& body) {
  if (count <= 0) return;
  const int threads = static_cast<int>(std::min<int64_t>(worker_count(), count));
  if (threads == 1) {
    for (int64_t i = 0; i < count; ++i) body(i);
    return;
  }
  std::atomic<int64_t> next{0};
  std::exception_ptr first_error;
  std::mutex error_mutex;
  auto worker = [&] {
    for (int64_t i = next++; i < count; i = next++) {
      try {
        body(i);
      } catch (...) {
        std::lock_guard lock(error_mutex);
        if (!first_error) first_error = std::current_exception();
        next = count;
      }
    }
  };
  std::vector<std::thread> pool;
  pool.reserve(threads - 1);
  for (int t = 1; t < threads; ++t) pool.emplace_back(worker);
  worker();
  for (auto& thread : pool) thread.join();
  if (first_error) std::rethrow_exception(first_error);
}

}  // namespace tilefmha
