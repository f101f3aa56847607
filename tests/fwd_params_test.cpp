// Problem -> FwdParams of the sm80_mma forward kernel (and its split-KV partials), and
// Problem + partials -> CombineParams of the combine kernel: what they copy, what they derive,
// and the device-only requirements they refuse naming the field. Pure host code: no GPU needed
// (views are only marked as device memory; nothing is dereferenced).
#include "runtime/fwd_params.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "common/philox.h"
#include "runtime/combine_params.hpp"
#include "support/forward_problems.hpp"
#include "tilefmha/error.hpp"

namespace tilefmha {
namespace {

using testing::Dims;
using testing::QkvLayout;
using testing::TensorPool;

void mark_device(Problem& p) {
  for (TensorView* view :
       {&p.q, &p.k, &p.v, &p.o, &p.lse, &p.bias, &p.alibi_slopes, &p.sink_logits})
    view->space = MemorySpace::device;
}

Problem bhsd_problem(TensorPool& pool) {
  Problem p = testing::batch_problem(pool, Family::fwd, DType::bf16, {2, 8, 2, 40, 72, 64, 32},
                                     QkvLayout::bhsd)
                  .window(7, 3, MaskAlign::bottom_right)
                  .sink_tokens(4)
                  .softcap(20)
                  .alibi(pool.uniform(DType::fp32, {2, 8}, 0.1, 0.2))
                  .sink_logits(pool.uniform(DType::fp32, {8}, 0, 1))
                  .dropout(0.1, 42, 7)
                  .scale(0.25)
                  .build();
  mark_device(p);
  return p;
}

TEST(FwdParams, CopiesViewsAndDerivesScalars) {
  TensorPool pool(1);
  const Problem p = bhsd_problem(pool);
  const fmha::FwdParams params = runtime::make_fwd_params(p, {});
  EXPECT_EQ(params.q, p.q.data);
  EXPECT_EQ(params.o, p.o.data);
  EXPECT_EQ(params.lse, p.lse.data);
  // bhsd: [batch, head, seq, dim] memory seen as [batch, seq, head, dim].
  EXPECT_EQ(params.q_strides.seq, 64);
  EXPECT_EQ(params.q_strides.head, 40 * 64);
  EXPECT_EQ(params.q_strides.batch, 8 * 40 * 64);
  EXPECT_EQ(params.k_strides.head, 72 * 64);
  EXPECT_EQ(params.v_strides.seq, 32);
  EXPECT_EQ(params.lse_head_stride, 40);
  EXPECT_EQ(params.head_group, 4);
  EXPECT_EQ(params.hdim_v, 32);
  EXPECT_FLOAT_EQ(params.scale, 0.25f);
  EXPECT_FLOAT_EQ(params.scale_log2, static_cast<float>(0.25 / std::log(2.0)));
  EXPECT_FLOAT_EQ(params.softcap, 20.0f);
  EXPECT_FLOAT_EQ(params.softcap_inverse, 0.05f);
  EXPECT_EQ(params.window_left, 7);
  EXPECT_EQ(params.window_right, 3);
  EXPECT_EQ(params.sink_tokens, 4);
  EXPECT_EQ(params.bottom_right, 1);
  EXPECT_EQ(params.alibi_batch_stride, 8);  // per-sequence slopes
  EXPECT_EQ(params.alibi_head_stride, 1);
  EXPECT_EQ(params.sink_logits, p.sink_logits.data);
  EXPECT_EQ(params.dropout_seed, 42u);
  EXPECT_EQ(params.dropout_offset, 7u);
  EXPECT_EQ(params.dropout_threshold, philox::dropout_threshold(0.1));
  EXPECT_FLOAT_EQ(params.dropout_keep_scale, static_cast<float>(1 / 0.9));
  EXPECT_EQ(params.seqstart_q, nullptr);
  EXPECT_EQ(params.seqlen_k_per_batch, nullptr);
}

TEST(FwdParams, UnmaskedProblemsHaveUnboundedWindows) {
  TensorPool pool(2);
  Problem p = testing::batch_problem(pool, Family::fwd, DType::fp16, Dims{}).build();
  mark_device(p);
  const fmha::FwdParams params = runtime::make_fwd_params(p, {});
  EXPECT_EQ(params.window_left, -1);
  EXPECT_EQ(params.window_right, -1);
  EXPECT_EQ(params.sink_tokens, 0);
  EXPECT_EQ(params.dropout_threshold, 0u);
  EXPECT_FLOAT_EQ(params.dropout_keep_scale, 1.0f);
  EXPECT_EQ(params.alibi_slopes, nullptr);
  EXPECT_EQ(params.bias, nullptr);
}

TEST(FwdParams, GroupModeTakesTheDeviceIndexArrays) {
  TensorPool pool(3);
  Problem p =
      testing::group_problem(pool, Family::fwd, DType::bf16, {0, 5, 9}, {0, 8, 16}, 2, 2, 32, 32)
          .build();
  mark_device(p);
  const int64_t fake[3] = {};
  EXPECT_THROW(runtime::make_fwd_params(p, {}), Error);  // no device copies given
  const fmha::FwdParams params = runtime::make_fwd_params(p, {fake, fake + 1, nullptr});
  EXPECT_EQ(params.seqstart_q, reinterpret_cast<const long long*>(fake));
  EXPECT_EQ(params.seqstart_k, reinterpret_cast<const long long*>(fake + 1));
  EXPECT_EQ(params.seqlen_k_per_batch, nullptr);
}

void expect_refused(const Problem& p, const std::string& field) {
  try {
    runtime::make_fwd_params(p, {});
    ADD_FAILURE() << "accepted a problem with bad " << field;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
  }
}

TEST(FwdParams, RefusesWhatTheKernelCannotRead) {
  TensorPool pool(4);
  Problem host = testing::batch_problem(pool, Family::fwd, DType::bf16, Dims{}).build();
  expect_refused(host, "q is in host memory");

  Problem p = host;
  mark_device(p);
  Problem unaligned = p;
  unaligned.k.stride[1] += 4;  // rows no longer 16-byte aligned
  unaligned.k.stride[0] = unaligned.k.stride[1] * unaligned.seqlen_k;
  expect_refused(unaligned, "k.stride[1] (seq)");

  // The padded test layout has strides that are not multiples of 8 elements.
  Problem padded =
      testing::batch_problem(pool, Family::fwd, DType::fp16, Dims{}, QkvLayout::padded).build();
  mark_device(padded);
  expect_refused(padded, "q.stride");

  Problem odd_dim =
      testing::batch_problem(pool, Family::fwd, DType::bf16, {1, 1, 1, 8, 8, 36, 36}).build();
  mark_device(odd_dim);
  expect_refused(odd_dim, "hdim_q = 36");

  Problem fp32 = testing::batch_problem(pool, Family::fwd, DType::fp32, Dims{}).build();
  mark_device(fp32);
  expect_refused(fp32, "dtype = fp32");
}

// ---- split-KV -------------------------------------------------------------------------------

// fp32 partials of `p` (its rows: (batch, seqlen_q), or (1, total tokens) in group mode) in
// device memory.
SplitKv device_partials(TensorPool& pool, const Problem& p, int64_t num_splits,
                        DType o_dtype = DType::fp32) {
  const bool group = p.mode == Mode::group;
  const int64_t rows_batch = group ? 1 : p.batch;
  const int64_t rows_seq = group ? p.total_q() : p.seqlen_q;
  SplitKv split{num_splits,
                pool.filled(o_dtype, {num_splits, rows_batch, p.nhead_q, rows_seq, p.hdim_v}, 0),
                pool.filled(DType::fp32, {num_splits, rows_batch, p.nhead_q, rows_seq}, 0)};
  split.o_acc.space = split.lse_acc.space = MemorySpace::device;
  return split;
}

TEST(FwdParams, SplitPartialsReplaceOutputsAndSinkLogit) {
  TensorPool pool(5);
  Problem p = testing::batch_problem(pool, Family::fwd, DType::bf16, {2, 4, 2, 30, 500, 64, 64})
                  .causal()
                  .sink_logits(pool.uniform(DType::fp32, {4}, 0, 1))
                  .build();
  p.family = Family::fwd_splitkv;
  p.split = device_partials(pool, p, 3);
  mark_device(p);
  const fmha::FwdParams params = runtime::make_fwd_params(p, {});
  EXPECT_EQ(params.num_splits, 3);
  EXPECT_EQ(params.o_acc, p.split.o_acc.data);
  EXPECT_EQ(params.o_acc_split_stride, 2 * 4 * 30 * 64);
  EXPECT_EQ(params.o_acc_batch_stride, 4 * 30 * 64);
  EXPECT_EQ(params.o_acc_head_stride, 30 * 64);
  EXPECT_EQ(params.o_acc_seq_stride, 64);
  EXPECT_EQ(params.lse_acc, p.split.lse_acc.data);
  EXPECT_EQ(params.lse_acc_split_stride, 2 * 4 * 30);
  EXPECT_EQ(params.lse_acc_seq_stride, 1);
  // The combine writes O and LSE and adds the sink logit.
  EXPECT_EQ(params.o, nullptr);
  EXPECT_EQ(params.lse, nullptr);
  EXPECT_EQ(params.sink_logits, nullptr);

  // A fwd problem takes the partials of a plan workspace; without them, none.
  Problem fwd = p;
  fwd.family = Family::fwd;
  fwd.split = {};
  EXPECT_EQ(runtime::make_fwd_params(fwd, {}).num_splits, 1);
  EXPECT_EQ(runtime::make_fwd_params(fwd, {}).o_acc, nullptr);
  const SplitKv workspace = device_partials(pool, fwd, 5);
  const fmha::FwdParams staged = runtime::make_fwd_params(fwd, {}, Pipeline::sm80_mma, &workspace);
  EXPECT_EQ(staged.num_splits, 5);
  EXPECT_EQ(staged.o_acc, workspace.o_acc.data);
  EXPECT_EQ(staged.o, nullptr);
}

void expect_split_refused(const Problem& p, const SplitKv& split, const std::string& field) {
  try {
    runtime::make_fwd_params(p, {}, Pipeline::sm80_mma, &split);
    ADD_FAILURE() << "accepted partials with bad " << field;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
  }
}

TEST(FwdParams, RefusesPartialsTheKernelCannotWrite) {
  TensorPool pool(6);
  Problem p =
      testing::batch_problem(pool, Family::fwd, DType::fp16, {2, 2, 2, 16, 300, 64, 64}).build();
  mark_device(p);
  SplitKv host = device_partials(pool, p, 2);
  host.o_acc.space = MemorySpace::host;
  expect_split_refused(p, host, "split.o_acc is in host memory");
  SplitKv half = device_partials(pool, p, 2, DType::fp16);
  expect_split_refused(p, half, "split.o_acc.dtype = fp16");
  // A workspace sized for another problem: named with both shapes.
  Problem longer = p;
  longer.seqlen_q = 17;
  longer.q = pool.filled(DType::fp16, {2, 17, 2, 64}, 0);
  longer.o = pool.filled(DType::fp16, {2, 17, 2, 64}, 0);
  longer.lse = pool.filled(DType::fp32, {2, 2, 17}, 0);
  mark_device(longer);
  expect_split_refused(longer, device_partials(pool, p, 2),
                       "split.o_acc.shape = [2, 2, 2, 16, 64], expected [2, 2, 2, 17, 64]");
  SplitKv odd = device_partials(pool, p, 2);
  odd.o_acc.stride[3] = 65;  // rows no longer 8-byte aligned
  expect_split_refused(p, odd, "split.o_acc.stride[3] = 65");
  SplitKv many = device_partials(pool, p, 2);
  many.num_splits = 2000;
  expect_split_refused(p, many, "split.");
}

// ---- combine ---------------------------------------------------------------------------------

TEST(CombineParams, BindsOutputsPartialsAndSinkLogit) {
  TensorPool pool(7);
  Problem p = testing::batch_problem(pool, Family::fwd, DType::bf16, {3, 4, 1, 20, 200, 128, 128},
                                     QkvLayout::bhsd)
                  .sink_logits(pool.uniform(DType::fp32, {4}, 0, 1))
                  .build();
  p.family = Family::fwd_splitkv_combine;
  p.split = device_partials(pool, p, 6);
  mark_device(p);
  const fmha::CombineParams params = runtime::make_combine_params(p, p.split);
  EXPECT_EQ(params.o_acc, p.split.o_acc.data);
  EXPECT_EQ(params.o_acc_kind, fmha::ScalarKind::fp32);
  EXPECT_EQ(params.o_acc_split_stride, 3 * 4 * 20 * 128);
  EXPECT_EQ(params.o_acc_seq_stride, 128);
  EXPECT_EQ(params.lse_acc, p.split.lse_acc.data);
  EXPECT_EQ(params.lse_acc_head_stride, 20);
  EXPECT_EQ(params.num_splits, 6);
  EXPECT_EQ(params.batch, 3);
  EXPECT_EQ(params.nhead, 4);
  EXPECT_EQ(params.seqlen, 20);
  EXPECT_EQ(params.hdim_v, 128);
  EXPECT_EQ(params.o, p.o.data);
  // bhsd O: [batch, head, seq, dim] memory seen as [batch, seq, head, dim].
  EXPECT_EQ(params.o_strides.seq, 128);
  EXPECT_EQ(params.o_strides.head, 20 * 128);
  EXPECT_EQ(params.o_strides.batch, 4 * 20 * 128);
  EXPECT_EQ(params.lse, p.lse.data);
  EXPECT_EQ(params.lse_head_stride, 20);
  EXPECT_EQ(params.sink_logits, p.sink_logits.data);
  EXPECT_EQ(params.sink_stride, 1);

  // Merging finished 16-bit attention outputs: validation and the kernel take them.
  Problem merge = p;
  merge.split = device_partials(pool, p, 2, DType::bf16);
  merge.return_lse = false;
  merge.lse = {};
  merge.sink_logits = {};
  const fmha::CombineParams merged = runtime::make_combine_params(merge, merge.split);
  EXPECT_EQ(merged.o_acc_kind, fmha::ScalarKind::bf16);
  EXPECT_EQ(merged.lse, nullptr);
  EXPECT_EQ(merged.sink_logits, nullptr);
}

TEST(CombineParams, GroupModeRowsAreThePackedTokens) {
  TensorPool pool(8);
  Problem p = testing::group_problem(pool, Family::fwd, DType::fp16, {0, 5, 5, 19}, {0, 9, 30, 70},
                                     2, 2, 64, 64)
                  .build();
  mark_device(p);
  const SplitKv workspace = device_partials(pool, p, 4);
  const fmha::CombineParams params = runtime::make_combine_params(p, workspace);
  EXPECT_EQ(params.batch, 1);
  EXPECT_EQ(params.seqlen, 19);
  EXPECT_EQ(params.nhead, 2);
  EXPECT_EQ(params.num_splits, 4);
}

void expect_combine_refused(const Problem& p, const SplitKv& split, const std::string& field) {
  try {
    runtime::make_combine_params(p, split);
    ADD_FAILURE() << "accepted a combine with bad " << field;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
  }
}

TEST(CombineParams, RefusesWhatTheKernelCannotReadOrWrite) {
  TensorPool pool(9);
  Problem p =
      testing::batch_problem(pool, Family::fwd, DType::bf16, {2, 2, 2, 16, 300, 64, 64}).build();
  mark_device(p);
  const SplitKv good = device_partials(pool, p, 3);
  Problem host_o = p;
  host_o.o.space = MemorySpace::host;
  expect_combine_refused(host_o, good, "o is in host memory");
  SplitKv host = good;
  host.lse_acc.space = MemorySpace::host;
  expect_combine_refused(p, host, "split.lse_acc is in host memory");
  SplitKv fewer = good;
  fewer.num_splits = 2;  // the views hold 3
  expect_combine_refused(p, fewer,
                         "split.o_acc.shape = [3, 2, 2, 16, 64], expected [2, 2, 2, 16, 64]");
  SplitKv none = good;
  none.num_splits = 0;
  expect_combine_refused(p, none, "split.num_splits = 0");
  SplitKv int_lse = good;
  int_lse.lse_acc.dtype = DType::int32;
  expect_combine_refused(p, int_lse, "split.lse_acc.dtype = int32");
  Problem splits_only = p;
  splits_only.family = Family::fwd_splitkv;
  splits_only.split = good;
  expect_combine_refused(splits_only, good, "family = fwd_splitkv");
}

}  // namespace
}  // namespace tilefmha
