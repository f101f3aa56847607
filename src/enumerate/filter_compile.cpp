// Recursive-descent compiler of the filter language into Filter::Node trees.
//
//   or_expr   := and_expr ('or' and_expr)*
//   and_expr  := not_expr ('and' not_expr)*
//   not_expr  := 'not' not_expr | condition
//   condition := '(' or_expr ')'
//              | operand (compare operand | 'in' list | 'not' 'in' list)?
//   operand   := 'c' '.' field | integer | string | 'true' | 'false'
//   list      := '[' (operand (',' operand)* ','?)? ']'
#include <algorithm>
#include <optional>

#include "enumerate/filter.hpp"
#include "enumerate/filter_lexer.hpp"

namespace tilefmha::enumerate {
namespace {

using Node = Filter::Node;
using Token = FilterToken;

// A field reference or a literal, before it is typed against the other side of a comparison.
struct Operand {
  enum class Kind { field, integer, boolean, string };
  Kind kind = Kind::integer;
  size_t field = 0;
  int64_t number = 0;  // integer, boolean (0/1)
  std::string text;    // string
  int32_t column = 0;
};

std::string_view kind_name(FieldKind kind) {
  switch (kind) {
    case FieldKind::integer: return "an integer";
    case FieldKind::boolean: return "a boolean";
    case FieldKind::enumeration: return "an enum";
  }
  return "";
}

std::string all_field_names() {
  std::string out;
  for (const FieldInfo& info : field_infos()) {
    if (!out.empty()) out += ", ";
    out += info.name;
  }
  return out;
}

bool is_ordering(CompareOp op) {
  return op != CompareOp::eq && op != CompareOp::ne;
}

bool compare(int64_t a, CompareOp op, int64_t b) {
  switch (op) {
    case CompareOp::eq: return a == b;
    case CompareOp::ne: return a != b;
    case CompareOp::lt: return a < b;
    case CompareOp::le: return a <= b;
    case CompareOp::gt: return a > b;
    case CompareOp::ge: return a >= b;
  }
  return false;
}

// a OP b  ==  b MIRROR(OP) a
CompareOp mirrored(CompareOp op) {
  switch (op) {
    case CompareOp::lt: return CompareOp::gt;
    case CompareOp::le: return CompareOp::ge;
    case CompareOp::gt: return CompareOp::lt;
    case CompareOp::ge: return CompareOp::le;
    default: return op;
  }
}

class Compiler {
 public:
  explicit Compiler(std::string_view expression)
      : expression_(expression), tokens_(lex_filter(expression)) {}

  Filter compile() {
    if (peek().kind == Token::Kind::end) fail(peek(), "empty expression");
    const int32_t root = or_expr();
    if (peek().kind != Token::Kind::end) fail(peek(), "unexpected '" + peek().text + "'");
    return Filter(std::string(expression_), std::move(nodes_), root);
  }

 private:
  // ---- tokens ----
  const Token& peek(size_t ahead = 0) const {
    return tokens_[std::min(position_ + ahead, tokens_.size() - 1)];
  }
  const Token& next() { return tokens_[std::min(position_++, tokens_.size() - 1)]; }
  bool is_word(const Token& t, std::string_view word) const {
    return t.kind == Token::Kind::identifier && t.text == word;
  }
  bool is_symbol(const Token& t, std::string_view symbol) const {
    return t.kind == Token::Kind::symbol && t.text == symbol;
  }
  void expect_symbol(std::string_view symbol, std::string_view what) {
    if (!is_symbol(peek(), symbol))
      fail(peek(),
           "expected '" + std::string(symbol) + "' " + std::string(what) + describe_found());
    next();
  }
  std::string describe_found() const {
    return peek().kind == Token::Kind::end ? ", found the end" : ", found '" + peek().text + "'";
  }
  [[noreturn]] void fail(const Token& at, const std::string& message) const {
    filter_error(expression_, at.column, message);
  }
  [[noreturn]] void fail(int32_t column, const std::string& message) const {
    filter_error(expression_, column, message);
  }

  int32_t add(Node node) {
    nodes_.push_back(std::move(node));
    return static_cast<int32_t>(nodes_.size() - 1);
  }
  int32_t combine(Node::Kind kind, int32_t lhs, int32_t rhs) {
    Node node;
    node.kind = kind;
    node.lhs = lhs;
    node.rhs = rhs;
    return add(std::move(node));
  }
  int32_t constant(bool value) {
    Node node;
    node.kind = Node::Kind::constant;
    node.value = value;
    return add(std::move(node));
  }

