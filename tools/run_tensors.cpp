#include "run_tensors.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "core/numeric.hpp"
#include "core/tensor_iteration.hpp"
#include "run_size.hpp"
#include "tilefmha/error.hpp"

namespace tilefmha::cli {
namespace {

// Each random input draws from its own stream, so adding a tensor never shifts another's data.
enum class RandomStream : uint32_t {
  q = 1,
  k,
  v,
  bias,
  d_o,
  q_descale,
  k_descale,
  v_descale,
  k_new,
  v_new,
  k_page_descale,
  v_page_descale
};

// Where the rows of a token-major view live: [batch, seq] in batch mode, [1, total] in group
// mode (the files then drop the leading 1).
struct TokenRows {
  int64_t batch;
  int64_t seq;
};

// Names of a token-major tensor's dimensions, for messages about its file.
struct TokenNames {
  std::string_view seq, total, heads, dim;
};
constexpr TokenNames kQueryNames{"seqlen_q", "total_q", "nhead_q", "hdim_q"};
constexpr TokenNames kOutputNames{"seqlen_q", "total_q", "nhead_q", "hdim_v"};
constexpr TokenNames kKeyNames{"seqlen_k", "total_k", "nhead_k", "hdim_q"};
constexpr TokenNames kValueNames{"seqlen_k", "total_k", "nhead_k", "hdim_v"};

TokenRows query_rows(const Problem& p) {
  return p.mode == Mode::group ? TokenRows{1, p.total_q()} : TokenRows{p.batch, p.seqlen_q};
}

TokenRows key_rows(const Problem& p) {
  return p.mode == Mode::group ? TokenRows{1, total_keys(p)} : TokenRows{p.batch, p.seqlen_k};
}

TensorView token_layout(DType dtype, TokenRows rows, int64_t heads, int64_t dim, bool bhsd_order) {
  return bhsd_order ? bhsd(nullptr, dtype, rows.batch, rows.seq, heads, dim)
                    : bshd(nullptr, dtype, rows.batch, rows.seq, heads, dim);
}

FileShape token_file(const Problem& p, TokenRows rows, int64_t heads, int64_t dim,
                     const TokenNames& names) {
  auto text = [](std::initializer_list<std::string_view> parts) {
    std::string joined = "[";
    for (std::string_view part : parts) joined.append(joined.size() > 1 ? ", " : "").append(part);
    return joined + "]";
  };
  if (p.mode == Mode::group)
    return {{rows.seq, heads, dim}, text({names.total, names.heads, names.dim})};
  return {{rows.batch, rows.seq, heads, dim}, text({"batch", names.seq, names.heads, names.dim})};
}

// The page pool [num_pages, page_size, nhead_k, dim], strided per --kv-layout.
TensorView pool_layout(const Problem& p, DType dtype, int64_t dim) {
  TensorView view =
      contiguous_view(nullptr, dtype, {p.paged.num_pages, p.paged.page_size, p.nhead_k, dim});
  if (p.paged.layout == KvLayout::hnd)
    view.stride = {p.nhead_k * p.paged.page_size * dim, dim, p.paged.page_size * dim, 1, 0};
  return view;
}

FileShape pool_file(const Problem& p, int64_t dim, std::string_view dim_name) {
  return {{p.paged.num_pages, p.paged.page_size, p.nhead_k, dim},
          "[num_pages, page_size, nhead_k, " + std::string(dim_name) + "]"};
}

// K or V as stored in its file: the pool of a paged problem, else token-major rows.
FileShape key_value_file(const Problem& p, int64_t dim, const TokenNames& names) {
  if (p.is_paged()) return pool_file(p, dim, names.dim);
  return token_file(p, key_rows(p), p.nhead_k, dim, names);
}

// Append-KV's new tokens [batch, seqlen_knew, nhead_k, dim].
FileShape new_token_file(const Problem& p, int64_t dim, std::string_view dim_name) {
  return {{p.batch, p.append.seqlen_knew, p.nhead_k, dim},
          "[batch, seqlen_knew, nhead_k, " + std::string(dim_name) + "]"};
}

FileShape rope_file(int64_t positions, int64_t rotary_dim) {
  return {{positions, rotary_dim / 2}, "[positions, rotary_dim / 2]"};
}

// LSE-like fp32 [batch, nhead_q, seqlen_q] (group mode [1, nhead_q, total_q]).
TensorView row_stat_layout(const Problem& p) {
  const TokenRows rows = query_rows(p);
  return contiguous_view(nullptr, DType::fp32, {rows.batch, p.nhead_q, rows.seq});
}

FileShape row_stat_file(const Problem& p) {
  if (p.mode == Mode::group) return {{p.nhead_q, p.total_q()}, "[nhead_q, total_q]"};
  return {{p.batch, p.nhead_q, p.seqlen_q}, "[batch, nhead_q, seqlen_q]"};
}

FileShape score_file(const Problem& p) {
  return {{p.batch, p.nhead_q, p.seqlen_q, p.seqlen_k}, "[batch, nhead_q, seqlen_q, seqlen_k]"};
}

FileShape head_file(const Problem& p) {
  return {{p.nhead_q}, "[nhead_q]"};
}

int64_t scale_blocks(int64_t seqlen) {
  return (seqlen + kFp8ScaleBlock - 1) / kFp8ScaleBlock;
}

FileShape block_scale_file(const Problem& p, int64_t heads, int64_t seqlen, std::string_view head,
                           std::string_view seq) {
  return {{p.batch, heads, scale_blocks(seqlen)},
          "[batch, " + std::string(head) + ", ceil(" + std::string(seq) + " / 128)]"};
}

// Largest magnitude of a dtype's finite values that random data should span: fp8 codes use
// their whole range (the descale brings them back to about 1), other types [-1, 1).
double random_amplitude(DType dtype) {
  if (dtype == DType::fp8_e4m3) return 448.0;
  if (dtype == DType::fp8_e5m2) return 57344.0;
  return 1.0;
}

void fill_uniform(const TensorView& view, uint64_t seed, RandomStream stream, double lo,
                  double hi) {
  std::seed_seq seeds{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32),
                      static_cast<uint32_t>(stream)};
  std::mt19937_64 rng(seeds);
  std::uniform_real_distribution<double> dist(lo, hi);
  for_each_element(view, [&](int64_t, int64_t offset) {
    numeric::store(view.data, view.dtype, offset, dist(rng));
  });
}

void fill_constant(const TensorView& view, double value) {
  for_each_element(
      view, [&](int64_t, int64_t offset) { numeric::store(view.data, view.dtype, offset, value); });
}

// An input from --load (always when `required`, else when its file exists) or at random.
void fill_input(InputDir* input, std::string_view name, bool required, const FileShape& shape,
                const TensorView& view, uint64_t seed, RandomStream stream) {
  if (input && (required || input->has(name))) {
    npy_to_view(input->read_data(name, shape), view);
    return;
  }
  const double amplitude = random_amplitude(view.dtype);
  fill_uniform(view, seed, stream, -amplitude, amplitude);
}

// Copies logical K or V ([batch, seqlen_k] or [1, total_k] rows) into the page pool through
// the page table.
void scatter_into_pool(const Problem& p, const TensorView& logical, const TensorView& pool) {
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t j = 0; j < p.key_length(b); ++j) {
      const auto [page, slot] = p.page_slot(b, j);
      const int64_t row_batch = p.mode == Mode::group ? 0 : b;
      const int64_t row_seq = p.mode == Mode::group ? p.key_start(b) + j : j;
      for (int64_t h = 0; h < logical.shape[2]; ++h)
        for (int64_t d = 0; d < logical.shape[3]; ++d)
          numeric::store(pool, {page, slot, h, d},
                         numeric::load(logical, {row_batch, row_seq, h, d}));
    }
  }
}

