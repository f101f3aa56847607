#include "runtime/precompile.hpp"

#include "codegen/generate.hpp"
#include "runtime/heuristics.hpp"
#include "tilefmha/error.hpp"

namespace tilefmha::runtime {

std::vector<jit::BuildJob> build_jobs(std::span<const KernelConfig> configs) {
  std::vector<jit::BuildJob> jobs;
  jobs.reserve(configs.size());
  // The symbol and source Dispatcher::prepare_stage compiles: the cache key hashes both.
  for (const KernelConfig& config : configs)
    jobs.push_back({config.symbol(), codegen::generate_source(config)});
  return jobs;
}

std::vector<KernelConfig> with_launch_forms(std::span<const KernelConfig> configs) {
  std::vector<KernelConfig> out(configs.begin(), configs.end());
  for (const KernelConfig& config : configs) {
    if (config.pipeline != Pipeline::sm90_ws || config.pack_gqa || config.persistent) continue;
    std::vector<KernelConfig> forms;
    KernelConfig packed = config;
    packed.pack_gqa = true;
    forms.push_back(packed);
    if (config.family == Family::fwd || config.family == Family::bwd_dq_dk_dv) {
      KernelConfig persistent = config;
      persistent.persistent = true;
      forms.push_back(persistent);
      if (config.family == Family::fwd) {  // short packed decode (packed_tiles_persist_pays)
        KernelConfig packed_persistent = packed;
        packed_persistent.persistent = true;
        forms.push_back(packed_persistent);
      }
    }
    // Short hdim-64 GQA decode merged in small clusters runs its packed tiles on warp MMAs
    // (warp_decode_pays).
    if (warp_decode_may_pay(config)) {
      KernelConfig warp = packed;
      warp.warp_decode = true;
      forms.push_back(warp);
    }
    // The default mode's unmasked backward takes dQ turns where they pay
    // (codegen::bwd_sm90_takes_turns): the deterministic kernel on its staggered grid.
    if (config.family == Family::bwd_dq_dk_dv && !config.deterministic &&
        config.mask == MaskKind::none) {
      KernelConfig turns = config;
      turns.deterministic = turns.persistent = true;
      forms.push_back(turns);
    }
    for (const KernelConfig& form : forms) {
      try {
        codegen::check_supported(form);
        out.push_back(form);
      } catch (const Error& error) {
        if (error.kind() != ErrorKind::not_supported) throw;
      }
    }
  }
  return out;
}

}  // namespace tilefmha::runtime
