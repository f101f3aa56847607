// What `tilefmha bench` prints and writes: a table row per shape as it finishes, a summary, and
// CSV / JSON files whose rows carry every KernelConfig field (so the kernel can be rebuilt),
// the shape, the timings, the anchors, the card, driver and clocks.
#pragma once

#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>

#include "bench_runner.hpp"

namespace tilefmha::cli {

void print_bench_header(std::ostream& out, const BenchOptions& options, const BenchSweep& sweep,
                        const DeviceFacts& device, const CandidateCounts& candidates);
void print_shape_list(std::ostream& out, const BenchSweep& sweep,
                      const std::vector<BenchShape>& shapes);
void print_table_header(std::ostream& out);
void print_bench_row(std::ostream& out, const BenchRow& row);
void print_bench_summary(std::ostream& out, const std::vector<BenchRow>& rows,
                         double jit_wall_seconds);

// One row as an ordered object: the column names are the CSV header, the values typed (null
// where a value does not apply).
nlohmann::ordered_json bench_row_json(const BenchRow& row, const BenchOptions& options,
                                      const DeviceFacts& device);

// Throws Error(io) naming `flag` and the path when the path's directory does not exist: the
// commands check their output paths before the GPU work, so a typo does not cost a whole sweep.
void check_output_path(const std::string& path, const char* flag);

// Both throw Error(io) naming the path when it cannot be written; the file appears whole
// (written beside it, then renamed).
void write_bench_csv(const std::string& path, const std::vector<nlohmann::ordered_json>& rows);
void write_bench_json(const std::string& path, const BenchOptions& options, const BenchSweep& sweep,
                      const DeviceFacts& device, const std::vector<nlohmann::ordered_json>& rows);

// The driver version as "13.0" from 13000.
std::string driver_version_text(int version);

}  // namespace tilefmha::cli
