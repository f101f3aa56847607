// The GPU backend of the Python package: one tilefmha::Engine per device, kept by the Python
// layer for the life of the process so that repeated calls of one problem shape plan in
// microseconds.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "tilefmha/engine.hpp"

namespace tilefmha::python {

class ProblemHandle;

class GpuSession {
 public:
  // Opens an engine on `device_ordinal` (its primary context, the one PyTorch's runtime uses).
  // Throws Error(invalid_argument) saying why when no driver or GPU is usable.
  explicit GpuSession(int device_ordinal);

  int device_ordinal() const { return device_ordinal_; }
  std::string device_name() const { return engine_->device_name(); }

  // Plans (JIT-compiling on first use) and launches the handle's problem on `stream` (a
  // CUstream handle as an integer; 0 is the legacy default stream). Only family fwd runs on
  // the GPU so far; other families throw Error(not_supported). Releases the GIL meanwhile.
  // Returns the plan's explanation (one line per stage).
  std::string run(const ProblemHandle& handle, uintptr_t stream);

 private:
  int device_ordinal_;
  std::unique_ptr<Engine> engine_;
};

}  // namespace tilefmha::python
