#include "runtime/registry.hpp"

#include <algorithm>
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
  std::shared_ptr<Slot> slot;
  {
    std::unique_lock lock(mutex_);
    auto [it, inserted] = slots_.try_emplace(config, nullptr);
    if (inserted) it->second = std::make_shared<Slot>();
    slot = it->second;
  }
  std::lock_guard slot_lock(slot->mutex);
  slot->cubin = std::move(cubin);
  slot->module.reset();
}

bool Registry::contains(const KernelConfig& config) const {
  return find_slot(config) != nullptr;
}

bool Registry::is_built(const KernelConfig& config) const {
  const auto slot = find_slot(config);
  if (!slot) return false;
  std::lock_guard slot_lock(slot->mutex);
  return !slot->cubin.empty();
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

jit::CUfunction Registry::function(const KernelConfig& config) const {
  const auto slot = find_slot(config);
  if (!slot)
    throw Error(ErrorKind::no_kernel, "kernel " + config.name() + " is not in the registry");
  std::lock_guard slot_lock(slot->mutex);
  if (slot->cubin.empty())
    throw Error(ErrorKind::no_kernel, "kernel " + config.name() + " is declared but not built");
  if (!slot->module) slot->module = std::make_unique<jit::LoadedModule>(slot->cubin);
  return slot->module->function(config.symbol());
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
