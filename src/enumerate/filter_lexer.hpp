// Tokens of the filter language (internal to filter_compile.cpp and its tests).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tilefmha::enumerate {

struct FilterToken {
  enum class Kind : uint8_t { identifier, integer, string, symbol, end };
  Kind kind = Kind::end;
  std::string text;    // identifier / symbol text, or the string literal's contents
  int64_t number = 0;  // integer
  int32_t column = 0;  // 1-based column of the token's first character
};

// Splits an expression into tokens ending with an `end` token; throws Error(invalid_argument)
// with the column of a character that starts no token or an unterminated string.
std::vector<FilterToken> lex_filter(std::string_view expression);

// "<message> at column N" plus the expression and a caret line, as Error(invalid_argument).
[[noreturn]] void filter_error(std::string_view expression, int32_t column,
                               std::string_view message);

}  // namespace tilefmha::enumerate
