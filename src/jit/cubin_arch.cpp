#include "jit/cubin_arch.hpp"

#include <cstdint>
#include <cstdio>

namespace tilefmha::jit {
namespace {

constexpr size_t elf64_header_bytes = 64;
constexpr unsigned char elf_class_64 = 2;
constexpr unsigned char elf_data_little_endian = 1;
constexpr uint16_t elf_machine_cuda = 190;
constexpr unsigned char cuda_abi_sm_in_low_byte = 7;
constexpr unsigned char cuda_abi_sm_in_second_byte = 8;

unsigned char byte_at(std::span<const char> bytes, size_t offset) {
  return static_cast<unsigned char>(bytes[offset]);
}

uint32_t little_endian(std::span<const char> bytes, size_t offset, size_t width) {
  uint32_t value = 0;
  for (size_t i = 0; i < width; ++i) value |= uint32_t(byte_at(bytes, offset + i)) << (8 * i);
  return value;
}

std::optional<int> fail(std::string* why_not, std::string reason) {
  if (why_not != nullptr) *why_not = std::move(reason);
  return std::nullopt;
}

}  // namespace

std::optional<int> cubin_sm_version(std::span<const char> cubin, std::string* why_not) {
  if (cubin.size() < elf64_header_bytes) {
    return fail(why_not, "cubin has " + std::to_string(cubin.size()) +
                             " bytes, shorter than the 64-byte ELF64 header");
  }
  if (byte_at(cubin, 0) != 0x7f || cubin[1] != 'E' || cubin[2] != 'L' || cubin[3] != 'F') {
    return fail(why_not, "cubin does not start with the ELF magic");
  }
  if (const unsigned char elf_class = byte_at(cubin, 4); elf_class != elf_class_64) {
    return fail(why_not, "cubin ELF class " + std::to_string(elf_class) + ", expected 2 (ELF64)");
  }
  if (const unsigned char data = byte_at(cubin, 5); data != elf_data_little_endian) {
    return fail(why_not,
                "cubin ELF data encoding " + std::to_string(data) + ", expected 1 (little-endian)");
  }
  if (const uint32_t machine = little_endian(cubin, 18, 2); machine != elf_machine_cuda) {
    return fail(why_not,
                "cubin ELF e_machine " + std::to_string(machine) + ", expected 190 (EM_CUDA)");
  }
  const unsigned char abi_version = byte_at(cubin, 8);
  const uint32_t flags = little_endian(cubin, 48, 4);
  int sm = 0;
  if (abi_version == cuda_abi_sm_in_low_byte) {
    sm = static_cast<int>(flags & 0xff);
  } else if (abi_version == cuda_abi_sm_in_second_byte) {
    sm = static_cast<int>((flags >> 8) & 0xff);
  } else {
    return fail(why_not, "cubin ELF ABI version " + std::to_string(abi_version) +
                             " has no known SM encoding (expected 7 or 8)");
  }
  if (sm == 0) {
    char hex[16];
    std::snprintf(hex, sizeof(hex), "0x%08x", static_cast<unsigned>(flags));
    return fail(why_not, "cubin ELF e_flags " + std::string(hex) + " name no SM version");
  }
  return sm;
}

std::optional<int> target_sm_version(std::string_view arch) {
  constexpr std::string_view prefix = "sm_";
  if (arch.substr(0, prefix.size()) != prefix) return std::nullopt;
  std::string_view digits = arch.substr(prefix.size());
  if (!digits.empty() && (digits.back() == 'a' || digits.back() == 'f')) digits.remove_suffix(1);
  if (digits.empty() || digits.size() > 3) return std::nullopt;
  int sm = 0;
  for (const char c : digits) {
    if (c < '0' || c > '9') return std::nullopt;
    sm = 10 * sm + (c - '0');
  }
  return sm;
}

std::string cubin_arch_mismatch(std::span<const char> cubin, std::string_view arch) {
  const std::optional<int> wanted = target_sm_version(arch);
  if (!wanted) return "arch '" + std::string(arch) + "' is not an sm_<digits>[a|f] target";
  std::string why_not;
  const std::optional<int> found = cubin_sm_version(cubin, &why_not);
  if (!found) return why_not;
  if (*found != *wanted) {
    return "cubin is for sm_" + std::to_string(*found) + ", the lookup asked for " +
           std::string(arch);
  }
  return {};
}

}  // namespace tilefmha::jit