// One of K or V: contiguous, a pool loaded as is, or logical data scattered into the pool.
OwnedTensor make_key_value(const RunSpec& spec, InputDir* input, std::string_view name, int64_t dim,
                           const TokenNames& names, RandomStream stream) {
  const Problem& p = spec.problem;
  if (!p.is_paged()) {
    OwnedTensor tensor(token_layout(p.dtype, key_rows(p), p.nhead_k, dim, spec.bhsd));
    fill_input(input, name, true, token_file(p, key_rows(p), p.nhead_k, dim, names), tensor.view(),
               spec.input_seed, stream);
    return tensor;
  }
  OwnedTensor pool(pool_layout(p, p.dtype, dim));
  if (spec.kv_pool_from_files) {
    npy_to_view(input->read_data(name, pool_file(p, dim, names.dim)), pool.view());
    return pool;
  }
  OwnedTensor logical(token_layout(p.dtype, key_rows(p), p.nhead_k, dim, false));
  fill_input(input, name, true, token_file(p, key_rows(p), p.nhead_k, dim, names), logical.view(),
             spec.input_seed, stream);
  scatter_into_pool(p, logical.view(), pool.view());
  return pool;
}

// The per-page scales' file shape.
FileShape page_scale_file(const Problem& p) {
  return {{p.paged.num_pages, p.nhead_k}, "[num_pages, nhead_k]"};
}

