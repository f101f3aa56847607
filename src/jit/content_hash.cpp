#include "jit/content_hash.hpp"

namespace tilefmha::jit {
namespace {

constexpr uint64_t fnv64_offset_basis = 0xCBF29CE484222325ull;
constexpr uint64_t fnv64_prime = 0x100000001B3ull;

// FNV-128: offset basis 0x6C62272E07BB014262B821756295C58D, prime 2^88 + 2^8 + 0x3B.
constexpr unsigned __int128 fnv128_offset_basis =
    (static_cast<unsigned __int128>(0x6C62272E07BB0142ull) << 64) | 0x62B821756295C58Dull;
constexpr unsigned __int128 fnv128_prime =
    (static_cast<unsigned __int128>(1) << 88) | (static_cast<unsigned __int128>(1) << 8) | 0x3B;

}  // namespace

uint64_t fnv1a_64(std::string_view bytes) {
  uint64_t state = fnv64_offset_basis;
  for (const char byte : bytes) {
    state ^= static_cast<unsigned char>(byte);
    state *= fnv64_prime;
  }
  return state;
}

ContentHasher::ContentHasher() : state_(fnv128_offset_basis) {}

void ContentHasher::mix(std::string_view bytes) {
  for (const char byte : bytes) {
    state_ ^= static_cast<unsigned char>(byte);
    state_ *= fnv128_prime;
  }
}

ContentHasher& ContentHasher::add(uint64_t value) {
  char little_endian[8];
  for (int i = 0; i < 8; ++i) little_endian[i] = static_cast<char>(value >> (8 * i));
  mix(std::string_view(little_endian, 8));
  return *this;
}

ContentHasher& ContentHasher::add(std::string_view field) {
  add(static_cast<uint64_t>(field.size()));
  mix(field);
  return *this;
}

std::string ContentHasher::hex() const {
  static constexpr char digits[] = "0123456789abcdef";
  std::string text(32, '0');
  for (int i = 0; i < 32; ++i) {
    text[31 - i] = digits[static_cast<unsigned>(state_ >> (4 * i)) & 0xF];
  }
  return text;
}

}  // namespace tilefmha::jit
