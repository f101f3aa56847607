#include "templates/kernel_template.hpp"

namespace tilefmha::templates {

std::optional<Rejection> KernelTemplate::can_implement(const KernelConfig&, const Problem&) const {
  return std::nullopt;
}

std::string KernelTemplate::entry(const KernelConfig& config, const Problem&,
                                  const StageContext&) const {
  return config.symbol();
}

int64_t KernelTemplate::workspace_bytes(const KernelConfig&, const Problem&,
                                        const StageContext&) const {
  return 0;
}

}  // namespace tilefmha::templates
