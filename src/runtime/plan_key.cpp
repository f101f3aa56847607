#include "runtime/plan_key.hpp"

#include <sstream>
#include <type_traits>

namespace tilefmha::runtime {

PlanKey PlanKey::of(const Problem& problem) {
  return {
      std::apply([&](const auto&... field) { return std::make_tuple(field.project(problem)...); },
                 kPlanKeyFields)};
}

size_t PlanKey::hash() const {
  size_t seed = 0;
  std::apply(
      [&](const auto&... value) {
        // boost::hash_combine's mixing: order-sensitive, cheap.
        ((seed ^= std::hash<std::decay_t<decltype(value)>>{}(value) + 0x9e3779b97f4a7c15ULL +
                  (seed << 6) + (seed >> 2)),
         ...);
      },
      values);
  return seed;
}

std::string PlanKey::describe() const {
  std::ostringstream out;
  auto write = [&](const char* name, const auto& value) {
    out << (out.tellp() > 0 ? " " : "") << name << '=';
    if constexpr (std::is_enum_v<std::decay_t<decltype(value)>>)
      out << to_string(value);
    else
      out << value;
  };
  // Both tuples are walked in the same order: field i names value i.
  [&]<size_t... I>(std::index_sequence<I...>) {
    (write(std::get<I>(kPlanKeyFields).name, std::get<I>(values)), ...);
  }
  (std::make_index_sequence<std::tuple_size_v<PlanKeyValues>>());
  return out.str();
}

}  // namespace tilefmha::runtime
