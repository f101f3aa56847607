#include "runtime/kernel_selection.hpp"

#include "codegen/generate.hpp"
#include "tilefmha/error.hpp"

namespace tilefmha::runtime {

void split_by_support(const std::vector<KernelConfig>& configs, SelectedKernels& out) {
  for (const KernelConfig& config : configs) {
    try {
      codegen::check_supported(config);
      out.supported.push_back(config);
    } catch (const Error& error) {
      // Only "not implemented yet" is expected here; anything else is a real failure.
      if (error.kind() != ErrorKind::not_supported) throw;
      out.not_implemented.push_back({config, error.what()});
    }
  }
}

SelectedKernels select_kernels(const KernelSelection& selection) {
  const enumerate::SweepConfig config = enumerate::load_sweep_config(selection.config);
  const enumerate::Profile profile = enumerate::load_profile(selection.profile);
  enumerate::FilterSet extra;
  for (const std::string& expression : selection.filters) extra.add(expression);
  for (const std::string& file : selection.filter_files) extra.add_file(file);
  const enumerate::ArchSpec arch = enumerate::load_arch_spec(selection.arch);

  const enumerate::Enumeration enumeration =
      enumerate::enumerate_kernels(arch, config, profile, extra);
  SelectedKernels out;
  out.description = "sweep config " + config.name + " (variant " + config.variant + "), arch " +
                    std::string(to_string(selection.arch)) + ", profile " + profile.name;
  out.enumerated = static_cast<int64_t>(enumeration.configs.size());
  split_by_support(enumeration.configs, out);
  return out;
}

}  // namespace tilefmha::runtime
