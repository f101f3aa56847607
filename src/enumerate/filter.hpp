// The filter language over KernelConfig fields (DESIGN §6):
//   c.hdim_q == 128 and c.pipeline == 'sm90_ws' and not (c.mask in ['causal', 'window'])
// Operators: or < and < not < comparisons (==, !=, <, <=, >, >=, in [..], not in [..]);
// parentheses; literals: integers, 'strings' / "strings", true / false. Enum fields compare by
// name; ordering comparisons need integer fields. An expression is compiled once into a typed
// tree, so evaluating it per config is a few integer compares.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "enumerate/field_codes.hpp"
#include "tilefmha/kernel_config.hpp"

namespace tilefmha::enumerate {

enum class CompareOp : uint8_t { eq, ne, lt, le, gt, ge };

class Filter {
 public:
  // Throws Error(invalid_argument) on a syntax or type error; the message gives the 1-based
  // column and the expression with a caret under the mistake.
  static Filter compile(std::string_view expression);

  bool matches(const KernelConfig& config) const { return evaluate(root_, config); }
  const std::string& expression() const { return expression_; }

  // One node of the compiled tree (public for the compiler in filter_compile.cpp).
  struct Node {
    enum class Kind : uint8_t {
      constant,
      field_flag,
      field_vs_value,
      field_vs_field,
      in_set,
      all,
      any,
      negate
    };
    Kind kind = Kind::constant;
    CompareOp op = CompareOp::eq;
    bool value = false;          // constant
    size_t field = 0;            // field_flag, field_vs_*, in_set
    size_t other_field = 0;      // field_vs_field
    int64_t code = 0;            // field_vs_value
    std::vector<int64_t> codes;  // in_set
    int32_t lhs = -1, rhs = -1;  // all, any (both); negate (lhs)
  };
  Filter(std::string expression, std::vector<Node> nodes, int32_t root)
      : expression_(std::move(expression)), nodes_(std::move(nodes)), root_(root) {}

 private:
  bool evaluate(int32_t node, const KernelConfig& config) const;

  std::string expression_;
  std::vector<Node> nodes_;
  int32_t root_ = -1;
};

// A conjunction of filters: a config passes when every one matches.
class FilterSet {
 public:
  void add(std::string_view expression);
  // One expression per line; blank lines and lines starting with # are ignored. Errors name
  // the file and line.
  void add_file(const std::filesystem::path& path);
  void add(Filter filter) { filters_.push_back(std::move(filter)); }

  bool matches(const KernelConfig& config) const;
  bool empty() const { return filters_.empty(); }
  const std::vector<Filter>& filters() const { return filters_; }

 private:
  std::vector<Filter> filters_;
};

}  // namespace tilefmha::enumerate