// A scalar per-tensor descale from `<x>_descale.npy` ([] or [1]).
double read_scalar_descale(InputDir& input, std::string_view name) {
  const io::NpyArray& array = input.read(name);
  const bool scalar = array.shape.empty() || (array.shape.size() == 1 && array.shape[0] == 1);
  if (array.dtype != DType::fp32 || !scalar)
    throw Error(ErrorKind::invalid_argument,
                input.describe(name) + ": expected a float32 scalar ([] or [1]) for " +
                    "--fp8-scale per_tensor, got " + std::string(to_string(array.dtype)) + " " +
                    io::shape_string(array.shape));
  return numeric::load(array.bytes.data(), DType::fp32, 0);
}

// Random descales land near 1 / amplitude so that dequantized values span about [-1, 1];
// they are float32 values, so saving them loses nothing.
double random_descale(const Problem& p, uint64_t seed, RandomStream stream) {
  std::seed_seq seeds{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32),
                      static_cast<uint32_t>(stream)};
  std::mt19937_64 rng(seeds);
  return static_cast<float>(std::uniform_real_distribution<double>(0.5, 1.5)(rng) /
                            random_amplitude(p.dtype));
}

// A per-tensor descale: from `file` ([] or [1]), else 1 with --load, else random.
double scalar_descale(const RunSpec& spec, InputDir* input, std::string_view file,
                      RandomStream stream) {
  if (!input) return random_descale(spec.problem, spec.input_seed, stream);
  return input->has(file) ? read_scalar_descale(*input, file) : 1.0;
}

// A float32 table of descales (`layout`, the file's `shape`): from `file`, else 1 with --load,
// else random near 1 / amplitude (so dequantized values span about [-1, 1]).
void fill_scale_table(const RunSpec& spec, InputDir* input, std::string_view file,
                      const FileShape& shape, RandomStream stream, const TensorView& layout,
                      OwnedTensor& table) {
  table = OwnedTensor(layout);
  if (input) {
    if (input->has(file)) {
      npy_to_view(input->read_data(file, shape), table.view());
    } else {
      fill_constant(table.view(), 1.0);
    }
  } else {
    const double amplitude = random_amplitude(spec.problem.dtype);
    fill_uniform(table.view(), spec.input_seed, stream, 0.5 / amplitude, 1.5 / amplitude);
  }
}

// Per-page scales [num_pages, nhead_k] of K's and V's pools (Q stays per tensor); random ones
// are near 1 / amplitude, where a quantizing append's 16-bit new values (about 1) make some
// pages grow and others keep.
void prepare_page_scales(RunSpec& spec, RunTensors& t, InputDir* input) {
  Problem& p = spec.problem;
  p.fp8.q_descale = scalar_descale(spec, input, "q_descale.npy", RandomStream::q_descale);
  const TensorView layout = contiguous_view(nullptr, DType::fp32, {p.paged.num_pages, p.nhead_k});
  fill_scale_table(spec, input, "k_page_descale.npy", page_scale_file(p),
                   RandomStream::k_page_descale, layout, t.k_page_descale);
  fill_scale_table(spec, input, "v_page_descale.npy", page_scale_file(p),
                   RandomStream::v_page_descale, layout, t.v_page_descale);
  p.fp8.k_page = t.k_page_descale.view();
  p.fp8.v_page = t.v_page_descale.view();
}

