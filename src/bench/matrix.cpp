#include "bench/matrix.hpp"

#include <algorithm>
#include <functional>
#include <numeric>
#include <set>

#include "enumerate/data_dir.hpp"
#include "enumerate/strict_json.hpp"
#include "tilefmha/error.hpp"

namespace tilefmha::bench {
namespace {

using enumerate::data_error;
using enumerate::StrictObject;
using Setter = std::function<void(MatrixShape&)>;

int64_t int_at_least(const nlohmann::json& value, int64_t min_value, const std::string& context) {
  if (!value.is_number_integer() || value.get<int64_t>() < min_value)
    data_error(context,
               "expected an integer >= " + std::to_string(min_value) + ", got " + value.dump());
  return value.get<int64_t>();
}

// An int or an [a, b] pair: "hdim": [128, [192, 128]].
std::pair<int64_t, int64_t> int_or_pair(const nlohmann::json& value, int64_t min_value,
                                        const std::string& context) {
  if (value.is_array()) {
    if (value.size() != 2) data_error(context, "expected n or [a, b], got " + value.dump());
    return {int_at_least(value[0], min_value, context), int_at_least(value[1], min_value, context)};
  }
  const int64_t n = int_at_least(value, min_value, context);
  return {n, n};
}

template <class E>
E enum_value(const nlohmann::json& value, const std::string& context) {
  if (!value.is_string()) data_error(context, "expected a name, got " + value.dump());
  try {
    return parse_enum<E>(value.get<std::string>());
  } catch (const Error& e) {
    data_error(context, e.what());
  }
}

// One axis: a non-empty array whose values each become a setter.
std::vector<Setter> axis(
    StrictObject& group, std::string_view key,
    const std::function<Setter(const nlohmann::json&, const std::string&)>& parse) {
  const nlohmann::json* values = group.optional(key);
  if (!values) return {[](MatrixShape&) {}};
  const std::string context = group.context() + "." + std::string(key);
  if (!values->is_array() || values->empty())
    data_error(context, "expected a non-empty array of values, got " + values->dump());
  std::vector<Setter> out;
  for (const nlohmann::json& value : *values) out.push_back(parse(value, context));
  return out;
}

Setter bool_setter(bool MatrixShape::*member, const nlohmann::json& value,
                   const std::string& context) {
  if (!value.is_boolean()) data_error(context, "expected true or false, got " + value.dump());
  const bool flag = value.get<bool>();
  return [member, flag](MatrixShape& s) { s.*member = flag; };
}

void check_shape(const MatrixShape& s, const std::string& context) {
  auto fail = [&](const std::string& why) { data_error(context, s.label() + ": " + why); };
  if (s.nhead_q % s.nhead_k != 0)
    fail("heads: nhead_q " + std::to_string(s.nhead_q) + " is not a multiple of nhead_k " +
         std::to_string(s.nhead_k));
  if (s.dtype != DType::fp16 && s.dtype != DType::bf16 && s.dtype != DType::fp8_e4m3 &&
      s.dtype != DType::fp8_e5m2)
    fail("dtype " + std::string(to_string(s.dtype)) + " is not an attention input type");
  const bool paged = s.family == Family::fwd_pagedkv || s.family == Family::batch_prefill;
  if (paged != (s.page_table != PageTableKind::none))
    fail("page_table: " + std::string(to_string(s.page_table)) + " for family " +
         std::string(to_string(s.family)) + " (paged families need one, others none)");
  if (paged && s.page_size <= 0) fail("page_size must be positive for a paged cache");
  if (!paged && s.page_size != 0) fail("page_size is only for paged families");
  if (s.num_splits != 1 && s.family != Family::fwd_splitkv)
    fail("num_splits is only for fwd_splitkv");
  if ((s.family == Family::fwd_appendkv) != (s.seqlen_knew > 0))
    fail("seqlen_knew: fwd_appendkv needs new tokens, other families none");
  if (s.family == Family::fwd_splitkv_combine || s.family == Family::bwd_dot_do_o ||
      s.family == Family::bwd_convert_dq)
    fail("family " + std::string(to_string(s.family)) +
         " is a stage of another family, not a problem");
  if (s.dropout && s.family != Family::fwd && s.family != Family::bwd_dq_dk_dv)
    fail("dropout is only for fwd and backward problems");
  if (!s.varlen.empty() &&
      std::none_of(s.varlen.begin(), s.varlen.end(), [](int64_t n) { return n > 0; }))
    fail("varlen: every sequence is empty");
  if (s.varlen.empty() && (s.seqlen_q <= 0 || s.seqlen_k <= 0))
    fail("seqlen must be positive in batch mode");
}

std::vector<MatrixShape> expand_group(const nlohmann::json& json, const std::string& tier,
                                      const std::string& context) {
  if (!json.is_object() || !json.contains("name") || !json["name"].is_string())
    data_error(context, "a group needs a string 'name', got " + json.dump().substr(0, 80));
  const std::string name = json["name"].get<std::string>();
  StrictObject named(json, context + " group '" + name + "'");
  named.required("name");
  std::vector<std::vector<Setter>> axes;
  axes.push_back(axis(named, "family", [](const nlohmann::json& v, const std::string& c) -> Setter {
    const Family f = enum_value<Family>(v, c);
    return [f](MatrixShape& s) { s.family = f; };
  }));
  axes.push_back(axis(named, "dtype", [](const nlohmann::json& v, const std::string& c) -> Setter {
    const DType d = enum_value<DType>(v, c);
    return [d](MatrixShape& s) { s.dtype = d; };
  }));
  axes.push_back(axis(named, "batch", [](const nlohmann::json& v, const std::string& c) -> Setter {
    const int64_t b = int_at_least(v, 1, c);
    return [b](MatrixShape& s) { s.batch = b; };
  }));
  axes.push_back(axis(named, "heads", [](const nlohmann::json& v, const std::string& c) -> Setter {
    const auto [q, k] = int_or_pair(v, 1, c);
    return [q, k](MatrixShape& s) { s.nhead_q = q, s.nhead_k = k; };
  }));
  axes.push_back(axis(named, "hdim", [](const nlohmann::json& v, const std::string& c) -> Setter {
    const auto [q, vd] = int_or_pair(v, 1, c);
    return [q, vd](MatrixShape& s) { s.hdim_q = q, s.hdim_v = vd; };
  }));
  axes.push_back(axis(named, "seqlen", [](const nlohmann::json& v, const std::string& c) -> Setter {
    const auto [q, k] = int_or_pair(v, 1, c);
    return [q, k](MatrixShape& s) { s.seqlen_q = q, s.seqlen_k = k; };
  }));
  axes.push_back(axis(named, "varlen", [](const nlohmann::json& v, const std::string& c) -> Setter {
    if (!v.is_array() || v.empty())
      data_error(c, "expected a non-empty list of sequence lengths, got " + v.dump());
    std::vector<int64_t> lengths;
    for (const nlohmann::json& n : v) lengths.push_back(int_at_least(n, 0, c));
    return [lengths](MatrixShape& s) { s.varlen = lengths; };
  }));
  axes.push_back(
      axis(named, "page_table", [](const nlohmann::json& v, const std::string& c) -> Setter {
        const PageTableKind t = enum_value<PageTableKind>(v, c);
        return [t](MatrixShape& s) { s.page_table = t; };
      }));
  axes.push_back(
      axis(named, "page_size", [](const nlohmann::json& v, const std::string& c) -> Setter {
        const int64_t n = int_at_least(v, 1, c);
        return [n](MatrixShape& s) { s.page_size = n; };
      }));
  axes.push_back(
      axis(named, "num_splits", [](const nlohmann::json& v, const std::string& c) -> Setter {
        const int64_t n = int_at_least(v, 1, c);
        return [n](MatrixShape& s) { s.num_splits = n; };
      }));
  axes.push_back(
      axis(named, "seqlen_knew", [](const nlohmann::json& v, const std::string& c) -> Setter {
        const int64_t n = int_at_least(v, 1, c);
        return [n](MatrixShape& s) { s.seqlen_knew = n; };
      }));
  axes.push_back(axis(named, "mask", [](const nlohmann::json& v, const std::string& c) -> Setter {
    const MaskKind m = enum_value<MaskKind>(v, c);
    return [m](MatrixShape& s) { s.mask = m; };
  }));
  axes.push_back(axis(named, "bias", [](const nlohmann::json& v, const std::string& c) -> Setter {
    const BiasKind b = enum_value<BiasKind>(v, c);
    return [b](MatrixShape& s) { s.bias = b; };
  }));
  for (auto [key, member] :
       {std::pair{"softcap", &MatrixShape::softcap}, std::pair{"dropout", &MatrixShape::dropout},
        std::pair{"lse", &MatrixShape::lse}})
    axes.push_back(axis(named, key, [member](const nlohmann::json& v, const std::string& c) {
      return bool_setter(member, v, c);
    }));
  named.finish();
  if (!json.contains("hdim")) data_error(named.context(), "'hdim' is required");
  if (json.contains("seqlen") == json.contains("varlen"))
    data_error(named.context(), "needs exactly one of 'seqlen' and 'varlen'");

  // Odometer over the axes: the last axis varies fastest.
  std::vector<MatrixShape> shapes;
  std::vector<size_t> index(axes.size(), 0);
  while (true) {
    MatrixShape shape;
    shape.group = name;
    shape.tier = tier;
    for (size_t a = 0; a < axes.size(); ++a) axes[a][index[a]](shape);
    if (!shape.varlen.empty()) {
      shape.batch = static_cast<int64_t>(shape.varlen.size());
      shape.seqlen_q = shape.seqlen_k = *std::max_element(shape.varlen.begin(), shape.varlen.end());
    }
    if (shape.dtype == DType::fp8_e4m3 || shape.dtype == DType::fp8_e5m2)
      shape.out_dtype = DType::bf16;
    else
      shape.out_dtype = shape.dtype;
    check_shape(shape, named.context());
    shapes.push_back(std::move(shape));
    size_t a = axes.size();
    while (a > 0 && ++index[a - 1] == axes[a - 1].size()) index[--a] = 0;
    if (a == 0) break;
  }
  return shapes;
}

void load_into(const std::filesystem::path& path, std::vector<std::string>& open_tiers,
               std::vector<MatrixShape>& out) {
  const std::string tier = path.stem().string();
  if (std::find(open_tiers.begin(), open_tiers.end(), tier) != open_tiers.end())
    data_error("matrix tier '" + tier + "'", "include cycle");
  open_tiers.push_back(tier);
  const nlohmann::json json = read_json_file(path);
  const std::string context = "matrix tier '" + tier + "' (" + path.string() + ")";
  StrictObject root(json, context);
  root.optional_string("description");
  if (const nlohmann::json* includes = root.optional("include")) {
    if (!includes->is_array()) data_error(context, "'include' must be an array of tier names");
    for (const nlohmann::json& include : *includes) {
      if (!include.is_string()) data_error(context, "include " + include.dump() + " is not a name");
      load_into(path.parent_path() / (include.get<std::string>() + ".json"), open_tiers, out);
    }
  }
  const nlohmann::json& groups = root.required_array("groups");
  std::set<std::string> names;
  for (size_t g = 0; g < groups.size(); ++g) {
    std::vector<MatrixShape> shapes =
        expand_group(groups[g], tier, context + ": groups[" + std::to_string(g) + "]");
    if (!names.insert(shapes.front().group).second)
      data_error(context, "group name '" + shapes.front().group + "' is repeated");
    out.insert(out.end(), std::make_move_iterator(shapes.begin()),
               std::make_move_iterator(shapes.end()));
  }
  root.finish();
  open_tiers.pop_back();
}

}  // namespace

std::string MatrixShape::label() const {
  std::string out = std::string(to_string(family)) + " " + std::string(to_string(dtype)) + " b" +
                    std::to_string(batch) + " h" + std::to_string(nhead_q) + "/" +
                    std::to_string(nhead_k) + " d" + std::to_string(hdim_q) + "/" +
                    std::to_string(hdim_v);
  if (varlen.empty()) {
    out += " s" + std::to_string(seqlen_q) + "/" + std::to_string(seqlen_k);
  } else {
    out += " varlen[";
    for (size_t i = 0; i < varlen.size(); ++i) out += (i ? " " : "") + std::to_string(varlen[i]);
    out += "]";
  }
  if (page_table != PageTableKind::none)
    out += " " + std::string(to_string(page_table)) + " page " + std::to_string(page_size);
  if (num_splits > 1) out += " splits " + std::to_string(num_splits);
  if (seqlen_knew > 0) out += " knew " + std::to_string(seqlen_knew);
  if (mask != MaskKind::none) out += " mask=" + std::string(to_string(mask));
  if (bias != BiasKind::none) out += " bias=" + std::string(to_string(bias));
  if (softcap) out += " softcap";
  if (dropout) out += " dropout";
  if (lse) out += " lse";
  return out;
}

Problem MatrixShape::to_problem() const {
  Problem p;
  p.family = family;
  p.dtype = dtype;
  p.out_dtype = out_dtype;
  p.mode = mode();
  p.batch = batch;
  p.nhead_q = nhead_q;
  p.nhead_k = nhead_k;
  p.seqlen_q = seqlen_q;
  p.seqlen_k = seqlen_k;
  p.hdim_q = hdim_q;
  p.hdim_v = hdim_v;
  if (!varlen.empty()) {
    p.batch = 1;  // group mode: one packed sequence dimension
    p.seqstart_q.assign(1, 0);
    for (int64_t n : varlen) p.seqstart_q.push_back(p.seqstart_q.back() + n);
    p.seqstart_k = p.seqstart_q;
  }
  if (mask == MaskKind::causal) p.mask = {MaskKind::causal, MaskAlign::bottom_right, -1, 0, 0};
  if (mask == MaskKind::window) p.mask = {MaskKind::window, MaskAlign::bottom_right, 256, 0, 0};
  p.bias_kind = bias;
  p.softcap = softcap ? 30.0 : 0.0;
  p.dropout.p = dropout ? 0.1 : 0.0;
  p.return_lse = lse;
  if (dtype == DType::fp8_e4m3 || dtype == DType::fp8_e5m2) p.fp8.kind = Fp8ScaleKind::per_tensor;
  if (page_table != PageTableKind::none) {
    p.paged.table = page_table;
    p.paged.page_size = page_size;
    const int64_t sequences = static_cast<int64_t>(varlen.empty() ? batch : varlen.size());
    p.paged.max_pages_per_seq = (seqlen_k + page_size - 1) / page_size;
    p.paged.num_pages = sequences * p.paged.max_pages_per_seq;
    p.seqlen_k_per_batch.assign(static_cast<size_t>(sequences), seqlen_k);
  }
  if (family == Family::fwd_splitkv) p.split.num_splits = num_splits;
  if (family == Family::fwd_appendkv) {
    p.append.seqlen_knew = seqlen_knew;
    p.seqlen_k_per_batch.assign(static_cast<size_t>(batch), seqlen_k);
  }
  return p;
}

std::filesystem::path matrix_tier_path(std::string_view tier) {
  if (std::find(std::begin(kMatrixTiers), std::end(kMatrixTiers), tier) == std::end(kMatrixTiers))
    throw Error(ErrorKind::invalid_argument,
                "matrix tier '" + std::string(tier) + "': expected smoke, full or nightly");
  return data_dir() / "matrix" / (std::string(tier) + ".json");
}

std::vector<MatrixShape> load_matrix_tier(std::string_view tier) {
  return load_matrix_file(matrix_tier_path(tier));
}

std::vector<MatrixShape> load_matrix_file(const std::filesystem::path& path) {
  std::vector<std::string> open_tiers;
  std::vector<MatrixShape> out;
  load_into(path, open_tiers, out);
  return out;
}

}  // namespace tilefmha::bench
