#include "jit/kernel_cache.hpp"

#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <thread>

#include "jit/content_hash.hpp"
#include "jit/cubin_arch.hpp"
#include "jit/embedded_headers.hpp"
#include "jit/nvrtc_api.hpp"
#include "tilefmha/error.hpp"

namespace tilefmha::jit {
namespace {

constexpr char entry_magic[8] = {'T', 'F', 'M', 'H', 'A', 'J', 'I', 'T'};
constexpr uint32_t entry_format_version = 1;
constexpr size_t key_bytes = 32;
constexpr size_t header_bytes = 64;
// Bumped when the key recipe changes, so old entries are simply never found.
constexpr std::string_view key_recipe = "tilefmha-jit-key-v1";

void put_u32(char* out, uint32_t value) {
  for (int i = 0; i < 4; ++i) out[i] = static_cast<char>(value >> (8 * i));
}
void put_u64(char* out, uint64_t value) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(value >> (8 * i));
}
uint32_t get_u32(const char* in) {
  uint32_t value = 0;
  for (int i = 0; i < 4; ++i) value |= uint32_t(static_cast<unsigned char>(in[i])) << (8 * i);
  return value;
}
uint64_t get_u64(const char* in) {
  uint64_t value = 0;
  for (int i = 0; i < 8; ++i) value |= uint64_t(static_cast<unsigned char>(in[i])) << (8 * i);
  return value;
}

// Why `bytes` is not a valid entry for `key`, or empty when it is.
std::string entry_problem(const std::vector<char>& bytes, std::string_view key) {
  if (bytes.size() < header_bytes) {
    return "file has " + std::to_string(bytes.size()) + " bytes, shorter than the " +
           std::to_string(header_bytes) + "-byte header";
  }
  if (std::memcmp(bytes.data(), entry_magic, sizeof(entry_magic)) != 0) return "bad magic";
  if (const uint32_t version = get_u32(bytes.data() + 8); version != entry_format_version) {
    return "format version " + std::to_string(version) + ", expected " +
           std::to_string(entry_format_version);
  }
  if (get_u32(bytes.data() + 12) != header_bytes) return "bad header size";
  if (std::string_view(bytes.data() + 32, key_bytes) != key) return "key mismatch";
  const uint64_t payload_length = get_u64(bytes.data() + 16);
  if (payload_length != bytes.size() - header_bytes) {
    return "header says " + std::to_string(payload_length) + " payload bytes, file holds " +
           std::to_string(bytes.size() - header_bytes);
  }
  const std::string_view payload(bytes.data() + header_bytes, payload_length);
  if (fnv1a_64(payload) != get_u64(bytes.data() + 24)) return "payload checksum mismatch";
  return {};
}

std::string temporary_suffix() {
  const auto now = std::chrono::steady_clock::now().time_since_epoch().count();
  const size_t thread = std::hash<std::thread::id>{}(std::this_thread::get_id());
  return ".tmp." + std::to_string(::getpid()) + "." + std::to_string(thread) + "." +
         std::to_string(now);
}

// What sits at `path` when it is neither missing nor a regular file, for messages.
const char* file_kind(std::filesystem::file_type type) {
  switch (type) {
    case std::filesystem::file_type::directory: return "directory";
    case std::filesystem::file_type::block: return "block device";
    case std::filesystem::file_type::character: return "character device";
    case std::filesystem::file_type::fifo: return "FIFO";
    case std::filesystem::file_type::socket: return "socket";
    default: return "non-regular file";
  }
}

}  // namespace

std::string cache_key(std::string_view name, std::string_view source,
                      const CompileOptions& options) {
  ContentHasher hasher;
  hasher.add(key_recipe).add(nvrtc_version_string()).add(options.arch).add(name).add(source);
  const std::vector<std::string> arguments = nvrtc_arguments(options);
  hasher.add(static_cast<uint64_t>(arguments.size()));
  for (const std::string& argument : arguments) hasher.add(argument);
  hasher.add(embedded_kernel_files_hash());
  return hasher.hex();
}

KernelCache::KernelCache(std::filesystem::path directory) : directory_(std::move(directory)) {
  std::error_code error;
  std::filesystem::create_directories(directory_, error);
  if (error || !std::filesystem::is_directory(directory_)) {
    throw Error(ErrorKind::io, "kernel cache directory '" + directory_.string() +
                                   "' cannot be created (" + error.message() +
                                   "); set TILEFMHA_CACHE_DIR to a writable directory");
  }
}