void prepare_fp8_scales(RunSpec& spec, RunTensors& t, InputDir* input) {
  Problem& p = spec.problem;
  if (p.fp8.kind == Fp8ScaleKind::per_page) return prepare_page_scales(spec, t, input);
  struct Operand {
    std::string_view file;
    RandomStream stream;
    double* descale;
    OwnedTensor* blocks;
    int64_t heads, seqlen;
    std::string_view head_name, seq_name;
  };
  const Operand operands[] = {
      {"q_descale.npy", RandomStream::q_descale, &p.fp8.q_descale, &t.q_descale, p.nhead_q,
       p.seqlen_q, "nhead_q", "seqlen_q"},
      {"k_descale.npy", RandomStream::k_descale, &p.fp8.k_descale, &t.k_descale, p.nhead_k,
       p.seqlen_k, "nhead_k", "seqlen_k"},
      {"v_descale.npy", RandomStream::v_descale, &p.fp8.v_descale, &t.v_descale, p.nhead_k,
       p.seqlen_k, "nhead_k", "seqlen_k"},
  };
  for (const Operand& x : operands) {
    if (p.fp8.kind == Fp8ScaleKind::per_tensor) {
      *x.descale = scalar_descale(spec, input, x.file, x.stream);
      continue;
    }
    const FileShape shape = block_scale_file(p, x.heads, x.seqlen, x.head_name, x.seq_name);
    fill_scale_table(
        spec, input, x.file, shape, x.stream,
        contiguous_view(nullptr, DType::fp32, {shape.sizes[0], shape.sizes[1], shape.sizes[2]}),
        *x.blocks);
  }
  p.fp8.q_block = t.q_descale.view();
  p.fp8.k_block = t.k_descale.view();
  p.fp8.v_block = t.v_descale.view();
}

// The standard ALiBi slopes 2^(-8 (h + 1) / nhead).
void fill_alibi_slopes(const TensorView& slopes, int64_t nhead) {
  for (int64_t h = 0; h < nhead; ++h)
    numeric::store(slopes, {h}, std::exp2(-8.0 * static_cast<double>(h + 1) / nhead));
}

void prepare_logit_inputs(RunSpec& spec, RunTensors& t, InputDir* input) {
  Problem& p = spec.problem;
  if (p.bias_kind == BiasKind::elementwise) {
    t.bias = OwnedTensor(
        contiguous_view(nullptr, p.out_dtype, {p.batch, p.nhead_q, p.seqlen_q, p.seqlen_k}));
    fill_input(input, "bias.npy", false, score_file(p), t.bias.view(), spec.input_seed,
               RandomStream::bias);
    p.bias = t.bias.view();
  } else if (p.bias_kind == BiasKind::alibi) {
    t.alibi_slopes = OwnedTensor(contiguous_view(nullptr, DType::fp32, {p.nhead_q}));
    if (input && input->has("alibi_slopes.npy")) {
      npy_to_view(input->read_data("alibi_slopes.npy", head_file(p)), t.alibi_slopes.view());
    } else {
      fill_alibi_slopes(t.alibi_slopes.view(), p.nhead_q);
    }
    p.alibi_slopes = t.alibi_slopes.view();
  }
  if (spec.sink_logit) {
    t.sink_logits = OwnedTensor(contiguous_view(nullptr, DType::fp32, {p.nhead_q}));
    if (input && input->has("sink_logits.npy")) {
      npy_to_view(input->read_data("sink_logits.npy", head_file(p)), t.sink_logits.view());
    } else {
      fill_constant(t.sink_logits.view(), *spec.sink_logit);
    }
    p.sink_logits = t.sink_logits.view();
  }
}

