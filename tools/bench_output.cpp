#include "bench_output.hpp"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "kernel_fields_json.hpp"
#include "tilefmha/error.hpp"

namespace tilefmha::cli {
namespace {

std::string printf_text(const char* pattern, auto... values) {
  char text[512];
  std::snprintf(text, sizeof text, pattern, values...);
  return text;
}

std::string ratio_text(double ours, double anchor) {
  return printf_text("%.2f", ours / anchor);
}

// Integers stay integers in the JSON and CSV (no "1980.0").
template <class Number>
nlohmann::ordered_json optional_number(bool present, Number value) {
  return present ? nlohmann::ordered_json(value) : nlohmann::ordered_json(nullptr);
}

std::string csv_cell(const nlohmann::ordered_json& value) {
  if (value.is_null()) return "";
  const std::string text = value.is_string() ? value.get<std::string>() : value.dump();
  if (text.find_first_of(",\"\n\r") == std::string::npos) return text;
  std::string quoted = "\"";
  for (char c : text) {
    if (c == '"') quoted += '"';
    quoted += c;
  }
  return quoted + '"';
}

// Writes beside the target and renames, so readers never see half a file.
void write_whole_file(const std::string& path, const std::string& text) {
  const std::string partial = path + ".partial";
  {
    std::ofstream file(partial, std::ios::binary);
    if (!file) throw Error(ErrorKind::io, "cannot write '" + path + "'");
    file << text;
    if (!file) throw Error(ErrorKind::io, "cannot write '" + path + "'");
  }
  std::error_code error;
  std::filesystem::rename(partial, path, error);
  if (error) throw Error(ErrorKind::io, "cannot write '" + path + "': " + error.message());
}

bool timed(const BenchRow& row) {
  return row.status == "ok";
}

}  // namespace

std::string driver_version_text(int version) {
  return std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10);
}

void print_bench_header(std::ostream& out, const BenchOptions& options, const BenchSweep& sweep,
                        const DeviceFacts& device, const CandidateCounts& candidates) {
  out << "bench: " << sweep.source << " (" << sweep.total_tokens << " tokens, hidden "
      << sweep.hidden << ")\n";
  out << "device: " << device.card << ", " << to_string(device.arch) << ", " << device.sm_count
      << " SMs, CUDA driver " << driver_version_text(device.driver_version);
  if (device.sm_clock_mhz > 0)
    out << ", peak clocks " << device.sm_clock_mhz << " MHz SM / " << device.memory_clock_mhz
        << " MHz memory";
  out << '\n';
  out << "candidates: " << candidates.enumerated << " fwd kernels (profile " << options.profile
      << "), " << candidates.implemented << " implemented by codegen\n";
  out << "timing: CUDA events, " << options.timing.warmup << " warm-ups, median of "
      << options.timing.repeat << ", L2 flush " << (options.timing.l2_flush ? "on" : "off")
      << "; FLOPs 4*b*h*s*s*d, halved for causal\n";
  if (!sweep.anchors.empty())
    out << "anchors (" << to_string(sweep.anchor_dtype) << "): " << sweep.anchor_card << ", "
        << sweep.anchor_source << '\n';
}

void print_shape_list(std::ostream& out, const BenchSweep& sweep,
                      const std::vector<BenchShape>& shapes) {
  out << printf_text("%5s %7s %6s %6s %5s %8s %10s %8s %8s\n", "hdim", "seqlen", "causal", "batch",
                     "heads", "dtype", "GFLOP", "FA2", "cuDNN");
  for (const BenchShape& shape : shapes) {
    const auto anchor = sweep.anchor(shape.hdim, shape.seqlen, shape.causal, shape.dtype);
    out << printf_text("%5lld %7lld %6s %6lld %5lld %8s %10.1f %8s %8s\n",
                       static_cast<long long>(shape.hdim), static_cast<long long>(shape.seqlen),
                       shape.causal ? "yes" : "no", static_cast<long long>(shape.batch),
                       static_cast<long long>(shape.nhead), to_string(shape.dtype).data(),
                       shape.flops() / 1e9,
                       anchor ? printf_text("%.0f", anchor->fa2_tflops).c_str() : "-",
                       anchor ? printf_text("%.0f", anchor->cudnn_tflops).c_str() : "-");
  }
  out << shapes.size() << " shapes\n";
}

void print_table_header(std::ostream& out) {
  out << printf_text("%5s %7s %6s %6s %5s %10s %10s %8s %6s %6s %6s %6s  %s\n", "hdim", "seqlen",
                     "causal", "batch", "heads", "median ms", "min ms", "TFLOP/s", "cuDNN", "x",
                     "FA2", "x", "verify");
}

