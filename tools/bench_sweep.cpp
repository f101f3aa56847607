#include "bench_sweep.hpp"

#include <algorithm>
#include <set>

#include "enumerate/data_dir.hpp"
#include "enumerate/strict_json.hpp"
#include "tilefmha/error.hpp"

namespace tilefmha::cli {
namespace {

using enumerate::data_error;
using enumerate::StrictObject;

int64_t positive_int(const nlohmann::json& value, const std::string& context) {
  if (!value.is_number_integer() || value.get<int64_t>() <= 0)
    data_error(context, "expected a positive integer, got " + value.dump());
  return value.get<int64_t>();
}

std::vector<int64_t> positive_ints(const nlohmann::json& array, const std::string& context) {
  if (!array.is_array() || array.empty())
    data_error(context, "expected a non-empty array of positive integers, got " + array.dump());
  std::vector<int64_t> out;
  for (const nlohmann::json& item : array) out.push_back(positive_int(item, context));
  return out;
}

DType parse_dtype(const nlohmann::json& value, const std::string& context) {
  if (!value.is_string()) data_error(context, "expected a dtype name, got " + value.dump());
  try {
    return parse_enum<DType>(value.get<std::string>());
  } catch (const Error& e) {
    data_error(context, e.what());
  }
}

double positive_number(const nlohmann::json& value, const std::string& context) {
  if (!value.is_number() || value.get<double>() <= 0)
    data_error(context, "expected a positive number, got " + value.dump());
  return value.get<double>();
}

void parse_anchors(const nlohmann::json& json, const std::string& context, BenchSweep& sweep) {
  StrictObject anchors(json, context);
  sweep.anchor_source = anchors.required_string("source");
  sweep.anchor_card = anchors.required_string("card");
  sweep.anchor_dtype = parse_dtype(anchors.required("dtype"), context + ".dtype");
  if (const std::string unit = anchors.required_string("unit"); unit != "TFLOP/s")
    data_error(context, "unit '" + unit + "': only TFLOP/s anchors are supported");
  // The column order is data too, but every column must be there exactly once.
  const std::vector<std::string> expected{"hdim", "seqlen", "causal", "fa2", "cudnn"};
  std::vector<std::string> columns;
  for (const nlohmann::json& column : anchors.required_array("columns")) {
    if (!column.is_string()) data_error(context, "columns must be names, got " + column.dump());
    columns.push_back(column.get<std::string>());
  }
  auto index_of = [&](const std::string& name) {
    const auto it = std::find(columns.begin(), columns.end(), name);
    if (it == columns.end()) data_error(context, "columns lack '" + name + "'");
    return static_cast<size_t>(it - columns.begin());
  };
  for (const std::string& column : columns)
    if (std::count(expected.begin(), expected.end(), column) != 1 ||
        std::count(columns.begin(), columns.end(), column) != 1)
      data_error(context, "column '" + column + "' is unknown or repeated");
  const size_t hdim = index_of("hdim"), seqlen = index_of("seqlen"), causal = index_of("causal"),
               fa2 = index_of("fa2"), cudnn = index_of("cudnn");
  const nlohmann::json& rows = anchors.required_array("rows");
  std::set<std::tuple<int64_t, int64_t, bool>> seen;
  for (size_t r = 0; r < rows.size(); ++r) {
    const std::string row_context = context + ".rows[" + std::to_string(r) + "]";
    const nlohmann::json& row = rows[r];
    if (!row.is_array() || row.size() != columns.size())
      data_error(row_context,
                 "expected " + std::to_string(columns.size()) + " values, got " + row.dump());
    AnchorRow anchor;
    anchor.hdim = positive_int(row[hdim], row_context + ".hdim");
    anchor.seqlen = positive_int(row[seqlen], row_context + ".seqlen");
    if (!row[causal].is_boolean())
      data_error(row_context, "causal must be true or false, got " + row[causal].dump());
    anchor.causal = row[causal].get<bool>();
    anchor.fa2_tflops = positive_number(row[fa2], row_context + ".fa2");
    anchor.cudnn_tflops = positive_number(row[cudnn], row_context + ".cudnn");
    if (!seen.emplace(anchor.hdim, anchor.seqlen, anchor.causal).second)
      data_error(row_context, "repeats the shape of an earlier row");
    sweep.anchors.push_back(anchor);
  }
  anchors.finish();
}

// The dtypes the bench's candidates (the `fwd` sweep config) hold kernels for. `run` plans
// over every forward kernel, e5m2 included, so the refusal points there.
void check_bench_dtype(DType dtype) {
  if (dtype == DType::bf16 || dtype == DType::fp16 || dtype == DType::fp8_e4m3) return;
  std::string message =
      "--dtype " + std::string(to_string(dtype)) + ": the benchmark runs bf16, fp16 or fp8_e4m3";
  if (dtype == DType::fp8_e5m2)
    message +=
        " (its candidates, sweep config fwd, hold no fp8_e5m2 kernel; `tilefmha run "
        "--dtype fp8_e5m2 --backend gpu` runs one shape)";
  throw Error(ErrorKind::invalid_argument, message);
}

}  // namespace

std::optional<AnchorRow> BenchSweep::anchor(int64_t hdim, int64_t seqlen, bool is_causal,
                                            DType shape_dtype) const {
  if (shape_dtype != anchor_dtype) return std::nullopt;
  for (const AnchorRow& row : anchors)
    if (row.hdim == hdim && row.seqlen == seqlen && row.causal == is_causal) return row;
  return std::nullopt;
}

BenchSweep load_bench_sweep(const std::filesystem::path& path) {
  const nlohmann::json json = read_json_file(path);
  const std::string context = "bench sweep '" + path.string() + "'";
  StrictObject root(json, context);
  BenchSweep sweep;
  sweep.source = path.string();
  sweep.description = root.optional_string("description");
  {
    StrictObject protocol(root.required("protocol"), context + ": protocol");
    sweep.total_tokens = protocol.required_int("total_tokens", 1);
    sweep.hidden = protocol.required_int("hidden", 1);
    protocol.finish();
  }
  sweep.dtype = parse_dtype(root.required("dtype"), context + ": dtype");
  sweep.hdims = positive_ints(root.required("hdim"), context + ": hdim");
  sweep.seqlens = positive_ints(root.required("seqlen"), context + ": seqlen");
  const nlohmann::json& causal = root.required_array("causal");
  for (const nlohmann::json& value : causal) {
    if (!value.is_boolean())
      data_error(context + ": causal", "expected true or false, got " + value.dump());
    sweep.causal.push_back(value.get<bool>());
  }
  if (sweep.causal.empty()) data_error(context + ": causal", "must not be empty");
  if (const nlohmann::json* anchors = root.optional("anchors"))
    parse_anchors(*anchors, context + ": anchors", sweep);
  root.finish();
  return sweep;
}

double BenchShape::flops() const {
  const double full = 4.0 * static_cast<double>(batch) * static_cast<double>(nhead) *
                      static_cast<double>(seqlen) * static_cast<double>(seqlen) *
                      static_cast<double>(hdim);
  return causal ? full / 2 : full;
}

std::string BenchShape::label() const {
  return "hdim " + std::to_string(hdim) + " seqlen " + std::to_string(seqlen) +
         (causal ? " causal" : " non-causal") + " b" + std::to_string(batch) + " h" +
         std::to_string(nhead) + " " + std::string(to_string(dtype));
}

std::vector<BenchShape> expand_shapes(const BenchSweep& sweep, const ShapeSelection& selection) {
  const std::vector<int64_t>& hdims = selection.hdims.empty() ? sweep.hdims : selection.hdims;
  const std::vector<int64_t>& seqlens =
      selection.seqlens.empty() ? sweep.seqlens : selection.seqlens;
  std::vector<bool> causal;
  if (selection.causal == "sweep")
    causal = sweep.causal;
  else if (selection.causal == "both")
    causal = {false, true};
  else if (selection.causal == "yes")
    causal = {true};
  else if (selection.causal == "no")
    causal = {false};
  else
    throw Error(ErrorKind::invalid_argument,
                "--causal '" + selection.causal + "': expected both, yes or no");
  std::sort(causal.begin(), causal.end());
  causal.erase(std::unique(causal.begin(), causal.end()), causal.end());
  const DType dtype = selection.dtype.value_or(sweep.dtype);
  check_bench_dtype(dtype);

  std::vector<BenchShape> shapes;
  for (int64_t hdim : hdims) {
    if (hdim <= 0 || sweep.hidden % hdim != 0)
      throw Error(ErrorKind::invalid_argument, "hdim " + std::to_string(hdim) +
                                                   " does not divide the protocol's hidden size " +
                                                   std::to_string(sweep.hidden));
    for (int64_t seqlen : seqlens) {
      if (seqlen <= 0)
        throw Error(ErrorKind::invalid_argument,
                    "seqlen " + std::to_string(seqlen) + " must be positive");
      for (bool is_causal : causal) {
        BenchShape shape;
        shape.hdim = hdim;
        shape.nhead = sweep.hidden / hdim;
        shape.seqlen = seqlen;
        // Lengths above the token budget still run one sequence.
        shape.batch = std::max<int64_t>(1, sweep.total_tokens / seqlen);
        shape.causal = is_causal;
        shape.dtype = dtype;
        shapes.push_back(shape);
      }
    }
  }
  return shapes;
}

}  // namespace tilefmha::cli