  // ---- grammar ----
  int32_t or_expr() {
    int32_t lhs = and_expr();
    while (is_word(peek(), "or")) {
      next();
      lhs = combine(Node::Kind::any, lhs, and_expr());
    }
    return lhs;
  }

  int32_t and_expr() {
    int32_t lhs = not_expr();
    while (is_word(peek(), "and")) {
      next();
      lhs = combine(Node::Kind::all, lhs, not_expr());
    }
    return lhs;
  }

  int32_t not_expr() {
    if (is_word(peek(), "not")) {
      next();
      return combine(Node::Kind::negate, not_expr(), -1);
    }
    return condition();
  }

  int32_t condition() {
    if (is_symbol(peek(), "(")) {
      next();
      const int32_t inner = or_expr();
      expect_symbol(")", "to close '('");
      return inner;
    }
    const Operand lhs = operand();
    if (auto op = compare_op(peek())) {
      const Token& op_token = next();
      return comparison(lhs, *op, op_token.column, operand());
    }
    if (is_word(peek(), "in")) {
      next();
      return membership(lhs, false);
    }
    if (is_word(peek(), "not") && is_word(peek(1), "in")) {
      next();
      next();
      return membership(lhs, true);
    }
    return truth_value(lhs);
  }

  Operand operand() {
    const Token& token = peek();
    Operand out;
    out.column = token.column;
    if (token.kind == Token::Kind::integer) {
      out.kind = Operand::Kind::integer;
      out.number = next().number;
      return out;
    }
    if (token.kind == Token::Kind::string) {
      out.kind = Operand::Kind::string;
      out.text = next().text;
      return out;
    }
    if (is_word(token, "true") || is_word(token, "True") || is_word(token, "false") ||
        is_word(token, "False")) {
      const std::string& word = next().text;
      out.kind = Operand::Kind::boolean;
      out.number = (word == "true" || word == "True") ? 1 : 0;
      return out;
    }
    if (is_word(token, "c") && is_symbol(peek(1), ".")) {
      next();
      next();
      const Token& name = peek();
      if (name.kind != Token::Kind::identifier) fail(name, "expected a field name after 'c.'");
      const auto field = find_field(name.text);
      if (!field)
        fail(name, "unknown field '" + name.text + "' (fields: " + all_field_names() + ")");
      next();
      out.kind = Operand::Kind::field;
      out.field = *field;
      return out;
    }
    if (token.kind == Token::Kind::end) fail(token, "expression ends where a value is expected");
    if (token.kind == Token::Kind::identifier)
      fail(token,
           "unknown name '" + token.text + "': fields are written c.<field>, strings in quotes");
    fail(token, "expected c.<field> or a literal, found '" + token.text + "'");
  }

  std::optional<CompareOp> compare_op(const Token& t) const {
    if (t.kind != Token::Kind::symbol) return std::nullopt;
    if (t.text == "==") return CompareOp::eq;
    if (t.text == "!=") return CompareOp::ne;
    if (t.text == "<") return CompareOp::lt;
    if (t.text == "<=") return CompareOp::le;
    if (t.text == ">") return CompareOp::gt;
    if (t.text == ">=") return CompareOp::ge;
    return std::nullopt;
  }

  // ---- typing ----
  std::string field_text(size_t field) const {
    const FieldInfo& info = field_infos()[field];
    std::string out = "c." + std::string(info.name) + " is " + std::string(kind_name(info.kind));
    if (info.kind == FieldKind::enumeration) out += " (" + std::string(info.enum_type) + ")";
    return out;
  }

  // The literal as a code of `field`, or a typed error at the literal's column.
  int64_t literal_code(size_t field, const Operand& literal) const {
    const FieldInfo& info = field_infos()[field];
    switch (info.kind) {
      case FieldKind::integer:
        if (literal.kind != Operand::Kind::integer)
          fail(literal.column, field_text(field) + "; compare it with a number");
        return literal.number;
      case FieldKind::boolean:
        if (literal.kind != Operand::Kind::boolean)
          fail(literal.column, field_text(field) + "; compare it with true or false");
        return literal.number;
      case FieldKind::enumeration:
        if (literal.kind != Operand::Kind::string)
          fail(literal.column, field_text(field) + "; compare it with a quoted name");
        for (size_t i = 0; i < info.enum_names.size(); ++i)
          if (info.enum_names[i] == literal.text) return static_cast<int64_t>(i);
        fail(literal.column, "'" + literal.text + "' is not a " + std::string(info.enum_type) +
                                 " (accepted: " + accepted_values(field) + ")");
    }
    return 0;
  }

