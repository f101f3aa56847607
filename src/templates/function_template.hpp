// A KernelTemplate assembled from one pipeline's free functions (its codegen, its shape formulas
// and its parameter builder), so each template file states only what differs.
#pragma once

#include "templates/kernel_template.hpp"
#include "templates/template_table.hpp"

namespace tilefmha::templates {

struct TemplateFunctions {
  Family family;
  Pipeline pipeline;
  // Throws Error(not_supported) naming the field (codegen's check_supported_*).
  void (*check)(const KernelConfig& config);
  std::string (*source)(const KernelConfig& config);
  int (*threads)(const KernelConfig& config);
  int64_t (*shared_bytes)(const KernelConfig& config);
  jit::LaunchShape (*launch_shape)(const KernelConfig& config, const Problem& problem,
                                   const StageContext& context);
  void (*launch)(const KernelConfig& config, const StageLaunch& launch);
  // Optional: problem-level limits (null: every matched problem).
  std::optional<Rejection> (*can_implement)(const KernelConfig& config,
                                            const Problem& problem) = nullptr;
  // Optional: the entry that runs a problem (null: the config's symbol).
  std::string (*entry)(const KernelConfig& config, const Problem& problem,
                       const StageContext& context) = nullptr;
};

class FunctionTemplate final : public KernelTemplate {
 public:
  explicit FunctionTemplate(TemplateFunctions functions) : f_(functions) {}

  Family family() const override { return f_.family; }
  Pipeline pipeline() const override { return f_.pipeline; }
  std::optional<Rejection> supports(const KernelConfig& config) const override {
    return rejection_of([&] { f_.check(config); });
  }
  std::optional<Rejection> can_implement(const KernelConfig& config,
                                         const Problem& problem) const override {
    return f_.can_implement ? f_.can_implement(config, problem) : std::nullopt;
  }
  std::string entry(const KernelConfig& config, const Problem& problem,
                    const StageContext& context) const override {
    return f_.entry ? f_.entry(config, problem, context)
                    : KernelTemplate::entry(config, problem, context);
  }
  std::string source(const KernelConfig& config) const override { return f_.source(config); }
  int threads(const KernelConfig& config) const override { return f_.threads(config); }
  int64_t shared_bytes(const KernelConfig& config) const override {
    return f_.shared_bytes(config);
  }
  jit::LaunchShape launch_shape(const KernelConfig& config, const Problem& problem,
                                const StageContext& context) const override {
    return f_.launch_shape(config, problem, context);
  }
  void launch(const KernelConfig& config, const StageLaunch& launch) const override {
    f_.launch(config, launch);
  }

 private:
  TemplateFunctions f_;
};

}  // namespace tilefmha::templates