void print_bench_row(std::ostream& out, const BenchRow& row) {
  const BenchShape& shape = row.shape;
  out << printf_text("%5lld %7lld %6s %6lld %5lld ", static_cast<long long>(shape.hdim),
                     static_cast<long long>(shape.seqlen), shape.causal ? "yes" : "no",
                     static_cast<long long>(shape.batch), static_cast<long long>(shape.nhead));
  if (!timed(row)) {
    const std::string label = row.status == "no_kernel" ? "no kernel: " : "error: ";
    std::string indented;
    for (char c : row.message) indented += c == '\n' ? std::string("\n      ") : std::string(1, c);
    out << label << indented << '\n';
    return;
  }
  const auto& a = row.anchor;
  out << printf_text("%10.3f %10.3f %8.1f %6s %6s %6s %6s  %s\n", row.gpu_ms.median, row.gpu_ms.min,
                     row.tflops, a ? printf_text("%.0f", a->cudnn_tflops).c_str() : "-",
                     a ? ratio_text(row.tflops, a->cudnn_tflops).c_str() : "-",
                     a ? printf_text("%.0f", a->fa2_tflops).c_str() : "-",
                     a ? ratio_text(row.tflops, a->fa2_tflops).c_str() : "-",
                     row.verify.status.c_str());
  out << "      kernel " << row.kernel->name();
  if (row.build)
    out << printf_text(" (JIT %.2f s, %s)", row.build->seconds, row.build->cache.c_str());
  out << printf_text("; plan %.1f us cached, run %.1f us host", row.plan_cached_us, row.run_host_us)
      << '\n';
  if (row.verify.status != "skipped")
    out << printf_text("      verify %s: %s, max abs error %.3g, %lld of %lld outside tolerance\n",
                       row.verify.status.c_str(), row.verify.scope.c_str(),
                       row.verify.max_abs_error, static_cast<long long>(row.verify.mismatches),
                       static_cast<long long>(row.verify.compared));
}

void print_bench_summary(std::ostream& out, const std::vector<BenchRow>& rows,
                         double jit_wall_seconds) {
  int64_t ok = 0, no_kernel = 0, errors = 0, passed = 0, failed = 0;
  std::vector<double> plan_us, run_us;
  double log_cudnn = 0, log_fa2 = 0;
  int64_t anchored = 0;
  std::vector<std::string> kernels_seen;
  double compile_sum = 0, hit_sum = 0;
  int64_t compiles = 0, hits = 0;
  for (const BenchRow& row : rows) {
    if (row.status == "no_kernel") ++no_kernel;
    if (row.status == "error") ++errors;
    passed += row.verify.status == "passed";
    failed += row.verify.status == "failed";
    if (!timed(row)) continue;
    ++ok;
    plan_us.push_back(row.plan_cached_us);
    run_us.push_back(row.run_host_us);
    if (row.anchor) {
      ++anchored;
      log_cudnn += std::log(row.tflops / row.anchor->cudnn_tflops);
      log_fa2 += std::log(row.tflops / row.anchor->fa2_tflops);
    }
    const std::string name = row.kernel->name();
    if (!row.build ||
        std::find(kernels_seen.begin(), kernels_seen.end(), name) != kernels_seen.end())
      continue;
    kernels_seen.push_back(name);
    if (row.build->cache == "hit") {
      hit_sum += row.build->seconds;
      ++hits;
    } else {
      compile_sum += row.build->seconds;
      ++compiles;
    }
  }
  out << "summary: " << rows.size() << " shapes: " << ok << " timed, " << no_kernel
      << " without a kernel, " << errors << " errors";
  if (passed + failed > 0) out << "; verify " << passed << " passed, " << failed << " failed";
  out << '\n';
  out << printf_text("  JIT: %lld kernels in %.2f s wall; ",
                     static_cast<long long>(compiles + hits), jit_wall_seconds);
  out << (compiles > 0 ? printf_text("%.2f s per compiled kernel (mean of %lld)",
                                     compile_sum / compiles, static_cast<long long>(compiles))
                       : std::string("nothing compiled"));
  if (hits > 0)
    out << printf_text(", %.1f ms per cache hit (mean of %lld)", 1e3 * hit_sum / hits,
                       static_cast<long long>(hits));
  out << '\n';
  if (ok > 0) {
    out << printf_text(
        "  host cost: Dispatcher::plan (cached) %.2f us, Dispatcher::run %.2f us "
        "(medians over shapes)\n",
        runtime::summarize(plan_us).median, runtime::summarize(run_us).median);
  }
  if (anchored > 0)
    out << printf_text("  geometric mean over %lld anchored shapes: %.2fx cuDNN, %.2fx FA2\n",
                       static_cast<long long>(anchored), std::exp(log_cudnn / anchored),
                       std::exp(log_fa2 / anchored));
}

