// An architecture's specification, read from data/arch/<arch>.json: hardware limits,
// tensor-core instructions, supported dtypes and pipelines, and the tile table.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "tilefmha/kernel_config.hpp"
#include "tilefmha/types.hpp"

namespace tilefmha::enumerate {

struct ArchLimits {
  int64_t smem_per_block_optin_bytes = 0;  // cudaFuncAttributeMaxDynamicSharedMemorySize ceiling
  int64_t smem_per_sm_bytes = 0;
  int64_t registers_per_thread_max = 0;
  int64_t registers_per_sm = 0;
  int64_t max_threads_per_block = 0;
  int64_t max_threads_per_sm = 0;
  int64_t sm_count_typical = 0;
};

// Constants of the register estimate (see tile_resources.hpp).
struct RegisterModel {
  int64_t overhead_per_thread = 0;           // addresses, softmax row state, loop counters
  int64_t producer_warpgroup_registers = 0;  // sm90_ws producer after setmaxnreg.dec
};

struct TensorCoreInstruction {
  std::string ptx;
  int64_t m = 0, n = 0, k = 0;  // n: the N granularity
  int64_t n_max = 0;            // wgmma: any multiple of n up to n_max in one issue; 0: fixed n
  std::vector<DType> dtypes;
  std::vector<Pipeline> pipelines;
};

struct TileShape {
  int32_t block_m = 0, block_n = 0, block_k = 0, warps = 0, stages = 0;
  bool operator==(const TileShape&) const = default;
};

// One row of the tile table: the tile a pipeline uses for one dtype and head-dim pair, shared
// by the listed families.
struct TileEntry {
  std::vector<Family> families;
  Pipeline pipeline = Pipeline::sm80_mma;
  DType dtype = DType::bf16;
  int32_t hdim_q = 0, hdim_v = 0;
  TileShape shape;

  // The tile's fields on a KernelConfig of `family` (identity, pipeline, head dims, tile).
  void apply_to(KernelConfig& config) const;
  // A config of `family` on `arch` with the tile's fields and the out_dtype enumeration pairs
  // with its dtype: what the arch checks judge the tile's resources by.
  KernelConfig probe(Family family, Arch arch) const;
  // "sm90_ws bf16 hdim 128/128 m128.n192.k128.w12.s2" for messages.
  std::string describe() const;
};

struct ArchSpec {
  Arch arch = Arch::sm90;
  std::string description;
  ArchLimits limits;
  RegisterModel registers;
  std::vector<TensorCoreInstruction> instructions;
  std::vector<DType> dtypes;
  std::vector<Pipeline> pipelines;
  std::vector<int32_t> page_sizes;  // page_size specializations (0 = any page size)
  std::vector<TileEntry> tiles;

  bool supports(DType dtype) const;
  bool supports(Pipeline pipeline) const;
  // The instruction a tensor-core pipeline uses for dtype, or nullptr.
  const TensorCoreInstruction* instruction_for(Pipeline pipeline, DType dtype) const;
};

// Parses and checks a spec: unknown keys, unknown names, tiles that break a rule, the MMA
// granularity or a hardware limit are errors naming the tile. `source` names the file.
ArchSpec parse_arch_spec(const nlohmann::json& json, const std::string& source);
// data_dir()/arch/<arch>.json
ArchSpec load_arch_spec(Arch arch);

}  // namespace tilefmha::enumerate
