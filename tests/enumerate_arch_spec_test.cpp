// Arch specs: the data loads, states the hardware facts, and the loader rejects tiles that
// break a rule, the MMA shape or a hardware limit, naming the tile.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "enumerate/arch_spec.hpp"
#include "enumerate/data_dir.hpp"
#include "enumerate/family_traits.hpp"
#include "enumerate/tile_resources.hpp"
#include "fmha/fwd_shape.h"
#include "fmha/fwd_sm90_shape.h"
#include "tilefmha/error.hpp"

using namespace tilefmha;
using namespace tilefmha::enumerate;

namespace {

nlohmann::json sm90_json() {
  return read_json_file(data_dir() / "arch" / "sm90.json");
}

// The error message parsing `json` gives ("" when it parses).
std::string load_error(const nlohmann::json& json) {
  try {
    parse_arch_spec(json, "test.json");
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::invalid_argument);
    return e.what();
  }
  return "";
}

// The sm90_ws fp16/bf16 forward tile group.
nlohmann::json& hopper_forward_group(nlohmann::json& spec) {
  for (auto& group : spec["tiles"])
    if (group["pipeline"] == "sm90_ws" && group["dtypes"][0] == "fp16" &&
        group["families"][0] == "fwd")
      return group;
  throw std::runtime_error("no sm90_ws forward group in sm90.json");
}

bool has_tile(const ArchSpec& spec, Family family, Pipeline pipeline, DType dtype, int hdim_q,
              int hdim_v, int block_m, int block_n) {
  return std::any_of(spec.tiles.begin(), spec.tiles.end(), [&](const TileEntry& t) {
    return t.pipeline == pipeline && t.dtype == dtype && t.hdim_q == hdim_q && t.hdim_v == hdim_v &&
           t.shape.block_m == block_m && t.shape.block_n == block_n &&
           std::find(t.families.begin(), t.families.end(), family) != t.families.end();
  });
}

KernelConfig hopper_tile(Family family, DType dtype, int hdim, int block_m, int block_n, int warps,
                         int stages) {
  KernelConfig c;
  c.family = family;
  c.arch = Arch::sm90;
  c.dtype = dtype;
  c.pipeline = Pipeline::sm90_ws;
  c.hdim_q = c.hdim_v = hdim;
  c.block_m = block_m;
  c.block_n = block_n;
  c.block_k = hdim;
  c.warps = warps;
  c.stages = stages;
  return c;
}

}  // namespace

TEST(ArchSpec, EveryArchLoadsWithItsFacts) {
  for (Arch arch : {Arch::sm80, Arch::sm86, Arch::sm89, Arch::sm90}) {
    const ArchSpec spec = load_arch_spec(arch);
    EXPECT_EQ(spec.arch, arch);
    EXPECT_FALSE(spec.tiles.empty());
    EXPECT_EQ(spec.supports(Pipeline::sm90_ws), arch == Arch::sm90) << to_string(arch);
    const bool has_fp8 = arch == Arch::sm89 || arch == Arch::sm90;
    EXPECT_EQ(spec.supports(DType::fp8_e4m3), has_fp8) << to_string(arch);
    EXPECT_TRUE(spec.supports(DType::fp32));
    EXPECT_TRUE(spec.instruction_for(Pipeline::sm80_mma, DType::bf16) != nullptr);
    EXPECT_EQ(spec.instruction_for(Pipeline::sm90_ws, DType::bf16) != nullptr, arch == Arch::sm90);
    EXPECT_GE(spec.limits.smem_per_sm_bytes, spec.limits.smem_per_block_optin_bytes);
    EXPECT_EQ(spec.limits.registers_per_sm, 65536);
  }
  EXPECT_EQ(load_arch_spec(Arch::sm90).limits.smem_per_block_optin_bytes, 227 * 1024);
  EXPECT_EQ(load_arch_spec(Arch::sm80).limits.smem_per_block_optin_bytes, 163 * 1024);
  EXPECT_EQ(load_arch_spec(Arch::sm86).limits.smem_per_block_optin_bytes, 99 * 1024);
}

