// The enumerator checks each rule as soon as its fields are set. This test enumerates the plain
// product of every field's values instead, checks all rules only on complete configs, and
// expects exactly the same set.
#include <gtest/gtest.h>

#include <algorithm>
#include <unordered_set>

#include "enumerate/enumerator.hpp"
#include "enumerate/rules.hpp"

using namespace tilefmha;
using namespace tilefmha::enumerate;

namespace {

// All values of a field on `arch` that `allow` permits; the tile comes from the table below.
std::vector<int64_t> values_of(size_t field, const ArchSpec& arch, const FieldAllowList& allow) {
  const FieldInfo& info = field_infos()[field];
  std::vector<int64_t> values;
  if (info.name == "page_size") {
    values.assign(arch.page_sizes.begin(), arch.page_sizes.end());
  } else if (info.kind == FieldKind::boolean) {
    values = {0, 1};
  } else if (info.kind == FieldKind::enumeration) {
    for (size_t code = 0; code < info.enum_names.size(); ++code) values.push_back(code);
  }
  std::erase_if(values, [&](int64_t v) { return !allow.allows(field, v); });
  return values;
}

class BruteForce {
 public:
  BruteForce(const ArchSpec& arch, const FieldAllowList& allow) : arch_(arch), allow_(allow) {
    // family and dtype first so that tiles of other families or dtypes end at once; every
    // other field after them, in table order.
    fields_ = {field_index("family"), field_index("dtype")};
    for (size_t field = 0; field < kFieldCount; ++field) {
      const std::string_view name = field_infos()[field].name;
      if (name == "family" || name == "dtype" || name == "arch" || name == "pipeline" ||
          name == "hdim_q" || name == "hdim_v" || name == "block_m" || name == "block_n" ||
          name == "block_k" || name == "warps" || name == "stages")
        continue;  // placed above, or fixed by the arch or the tile
      fields_.push_back(field);
    }
    for (size_t field : fields_) domains_.push_back(values_of(field, arch_, allow_));
  }

  std::unordered_set<KernelConfig> run() {
    for (const TileEntry& tile : arch_.tiles) {
      KernelConfig c;
      c.arch = arch_.arch;
      tile.apply_to(c);
      descend(0, c, tile);
    }
    return found_;
  }

 private:
  void descend(size_t depth, KernelConfig& c, const TileEntry& tile) {
    // The tile table offers this tile only to its families and dtype.
    if (depth == 2 &&
        (c.dtype != tile.dtype ||
         std::find(tile.families.begin(), tile.families.end(), c.family) == tile.families.end()))
      return;
    if (depth == fields_.size()) {
      if (allow_.allows(c) && first_violated_rule(c) == nullptr) found_.insert(c);
      return;
    }
    for (int64_t value : domains_[depth]) {
      set_code(c, fields_[depth], value);
      descend(depth + 1, c, tile);
    }
  }

  const ArchSpec& arch_;
  const FieldAllowList& allow_;
  std::vector<size_t> fields_;
  std::vector<std::vector<int64_t>> domains_;
  std::unordered_set<KernelConfig> found_;
};

void restrict(FieldAllowList& allow, std::string_view field, std::vector<int64_t> codes) {
  allow.restrict(field_index(field), codes);
}

void expect_same_as_brute_force(const ArchSpec& arch, const FieldAllowList& allow) {
  EnumerationRequest request;
  for (size_t f = 0; f < enum_count<Family>(); ++f) request.families.push_back(Family(f));
  request.allow = allow;
  const Enumeration fast = enumerate_kernels(arch, request);
  const std::unordered_set<KernelConfig> fast_set(fast.configs.begin(), fast.configs.end());
  EXPECT_EQ(fast_set.size(), fast.configs.size()) << "duplicates";
  const std::unordered_set<KernelConfig> slow = BruteForce(arch, allow).run();
  EXPECT_GT(slow.size(), 0u);
  EXPECT_EQ(fast_set.size(), slow.size());
  for (const KernelConfig& c : slow) EXPECT_TRUE(fast_set.contains(c)) << "missing " << c.name();
  for (const KernelConfig& c : fast_set) EXPECT_TRUE(slow.contains(c)) << "extra " << c.name();
}

}  // namespace

// Every family at one head dim; attention traits open, paging narrowed.
TEST(EnumerateBruteForce, AttentionTraitsMatchOnSm90) {
  const ArchSpec arch = load_arch_spec(Arch::sm90);
  FieldAllowList allow;
  restrict(allow, "hdim_q", {128});
  restrict(allow, "dtype", {int64_t(DType::bf16), int64_t(DType::fp8_e4m3), int64_t(DType::fp32)});
  restrict(allow, "out_dtype", {int64_t(DType::bf16), int64_t(DType::fp32)});
  restrict(allow, "page_table",
           {int64_t(PageTableKind::none), int64_t(PageTableKind::vllm_block_table)});
  restrict(allow, "page_size", {0});
  restrict(allow, "kv_layout", {int64_t(KvLayout::nhd)});
  restrict(allow, "rope", {int64_t(RopeKind::none)});
  restrict(allow, "block_n", {0, 128, 224, 32});
  expect_same_as_brute_force(arch, allow);
}

// Paging, RoPE and fp8 scales open; attention traits narrowed.
TEST(EnumerateBruteForce, PagingTraitsMatchOnSm89) {
  const ArchSpec arch = load_arch_spec(Arch::sm89);
  FieldAllowList allow;
  restrict(allow, "hdim_q", {128});
  restrict(allow, "dtype", {int64_t(DType::fp16), int64_t(DType::fp8_e5m2)});
  restrict(allow, "mask", {int64_t(MaskKind::causal)});
  restrict(allow, "bias", {int64_t(BiasKind::none), int64_t(BiasKind::elementwise)});
  restrict(allow, "softcap", {0});
  restrict(allow, "sink_logit", {1});
  restrict(allow, "mode", {int64_t(Mode::group)});
  expect_same_as_brute_force(arch, allow);
}
