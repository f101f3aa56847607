#include "templates/template_table.hpp"

#include <algorithm>
#include <array>

#include "templates/attention_templates.hpp"
#include "tilefmha/error.hpp"

namespace tilefmha::templates {
namespace {

struct TableEntry {
  Family family;
  Pipeline pipeline;
  const KernelTemplate& kernel_template;
};

// Every kernel template. A new family or pipeline is one line here and one template file.
const std::array<TableEntry, 15>& table() {
  static const std::array<TableEntry, 15> entries = {{
      {Family::fwd, Pipeline::sm90_ws, fwd_sm90_template()},
      {Family::fwd, Pipeline::sm80_mma, fwd_sm80_template()},
      {Family::fwd, Pipeline::simt_f32, fwd_simt_template()},
      {Family::fwd_splitkv, Pipeline::sm90_ws, splitkv_sm90_template()},
      {Family::fwd_splitkv, Pipeline::sm80_mma, splitkv_sm80_template()},
      {Family::fwd_pagedkv, Pipeline::sm90_ws, pagedkv_sm90_template()},
      {Family::fwd_pagedkv, Pipeline::sm80_mma, pagedkv_sm80_template()},
      {Family::batch_prefill, Pipeline::sm90_ws, batch_prefill_sm90_template()},
      {Family::batch_prefill, Pipeline::sm80_mma, batch_prefill_sm80_template()},
      {Family::fwd_splitkv_combine, Pipeline::combine, combine_template()},
      {Family::fwd_appendkv, Pipeline::appendkv, appendkv_template()},
      {Family::bwd_dot_do_o, Pipeline::bwd_dot_do_o, bwd_dot_do_o_template()},
      {Family::bwd_dq_dk_dv, Pipeline::sm90_ws, bwd_dq_dk_dv_sm90_template()},
      {Family::bwd_dq_dk_dv, Pipeline::sm80_mma, bwd_dq_dk_dv_sm80_template()},
      {Family::bwd_convert_dq, Pipeline::bwd_convert_dq, bwd_convert_dq_template()},
  }};
  return entries;
}

}  // namespace

const KernelTemplate* find_kernel_template(Family family, Pipeline pipeline) {
  for (const TableEntry& entry : table())
    if (entry.family == family && entry.pipeline == pipeline) return &entry.kernel_template;
  return nullptr;
}

std::vector<Family> template_families() {
  std::vector<Family> families;
  for (const TableEntry& entry : table())
    if (std::find(families.begin(), families.end(), entry.family) == families.end())
      families.push_back(entry.family);
  return families;
}

std::optional<Rejection> rejection_of(const std::function<void()>& check) {
  try {
    check();
    return std::nullopt;
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::not_supported && e.kind() != ErrorKind::invalid_problem) throw;
    return Rejection{e.field().empty() ? "codegen" : e.field(), e.what()};
  }
}

std::optional<Rejection> build_rejection(const KernelConfig& config) {
  const KernelTemplate* found = find_kernel_template(config.family, config.pipeline);
  if (found == nullptr) {
    // Name the family when the pipeline has templates for others, else the pipeline.
    std::string families;
    for (const TableEntry& entry : table())
      if (entry.pipeline == config.pipeline)
        families += (families.empty() ? "" : ", ") + std::string(to_string(entry.family));
    if (!families.empty())
      return Rejection{"family", "family = " + std::string(to_string(config.family)) +
                                     ": pipeline " + std::string(to_string(config.pipeline)) +
                                     " has kernel templates for " + families + " only"};
    return Rejection{"pipeline", "pipeline = " + std::string(to_string(config.pipeline)) +
                                     ": no kernel template for family " +
                                     std::string(to_string(config.family)) + " yet"};
  }
  return found->supports(config);
}

const KernelTemplate& kernel_template(const KernelConfig& config) {
  if (const auto rejection = build_rejection(config))
    throw Error(ErrorKind::not_supported, rejection->text, rejection->field);
  return *find_kernel_template(config.family, config.pipeline);
}

}  // namespace tilefmha::templates
