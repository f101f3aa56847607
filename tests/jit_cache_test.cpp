// The on-disk cubin cache: keys, hits, atomic writes, corruption detection and rebuild, entries
// for another arch, and paths that cannot hold an entry.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "jit/cached_compiler.hpp"
#include "jit/content_hash.hpp"
#include "jit/cubin_arch.hpp"
#include "jit/kernel_cache.hpp"
#include "support/scratch_dirs.hpp"
#include "tilefmha/error.hpp"

namespace tilefmha::jit {
namespace {

namespace fs = std::filesystem;
using testing::TemporaryDirectory;

constexpr const char* axpy_kernel = R"(
#include "tile/fast_math.h"
extern "C" __global__ void axpy(float* y, const float* x, float a) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  y[i] = tilefmha::tile::exp2_approx(a * x[i]) + y[i];
}
)";

CompileOptions sm80() {
  CompileOptions options;
  options.arch = "sm_80";
  return options;
}

std::vector<char> read_bytes(const fs::path& path) {
  std::ifstream file(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>()};
}

void write_bytes(const fs::path& path, const std::vector<char>& bytes) {
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  file.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

TEST(JitHash, Fnv1a64KnownAnswers) {
  EXPECT_EQ(fnv1a_64(""), 0xcbf29ce484222325ull);
  EXPECT_EQ(fnv1a_64("a"), 0xaf63dc4c8601ec8cull);
  EXPECT_EQ(fnv1a_64("foobar"), 0x85944171f73967e8ull);
}

TEST(JitHash, Fnv1a128OverLengthPrefixedFields) {
  // Expected values from an independent FNV-1a-128 over the little-endian 8-byte length
  // followed by the bytes of each field.
  EXPECT_EQ(ContentHasher().hex(), "6c62272e07bb014262b821756295c58d");
  EXPECT_EQ(ContentHasher().add("a").hex(), "426d56754e03ad9adb79f299c730f21f");
  EXPECT_EQ(ContentHasher().add("abc").add(uint64_t{7}).hex(), "0833c281dc9d088de7e376a80a0242dd");
  EXPECT_NE(ContentHasher().add("ab").add("c").hex(), ContentHasher().add("a").add("bc").hex());
}

TEST(JitCacheKey, DependsOnEveryInput) {
  const std::string base = cache_key("axpy", axpy_kernel, sm80());
  EXPECT_EQ(base.size(), 32u);
  EXPECT_EQ(base.find_first_not_of("0123456789abcdef"), std::string::npos);
  EXPECT_EQ(cache_key("axpy", axpy_kernel, sm80()), base);

  EXPECT_NE(cache_key("axpy", std::string(axpy_kernel) + " ", sm80()), base);
  EXPECT_NE(cache_key("axpy2", axpy_kernel, sm80()), base);
  CompileOptions other_arch = sm80();
  other_arch.arch = "sm_90a";
  EXPECT_NE(cache_key("axpy", axpy_kernel, other_arch), base);
  CompileOptions line_info = sm80();
  line_info.line_info = true;
  EXPECT_NE(cache_key("axpy", axpy_kernel, line_info), base);
  CompileOptions defined = sm80();
  defined.defines = {"X=1"};
  EXPECT_NE(cache_key("axpy", axpy_kernel, defined), base);
}

TEST(JitCache, MissThenHitServesIdenticalBytesFaster) {
  const TemporaryDirectory directory("tilefmha_jit_cache_test_");
  const KernelCache cache(directory.path());
  const CachedKernel first = compile_cached("axpy", axpy_kernel, sm80(), &cache);
  EXPECT_EQ(first.outcome, CacheOutcome::miss);
  EXPECT_TRUE(fs::exists(cache.entry_path(cache_key("axpy", axpy_kernel, sm80()))));

  const CachedKernel second = compile_cached("axpy", axpy_kernel, sm80(), &cache);
  EXPECT_EQ(second.outcome, CacheOutcome::hit);
  EXPECT_EQ(second.cubin, first.cubin);
  EXPECT_LT(second.seconds, first.seconds);
  EXPECT_TRUE(second.note.empty());
}

TEST(JitCache, WithoutCacheAlwaysCompiles) {
  const CachedKernel compiled = compile_cached("axpy", axpy_kernel, sm80(), nullptr);
  EXPECT_EQ(compiled.outcome, CacheOutcome::uncached);
  EXPECT_FALSE(compiled.cubin.empty());
}

class CorruptEntry : public ::testing::Test {
 protected:
  void SetUp() override {
    cache_ = std::make_unique<KernelCache>(directory_.path());
    original_ = compile_cached("axpy", axpy_kernel, sm80(), cache_.get()).cubin;
    entry_ = cache_->entry_path(cache_key("axpy", axpy_kernel, sm80()));
    ASSERT_TRUE(fs::exists(entry_));
  }

  // After damage: the next compile notices, says why, rebuilds the identical cubin, and the
  // entry after that is healthy again.
  void expect_detected_and_rebuilt(const std::string& expected_problem) {
    const CachedKernel rebuilt = compile_cached("axpy", axpy_kernel, sm80(), cache_.get());
    EXPECT_EQ(rebuilt.outcome, CacheOutcome::rebuilt);
    EXPECT_NE(rebuilt.note.find("corrupt cache entry"), std::string::npos) << rebuilt.note;
    EXPECT_NE(rebuilt.note.find(expected_problem), std::string::npos) << rebuilt.note;
    EXPECT_EQ(rebuilt.cubin, original_);
    EXPECT_EQ(compile_cached("axpy", axpy_kernel, sm80(), cache_.get()).outcome, CacheOutcome::hit);
  }

  const TemporaryDirectory directory_{"tilefmha_jit_cache_test_"};
  std::unique_ptr<KernelCache> cache_;
  std::vector<char> original_;
  fs::path entry_;
};

TEST_F(CorruptEntry, TruncatedPayload) {
  std::vector<char> bytes = read_bytes(entry_);
  bytes.resize(bytes.size() / 2);
  write_bytes(entry_, bytes);
  expect_detected_and_rebuilt("payload bytes");
}

TEST_F(CorruptEntry, TruncatedInsideHeader) {
  std::vector<char> bytes = read_bytes(entry_);
  bytes.resize(10);
  write_bytes(entry_, bytes);
  expect_detected_and_rebuilt("shorter than the 64-byte header");
}

TEST_F(CorruptEntry, FlippedPayloadByte) {
  std::vector<char> bytes = read_bytes(entry_);
  bytes[bytes.size() - 7] ^= 0x20;
  write_bytes(entry_, bytes);
  expect_detected_and_rebuilt("checksum");
}

TEST_F(CorruptEntry, FlippedMagic) {
  std::vector<char> bytes = read_bytes(entry_);
  bytes[0] ^= 0x01;
  write_bytes(entry_, bytes);
  expect_detected_and_rebuilt("bad magic");
}

TEST_F(CorruptEntry, EntryUnderAnotherKeysName) {
  const std::string other_key = cache_key("axpy", std::string(axpy_kernel) + "\n", sm80());
  fs::copy_file(entry_, cache_->entry_path(other_key));
  const CacheRead read = cache_->read(other_key);
  EXPECT_EQ(read.lookup, CacheLookup::corrupt);
  EXPECT_NE(read.problem.find("key mismatch"), std::string::npos) << read.problem;
}

TEST_F(CorruptEntry, ReadReportsAndRemovesIt) {
  std::vector<char> bytes = read_bytes(entry_);
  bytes.back() ^= 0x55;
  write_bytes(entry_, bytes);
  const CacheRead read = cache_->read(cache_key("axpy", axpy_kernel, sm80()));
  EXPECT_EQ(read.lookup, CacheLookup::corrupt);
  EXPECT_NE(read.problem.find(entry_.string()), std::string::npos) << read.problem;
  EXPECT_TRUE(read.cubin.empty());
  EXPECT_FALSE(fs::exists(entry_));
  EXPECT_EQ(cache_->read(cache_key("axpy", axpy_kernel, sm80())).lookup, CacheLookup::miss);
}

TEST(JitCache, ConcurrentWritersNeverExposeAPartialEntry) {
  const TemporaryDirectory directory("tilefmha_jit_cache_test_");
  const KernelCache cache(directory.path());
  const std::string key(32, 'c');
  // Large enough that a non-atomic write would be observed half-written.
  std::vector<char> payload(1 << 20);
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<char>(i * 131);

  std::atomic<bool> writing{true};
  std::atomic<int> corrupt_reads{0}, hits{0};
  std::vector<std::thread> writers;
  for (int w = 0; w < 2; ++w) {
    writers.emplace_back([&] {
      for (int i = 0; i < 15; ++i) cache.write(key, payload);
    });
  }
  std::thread reader([&] {
    while (writing) {
      const CacheRead read = cache.read(key);
      if (read.lookup == CacheLookup::corrupt) ++corrupt_reads;
      if (read.lookup == CacheLookup::hit) {
        ++hits;
        if (read.cubin != payload) ++corrupt_reads;
      }
    }
  });
  for (auto& writer : writers) writer.join();
  writing = false;
  reader.join();
  EXPECT_EQ(corrupt_reads, 0);
  EXPECT_EQ(cache.read(key).lookup, CacheLookup::hit);
  // Only the entry remains: every temporary file was renamed away.
  int files = 0;
  for (const auto& entry : fs::directory_iterator(directory.path())) {
    ++files;
    EXPECT_EQ(entry.path().extension(), ".cubin") << entry.path();
  }
  EXPECT_EQ(files, 1);
}

CompileOptions sm90a() {
  CompileOptions options;
  options.arch = "sm_90a";
  return options;
}

// An intact entry (valid checksum, right key) whose cubin is for sm_80 sits under the sm_90a
// key, as after a key collision or a hand-copied file: it is not served, it is reported, and
// the fresh compile replaces it.
TEST(JitCache, EntryForAnotherArchIsAMissThenOverwritten) {
  const TemporaryDirectory directory("tilefmha_jit_cache_test_");
  const KernelCache cache(directory.path());
  const std::vector<char> sm80_cubin = compile_cached("axpy", axpy_kernel, sm80(), nullptr).cubin;
  const std::string key = cache_key("axpy", axpy_kernel, sm90a());
  cache.write(key, sm80_cubin);

  const CacheRead read = cache.read(key, "sm_90a");
  EXPECT_EQ(read.lookup, CacheLookup::wrong_arch);
  EXPECT_TRUE(read.cubin.empty());
  EXPECT_NE(read.problem.find("sm_80"), std::string::npos) << read.problem;
  EXPECT_NE(read.problem.find("sm_90a"), std::string::npos) << read.problem;
  EXPECT_NE(read.problem.find(cache.entry_path(key).string()), std::string::npos) << read.problem;
  EXPECT_EQ(cache.read(key).lookup, CacheLookup::hit);  // intact: only the arch is wrong
  EXPECT_EQ(cache.read(key, "sm_80").lookup, CacheLookup::hit);

  const CachedKernel rebuilt = compile_cached("axpy", axpy_kernel, sm90a(), &cache);
  EXPECT_EQ(rebuilt.outcome, CacheOutcome::rebuilt);
  EXPECT_NE(rebuilt.note.find("not served"), std::string::npos) << rebuilt.note;
  EXPECT_EQ(cubin_sm_version(rebuilt.cubin), 90);
  EXPECT_TRUE(rebuilt.store_error.empty()) << rebuilt.store_error;

  const CachedKernel hit = compile_cached("axpy", axpy_kernel, sm90a(), &cache);
  EXPECT_EQ(hit.outcome, CacheOutcome::hit);
  EXPECT_EQ(hit.cubin, rebuilt.cubin);
}

TEST(JitCache, IntactEntryThatIsNotACubinIsNotServed) {
  const TemporaryDirectory directory("tilefmha_jit_cache_test_");
  const KernelCache cache(directory.path());
  const std::string key = cache_key("axpy", axpy_kernel, sm80());
  std::vector<char> garbage(300);
  for (size_t i = 0; i < garbage.size(); ++i) garbage[i] = static_cast<char>(i * 7);
  cache.write(key, garbage);
  const CacheRead read = cache.read(key, "sm_80");
  EXPECT_EQ(read.lookup, CacheLookup::wrong_arch);
  EXPECT_NE(read.problem.find("ELF"), std::string::npos) << read.problem;

  cache.write(key, std::vector<char>{'\x7f', 'E', 'L', 'F'});  // truncated
  EXPECT_EQ(cache.read(key, "sm_80").lookup, CacheLookup::wrong_arch);

  const CachedKernel rebuilt = compile_cached("axpy", axpy_kernel, sm80(), &cache);
  EXPECT_EQ(rebuilt.outcome, CacheOutcome::rebuilt);
  EXPECT_EQ(cubin_sm_version(rebuilt.cubin), 80);
  EXPECT_EQ(compile_cached("axpy", axpy_kernel, sm80(), &cache).outcome, CacheOutcome::hit);
}

// A directory where the entry belongs: a miss that leaves the directory alone, and a compile
// that still returns its cubin, with the skipped store reported instead of thrown.
TEST(JitCache, DirectoryAtTheEntryPathIsAMissAndTheStoreIsSkipped) {
  const TemporaryDirectory directory("tilefmha_jit_cache_test_");
  const KernelCache cache(directory.path());
  const std::string key = cache_key("axpy", axpy_kernel, sm80());
  const fs::path entry = cache.entry_path(key);
  for (const bool empty : {true, false}) {
    fs::create_directory(entry);
    if (!empty) write_bytes(entry / "inside", {'x'});

    const CacheRead read = cache.read(key, "sm_80");
    EXPECT_EQ(read.lookup, CacheLookup::miss);
    EXPECT_NE(read.problem.find("is a directory"), std::string::npos) << read.problem;
    EXPECT_EQ(cache.read(key).lookup, CacheLookup::miss);
    try {
      cache.write(key, std::vector<char>{'c'});
      ADD_FAILURE() << "wrote an entry over a directory";
    } catch (const Error& error) {
      EXPECT_EQ(error.kind(), ErrorKind::io);
      EXPECT_NE(std::string(error.what()).find(entry.string()), std::string::npos) << error.what();
    }

    CachedKernel compiled;
    ASSERT_NO_THROW(compiled = compile_cached("axpy", axpy_kernel, sm80(), &cache));
    EXPECT_EQ(compiled.outcome, CacheOutcome::miss);
    EXPECT_EQ(cubin_sm_version(compiled.cubin), 80);
    EXPECT_NE(compiled.store_error.find("directory"), std::string::npos) << compiled.store_error;
    EXPECT_NE(compiled.note.find("not stored in the kernel cache"), std::string::npos)
        << compiled.note;
    EXPECT_TRUE(fs::is_directory(entry));
    // Nothing else was left behind: no temporary file.
    int files = 0;
    for (const auto& item : fs::directory_iterator(directory.path())) {
      ++files;
      EXPECT_EQ(item.path(), entry);
    }
    EXPECT_EQ(files, 1);
    fs::remove_all(entry);
  }
  // With the directory gone the cache works again.
  EXPECT_EQ(compile_cached("axpy", axpy_kernel, sm80(), &cache).outcome, CacheOutcome::miss);
  EXPECT_EQ(compile_cached("axpy", axpy_kernel, sm80(), &cache).outcome, CacheOutcome::hit);
}

class EnvironmentVariable {
 public:
  explicit EnvironmentVariable(const char* name) : name_(name) {
    if (const char* value = std::getenv(name)) saved_ = value;
  }
  ~EnvironmentVariable() {
    if (saved_) {
      ::setenv(name_, saved_->c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }
  void set(const char* value) { ::setenv(name_, value, 1); }
  void unset() { ::unsetenv(name_); }

 private:
  const char* name_;
  std::optional<std::string> saved_;
};

TEST(JitCache, DefaultDirectoryFollowsTheEnvironment) {
  EnvironmentVariable chosen("TILEFMHA_CACHE_DIR"), xdg("XDG_CACHE_HOME"), home("HOME");
  chosen.set("/tmp/chosen_cache");
  xdg.set("/tmp/xdg");
  home.set("/tmp/home");
  EXPECT_EQ(KernelCache::default_directory(), fs::path("/tmp/chosen_cache"));
  chosen.set("");
  EXPECT_EQ(KernelCache::default_directory(), fs::path("/tmp/xdg/tilefmha"));
  xdg.unset();
  EXPECT_EQ(KernelCache::default_directory(), fs::path("/tmp/home/.cache/tilefmha"));
  home.unset();
  EXPECT_THROW(KernelCache::default_directory(), Error);
}

TEST(JitCache, UncreatableDirectoryIsAnIoErrorNamingIt) {
  const TemporaryDirectory directory("tilefmha_jit_cache_test_");
  const fs::path blocker = directory.path() / "a_file";
  write_bytes(blocker, {'x'});
  try {
    KernelCache cache(blocker / "cache");
    FAIL() << "a cache under a regular file was created";
  } catch (const Error& error) {
    EXPECT_EQ(error.kind(), ErrorKind::io);
    EXPECT_NE(std::string(error.what()).find((blocker / "cache").string()), std::string::npos);
  }
}

}  // namespace
}  // namespace tilefmha::jit
