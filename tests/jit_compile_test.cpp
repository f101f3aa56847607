// NVRTC compilation: arguments, arch names, embedded includes, warnings and compile errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "jit/compiler.hpp"
#include "jit/target_arch.hpp"
#include "tilefmha/error.hpp"

namespace tilefmha::jit {
namespace {

constexpr const char* scale_kernel = R"(
extern "C" __global__ void scale(float* data, float factor) {
  data[threadIdx.x] *= factor;
}
)";

bool contains(const std::vector<std::string>& list, const std::string& item) {
  return std::find(list.begin(), list.end(), item) != list.end();
}

// TILEFMHA_KERNEL_DEFINES: entries split at commas and white space, each NAME or NAME=VALUE;
// anything else names itself in the error instead of reaching NVRTC as a stray argument.
TEST(JitCompile, KernelDefinesFromTheEnvironmentAreNamesOrAssignments) {
  EXPECT_TRUE(parse_kernel_defines("").empty());
  EXPECT_TRUE(parse_kernel_defines(" , ").empty());
  const std::vector<std::string> expected = {"TILEFMHA_RESCALE_ALWAYS", "BLOCK=128", "_x1="};
  EXPECT_EQ(parse_kernel_defines("TILEFMHA_RESCALE_ALWAYS, BLOCK=128\t_x1="), expected);
  for (const char* bad : {"1ABC", "=1", "A-B", "A,-DB", "A B.C=1"}) {
    try {
      parse_kernel_defines(bad);
      ADD_FAILURE() << "accepted " << bad;
    } catch (const Error& error) {
      EXPECT_EQ(error.kind(), ErrorKind::invalid_argument) << bad;
      EXPECT_NE(std::string(error.what()).find("TILEFMHA_KERNEL_DEFINES"), std::string::npos);
    }
  }
}

TEST(JitCompile, ArgumentsCarryArchStandardAndDeviceDefault) {
  CompileOptions options;
  options.arch = "sm_80";
  const auto arguments = nvrtc_arguments(options);
  EXPECT_TRUE(contains(arguments, "--gpu-architecture=sm_80"));
  EXPECT_TRUE(contains(arguments, "-std=c++20"));
  EXPECT_TRUE(contains(arguments, "-default-device"));
  EXPECT_FALSE(contains(arguments, "--use_fast_math"));
  EXPECT_FALSE(contains(arguments, "-lineinfo"));

  options.line_info = true;
  options.fast_math = true;
  options.defines = {"TILE_M=64"};
  const auto more = nvrtc_arguments(options);
  EXPECT_TRUE(contains(more, "-lineinfo"));
  EXPECT_TRUE(contains(more, "--use_fast_math"));
  EXPECT_TRUE(contains(more, "-DTILE_M=64"));
}

// The profilers' switch: exactly "1" asks for -lineinfo. (setenv is not thread-safe; this test
// runs alone in its process's main thread.)
TEST(JitCompile, LineInfoIsRequestedByTheEnvironment) {
  const char* saved = std::getenv("TILEFMHA_LINEINFO");
  const std::string restore = saved != nullptr ? saved : "";
  setenv("TILEFMHA_LINEINFO", "1", 1);
  EXPECT_TRUE(line_info_requested());
  setenv("TILEFMHA_LINEINFO", "0", 1);
  EXPECT_FALSE(line_info_requested());
  unsetenv("TILEFMHA_LINEINFO");
  EXPECT_FALSE(line_info_requested());
  if (saved != nullptr) setenv("TILEFMHA_LINEINFO", restore.c_str(), 1);
}

TEST(JitCompile, ArchNamesAreValidated) {
  EXPECT_EQ(validate_target_arch("sm_90a"), "sm_90a");
  EXPECT_EQ(validate_target_arch("sm_86"), "sm_86");
  for (const char* bad : {"sm90", "sm_", "sm_9x", "compute_90", "sm_90b", ""}) {
    try {
      validate_target_arch(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const Error& error) {
      EXPECT_EQ(error.kind(), ErrorKind::invalid_argument);
      EXPECT_NE(std::string(error.what()).find("'" + std::string(bad) + "'"), std::string::npos);
    }
  }
  EXPECT_EQ(nvrtc_target(Arch::sm80), "sm_80");
  EXPECT_EQ(nvrtc_target(Arch::sm86), "sm_86");
  EXPECT_EQ(nvrtc_target(Arch::sm89), "sm_89");
  EXPECT_EQ(nvrtc_target(Arch::sm90), "sm_90a");
}

TEST(JitCompile, ProducesCudaElfCubin) {
  CompileOptions options;
  options.arch = "sm_80";
  const CompiledKernel compiled = compile_kernel("scale", scale_kernel, options);
  ASSERT_GT(compiled.cubin.size(), 64u);
  EXPECT_EQ(std::string(compiled.cubin.data(), 4),
            "\x7f"
            "ELF");
  // e_machine (offset 18, little-endian) is EM_CUDA = 190 for a cubin.
  const int machine = static_cast<unsigned char>(compiled.cubin[18]) |
                      (static_cast<unsigned char>(compiled.cubin[19]) << 8);
  EXPECT_EQ(machine, 190);
  EXPECT_TRUE(compiled.ptx.empty());
}

TEST(JitCompile, EmbeddedHeadersResolveOutsideTile) {
  const std::string source = R"(
#include "common/philox.h"
extern "C" __global__ void words(unsigned* out) {
  out[threadIdx.x] = tilefmha::philox::dropout_word(1234, 0, 0, 0, 1, 0, threadIdx.x);
}
)";
  CompileOptions options;
  options.arch = "sm_90a";
  EXPECT_FALSE(compile_kernel("philox_words", source, options).cubin.empty());
}

TEST(JitCompile, SyntaxErrorReportsKernelNameAndDiagnostic) {
  const std::string source = R"(
extern "C" __global__ void broken(float* data) {
  data[threadIdx.x] = undeclared_value_q7 * 2.0f
}
)";
  CompileOptions options;
  options.arch = "sm_80";
  try {
    compile_kernel("fwd_broken_kernel_for_test", source, options);
    FAIL() << "a syntax error compiled";
  } catch (const Error& error) {
    EXPECT_EQ(error.kind(), ErrorKind::compile);
    const std::string message = error.what();
    EXPECT_NE(message.find("fwd_broken_kernel_for_test"), std::string::npos) << message;
    EXPECT_NE(message.find("sm_80"), std::string::npos) << message;
    EXPECT_NE(message.find("undeclared_value_q7"), std::string::npos) << message;
    EXPECT_NE(message.find("error"), std::string::npos) << message;
    EXPECT_NE(message.find("expected a \";\""), std::string::npos) << message;
  }
}

