#include "runtime/plan.hpp"

#include "jit/cuda_driver.hpp"

namespace tilefmha::runtime {

OwnedWorkspace::OwnedWorkspace(int64_t bytes) : buffer_(bytes) {}

// The handoff event is recorded on each user's stream right after its work, never later on a
// stream that may have been destroyed since (recording on a destroyed stream crashed the driver).
bool OwnedWorkspace::order_after_previous_user(jit::CUstream stream) {
  int capture_status = 0;
  jit::check_cuda(jit::cuda_driver().stream_is_capturing(stream, &capture_status),
                  "cuStreamIsCapturing");
  const bool capturing = capture_status != 0;
  if (used_ && stream != last_stream_ && !capturing) handoff_.wait_on(stream);
  return capturing;
}

void OwnedWorkspace::mark_used(jit::CUstream stream, bool capturing) {
  // A capture records nothing: the event keeps the last eager use, which a replay follows on
  // the captured stream anyway.
  if (!capturing) handoff_.record(stream);
  last_stream_ = stream;
  used_ = true;
}

}  // namespace tilefmha::runtime