std::filesystem::path KernelCache::default_directory() {
  if (const char* chosen = std::getenv("TILEFMHA_CACHE_DIR"); chosen != nullptr && *chosen) {
    return chosen;
  }
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && *xdg) {
    return std::filesystem::path(xdg) / "tilefmha";
  }
  if (const char* home = std::getenv("HOME"); home != nullptr && *home) {
    return std::filesystem::path(home) / ".cache" / "tilefmha";
  }
  throw Error(ErrorKind::io,
              "no kernel cache directory: none of TILEFMHA_CACHE_DIR, XDG_CACHE_HOME, HOME is set");
}

std::filesystem::path KernelCache::entry_path(std::string_view key) const {
  return directory_ / (std::string(key) + ".cubin");
}

CacheRead KernelCache::read(std::string_view key) const {
  return read_entry(key, {});
}

CacheRead KernelCache::read(std::string_view key, std::string_view arch) const {
  return read_entry(key, arch);
}

CacheRead KernelCache::read_entry(std::string_view key, std::string_view arch) const {
  CacheRead result;
  const std::filesystem::path path = entry_path(key);
  std::error_code status_error;
  const std::filesystem::file_status status = std::filesystem::status(path, status_error);
  if (!std::filesystem::exists(status)) {
    if (status_error && status.type() != std::filesystem::file_type::not_found) {
      result.problem =
          "cache entry path " + path.string() + " cannot be examined: " + status_error.message();
    }
    return result;
  }
  if (!std::filesystem::is_regular_file(status)) {
    // Not ours to remove (it may be a user's directory); reading it would fail anyway.
    result.problem =
        "cache entry path " + path.string() + " is a " + file_kind(status.type()) + ", not a file";
    return result;
  }
  std::ifstream file(path, std::ios::binary);
  if (!file) return result;
  std::vector<char> bytes((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  file.close();
  result.problem = entry_problem(bytes, key);
  if (!result.problem.empty()) {
    result.lookup = CacheLookup::corrupt;
    result.problem = "corrupt cache entry " + path.string() + ": " + result.problem;
    std::error_code ignored;  // a concurrent reader may have removed it already
    std::filesystem::remove(path, ignored);
    return result;
  }
  const std::span<const char> payload(bytes.data() + header_bytes, bytes.size() - header_bytes);
  if (!arch.empty()) {
    // The checksum only proves the file is what was written; a shared cache directory or a
    // key collision can still hold another GPU's code, which would fail to load or misbehave.
    if (std::string mismatch = cubin_arch_mismatch(payload, arch); !mismatch.empty()) {
      result.lookup = CacheLookup::wrong_arch;
      result.problem = "cache entry " + path.string() + " not served: " + mismatch;
      return result;
    }
  }
  result.lookup = CacheLookup::hit;
  result.cubin.assign(payload.begin(), payload.end());
  return result;
}

void KernelCache::write(std::string_view key, std::span<const char> cubin) const {
  if (key.size() != key_bytes) {
    throw Error(ErrorKind::invalid_argument, "cache key '" + std::string(key) + "' is not " +
                                                 std::to_string(key_bytes) + " hex digits");
  }
  char header[header_bytes] = {};
  std::memcpy(header, entry_magic, sizeof(entry_magic));
  put_u32(header + 8, entry_format_version);
  put_u32(header + 12, header_bytes);
  put_u64(header + 16, cubin.size());
  put_u64(header + 24, fnv1a_64(std::string_view(cubin.data(), cubin.size())));
  std::memcpy(header + 32, key.data(), key_bytes);

  const std::filesystem::path path = entry_path(key);
  std::error_code status_error;
  if (const auto status = std::filesystem::status(path, status_error);
      std::filesystem::exists(status) && !std::filesystem::is_regular_file(status)) {
    // rename() cannot replace it; fail before writing a temporary file for nothing.
    throw Error(ErrorKind::io, "cannot write kernel cache entry '" + path.string() + "': a " +
                                   file_kind(status.type()) + " is in the way");
  }
  std::filesystem::path temporary = path;
  temporary += temporary_suffix();
  {
    std::ofstream file(temporary, std::ios::binary | std::ios::trunc);
    file.write(header, header_bytes);
    file.write(cubin.data(), static_cast<std::streamsize>(cubin.size()));
    file.flush();
    if (!file) {
      std::error_code ignored;
      std::filesystem::remove(temporary, ignored);
      throw Error(ErrorKind::io, "cannot write kernel cache entry '" + temporary.string() + "'");
    }
  }
  std::error_code error;
  std::filesystem::rename(temporary, path, error);
  if (error) {
    std::error_code ignored;
    std::filesystem::remove(temporary, ignored);
    throw Error(ErrorKind::io, "cannot rename '" + temporary.string() + "' to '" + path.string() +
                                   "': " + error.message());
  }
}

}  // namespace tilefmha::jit
