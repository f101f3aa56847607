// The one exception type of tilefmha: every message names what was wrong.
#pragma once

#include <stdexcept>
#include <string>

namespace tilefmha {

enum class ErrorKind {
  invalid_problem,
  invalid_argument,
  io,
  not_supported,
  no_kernel,
  compile,
  runtime
};

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}
  ErrorKind kind() const { return kind_; }

 private:
  ErrorKind kind_;
};

}  // namespace tilefmha
