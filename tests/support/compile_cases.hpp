// Test support: compiling generated kernels with NVRTC (no GPU needed) and checking what ptxas
// reports, for the codegen tests.
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "jit/build_pipeline.hpp"
#include "support/ptxas_report.hpp"
#include "tilefmha/kernel_config.hpp"

namespace tilefmha::testing {

struct CompileCase {
  KernelConfig config;
  std::string source;
  // Spill bytes ptxas may report for this kernel: 0 unless a kernel states why it tolerates a
  // few (a spilled index reloaded once per block costs nothing measurable).
  int spill_allowance = 0;
};

// Compiles every case for `arch` (in parallel); reports registers and spills.
inline void expect_compiles(const std::vector<CompileCase>& cases, const std::string& arch) {
  std::vector<jit::BuildJob> jobs;
  for (const CompileCase& c : cases) jobs.push_back({c.config.symbol(), c.source});
  jit::BuildOptions options;
  options.compile = testing::verbose_ptxas_options(arch);
  options.compile.keep_ptx = false;
  options.show_progress = false;
  const jit::BuildReport report = jit::build_kernels(jobs, options, nullptr);
  ASSERT_EQ(report.results.size(), cases.size());
  for (size_t n = 0; n < cases.size(); ++n) {
    const jit::BuildResult& result = report.results[n];
    SCOPED_TRACE(cases[n].config.name() + " for " + arch);
    ASSERT_TRUE(result.ok) << result.error;
    EXPECT_FALSE(result.cubin.empty());
    const testing::PtxasReport ptxas = testing::ptxas_report(result.note);
    if (ptxas.registers >= 0) {
      EXPECT_LE(ptxas.spill_bytes, cases[n].spill_allowance) << result.note;
      std::printf("%-70s %s: %d registers, %d spill bytes\n", cases[n].config.name().c_str(),
                  arch.c_str(), ptxas.registers, ptxas.spill_bytes);
    }
  }
}

}  // namespace tilefmha::testing
