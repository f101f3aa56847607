// The one exception type of tilefmha: every message names what was wrong.
#pragma once

#include <stdexcept>
#include <string>
#include <utility>

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
  // `field` names the KernelConfig or Problem field at fault, so callers can act on it without
  // parsing the message (the dispatcher ranks near-miss kernels by it).
  Error(ErrorKind kind, const std::string& message, std::string field)
      : std::runtime_error(message), kind_(kind), field_(std::move(field)) {}
  ErrorKind kind() const { return kind_; }
  // Empty when the error is not about one field.
  const std::string& field() const { return field_; }

 private:
  ErrorKind kind_;
  std::string field_;
};

}  // namespace tilefmha