void prepare_outputs(RunSpec& spec, RunTensors& t, InputDir* input) {
  Problem& p = spec.problem;
  // A quantizing append chains no attention: its outputs are the pools and their scales.
  if (quantizes_append(p)) return;
  const TokenRows q_rows = query_rows(p);
  t.o = OwnedTensor(token_layout(p.out_dtype, q_rows, p.nhead_q, p.hdim_v, spec.bhsd));
  p.o = t.o.view();
  if (p.return_lse) {
    t.lse = OwnedTensor(row_stat_layout(p));
    p.lse = t.lse.view();
  }
  if (spec.stages == RunStages::splitkv) {
    const int64_t splits = p.split.num_splits;
    t.o_acc = OwnedTensor(contiguous_view(nullptr, DType::fp32,
                                          {splits, q_rows.batch, p.nhead_q, q_rows.seq, p.hdim_v}));
    t.lse_acc = OwnedTensor(
        contiguous_view(nullptr, DType::fp32, {splits, q_rows.batch, p.nhead_q, q_rows.seq}));
    p.split.o_acc = t.o_acc.view();
    p.split.lse_acc = t.lse_acc.view();
  }
  if (spec.stages != RunStages::backward) return;
  t.d_o = OwnedTensor(token_layout(p.out_dtype, q_rows, p.nhead_q, p.hdim_v, spec.bhsd));
  fill_input(input, "do.npy", false, token_file(p, q_rows, p.nhead_q, p.hdim_v, kOutputNames),
             t.d_o.view(), spec.input_seed, RandomStream::d_o);
  const TokenRows k_rows = key_rows(p);
  t.dq = OwnedTensor(token_layout(p.out_dtype, q_rows, p.nhead_q, p.hdim_q, spec.bhsd));
  t.dk = OwnedTensor(token_layout(p.out_dtype, k_rows, p.nhead_k, p.hdim_q, spec.bhsd));
  t.dv = OwnedTensor(token_layout(p.out_dtype, k_rows, p.nhead_k, p.hdim_v, spec.bhsd));
  t.d = OwnedTensor(row_stat_layout(p));
  t.dq_acc = OwnedTensor(
      contiguous_view(nullptr, DType::fp32, {q_rows.batch, q_rows.seq, p.nhead_q, p.hdim_q}));
  if (p.bias_kind == BiasKind::elementwise) {
    TensorView layout = t.bias.view();
    layout.data = nullptr;
    t.dbias = OwnedTensor(layout);
  }
  p.bwd.d_o = t.d_o.view();
  p.bwd.dq = t.dq.view();
  p.bwd.dk = t.dk.view();
  p.bwd.dv = t.dv.view();
  p.bwd.d = t.d.view();
  p.bwd.dq_acc = t.dq_acc.view();
  p.bwd.dbias = t.dbias.view();
}

// The RoPE positions append-KV rotates: new key t of sequence b sits at key_length(b) + t, and
// with rotate_q query i at key_length(b) + i.
int64_t rope_positions(const Problem& p) {
  int64_t positions = 0;
  for (int64_t b = 0; b < p.batch; ++b) {
    int64_t rotated = p.append.seqlen_knew;
    if (p.append.rotate_q) rotated = std::max(rotated, p.query_length(b));
    positions = std::max(positions, p.key_length(b) + rotated);
  }
  return positions;
}

// The usual rotary tables: angle = position * 10000^(-2f / rotary_dim).
void fill_rope_tables(const TensorView& cos, const TensorView& sin, int64_t rotary_dim) {
  for (int64_t position = 0; position < cos.shape[0]; ++position) {
    for (int64_t f = 0; f < cos.shape[1]; ++f) {
      const double angle = static_cast<double>(position) *
                           std::pow(10000.0, -2.0 * static_cast<double>(f) / rotary_dim);
      numeric::store(cos, {position, f}, std::cos(angle));
      numeric::store(sin, {position, f}, std::sin(angle));
    }
  }
}

