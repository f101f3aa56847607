#include "runtime/registry.hpp"

#include <algorithm>
#include <exception>
#include <nlohmann/json.hpp>

#include "jit/module.hpp"
#include "tilefmha/error.hpp"

namespace tilefmha::runtime {

Registry::Registry() = default;
Registry::~Registry() = default;

std::shared_ptr<Registry::Slot> Registry::find_slot(const KernelConfig& config) const {
  std::shared_lock lock(mutex_);
  const auto it = slots_.find(config);
  return it == slots_.end() ? nullptr : it->second;
}

bool Registry::declare(const KernelConfig& config) {
  std::unique_lock lock(mutex_);
  return slots_.try_emplace(config, std::make_shared<Slot>()).second;
}

void Registry::add(const KernelConfig& config, std::vector<char> cubin) {
  if (cubin.empty())
    throw Error(ErrorKind::invalid_argument,
                "empty cubin for kernel " + config.name() + ": nothing to register");
  std::shared_ptr<Slot> slot;
  {
    std::unique_lock lock(mutex_);
    auto [it, inserted] = slots_.try_emplace(config, nullptr);
    if (inserted) it->second = std::make_shared<Slot>();
    slot = it->second;
  }
  std::lock_guard slot_lock(slot->mutex);
  if (slot->module) {
    if (slot->cubin == cubin) return;
    // Another thread may be launching a function of this module right now; unloading it would
    // pull the code from under that launch.
    slot->retired.push_back(std::move(slot->module));
  }
  slot->cubin = std::move(cubin);
  slot->built.store(true, std::memory_order_release);
}

bool Registry::slot_built(const KernelConfig& config) const {
  const auto it = slots_.find(config);
  return it != slots_.end() && it->second->built.load(std::memory_order_acquire);
}

void Registry::ensure_built(const KernelConfig& config,
                            const std::function<std::vector<char>()>& build) {
  {
    std::shared_lock lock(mutex_);
    if (slot_built(config)) return;
  }
  std::promise<void> outcome;  // used only by the caller that runs the build
  std::shared_future<void> pending;
  {
    std::unique_lock lock(mutex_);
    if (slot_built(config)) return;  // finished between the two locks
    auto [it, first] = building_.try_emplace(config);
    if (first) it->second = outcome.get_future().share();
    pending = it->second;
    if (!first) {
      lock.unlock();
      pending.get();  // a failed build rethrows its exception here, in every waiter
      return;
    }
  }
  // This caller builds. The entry leaves building_ only after add() has marked the slot built
  // (or the build failed), so a later caller either sees the kernel built, joins this build,
  // or, after a failure, starts a new one.
  const auto forget_build = [&] {
    std::unique_lock lock(mutex_);
    building_.erase(config);
  };
  try {
    add(config, build());
  } catch (...) {
    forget_build();
    outcome.set_exception(std::current_exception());
    throw;
  }
  forget_build();
  outcome.set_value();
}

bool Registry::contains(const KernelConfig& config) const {
  return find_slot(config) != nullptr;
}

bool Registry::is_built(const KernelConfig& config) const {
  std::shared_lock lock(mutex_);
  return slot_built(config);
}

std::vector<char> Registry::cubin(const KernelConfig& config) const {
  const auto slot = find_slot(config);
  if (!slot)
    throw Error(ErrorKind::no_kernel, "kernel " + config.name() + " is not in the registry");
  std::lock_guard slot_lock(slot->mutex);
  return slot->cubin;
}

size_t Registry::retired_module_count() const {
  std::vector<std::shared_ptr<Slot>> slots;
  {
    std::shared_lock lock(mutex_);
    slots.reserve(slots_.size());
    for (const auto& [config, slot] : slots_) slots.push_back(slot);
  }
  size_t count = 0;
  for (const auto& slot : slots) {
    std::lock_guard slot_lock(slot->mutex);
    count += slot->retired.size();
  }
  return count;
}

size_t Registry::size() const {
  std::shared_lock lock(mutex_);
  return slots_.size();
}

std::vector<KernelConfig> Registry::configs(std::optional<Arch> arch) const {
  std::vector<KernelConfig> out;
  {
    std::shared_lock lock(mutex_);
    for (const auto& [config, slot] : slots_)
      if (!arch || config.arch == *arch) out.push_back(config);
  }
  std::sort(out.begin(), out.end(),
            [](const KernelConfig& a, const KernelConfig& b) { return a.name() < b.name(); });
  return out;
}

jit::CUfunction Registry::function(const KernelConfig& config, std::string_view entry) const {
  const auto slot = find_slot(config);
  if (!slot)
    throw Error(ErrorKind::no_kernel, "kernel " + config.name() + " is not in the registry");
  std::lock_guard slot_lock(slot->mutex);
  if (slot->cubin.empty())
    throw Error(ErrorKind::no_kernel, "kernel " + config.name() + " is declared but not built");
  if (!slot->module) slot->module = std::make_unique<jit::LoadedModule>(slot->cubin);
  return slot->module->function(entry.empty() ? config.symbol() : std::string(entry));
}

nlohmann::json Registry::to_json() const {
  nlohmann::json kernels = nlohmann::json::array();
  for (const KernelConfig& config : configs())
    kernels.push_back({{"name", config.name()}, {"config", config}});
  return {{"kernels", kernels}};
}

size_t Registry::declare_from_json(const nlohmann::json& document) {
  if (!document.is_object() || !document.contains("kernels") || !document["kernels"].is_array())
    throw Error(ErrorKind::invalid_argument, "registry JSON needs a \"kernels\" array");
  std::vector<KernelConfig> parsed;
  for (const auto& item : document["kernels"]) {
    if (!item.is_object() || !item.contains("config"))
      throw Error(ErrorKind::invalid_argument,
                  "registry JSON entry without \"config\": " + item.dump());
    const auto config = item["config"].get<KernelConfig>();
    if (item.contains("name") && item["name"] != config.name())
      throw Error(ErrorKind::invalid_argument, "registry JSON entry name " + item["name"].dump() +
                                                   " does not match its config (" + config.name() +
                                                   ")");
    parsed.push_back(config);
  }
  size_t added = 0;  // all entries parse before any is declared: a bad file changes nothing
  for (const auto& config : parsed) added += declare(config) ? 1 : 0;
  return added;
}

}  // namespace tilefmha::runtime
