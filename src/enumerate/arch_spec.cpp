#include "enumerate/arch_spec.hpp"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "enumerate/data_dir.hpp"
#include "enumerate/family_traits.hpp"
#include "enumerate/rules.hpp"
#include "enumerate/strict_json.hpp"
#include "enumerate/tile_resources.hpp"

namespace tilefmha::enumerate {
namespace {

template <class T>
bool contains(const std::vector<T>& values, T value) {
  return std::find(values.begin(), values.end(), value) != values.end();
}

ArchLimits parse_limits(const nlohmann::json& json, const std::string& context) {
  StrictObject in(json, context + ": limits");
  ArchLimits limits;
  limits.smem_per_block_optin_bytes = in.required_int("smem_per_block_optin_bytes", 1);
  limits.smem_per_sm_bytes = in.required_int("smem_per_sm_bytes", 1);
  limits.registers_per_thread_max = in.required_int("registers_per_thread_max", 1);
  limits.registers_per_sm = in.required_int("registers_per_sm", 1);
  limits.max_threads_per_block = in.required_int("max_threads_per_block", 32);
  limits.max_threads_per_sm = in.required_int("max_threads_per_sm", 32);
  limits.sm_count_typical = in.required_int("sm_count_typical", 1);
  in.finish();
  return limits;
}

RegisterModel parse_register_model(const nlohmann::json& json, const std::string& context) {
  StrictObject in(json, context + ": register_model");
  RegisterModel model;
  model.overhead_per_thread = in.required_int("overhead_per_thread", 0);
  model.producer_warpgroup_registers = in.required_int("producer_warpgroup_registers", 0);
  in.finish();
  return model;
}

TensorCoreInstruction parse_instruction(const nlohmann::json& json, const std::string& context) {
  StrictObject in(json, context);
  TensorCoreInstruction inst;
  inst.ptx = in.required_string("ptx");
  inst.m = in.required_int("m", 1);
  inst.n = in.required_int("n", 1);
  inst.k = in.required_int("k", 1);
  if (in.optional("n_max")) inst.n_max = in.required_int("n_max", inst.n);
  inst.dtypes = parse_enum_array<DType>(in.required("dtypes"), context + ": dtypes");
  inst.pipelines = parse_enum_array<Pipeline>(in.required("pipelines"), context + ": pipelines");
  in.finish();
  return inst;
}

int32_t checked_int32(StrictObject& in, std::string_view key, int64_t min_value) {
  const int64_t value = in.required_int(key, min_value);
  if (value > 1 << 20) data_error(in.context(), std::string(key) + " is implausibly large");
  return static_cast<int32_t>(value);
}

// One group of the tile table: {"pipeline", "families", "dtypes", "shapes": [...]}, expanded to
// one TileEntry per dtype and shape.
void parse_tile_group(const nlohmann::json& json, const std::string& context,
                      std::vector<TileEntry>& out) {
  StrictObject group(json, context);
  const Pipeline pipeline =
      parse_enum_value<Pipeline>(group.required("pipeline"), context + ": pipeline");
  const auto families =
      parse_enum_array<Family>(group.required("families"), context + ": families");
  const auto dtypes = parse_enum_array<DType>(group.required("dtypes"), context + ": dtypes");
  const nlohmann::json& shapes = group.required_array("shapes");
  group.finish();
  if (families.empty() || dtypes.empty() || shapes.empty())
    data_error(context, "families, dtypes and shapes must be non-empty");
  for (size_t s = 0; s < shapes.size(); ++s) {
    StrictObject shape(shapes[s], context + ": shapes[" + std::to_string(s) + "]");
    const nlohmann::json& hdim = shape.required("hdim");
    if (!hdim.is_array() || hdim.size() != 2 || !hdim[0].is_number_integer() ||
        !hdim[1].is_number_integer())
      data_error(shape.context(), "'hdim' must be [hdim_q, hdim_v], got " + hdim.dump());
    TileEntry entry;
    entry.families = families;
    entry.pipeline = pipeline;
    entry.hdim_q = hdim[0].get<int32_t>();
    entry.hdim_v = hdim[1].get<int32_t>();
    entry.shape.block_m = checked_int32(shape, "block_m", 1);
    entry.shape.block_n = checked_int32(shape, "block_n", 0);
    entry.shape.block_k = checked_int32(shape, "block_k", 1);
    entry.shape.warps = checked_int32(shape, "warps", 1);
    entry.shape.stages = checked_int32(shape, "stages", 1);
    shape.finish();
    for (DType dtype : dtypes) {
      entry.dtype = dtype;
      out.push_back(entry);
    }
  }
}

// The MMA shape constraints of a tensor-core pipeline's tile.
void check_instruction_granularity(const TileEntry& tile, const ArchSpec& spec,
                                   const std::string& where) {
  if (!is_tensor_core_pipeline(tile.pipeline)) return;
  const TensorCoreInstruction* inst = spec.instruction_for(tile.pipeline, tile.dtype);
  if (!inst) data_error(where, "no tensor-core instruction of this arch serves it");
  const TileShape& t = tile.shape;
  if (t.block_m % inst->m != 0 || t.block_n % inst->n != 0 || t.block_k % inst->k != 0)
    data_error(where, "block_m/n/k must be multiples of " + inst->ptx + "'s m" +
                          std::to_string(inst->m) + " n" + std::to_string(inst->n) + " k" +
                          std::to_string(inst->k));
  // A variable-N instruction (wgmma) covers block_n (QK^T) and hdim_v (PV) in one issue.
  if (inst->n_max > 0 && (t.block_n > inst->n_max || tile.hdim_v > inst->n_max))
    data_error(where, "block_n and hdim_v must be <= " + std::to_string(inst->n_max));
}

void check_tile_shape(const TileEntry& tile, const std::string& where) {
  const TileShape& t = tile.shape;
  if (pipeline_uses_block_n(tile.pipeline) != (t.block_n > 0))
    data_error(where, pipeline_uses_block_n(tile.pipeline)
                          ? "block_n must be positive for this pipeline"
                          : "block_n must be 0: this pipeline has no key tile");
  if (tile.hdim_q % t.block_k != 0)
    data_error(where, "block_k must divide hdim_q " + std::to_string(tile.hdim_q));
  if (tile.pipeline == Pipeline::sm90_ws) {
    // One producer warpgroup plus consumer warpgroups; forward consumers own 64 rows each.
    if (t.warps % 4 != 0 || t.warps < 8)
      data_error(where, "sm90_ws needs whole warpgroups: warps a multiple of 4, at least 8");
    if (!contains(tile.families, Family::bwd_dq_dk_dv) && t.block_m != 64 * (t.warps / 4 - 1))
      data_error(where,
                 "sm90_ws forward tiles give 64 rows to each consumer warpgroup: block_m "
                 "must be 64 * (warps / 4 - 1)");
  }
}

void check_tile(const TileEntry& tile, const ArchSpec& spec, const std::string& context) {
  const std::string where = context + ": tile " + tile.describe();
  if (!spec.supports(tile.pipeline)) data_error(where, "pipeline not in this arch's 'pipelines'");
  if (!spec.supports(tile.dtype)) data_error(where, "dtype not in this arch's 'dtypes'");
  static const FieldSet tile_fields =
      field_set({"family", "arch", "dtype", "pipeline", "hdim_q", "hdim_v", "block_m", "block_n",
                 "block_k", "warps", "stages"});
  std::vector<KernelConfig> configs;
  for (Family family : tile.families) {
    const KernelConfig config = tile.probe(family, spec.arch);
    // Rules first: they say why a tile makes no sense at all, before any shape detail.
    for (const Rule& rule : rules())
      if ((rule.reads & ~tile_fields).none() && !rule.holds(config))
        data_error(where, "family " + std::string(to_string(family)) + " breaks rule " + rule.name +
                              " (" + rule.why + ")");
    configs.push_back(config);
  }
  check_tile_shape(tile, where);
  check_instruction_granularity(tile, spec, where);
  for (const KernelConfig& config : configs)
    if (auto violation = tile_limit_violation(config, spec))
      data_error(where, "family " + std::string(to_string(config.family)) + ": " + *violation);
}

void check_unique_tiles(const std::vector<TileEntry>& tiles, const std::string& context) {
  for (size_t i = 0; i < tiles.size(); ++i)
    for (size_t j = 0; j < i; ++j) {
      const TileEntry& a = tiles[i];
      const TileEntry& b = tiles[j];
      if (a.pipeline != b.pipeline || a.dtype != b.dtype || a.hdim_q != b.hdim_q ||
          a.hdim_v != b.hdim_v || !(a.shape == b.shape))
        continue;
      for (Family family : a.families)
        if (contains(b.families, family))
          data_error(context, "tile " + a.describe() + " is listed twice for family " +
                                  std::string(to_string(family)));
    }
}

}  // namespace

void TileEntry::apply_to(KernelConfig& config) const {
  config.pipeline = pipeline;
  config.dtype = dtype;
  config.hdim_q = hdim_q;
  config.hdim_v = hdim_v;
  config.block_m = shape.block_m;
  config.block_n = shape.block_n;
  config.block_k = shape.block_k;
  config.warps = shape.warps;
  config.stages = shape.stages;
}

KernelConfig TileEntry::probe(Family family, Arch arch) const {
  KernelConfig config;
  config.family = family;
  config.arch = arch;
  apply_to(config);
  // As enumeration pairs them (rule out_dtype_follows_dtype; fp8 attention writes bf16): a
  // kernel template states the resources only of a config it supports.
  config.out_dtype = is_fp8(dtype) && family != Family::fwd_appendkv ? DType::bf16 : dtype;
  return config;
}

std::string TileEntry::describe() const {
  return std::string(to_string(pipeline)) + " " + std::string(to_string(dtype)) + " hdim " +
         std::to_string(hdim_q) + "/" + std::to_string(hdim_v) + " m" +
         std::to_string(shape.block_m) + ".n" + std::to_string(shape.block_n) + ".k" +
         std::to_string(shape.block_k) + ".w" + std::to_string(shape.warps) + ".s" +
         std::to_string(shape.stages);
}

bool ArchSpec::supports(DType dtype) const {
  return contains(dtypes, dtype);
}
bool ArchSpec::supports(Pipeline pipeline) const {
  return contains(pipelines, pipeline);
}

const TensorCoreInstruction* ArchSpec::instruction_for(Pipeline pipeline, DType dtype) const {
  for (const TensorCoreInstruction& inst : instructions)
    if (contains(inst.pipelines, pipeline) && contains(inst.dtypes, dtype)) return &inst;
  return nullptr;
}

ArchSpec parse_arch_spec(const nlohmann::json& json, const std::string& source) {
  const std::string context = "arch spec '" + source + "'";
  StrictObject in(json, context);
  ArchSpec spec;
  const std::string arch_name = in.required_string("arch");
  const auto arch = try_parse_enum<Arch>(arch_name);
  if (!arch) data_error(context, "unknown arch '" + arch_name + "'");
  spec.arch = *arch;
  spec.description = in.required_string("description");
  spec.limits = parse_limits(in.required("limits"), context);
  spec.registers = parse_register_model(in.required("register_model"), context);
  const nlohmann::json& instructions = in.required_array("tensor_core_instructions");
  for (size_t i = 0; i < instructions.size(); ++i)
    spec.instructions.push_back(parse_instruction(
        instructions[i], context + ": tensor_core_instructions[" + std::to_string(i) + "]"));
  spec.dtypes = parse_enum_array<DType>(in.required("dtypes"), context + ": dtypes");
  for (DType dtype : spec.dtypes)
    if (!is_attention_dtype(dtype))
      data_error(context,
                 "dtypes: '" + std::string(to_string(dtype)) + "' is not an attention dtype");
  spec.pipelines = parse_enum_array<Pipeline>(in.required("pipelines"), context + ": pipelines");
  for (const nlohmann::json& size : in.required_array("page_sizes")) {
    if (!size.is_number_integer() || size.get<int64_t>() < 0 || size.get<int64_t>() > 1 << 16)
      data_error(context, "page_sizes: bad page size " + size.dump());
    spec.page_sizes.push_back(size.get<int32_t>());
  }
  const nlohmann::json& groups = in.required_array("tiles");
  for (size_t g = 0; g < groups.size(); ++g)
    parse_tile_group(groups[g], context + ": tiles[" + std::to_string(g) + "]", spec.tiles);
  in.finish();

  for (const TileEntry& tile : spec.tiles) check_tile(tile, spec, context);
  check_unique_tiles(spec.tiles, context);
  return spec;
}

ArchSpec load_arch_spec(Arch arch) {
  const auto path = data_dir() / "arch" / (std::string(to_string(arch)) + ".json");
  ArchSpec spec = parse_arch_spec(read_json_file(path), path.string());
  if (spec.arch != arch)
    data_error(path.string(), "declares arch '" + std::string(to_string(spec.arch)) + "'");
  return spec;
}

}  // namespace tilefmha::enumerate
