// On-disk cubin cache. One file per entry, named by the cache key, each with a header that
// lets a reader reject torn, truncated or bit-flipped files instead of loading them:
//   offset  0  8 bytes  magic "TFMHAJIT"
//           8  u32      format version (1)
//          12  u32      header size (64)
//          16  u64      payload length in bytes
//          24  u64      FNV-1a-64 checksum of the payload
//          32  32 bytes the cache key (hex), guarding against a file under the wrong name
//          64  payload  the cubin
// (integers little-endian). Writers write a unique temporary file and rename it over the
// entry, so readers in other threads or processes see the old file or the new one, never a
// mix; a crash leaves at most a stray temporary file.
//
// An intact entry is served only when its cubin's ELF header names the SM version the lookup
// asked for (cubin_arch.hpp). Anything but a regular file at an entry's path (a directory, a
// socket) is a miss that is left alone; writing there fails with Error(io), which
// compile_cached turns into a skipped store.
#pragma once

#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "jit/compiler.hpp"

namespace tilefmha::jit {

// Hash of everything that determines the cubin: the kernel name and source, the NVRTC
// arguments (which carry the arch), the NVRTC version and every embedded kernel header.
std::string cache_key(std::string_view name, std::string_view source,
                      const CompileOptions& options);

enum class CacheLookup {
  hit,
  miss,        // no entry, or something other than a regular file at its path (see problem)
  corrupt,     // the file failed the integrity checks and was removed
  wrong_arch,  // intact, but the cubin is not for the arch asked for or its ELF header is
               // unreadable; left in place for the fresh compile to overwrite
};

struct CacheRead {
  CacheLookup lookup = CacheLookup::miss;
  std::vector<char> cubin;  // filled on a hit
  // Why a corrupt or wrong-arch entry was not served, or why its path cannot hold an entry;
  // empty on a hit and a plain miss.
  std::string problem;
};

class KernelCache {
 public:
  // Creates `directory` when missing; throws Error(io) naming it when that fails.
  explicit KernelCache(std::filesystem::path directory);

  // $TILEFMHA_CACHE_DIR when set and non-empty, else $XDG_CACHE_HOME/tilefmha, else
  // $HOME/.cache/tilefmha; throws Error(io) when none of the variables is set.
  static std::filesystem::path default_directory();

  const std::filesystem::path& directory() const { return directory_; }
  std::filesystem::path entry_path(std::string_view key) const;

  // Integrity checks only: serves any intact entry, whatever its cubin's arch.
  CacheRead read(std::string_view key) const;
  // Also checks that the cubin was built for NVRTC target `arch` ("sm_90a"): an intact entry
  // for another SM version is CacheLookup::wrong_arch.
  CacheRead read(std::string_view key, std::string_view arch) const;
  // Throws Error(io) naming the path when the entry cannot be written, e.g. when a directory
  // sits at its path.
  void write(std::string_view key, std::span<const char> cubin) const;

 private:
  CacheRead read_entry(std::string_view key, std::string_view arch) const;
  std::filesystem::path directory_;
};

}  // namespace tilefmha::jit
