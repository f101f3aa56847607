#include "enumerate/filter_lexer.hpp"

#include <cctype>
#include <charconv>

#include "tilefmha/error.hpp"

namespace tilefmha::enumerate {
namespace {

bool is_identifier_start(char c) {
  return std::isalpha(static_cast<unsigned char>(c)) || c == '_';
}
bool is_identifier_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
}
bool is_digit(char c) {
  return std::isdigit(static_cast<unsigned char>(c)) != 0;
}

}  // namespace

void filter_error(std::string_view expression, int32_t column, std::string_view message) {
  std::string text = "invalid filter at column " + std::to_string(column) + ": " +
                     std::string(message) + "\n  " + std::string(expression) + "\n  " +
                     std::string(size_t(std::max(column, 1) - 1), ' ') + "^";
  throw Error(ErrorKind::invalid_argument, text);
}

std::vector<FilterToken> lex_filter(std::string_view text) {
  std::vector<FilterToken> tokens;
  size_t i = 0;
  while (i < text.size()) {
    const char c = text[i];
    const auto column = static_cast<int32_t>(i + 1);
    if (std::isspace(static_cast<unsigned char>(c))) {
      ++i;
      continue;
    }
    FilterToken token;
    token.column = column;
    if (is_identifier_start(c)) {
      size_t end = i;
      while (end < text.size() && is_identifier_char(text[end])) ++end;
      token.kind = FilterToken::Kind::identifier;
      token.text = std::string(text.substr(i, end - i));
      i = end;
    } else if (is_digit(c) || (c == '-' && i + 1 < text.size() && is_digit(text[i + 1]))) {
      size_t end = i + 1;
      while (end < text.size() && is_digit(text[end])) ++end;
      if (end < text.size() && is_identifier_char(text[end]))
        filter_error(text, static_cast<int32_t>(end + 1), "malformed number");
      auto [ptr, ec] = std::from_chars(text.data() + i, text.data() + end, token.number);
      if (ec != std::errc()) filter_error(text, column, "integer out of range");
      token.kind = FilterToken::Kind::integer;
      token.text = std::string(text.substr(i, end - i));
      i = end;
    } else if (c == '\'' || c == '"') {
      const size_t close = text.find(c, i + 1);
      if (close == std::string_view::npos) filter_error(text, column, "unterminated string");
      token.kind = FilterToken::Kind::string;
      token.text = std::string(text.substr(i + 1, close - i - 1));
      i = close + 1;
    } else {
      static constexpr std::string_view kTwoChar[] = {"==", "!=", "<=", ">="};
      static constexpr std::string_view kOneChar = "()[],.<>";
      token.kind = FilterToken::Kind::symbol;
      bool matched = false;
      for (std::string_view op : kTwoChar)
        if (text.substr(i, 2) == op) {
          token.text = std::string(op);
          i += 2;
          matched = true;
          break;
        }
      if (!matched) {
        if (kOneChar.find(c) == std::string_view::npos) {
          if (c == '=') filter_error(text, column, "'=' is not an operator; use '=='");
          if (c == '&' || c == '|' || c == '!')
            filter_error(text, column, "use the words and, or, not");
          filter_error(text, column, "unexpected character '" + std::string(1, c) + "'");
        }
        token.text = std::string(1, c);
        ++i;
      }
    }
    tokens.push_back(std::move(token));
  }
  FilterToken end;
  end.kind = FilterToken::Kind::end;
  end.column = static_cast<int32_t>(text.size() + 1);
  tokens.push_back(end);
  return tokens;
}

}  // namespace tilefmha::enumerate