TEST(ArchSpec, EveryTileFitsItsArchForEveryFamily) {
  for (Arch arch : {Arch::sm80, Arch::sm86, Arch::sm89, Arch::sm90}) {
    const ArchSpec spec = load_arch_spec(arch);
    for (const TileEntry& tile : spec.tiles)
      for (Family family : tile.families) {
        const KernelConfig c = tile.probe(family, arch);
        EXPECT_EQ(tile_limit_violation(c, spec), std::nullopt) << tile.describe();
        if (is_attention_family(family)) EXPECT_GT(tile_smem_bytes(c), 0) << tile.describe();
      }
  }
}

TEST(ArchSpec, HopperWarpSpecializedTilesPerHeadDim) {
  const ArchSpec spec = load_arch_spec(Arch::sm90);
  const auto fwd = Family::fwd;
  const auto ws = Pipeline::sm90_ws;
  EXPECT_TRUE(has_tile(spec, fwd, ws, DType::bf16, 64, 64, 192, 128));
  EXPECT_TRUE(has_tile(spec, fwd, ws, DType::bf16, 128, 128, 128, 128));
  EXPECT_TRUE(has_tile(spec, fwd, ws, DType::bf16, 128, 128, 128, 192));
  EXPECT_TRUE(has_tile(spec, fwd, ws, DType::fp16, 192, 128, 128, 112));
  EXPECT_TRUE(has_tile(spec, fwd, ws, DType::bf16, 256, 256, 128, 80));
  EXPECT_TRUE(has_tile(spec, fwd, ws, DType::fp8_e4m3, 128, 128, 128, 128));
  EXPECT_TRUE(has_tile(spec, fwd, ws, DType::fp8_e4m3, 256, 256, 128, 128));
  // Head dims that are not whole 64-element panels go to the portable pipeline.
  for (int hdim : {32, 96, 160}) {
    EXPECT_FALSE(std::any_of(spec.tiles.begin(), spec.tiles.end(), [&](const TileEntry& t) {
      return t.pipeline == Pipeline::sm90_ws && t.hdim_q == hdim;
    })) << hdim;
  }
  EXPECT_TRUE(has_tile(spec, fwd, Pipeline::sm80_mma, DType::bf16, 32, 32, 128, 128));
  EXPECT_TRUE(has_tile(spec, fwd, Pipeline::sm80_mma, DType::bf16, 96, 96, 128, 64));
}