TEST(JitCompile, MissingHeaderIsACompileError) {
  const std::string source = "#include \"tile/no_such_header.h\"\n";
  try {
    compile_kernel("needs_missing_header", source, CompileOptions{});
    FAIL() << "a missing include compiled";
  } catch (const Error& error) {
    EXPECT_EQ(error.kind(), ErrorKind::compile);
    EXPECT_NE(std::string(error.what()).find("tile/no_such_header.h"), std::string::npos);
  }
}

TEST(JitCompile, WarningsOfASuccessfulCompileAreKept) {
  const std::string source = R"(
extern "C" __global__ void unused(float* data) {
  int never_read_variable_z3;
  data[0] = 1.0f;
}
)";
  CompileOptions options;
  options.arch = "sm_80";
  const CompiledKernel compiled = compile_kernel("unused_variable", source, options);
  EXPECT_FALSE(compiled.cubin.empty());
  EXPECT_NE(compiled.log.find("never_read_variable_z3"), std::string::npos) << compiled.log;
}

TEST(JitCompile, DefinesReachTheSource) {
  const std::string source = R"(
#ifndef REQUIRED_FLAG
#error REQUIRED_FLAG missing
#endif
extern "C" __global__ void flagged(int* out) { out[0] = REQUIRED_FLAG; }
)";
  CompileOptions options;
  options.arch = "sm_80";
  EXPECT_THROW(compile_kernel("flagged", source, options), Error);
  options.defines = {"REQUIRED_FLAG=7"};
  EXPECT_FALSE(compile_kernel("flagged", source, options).cubin.empty());
}

// NVRTC is loaded once per process, so the missing-library case runs in a fresh child process
// (threadsafe death tests re-execute the binary) with the library pointed at nothing.
TEST(JitCompile, MissingNvrtcIsAClearRuntimeError) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        ::setenv("TILEFMHA_NVRTC_LIBRARY", "/nonexistent/libnvrtc.so.13", 1);
        try {
          compile_kernel("scale", scale_kernel, CompileOptions{});
        } catch (const Error& error) {
          std::fprintf(stderr, "kind=%d %s\n", static_cast<int>(error.kind()), error.what());
          std::exit(error.kind() == ErrorKind::runtime ? 0 : 2);
        }
        std::exit(3);
      },
      ::testing::ExitedWithCode(0),
      "NVRTC not found: JIT compilation unavailable.*/nonexistent/libnvrtc.so.13");
}

}  // namespace
}  // namespace tilefmha::jit