void prepare_append(RunSpec& spec, RunTensors& t, InputDir* input) {
  Problem& p = spec.problem;
  AppendKv& a = p.append;
  const TokenRows rows{p.batch, a.seqlen_knew};
  // A quantizing append takes 16-bit new tokens into its fp8 pool (spec.new_dtype).
  t.k_new = OwnedTensor(token_layout(spec.new_dtype, rows, p.nhead_k, p.hdim_q, spec.bhsd));
  t.v_new = OwnedTensor(token_layout(spec.new_dtype, rows, p.nhead_k, p.hdim_v, spec.bhsd));
  fill_input(input, "k_new.npy", true, new_token_file(p, p.hdim_q, "hdim_q"), t.k_new.view(),
             spec.input_seed, RandomStream::k_new);
  fill_input(input, "v_new.npy", true, new_token_file(p, p.hdim_v, "hdim_v"), t.v_new.view(),
             spec.input_seed, RandomStream::v_new);
  a.k_new = t.k_new.view();
  a.v_new = t.v_new.view();
  const bool from_files = input && (input->has("rope_cos.npy") || input->has("rope_sin.npy"));
  if (a.rope == RopeKind::none) {
    // Tables of a run without RoPE would be ignored, so the new keys would not be rotated as
    // their author meant; refuse them, as fp8 descales of a non-fp8 run are.
    if (from_files)
      throw Error(ErrorKind::invalid_argument,
                  input->describe(input->has("rope_cos.npy") ? "rope_cos.npy" : "rope_sin.npy") +
                      " is a RoPE table, but --rope is none");
    return;
  }
  // Loaded tables may cover more positions than this run rotates; validation checks they
  // cover enough. Both files are checked against the expected shape before the tables are
  // allocated: a table that is not 2-D is refused naming its shape (it used to escape as an
  // internal error), and a matching one holds as many elements as the allocation.
  const std::vector<int64_t>* file_shape =
      from_files ? &input->read("rope_cos.npy").shape : nullptr;
  const int64_t positions =
      file_shape && file_shape->size() == 2 ? file_shape->front() : rope_positions(p);
  const FileShape table = rope_file(positions, a.rotary_dim);
  const io::NpyArray* cos_file = from_files ? &input->read_data("rope_cos.npy", table) : nullptr;
  const io::NpyArray* sin_file = from_files ? &input->read_data("rope_sin.npy", table) : nullptr;
  t.rope_cos = OwnedTensor(contiguous_view(nullptr, DType::fp32, {positions, a.rotary_dim / 2}));
  t.rope_sin = OwnedTensor(contiguous_view(nullptr, DType::fp32, {positions, a.rotary_dim / 2}));
  if (from_files) {
    npy_to_view(*cos_file, t.rope_cos.view());
    npy_to_view(*sin_file, t.rope_sin.view());
  } else {
    fill_rope_tables(t.rope_cos.view(), t.rope_sin.view(), a.rotary_dim);
  }
  a.rope_cos = t.rope_cos.view();
  a.rope_sin = t.rope_sin.view();
}

io::NpyArray integer_array(const std::vector<int64_t>& values, DType dtype,
                           std::vector<int64_t> shape) {
  io::NpyArray array;
  array.dtype = dtype;
  array.shape = std::move(shape);
  array.bytes.resize(values.size() * dtype_size(dtype));
  for (size_t i = 0; i < values.size(); ++i) {
    if (dtype == DType::int64) {
      std::memcpy(array.bytes.data() + i * 8, &values[i], 8);
    } else {
      const auto narrow = static_cast<int32_t>(values[i]);
      std::memcpy(array.bytes.data() + i * 4, &narrow, 4);
    }
  }
  return array;
}

template <class T>
std::vector<int64_t> widen(const std::vector<T>& values) {
  return std::vector<int64_t>(values.begin(), values.end());
}

io::NpyArray scalar_array(double value) {
  io::NpyArray array;
  array.dtype = DType::fp32;
  array.bytes.resize(4);
  numeric::store(array.bytes.data(), DType::fp32, 0, value);
  return array;
}

}  // namespace

