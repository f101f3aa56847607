#include "runtime/plan.hpp"

#include "jit/cuda_driver.hpp"

namespace tilefmha::runtime {

OwnedWorkspace::OwnedWorkspace(int64_t bytes) : buffer_(bytes) {}

void OwnedWorkspace::order_after_previous_user(jit::CUstream stream) {
  if (used_ && stream != last_stream_) {
    int capture_status = 0;
    jit::check_cuda(jit::cuda_driver().stream_is_capturing(stream, &capture_status),
                    "cuStreamIsCapturing");
    if (capture_status == 0) {
      handoff_.record(last_stream_);
      handoff_.wait_on(stream);
    }
  }
  last_stream_ = stream;
  used_ = true;
}

}  // namespace tilefmha::runtime