nlohmann::ordered_json bench_row_json(const BenchRow& row, const BenchOptions& options,
                                      const DeviceFacts& device) {
  using json = nlohmann::ordered_json;
  const BenchShape& shape = row.shape;
  const bool ok = timed(row);
  json out;
  out["card"] = device.card;
  out["device_arch"] = std::string(to_string(device.arch));
  out["sm_count"] = device.sm_count;
  out["driver_version"] = driver_version_text(device.driver_version);
  out["sm_clock_mhz"] = optional_number(device.sm_clock_mhz > 0, device.sm_clock_mhz);
  out["memory_clock_mhz"] = optional_number(device.memory_clock_mhz > 0, device.memory_clock_mhz);
  out["problem_family"] = "fwd";
  out["problem_dtype"] = std::string(to_string(shape.dtype));
  out["problem_batch"] = shape.batch;
  out["problem_nhead_q"] = shape.nhead;
  out["problem_nhead_k"] = shape.nhead;
  out["problem_seqlen_q"] = shape.seqlen;
  out["problem_seqlen_k"] = shape.seqlen;
  out["problem_hdim_q"] = shape.hdim;
  out["problem_hdim_v"] = shape.hdim;
  out["problem_causal"] = shape.causal;
  out["problem_lse"] = options.lse;
  out["status"] = row.status;
  out["message"] = row.message;
  out["kernel_name"] = row.kernel ? json(row.kernel->name()) : json(nullptr);
  // Every identity field by the single field table, so a row rebuilds its KernelConfig.
  put_kernel_fields(out, row.kernel ? &*row.kernel : nullptr);
  out["jit_seconds"] = row.build ? json(row.build->seconds) : json(nullptr);
  out["jit_cache"] = row.build ? json(row.build->cache) : json(nullptr);
  out["warmup"] = options.timing.warmup;
  out["repeat"] = options.timing.repeat;
  out["l2_flush"] = options.timing.l2_flush;
  out["median_ms"] = optional_number(ok, row.gpu_ms.median);
  out["min_ms"] = optional_number(ok, row.gpu_ms.min);
  out["max_ms"] = optional_number(ok, row.gpu_ms.max);
  out["mean_ms"] = optional_number(ok, row.gpu_ms.mean);
  out["gflop"] = shape.flops() / 1e9;
  out["tflops"] = optional_number(ok, row.tflops);
  out["plan_cached_us"] = optional_number(ok, row.plan_cached_us);
  out["run_host_us"] = optional_number(ok, row.run_host_us);
  const bool anchored = row.anchor.has_value();
  out["anchor_cudnn_tflops"] = optional_number(anchored, anchored ? row.anchor->cudnn_tflops : 0.0);
  out["anchor_fa2_tflops"] = optional_number(anchored, anchored ? row.anchor->fa2_tflops : 0.0);
  out["ratio_cudnn"] =
      optional_number(ok && anchored, anchored ? row.tflops / row.anchor->cudnn_tflops : 0.0);
  out["ratio_fa2"] =
      optional_number(ok && anchored, anchored ? row.tflops / row.anchor->fa2_tflops : 0.0);
  const bool verified = row.verify.status != "skipped";
  out["verify"] = row.verify.status;
  out["verify_scope"] = row.verify.scope;
  out["verify_max_abs_error"] = optional_number(verified, row.verify.max_abs_error);
  out["verify_mismatches"] = optional_number(verified, row.verify.mismatches);
  out["verify_compared"] = optional_number(verified, row.verify.compared);
  return out;
}

void check_output_path(const std::string& path, const char* flag) {
  if (path.empty()) return;
  const std::filesystem::path parent = std::filesystem::absolute(path).parent_path();
  if (!std::filesystem::is_directory(parent))
    throw Error(ErrorKind::io, std::string(flag) + " '" + path + "': directory '" +
                                   parent.string() + "' does not exist");
}

void write_bench_csv(const std::string& path, const std::vector<nlohmann::ordered_json>& rows) {
  std::ostringstream text;
  if (!rows.empty()) {
    bool first = true;
    for (const auto& item : rows.front().items()) {
      text << (first ? "" : ",") << csv_cell(item.key());
      first = false;
    }
    text << '\n';
  }
  for (const auto& row : rows) {
    bool first = true;
    for (const auto& item : row.items()) {
      text << (first ? "" : ",") << csv_cell(item.value());
      first = false;
    }
    text << '\n';
  }
  write_whole_file(path, text.str());
}

void write_bench_json(const std::string& path, const BenchOptions& options, const BenchSweep& sweep,
                      const DeviceFacts& device, const std::vector<nlohmann::ordered_json>& rows) {
  nlohmann::ordered_json document;
  document["tool"] = "tilefmha bench";
  document["sweep"] = sweep.source;
  document["device"] = {{"card", device.card},
                        {"arch", std::string(to_string(device.arch))},
                        {"sm_count", device.sm_count},
                        {"driver_version", driver_version_text(device.driver_version)},
                        {"sm_clock_mhz", device.sm_clock_mhz},
                        {"memory_clock_mhz", device.memory_clock_mhz}};
  document["timing"] = {{"method", "CUDA events"},
                        {"warmup", options.timing.warmup},
                        {"repeat", options.timing.repeat},
                        {"l2_flush", options.timing.l2_flush}};
  document["anchors"] = {{"card", sweep.anchor_card}, {"source", sweep.anchor_source}};
  document["rows"] = rows;
  write_whole_file(path, document.dump(1) + "\n");
}

}  // namespace tilefmha::cli