OwnedTensor::OwnedTensor(TensorView layout)
    : bytes_(static_cast<size_t>(layout.extent() * dtype_size(layout.dtype))), view_(layout) {
  view_.data = bytes_.empty() ? nullptr : bytes_.data();
}

RunTensors prepare_tensors(RunSpec& spec, InputDir* input) {
  check_run_size(spec);
  RunTensors t;
  Problem& p = spec.problem;
  const TokenRows q_rows = query_rows(p);
  t.q = OwnedTensor(token_layout(p.dtype, q_rows, p.nhead_q, p.hdim_q, spec.bhsd));
  fill_input(input, "q.npy", true, token_file(p, q_rows, p.nhead_q, p.hdim_q, kQueryNames),
             t.q.view(), spec.input_seed, RandomStream::q);
  t.k = make_key_value(spec, input, "k.npy", p.hdim_q, kKeyNames, RandomStream::k);
  t.v = make_key_value(spec, input, "v.npy", p.hdim_v, kValueNames, RandomStream::v);
  p.q = t.q.view();
  p.k = t.k.view();
  p.v = t.v.view();
  if (is_fp8(p.dtype)) prepare_fp8_scales(spec, t, input);
  prepare_logit_inputs(spec, t, input);
  if (spec.stages == RunStages::append) prepare_append(spec, t, input);
  prepare_outputs(spec, t, input);
  return t;
}

NamedArrays saved_inputs(const RunSpec& spec, const RunTensors& t) {
  const Problem& p = spec.problem;
  NamedArrays files;
  auto save = [&](std::string name, const OwnedTensor& tensor, const FileShape& shape) {
    files.emplace_back(std::move(name), view_to_npy(tensor.view(), DType::fp32, shape.sizes));
  };
  const TokenRows q_rows = query_rows(p);
  save("q.npy", t.q, token_file(p, q_rows, p.nhead_q, p.hdim_q, kQueryNames));
  save("k.npy", t.k, key_value_file(p, p.hdim_q, kKeyNames));
  save("v.npy", t.v, key_value_file(p, p.hdim_v, kValueNames));
  if (p.paged.table == PageTableKind::vllm_block_table) {
    files.emplace_back("block_table.npy", integer_array(widen(p.paged.block_table), DType::int32,
                                                        {p.batch, p.paged.max_pages_per_seq}));
  } else if (p.paged.table == PageTableKind::sglang_page_list) {
    const auto pages = static_cast<int64_t>(p.paged.page_indices.size());
    files.emplace_back("page_indptr.npy",
                       integer_array(p.paged.page_indptr, DType::int64, {p.batch + 1}));
    files.emplace_back("page_indices.npy",
                       integer_array(widen(p.paged.page_indices), DType::int32, {pages}));
  }
  if (p.mode == Mode::group) {
    files.emplace_back("seqstart_q.npy", integer_array(p.seqstart_q, DType::int64, {p.batch + 1}));
    files.emplace_back("seqstart_k.npy", integer_array(p.seqstart_k, DType::int64, {p.batch + 1}));
  } else if (!p.seqlen_k_per_batch.empty()) {
    files.emplace_back("seqlen_k.npy",
                       integer_array(p.seqlen_k_per_batch, DType::int64, {p.batch}));
  }
  if (p.bias_kind == BiasKind::elementwise) save("bias.npy", t.bias, score_file(p));
  if (p.bias_kind == BiasKind::alibi) save("alibi_slopes.npy", t.alibi_slopes, head_file(p));
  if (spec.sink_logit) save("sink_logits.npy", t.sink_logits, head_file(p));
  if (p.fp8.kind == Fp8ScaleKind::per_tensor) {
    files.emplace_back("q_descale.npy", scalar_array(p.fp8.q_descale));
    files.emplace_back("k_descale.npy", scalar_array(p.fp8.k_descale));
    files.emplace_back("v_descale.npy", scalar_array(p.fp8.v_descale));
  } else if (p.fp8.kind == Fp8ScaleKind::per_block) {
    auto sizes = [](const OwnedTensor& x) {
      return FileShape{{x.view().shape[0], x.view().shape[1], x.view().shape[2]}, ""};
    };
    save("q_descale.npy", t.q_descale, sizes(t.q_descale));
    save("k_descale.npy", t.k_descale, sizes(t.k_descale));
    save("v_descale.npy", t.v_descale, sizes(t.v_descale));
  } else if (p.fp8.kind == Fp8ScaleKind::per_page) {
    files.emplace_back("q_descale.npy", scalar_array(p.fp8.q_descale));
    save("k_page_descale.npy", t.k_page_descale, page_scale_file(p));
    save("v_page_descale.npy", t.v_page_descale, page_scale_file(p));
  }

  if (spec.stages == RunStages::backward)
    save("do.npy", t.d_o, token_file(p, q_rows, p.nhead_q, p.hdim_v, kOutputNames));
  if (spec.stages == RunStages::append) {
    save("k_new.npy", t.k_new, new_token_file(p, p.hdim_q, "hdim_q"));
    save("v_new.npy", t.v_new, new_token_file(p, p.hdim_v, "hdim_v"));
    if (p.append.rope != RopeKind::none) {
      const FileShape table = rope_file(t.rope_cos.view().shape[0], p.append.rotary_dim);
      save("rope_cos.npy", t.rope_cos, table);
      save("rope_sin.npy", t.rope_sin, table);
    }
  }
  return files;
}

