// Reading a cubin's SM version from its ELF header, on real NVRTC output for several targets
// and on buffers that are not cubins.
#include "jit/cubin_arch.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "jit/compiler.hpp"

namespace tilefmha::jit {
namespace {

constexpr const char* tiny_kernel = R"(
extern "C" __global__ void tiny(float* y) { y[threadIdx.x] = 2.0f * y[threadIdx.x]; }
)";

std::vector<char> compile_for(const std::string& arch) {
  CompileOptions options;
  options.arch = arch;
  return compile_kernel("tiny", tiny_kernel, options).cubin;
}

uint32_t e_flags(const std::vector<char>& cubin) {
  uint32_t flags = 0;
  for (int i = 0; i < 4; ++i)
    flags |= uint32_t(static_cast<unsigned char>(cubin[48 + i])) << (8 * i);
  return flags;
}

void set_e_flags(std::vector<char>& cubin, uint32_t flags) {
  for (int i = 0; i < 4; ++i) cubin[48 + i] = static_cast<char>(flags >> (8 * i));
}

TEST(CubinArch, TargetNamesGiveTheirSmVersion) {
  EXPECT_EQ(target_sm_version("sm_80"), 80);
  EXPECT_EQ(target_sm_version("sm_86"), 86);
  EXPECT_EQ(target_sm_version("sm_90a"), 90);
  EXPECT_EQ(target_sm_version("sm_100f"), 100);
  EXPECT_EQ(target_sm_version("sm_120"), 120);
  for (const char* bad : {"", "sm_", "sm90", "compute_90", "sm_9x", "sm_90b", "sm_1000"})
    EXPECT_EQ(target_sm_version(bad), std::nullopt) << bad;
}

// The layout, measured on NVRTC 13.0: ABI version 8, SM version in bits 8..15 of e_flags, and
// no bit that tells sm_90a from sm_90.
TEST(CubinArch, NvrtcCubinsCarryTheirSmVersion) {
  const std::vector<char> sm80 = compile_for("sm_80");
  const std::vector<char> sm90 = compile_for("sm_90");
  const std::vector<char> sm90a = compile_for("sm_90a");
  std::string why;
  EXPECT_EQ(cubin_sm_version(sm80, &why), 80) << why;
  EXPECT_EQ(cubin_sm_version(sm90a, &why), 90) << why;
  EXPECT_EQ(cubin_sm_version(sm90, &why), 90) << why;
  EXPECT_EQ(cubin_sm_version(compile_for("sm_86")), 86);
  EXPECT_EQ(cubin_sm_version(compile_for("sm_89")), 89);
  if (static_cast<unsigned char>(sm80[8]) == 8) {
    EXPECT_EQ((e_flags(sm80) >> 8) & 0xff, 80u);
    EXPECT_EQ(e_flags(sm90a), e_flags(sm90)) << "e_flags now tell sm_90a from sm_90";
  }
}

TEST(CubinArch, MismatchNamesBothArchs) {
  const std::vector<char> sm80 = compile_for("sm_80");
  const std::vector<char> sm90a = compile_for("sm_90a");
  EXPECT_EQ(cubin_arch_mismatch(sm80, "sm_80"), "");
  EXPECT_EQ(cubin_arch_mismatch(sm90a, "sm_90a"), "");
  const std::string wrong = cubin_arch_mismatch(sm80, "sm_90a");
  EXPECT_NE(wrong.find("sm_80"), std::string::npos) << wrong;
  EXPECT_NE(wrong.find("sm_90a"), std::string::npos) << wrong;
  EXPECT_NE(cubin_arch_mismatch(sm90a, "sm_80"), "");
  EXPECT_NE(cubin_arch_mismatch(sm90a, "sm_86"), "");
  EXPECT_NE(cubin_arch_mismatch(sm80, "compute_80").find("'compute_80'"), std::string::npos);
}

TEST(CubinArch, TruncatedOrGarbageBuffersHaveNoArch) {
  const std::vector<char> cubin = compile_for("sm_80");
  std::string why;
  EXPECT_EQ(cubin_sm_version(std::span<const char>(cubin.data(), 63), &why), std::nullopt);
  EXPECT_NE(why.find("63 bytes"), std::string::npos) << why;
  EXPECT_EQ(cubin_sm_version({}, &why), std::nullopt);

  std::vector<char> garbage(4096);
  for (size_t i = 0; i < garbage.size(); ++i) garbage[i] = static_cast<char>(i * 37 + 11);
  EXPECT_EQ(cubin_sm_version(garbage, &why), std::nullopt);
  EXPECT_NE(why.find("ELF magic"), std::string::npos) << why;
  EXPECT_NE(cubin_arch_mismatch(garbage, "sm_80"), "");

  std::vector<char> host_elf = cubin;  // an x86-64 object, say
  host_elf[18] = 62;
  host_elf[19] = 0;
  EXPECT_EQ(cubin_sm_version(host_elf, &why), std::nullopt);
  EXPECT_NE(why.find("e_machine 62"), std::string::npos) << why;

  std::vector<char> elf32 = cubin;
  elf32[4] = 1;
  EXPECT_EQ(cubin_sm_version(elf32, &why), std::nullopt);
  EXPECT_NE(why.find("class 1"), std::string::npos) << why;

  std::vector<char> future_abi = cubin;
  future_abi[8] = 9;
  EXPECT_EQ(cubin_sm_version(future_abi, &why), std::nullopt);
  EXPECT_NE(why.find("ABI version 9"), std::string::npos) << why;

  std::vector<char> no_sm = cubin;
  set_e_flags(no_sm, 0x06000004);
  no_sm[8] = 8;
  EXPECT_EQ(cubin_sm_version(no_sm, &why), std::nullopt);
  EXPECT_NE(why.find("0x06000004"), std::string::npos) << why;
}

// CUDA 12 cubins (ABI version 7) keep the SM version in the low byte of e_flags and the
// virtual arch in bits 16..23; no CUDA 12 toolkit is installed here, so the header is forged.
TEST(CubinArch, AbiSevenKeepsTheSmInTheLowByte) {
  std::vector<char> cubin = compile_for("sm_80");
  cubin[8] = 7;
  set_e_flags(cubin, 0x00500550);
  EXPECT_EQ(cubin_sm_version(cubin), 80);
  set_e_flags(cubin, 0x005a0d5a);
  EXPECT_EQ(cubin_sm_version(cubin), 90);
  EXPECT_EQ(cubin_arch_mismatch(cubin, "sm_90a"), "");
}

}  // namespace
}  // namespace tilefmha::jit
