// Hashes for the kernel cache: a 128-bit FNV-1a over length-prefixed fields for cache keys
// (collisions would silently serve the wrong cubin, so the key gets the wide variant) and a
// 64-bit FNV-1a for entry checksums (detecting torn or flipped bytes).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace tilefmha::jit {

uint64_t fnv1a_64(std::string_view bytes);

class ContentHasher {
 public:
  ContentHasher();
  // Each field is preceded by its length, so ("ab", "c") and ("a", "bc") hash differently.
  ContentHasher& add(std::string_view field);
  ContentHasher& add(uint64_t value);
  // 32 lowercase hex digits.
  std::string hex() const;

 private:
  void mix(std::string_view bytes);
  unsigned __int128 state_;
};

}  // namespace tilefmha::jit
