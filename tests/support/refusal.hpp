// Test support: what a support check says when it refuses a kernel config, for the codegen
// tests that expect each unsupported field to be named first in the message.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "tilefmha/error.hpp"

namespace tilefmha::testing {

// The message of the not_supported error that `check` throws; empty when it accepts.
template <typename Check>
std::string not_supported_message(Check&& check) {
  try {
    check();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::not_supported) << e.what();
    return e.what();
  }
  return {};
}

// The refusal starts with "<field> = ", so that the user sees which field to change.
inline void expect_names_field(const std::string& message, const std::string& field) {
  EXPECT_EQ(message.rfind(field + " = ", 0), 0u) << "expected " << field << ": " << message;
}

}  // namespace tilefmha::testing
