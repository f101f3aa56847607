// The kernel registry: KernelConfig <-> compiled cubin <-> loaded function. Thread-safe; kernels
// can be declared (config only, built on first use) or registered with their cubin.
//
// Lifetimes: a loaded module is never unloaded while the registry lives, so a CUfunction that
// function() returned stays valid until the registry is destroyed, even when add() later
// replaces the kernel's cubin (the old module is retired, not dropped).
#pragma once

#include <atomic>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <shared_mutex>
#include <string>
#include <string_view>
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
  // Registers (or replaces) the cubin of a kernel, declaring it when unknown. Once the kernel's
  // module is loaded, an identical cubin changes nothing, and a different one retires the
  // module (kept loaded, owned by the registry until it is destroyed) so that functions handed
  // out earlier, possibly launching on another thread, stay valid; the next function() loads
  // the new cubin. Throws Error(invalid_argument) naming the kernel for an empty cubin.
  void add(const KernelConfig& config, std::vector<char> cubin);

  // Builds the kernel at most once per process: returns at once when it already has a cubin
  // (from add() or an earlier call, without calling `build`); otherwise one caller runs
  // `build` and add()s its cubin while concurrent callers for the same kernel wait for that
  // build, and callers for other kernels build in parallel (no registry-wide lock is held
  // while building). When `build` throws (or returns an empty cubin, Error(invalid_argument)),
  // every caller waiting on that build gets the same exception, nothing is registered (not even
  // a declaration), and a later call builds again. `build` must not call ensure_built for the
  // same kernel (it would wait on itself).
  void ensure_built(const KernelConfig& config, const std::function<std::vector<char>()>& build);

  bool contains(const KernelConfig& config) const;
  bool is_built(const KernelConfig& config) const;
  // The kernel's current cubin (empty while only declared); throws Error(no_kernel) when the
  // kernel is unknown.
  std::vector<char> cubin(const KernelConfig& config) const;
  // Modules replaced by add() and kept loaded so that their functions stay valid.
  size_t retired_module_count() const;
  size_t size() const;
  // Every known config for `arch` (all archs when nullopt), sorted by canonical name.
  std::vector<KernelConfig> configs(std::optional<Arch> arch = std::nullopt) const;

  // The kernel's function in the current CUDA context, loading its module on first use.
  // Throws Error(no_kernel) when the kernel is unknown or has no cubin yet.
  // `entry`: another function of the kernel's module (KernelTemplate::entry); empty: its symbol.
  jit::CUfunction function(const KernelConfig& config, std::string_view entry = {}) const;

  // {"kernels": [{"name": ..., "config": {...}}, ...]}; cubins live in the JIT cache, not here.
  nlohmann::json to_json() const;
  // Declares every kernel of a to_json() document. Each name must match its config (a check
  // that catches hand-edited files); returns how many were new.
  size_t declare_from_json(const nlohmann::json& document);

 private:
  // One kernel: its cubin (empty while only declared), once used its loaded module, and the
  // modules of cubins it had before. `built` mirrors !cubin.empty() so that ensure_built's
  // fast path and is_built need no slot lock (which function() holds while loading).
  struct Slot {
    std::mutex mutex;
    std::vector<char> cubin;
    std::unique_ptr<jit::LoadedModule> module;
    std::vector<std::unique_ptr<jit::LoadedModule>> retired;
    std::atomic<bool> built{false};
  };
  std::shared_ptr<Slot> find_slot(const KernelConfig& config) const;
  bool slot_built(const KernelConfig& config) const;  // caller holds mutex_
  mutable std::shared_mutex mutex_;
  std::unordered_map<KernelConfig, std::shared_ptr<Slot>> slots_;
  // Builds in progress in ensure_built, by kernel. An entry lives from the first caller's
  // arrival until its outcome is published; guarded by mutex_, which is never held while
  // building.
  std::unordered_map<KernelConfig, std::shared_future<void>> building_;
};

}  // namespace tilefmha::runtime