// The estimates agree with the layouts the forward kernels themselves compute.
TEST(ArchSpec, SharedMemoryMatchesTheKernelLayouts) {
  int checked = 0;
  for (Arch arch : {Arch::sm80, Arch::sm86, Arch::sm89, Arch::sm90}) {
    const ArchSpec spec = load_arch_spec(arch);
    for (const TileEntry& tile : spec.tiles) {
      if (tile.dtype != DType::fp16 && tile.dtype != DType::bf16) continue;
      KernelConfig c;
      c.family = Family::fwd;
      c.arch = arch;
      tile.apply_to(c);
      if (std::find(tile.families.begin(), tile.families.end(), Family::fwd) == tile.families.end())
        continue;
      const int64_t ours = tile_smem_bytes(c);
      if (tile.pipeline == Pipeline::sm90_ws) {
        EXPECT_EQ(ours,
                  fmha::sm90_smem_layout(c.hdim_q, c.hdim_v, c.block_m, c.block_n, c.stages).bytes)
            << tile.describe();
        ++checked;
      } else if (tile.pipeline == Pipeline::sm80_mma) {
        EXPECT_EQ(ours, fmha::fwd_sm80_shared_bytes(c.hdim_q, c.hdim_v, c.block_m, c.block_n,
                                                    c.stages, 2))
            << tile.describe();
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 20);
}

// Hand-computed from the formulas in docs/enumeration.md.
TEST(ArchSpec, ResourceFormulas) {
  RegisterModel model{32, 24};
  KernelConfig c = hopper_tile(Family::fwd, DType::bf16, 128, 128, 176, 12, 2);
  // 2 B * (128*128 Q/O + 2 stages * 176 * (128 + 128) K,V) + 10 mbarriers (Q full/empty, 4 per
  // stage) + one swizzle atom
  EXPECT_EQ(tile_smem_bytes(c), 212992 + 8 * 10 + 1024);
  TileResources r = estimate_tile_resources(c, model);
  EXPECT_EQ(r.threads, 384);
  EXPECT_EQ(r.math_threads, 256);
  // S and O accumulators, plus P packed two 16-bit values per register.
  EXPECT_EQ(r.registers_per_thread, 32 + 128 * (176 + 128) / 256 + 128 * 176 / (2 * 256));
  EXPECT_EQ(r.registers_per_block, 128 * 24 + 256 * 228);

  // FP8: 1-byte Q, K and V, a transposed V copy per stage (and its two barriers), a 16-bit O
  // tile.
  c = hopper_tile(Family::fwd, DType::fp8_e4m3, 128, 128, 128, 12, 2);
  EXPECT_EQ(tile_smem_bytes(c), 128 * 128 + 2 * 128 * 384 + 2 * 128 * 128 + 8 * 14 + 1024);

  // Backward on sm90_ws, the kernel's own layout (fmha/bwd_sm90_shape.h): K and V of 128 keys,
  // Q and dO per stage, two dS^T tiles, two fp32 dQ tiles, LSE and D per stage, 10 mbarriers
  // (K/V full and empty, 2 per stage, 2 per dQ tile) and one swizzle atom.
  c = hopper_tile(Family::bwd_dq_dk_dv, DType::bf16, 128, 64, 128, 12, 2);
  EXPECT_EQ(tile_smem_bytes(c), 2 * (2 * 128 * 128 + 2 * 2 * 64 * 128 + 2 * 128 * 64) +
                                    2 * 4 * 64 * 128 + 2 * 2 * 4 * 64 + 8 * 10 + 1024);
  // The estimate of a kernel that does not exist (sm80_mma): Q, dO per stage; K, V; P, dS;
  // LSE, D.
  c.pipeline = Pipeline::sm80_mma;
  EXPECT_EQ(tile_smem_bytes(c), 2 * (2 * 64 * 256 + 128 * 256 + 2 * 64 * 128) + 8 * 2 * 64);
  r = estimate_tile_resources(c, model);
  EXPECT_EQ(r.math_threads, r.threads);  // no producer warpgroup
  EXPECT_EQ(r.registers_per_thread, 32 + (128 * 256 + 2 * 64 * 128) / 384);

  // Memory-bound kernels.
  c.family = Family::fwd_splitkv_combine;
  c.pipeline = Pipeline::combine;
  c.block_m = 16;
  c.block_n = 128;
  EXPECT_EQ(tile_smem_bytes(c), 4 * 16 * 128 + 8 * 16);
  c.family = Family::bwd_convert_dq;
  EXPECT_EQ(tile_smem_bytes(c), 0);
}

TEST(ArchSpec, TileOverSharedMemoryLimitIsNamed) {
  nlohmann::json spec = sm90_json();
  for (auto& shape : hopper_forward_group(spec)["shapes"])
    if (shape["block_n"] == 192) shape["stages"] = 3;
  const std::string message = load_error(spec);
  EXPECT_NE(message.find("sm90_ws fp16 hdim 128/128 m128.n192.k128.w12.s3"), std::string::npos)
      << message;
  EXPECT_NE(message.find("smem_per_block_optin_bytes 232448"), std::string::npos) << message;
}

TEST(ArchSpec, TileOverRegisterLimitIsNamed) {
  nlohmann::json spec = read_json_file(data_dir() / "arch" / "sm80.json");
  for (auto& group : spec["tiles"])
    if (group["pipeline"] == "sm80_mma" && group["families"][0] == "fwd")
      for (auto& shape : group["shapes"])
        if (shape["hdim"][0] == 256) shape["warps"] = 4;  // 128 x (32 + 256) / 128 threads
  const std::string message = load_error(spec);
  EXPECT_NE(message.find("hdim 256/256 m128.n32.k64.w4.s2"), std::string::npos) << message;
  EXPECT_NE(message.find("registers per thread 320 > registers_per_thread_max 255"),
            std::string::npos)
      << message;
}

TEST(ArchSpec, TileBreakingARuleIsNamed) {
  nlohmann::json spec = sm90_json();
  hopper_forward_group(spec)["dtypes"].push_back("fp32");
  std::string message = load_error(spec);
  EXPECT_NE(message.find("sm90_ws fp32"), std::string::npos) << message;
  EXPECT_NE(message.find("sm90_ws_dtypes"), std::string::npos) << message;

  spec = sm90_json();
  hopper_forward_group(spec)["shapes"][0]["hdim"] = {96, 96};
  message = load_error(spec);
  EXPECT_NE(message.find("sm90_ws_whole_panel_hdims"), std::string::npos) << message;

  spec = sm90_json();
  hopper_forward_group(spec)["families"].push_back("fwd_splitkv_combine");
  message = load_error(spec);
  EXPECT_NE(message.find("pipeline_serves_family"), std::string::npos) << message;

  spec = sm90_json();
  spec["tiles"].push_back({{"pipeline", "sm90_ws"},
                           {"families", {"fwd"}},
                           {"dtypes", {"bf16"}},
                           {"shapes",
                            {{{"hdim", {128, 64}},
                              {"block_m", 128},
                              {"block_n", 128},
                              {"block_k", 128},
                              {"warps", 12},
                              {"stages", 2}}}}});
  message = load_error(spec);
  EXPECT_NE(message.find("hdim_pair_supported"), std::string::npos) << message;
}

TEST(ArchSpec, TileBreakingTheMmaShapeIsNamed) {
  nlohmann::json spec = sm90_json();
  hopper_forward_group(spec)["shapes"][0]["block_n"] = 132;  // not a multiple of wgmma's n8
  std::string message = load_error(spec);
  EXPECT_NE(message.find("m192.n132"), std::string::npos) << message;
  EXPECT_NE(message.find("multiples of wgmma"), std::string::npos) << message;

  spec = sm90_json();
  hopper_forward_group(spec)["shapes"][0]["warps"] = 12;  // 192 rows need 3 consumer warpgroups
  message = load_error(spec);
  EXPECT_NE(message.find("64 rows to each consumer warpgroup"), std::string::npos) << message;

  spec = sm90_json();
  hopper_forward_group(spec)["shapes"][0]["block_k"] = 48;  // does not divide hdim 64
  message = load_error(spec);
  EXPECT_NE(message.find("block_k must divide"), std::string::npos) << message;
}

TEST(ArchSpec, UnknownKeysNamesAndDuplicatesAreErrors) {
  nlohmann::json spec = sm90_json();
  spec["tiels"] = nlohmann::json::array();
  EXPECT_NE(load_error(spec).find("unknown key 'tiels'"), std::string::npos);

  spec = sm90_json();
  hopper_forward_group(spec)["shapes"][0]["blockm"] = 64;
  EXPECT_NE(load_error(spec).find("unknown key 'blockm'"), std::string::npos);

  spec = sm90_json();
  spec["limits"].erase("registers_per_sm");
  EXPECT_NE(load_error(spec).find("missing key 'registers_per_sm'"), std::string::npos);

  spec = sm90_json();
  hopper_forward_group(spec)["pipeline"] = "sm90_wss";
  EXPECT_NE(load_error(spec).find("unknown Pipeline 'sm90_wss'"), std::string::npos);

  spec = sm90_json();
  auto& group = hopper_forward_group(spec);
  group["shapes"].push_back(group["shapes"][0]);
  EXPECT_NE(load_error(spec).find("listed twice"), std::string::npos);

  spec = sm90_json();
  spec["pipelines"] = {"sm80_mma", "simt_f32",     "combine",
                       "appendkv", "bwd_dot_do_o", "bwd_convert_dq"};
  EXPECT_NE(load_error(spec).find("pipeline not in this arch's 'pipelines'"), std::string::npos);
}

TEST(ArchSpec, DataDirComesFromTheEnvironmentWhenSet) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("tilefmha_arch_spec_test_data_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir / "arch");
  nlohmann::json spec = sm90_json();
  spec["description"] = "relocated";
  std::ofstream(dir / "arch" / "sm90.json") << spec.dump();
  ::setenv("TILEFMHA_DATA_DIR", dir.c_str(), 1);
  EXPECT_EQ(data_dir(), dir);
  EXPECT_EQ(load_arch_spec(Arch::sm90).description, "relocated");
  EXPECT_THROW(load_arch_spec(Arch::sm80), Error);  // not in the relocated dir
  ::unsetenv("TILEFMHA_DATA_DIR");
  EXPECT_EQ(data_dir(), std::filesystem::path(TILEFMHA_DATA_DIR));
  EXPECT_NE(load_arch_spec(Arch::sm90).description, "relocated");
  std::filesystem::remove_all(dir);
}
