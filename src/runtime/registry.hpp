// The kernel registry: KernelConfig <-> compiled cubin <-> loaded function. Thread-safe; kernels
// can be declared (config only, built on first use) or registered with their cubin.
#pragma once

#include <memory>
#include <mutex>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <shared_mutex>
#include <unordered_map>
#include <vector>

#include "jit/cuda_driver.hpp"
#include "tilefmha/kernel_config.hpp"

namespace tilefmha::jit {
class LoadedModule;
}

namespace tilefmha::runtime {

class Registry {
 public:
  Registry();
  ~Registry();
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  // Declares a kernel without code; returns false when it was already known.
  bool declare(const KernelConfig& config);
  // Registers (or replaces) the cubin of a kernel; a module loaded from an older cubin is dropped.
  void add(const KernelConfig& config, std::vector<char> cubin);

  bool contains(const KernelConfig& config) const;
  bool is_built(const KernelConfig& config) const;
  size_t size() const;
  // Every known config for `arch` (all archs when nullopt), sorted by canonical name.
  std::vector<KernelConfig> configs(std::optional<Arch> arch = std::nullopt) const;

  // The kernel's function in the current CUDA context, loading its module on first use.
  // Throws Error(no_kernel) when the kernel is unknown or has no cubin yet.
  jit::CUfunction function(const KernelConfig& config) const;

  // {"kernels": [{"name": ..., "config": {...}}, ...]}; cubins live in the JIT cache, not here.
  nlohmann::json to_json() const;
  // Declares every kernel of a to_json() document. Each name must match its config (a check
  // that catches hand-edited files); returns how many were new.
  size_t declare_from_json(const nlohmann::json& document);

 private:
  // One kernel: its cubin (empty while only declared) and, once used, its loaded module.
  struct Slot {
    std::mutex mutex;
    std::vector<char> cubin;
    std::unique_ptr<jit::LoadedModule> module;
  };
  std::shared_ptr<Slot> find_slot(const KernelConfig& config) const;
  mutable std::shared_mutex mutex_;
  std::unordered_map<KernelConfig, std::shared_ptr<Slot>> slots_;
};

}  // namespace tilefmha::runtime
