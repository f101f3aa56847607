// Problem -> FwdParams of the sm80_mma forward kernel: what it copies, what it derives, and the
// device-only requirements it refuses naming the field. Pure host code: no GPU needed (views
// are only marked as device memory; nothing is dereferenced).
#include "runtime/fwd_params.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "common/philox.h"
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

}  // namespace
}  // namespace tilefmha
