// The SM version a cubin was built for, read from its ELF header, so that a cache entry built
// for another GPU is never served (a shared cache directory, a key collision, a copied file).
//
// A cubin is an ELF64 little-endian file with e_machine EM_CUDA (190). Where its SM version
// sits in e_flags depends on the header's ABI version (e_ident[EI_ABIVERSION], byte 8):
//   ABI 8 (NVRTC/ptxas 13): bits 8..15, e.g. e_flags 0x06005004 for sm_80, 0x06005a04 for sm_90
//                           and sm_90a alike (measured: tests/cubin_arch_test.cpp);
//   ABI 7 (CUDA 12 and older): bits 0..7, with the virtual arch in bits 16..23.
// Neither layout as NVRTC 13.0 writes it tells sm_90 from sm_90a (nor sm_100 from sm_100f), so
// the check compares SM numbers only; the suffix stays guarded by the cache key, which hashes
// the arch and every NVRTC argument.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace tilefmha::jit {

// The cubin's SM version (80, 90, 100, ...), or nullopt when `cubin` is not a CUDA ELF64 cubin
// with a known header layout; then `why_not`, when given, says what was wrong.
std::optional<int> cubin_sm_version(std::span<const char> cubin, std::string* why_not = nullptr);

// The SM version of an NVRTC target name: "sm_80" -> 80, "sm_90a" -> 90, "sm_100f" -> 100;
// nullopt when `arch` is not spelled sm_<digits>[a|f].
std::optional<int> target_sm_version(std::string_view arch);

// Why `cubin` cannot serve a lookup for target `arch`, or empty when it can: its header is
// unreadable, `arch` is not an sm_ target, or the SM versions differ.
std::string cubin_arch_mismatch(std::span<const char> cubin, std::string_view arch);

}  // namespace tilefmha::jit