NamedArrays saved_outputs(const RunSpec& spec, const RunTensors& t) {
  const Problem& p = spec.problem;
  NamedArrays files;
  auto save = [&](std::string name, const OwnedTensor& tensor, const FileShape& shape) {
    files.emplace_back(std::move(name), view_to_npy(tensor.view(), DType::fp32, shape.sizes));
  };
  const TokenRows q_rows = query_rows(p), k_rows = key_rows(p);
  if (!quantizes_append(p))
    save("o.npy", t.o, token_file(p, q_rows, p.nhead_q, p.hdim_v, kOutputNames));
  if (spec.want_lse) save("lse.npy", t.lse, row_stat_file(p));
  if (spec.stages == RunStages::backward) {
    save("dq.npy", t.dq, token_file(p, q_rows, p.nhead_q, p.hdim_q, kQueryNames));
    save("dk.npy", t.dk, token_file(p, k_rows, p.nhead_k, p.hdim_q, kKeyNames));
    save("dv.npy", t.dv, token_file(p, k_rows, p.nhead_k, p.hdim_v, kValueNames));
    if (p.bias_kind == BiasKind::elementwise) save("dbias.npy", t.dbias, score_file(p));
  }
  if (spec.stages == RunStages::append) {
    save("k_appended.npy", t.k, key_value_file(p, p.hdim_q, kKeyNames));
    save("v_appended.npy", t.v, key_value_file(p, p.hdim_v, kValueNames));
    if (p.append.rotate_q && p.append.rope != RopeKind::none)
      save("q_rotated.npy", t.q, token_file(p, q_rows, p.nhead_q, p.hdim_q, kQueryNames));
    if (quantizes_append(p)) {
      save("k_page_descale_appended.npy", t.k_page_descale, page_scale_file(p));
      save("v_page_descale_appended.npy", t.v_page_descale, page_scale_file(p));
    }
  }
  return files;
}

std::vector<NamedView> checksum_views(const RunSpec& spec, const RunTensors& t) {
  if (quantizes_append(spec.problem))
    return {{"k", t.k.view()},
            {"v", t.v.view()},
            {"k_page_descale", t.k_page_descale.view()},
            {"v_page_descale", t.v_page_descale.view()}};
  std::vector<NamedView> outputs{{"o", t.o.view()}};
  if (spec.stages == RunStages::backward) {
    outputs.push_back({"dq", t.dq.view()});
    outputs.push_back({"dk", t.dk.view()});
    outputs.push_back({"dv", t.dv.view()});
  }
  return outputs;
}

}  // namespace tilefmha::cli
