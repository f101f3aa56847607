// Kernel set declaration: a program names the kernels it ships by canonical-name patterns
// ('*' any run, '?' one character). TILEFMHA_KERNEL_SET defines a function returning the set,
// built once on first call; resolve(arch) expands it against the arch's full enumeration and
// the result becomes the engine's kernels (EngineOptions::kernels, with only_listed = true for
// exactly these). No GPU needed.
#include "tilefmha/kernel_set.hpp"

#include <cstdio>
#include <string>

#include "tilefmha/error.hpp"
#include "tilefmha/kernel_config.hpp"

using namespace tilefmha;

// hdim-128 bf16 forward: warp-specialized batch kernels, and causal group-mode kernels.
TILEFMHA_KERNEL_SET(serving_kernels, "fwd.sm90.bf16.batch.sm90_ws.hq128.hv128.*",
                    "fwd.sm90.bf16.group.sm80_mma.hq128.hv128.*.mask-causal*")
// A typo'd pattern: resolving it must fail rather than ship an empty set.
TILEFMHA_KERNEL_SET(misspelled_kernels, "fwd.sm90.bf16.batch.sm90_ws.hq129.*")

int main() {
  const KernelSet& set = serving_kernels();
  const auto kernels = set.resolve(Arch::sm90);
  std::printf("kernel set '%s': %zu kernels\n", set.name().c_str(), kernels.size());
  bool ok = !kernels.empty();
  size_t batch_count = 0, group_count = 0;
  for (const KernelConfig& kernel : kernels) {
    const std::string name = kernel.name();
    const bool batch = matches_pattern(set.patterns()[0], name);
    const bool group = matches_pattern(set.patterns()[1], name);
    batch_count += batch;
    group_count += group;
    // Every resolved kernel comes from one of the patterns and has the traits they spell.
    if (!(batch || group) || kernel.hdim_q != 128 || kernel.dtype != DType::bf16) {
      std::printf("unexpected kernel %s\n", name.c_str());
      ok = false;
    }
  }
  if (!kernels.empty()) std::printf("first: %s\n", kernels.front().name().c_str());
  std::printf("batch sm90_ws: %zu, group causal sm80_mma: %zu\n", batch_count, group_count);
  ok = ok && batch_count > 0 && group_count > 0;

  try {
    misspelled_kernels().resolve(Arch::sm90);
    std::printf("misspelled pattern: resolved, FAILED\n");
    ok = false;
  } catch (const Error& error) {
    std::printf("misspelled pattern refused: %s\n", error.what());
  }
  std::printf("%s\n", ok ? "ok" : "FAILED");
  return ok ? 0 : 1;
}
