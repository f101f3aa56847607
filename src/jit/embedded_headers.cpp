#include "jit/embedded_headers.hpp"

#include <algorithm>
#include <string>

#include "jit/content_hash.hpp"

namespace tilefmha::jit {

const EmbeddedFile* find_embedded_kernel_file(std::string_view path) {
  const auto files = embedded_kernel_files();
  const auto found = std::lower_bound(
      files.begin(), files.end(), path,
      [](const EmbeddedFile& file, std::string_view wanted) { return file.path < wanted; });
  return found != files.end() && found->path == path ? &*found : nullptr;
}

const std::string& embedded_kernel_files_hash() {
  static const std::string hash = [] {
    ContentHasher hasher;
    for (const EmbeddedFile& file : embedded_kernel_files())
      hasher.add(file.path).add(file.contents);
    return hasher.hex();
  }();
  return hash;
}

}  // namespace tilefmha::jit