  int32_t comparison(Operand lhs, CompareOp op, int32_t op_column, Operand rhs) {
    if (lhs.kind != Operand::Kind::field && rhs.kind == Operand::Kind::field) {
      std::swap(lhs, rhs);
      op = mirrored(op);
    }
    if (lhs.kind != Operand::Kind::field) return constant_comparison(lhs, op, op_column, rhs);
    const FieldInfo& info = field_infos()[lhs.field];
    if (is_ordering(op) && info.kind != FieldKind::integer)
      fail(op_column, "ordering comparisons need numbers, but " + field_text(lhs.field));
    Node node;
    node.op = op;
    node.field = lhs.field;
    if (rhs.kind == Operand::Kind::field) {
      const FieldInfo& other = field_infos()[rhs.field];
      if (other.kind != info.kind || other.enum_type != info.enum_type)
        fail(rhs.column,
             "cannot compare: " + field_text(lhs.field) + " but " + field_text(rhs.field));
      node.kind = Node::Kind::field_vs_field;
      node.other_field = rhs.field;
    } else {
      node.kind = Node::Kind::field_vs_value;
      node.code = literal_code(lhs.field, rhs);
    }
    return add(std::move(node));
  }

  int32_t constant_comparison(const Operand& lhs, CompareOp op, int32_t op_column,
                              const Operand& rhs) {
    if (lhs.kind != rhs.kind) fail(rhs.column, "cannot compare values of different types");
    if (is_ordering(op) && lhs.kind != Operand::Kind::integer)
      fail(op_column, "ordering comparisons need numbers");
    if (lhs.kind == Operand::Kind::string)
      return constant(compare(0, op, lhs.text == rhs.text ? 0 : 1));
    return constant(compare(lhs.number, op, rhs.number));
  }

  int32_t membership(const Operand& lhs, bool negated) {
    if (lhs.kind != Operand::Kind::field)
      fail(lhs.column, "'in' needs a field on its left, e.g. c.hdim_q in [64, 128]");
    expect_symbol("[", "to open the list after 'in'");
    std::vector<Operand> items;
    while (!is_symbol(peek(), "]")) {
      items.push_back(operand());
      if (items.back().kind == Operand::Kind::field)
        fail(items.back().column, "list items must be literals");
      if (!is_symbol(peek(), ",")) break;
      next();
    }
    expect_symbol("]", "to close the list");
    Node node;
    node.kind = Node::Kind::in_set;
    node.field = lhs.field;
    for (const Operand& item : items) node.codes.push_back(literal_code(lhs.field, item));
    const int32_t set = add(std::move(node));
    return negated ? combine(Node::Kind::negate, set, -1) : set;
  }

  int32_t truth_value(const Operand& value) {
    if (value.kind == Operand::Kind::boolean) return constant(value.number != 0);
    if (value.kind == Operand::Kind::field &&
        field_infos()[value.field].kind == FieldKind::boolean) {
      Node node;
      node.kind = Node::Kind::field_flag;
      node.field = value.field;
      return add(std::move(node));
    }
    if (value.kind == Operand::Kind::field)
      fail(value.column, field_text(value.field) + ", not a condition; compare it");
    fail(value.column, "a literal alone is not a condition");
  }

  std::string_view expression_;
  std::vector<Token> tokens_;
  size_t position_ = 0;
  std::vector<Node> nodes_;
};

}  // namespace

Filter Filter::compile(std::string_view expression) {
  return Compiler(expression).compile();
}

bool Filter::evaluate(int32_t index, const KernelConfig& config) const {
  const Node& node = nodes_[size_t(index)];
  switch (node.kind) {
    case Node::Kind::constant: return node.value;
    case Node::Kind::field_flag: return get_code(config, node.field) != 0;
    case Node::Kind::field_vs_value:
      return compare(get_code(config, node.field), node.op, node.code);
    case Node::Kind::field_vs_field:
      return compare(get_code(config, node.field), node.op, get_code(config, node.other_field));
    case Node::Kind::in_set: {
      const int64_t code = get_code(config, node.field);
      return std::find(node.codes.begin(), node.codes.end(), code) != node.codes.end();
    }
    case Node::Kind::all: return evaluate(node.lhs, config) && evaluate(node.rhs, config);
    case Node::Kind::any: return evaluate(node.lhs, config) || evaluate(node.rhs, config);
    case Node::Kind::negate: return !evaluate(node.lhs, config);
  }
  return false;
}

}  // namespace tilefmha::enumerate
