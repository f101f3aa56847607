// Tensors as .npy files: the names of the file contract, conversions between strided views and
// C-order arrays, and the --load directory with its shape checks.
#pragma once

#include <array>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "io/npy.hpp"
#include "tilefmha/tensor.hpp"

namespace tilefmha::cli {

// Every file name `tilefmha run` reads or writes (docs/cli.md). A --save replaces all of them
// in its directory, so files of an earlier, different run cannot leak into a later --load.
// clang-format off
inline constexpr auto kContractFiles = std::to_array<std::string_view>({
    // inputs
    "q.npy", "k.npy", "v.npy", "seqstart_q.npy", "seqstart_k.npy", "seqlen_k.npy", "bias.npy",
    "alibi_slopes.npy", "sink_logits.npy", "block_table.npy", "page_indptr.npy",
    "page_indices.npy", "q_descale.npy", "k_descale.npy", "v_descale.npy", "do.npy",
    "k_new.npy", "v_new.npy", "rope_cos.npy", "rope_sin.npy",
    // outputs
    "o.npy", "lse.npy", "dq.npy", "dk.npy", "dv.npy", "dbias.npy", "k_appended.npy",
    "v_appended.npy", "q_rotated.npy"});
// clang-format on

// A file's expected shape with the meaning of each dimension, for messages.
struct FileShape {
  std::vector<int64_t> sizes;
  std::string meaning;  // e.g. "[batch, seqlen_q, nhead_q, hdim_q]"
};

// The logical elements of `view` in row-major order as an array of `file_dtype` and
// `file_shape` (same element count; e.g. a group-mode view [1, tokens, head, dim] saved as
// [tokens, head, dim]).
io::NpyArray view_to_npy(const TensorView& view, DType file_dtype, std::vector<int64_t> file_shape);
// The elements of `array`, in row-major order, into the logical elements of `view`, rounded to
// the view's dtype. Element counts must agree.
void npy_to_view(const io::NpyArray& array, const TensorView& view);
// Integer arrays (int32 or int64) as int64 values.
std::vector<int64_t> npy_to_integers(const io::NpyArray& array);

// The --load directory. Reads are cached, so a file whose header decided a size (page pool)
// is read once.
class InputDir {
 public:
  explicit InputDir(std::filesystem::path dir);

  const std::filesystem::path& path() const { return dir_; }
  bool has(std::string_view name) const;
  // The file as stored; a missing or corrupt file is an Error(io) naming it.
  const io::NpyArray& read(std::string_view name);
  // A float32 data file whose shape must be `shape` (else Error(invalid_argument) naming the
  // file, the expected and the actual shape).
  const io::NpyArray& read_data(std::string_view name, const FileShape& shape);
  // A 1-D int32/int64 file.
  std::vector<int64_t> read_integers(std::string_view name);

  std::string describe(std::string_view name) const;

 private:
  std::filesystem::path dir_;
  std::map<std::string, io::NpyArray, std::less<>> cache_;
};

}  // namespace tilefmha::cli
