"""The GPU backward (one plan of bwd_dot_do_o, bwd_dq_dk_dv on sm90_ws or sm80_mma,
bwd_convert_dq) from Python: tilefmha.attention_backward on CUDA tensors and tilefmha.torch
autograd against the CPU reference on the same inputs (masks, GQA, varlen, ALiBi, bias with
dBias, dropout, head dims to 256), deterministic repeats, and what the GPU backward refuses.
Skipped (and reported as skipped) without PyTorch, a CUDA GPU or a usable driver."""

import numpy as np
import pytest

import tilefmha

from gpu_support import gpu_skip_reason, torch


pytestmark = pytest.mark.skipif(bool(gpu_skip_reason()), reason=gpu_skip_reason() or "GPU")

# Gradients sum many rounded products: bounds relative to the largest reference gradient.
RTOL = {"float16": 1e-2, "bfloat16": 3e-2}

# (case name, nhead_q, nhead_k, seqlen_q, seqlen_k, hdim, features)
CASES = [
    ("plain_d64", 4, 4, 128, 128, 64, {}),
    ("causal_top_left_ragged_d128", 2, 2, 77, 130, 128, {"causal": True}),
    ("causal_bottom_right_gqa_d128", 8, 2, 77, 130, 128, {"causal": "bottom_right"}),
    ("window_sinks_gqa_d64", 8, 2, 200, 260, 64,
     {"window": (40, 8), "window_align": "bottom_right", "sink_tokens": 4}),
    ("softcap_scale_d64", 2, 1, 96, 64, 64, {"softcap": 5.0, "scale": 0.3}),
    # Several key and query blocks per head (the sm90_ws kernel's ring and dQ hand-off).
    ("causal_long_d128", 4, 2, 700, 900, 128, {"causal": True}),
    ("plain_long_d64", 4, 4, 520, 600, 64, {}),
    # The portable kernel's features (the dispatcher falls back to sm80_mma for them).
    ("alibi_gqa_d64", 4, 2, 96, 130, 64, {"alibi_slopes": [0.5, 0.25, 0.125, 0.0625],
                                          "causal": True}),
    ("dropout_d64", 2, 2, 96, 130, 64, {"dropout_p": 0.1, "seed": 7, "offset": 3}),
    ("causal_d256", 2, 2, 77, 130, 256, {"causal": True}),
]


def draw(generator, dtype, *shape):
    return torch.rand(shape, generator=generator, device="cuda", dtype=torch.float32).sub(
        0.5).mul(2).to(getattr(torch, dtype))


def assert_close_to(actual, expected, dtype, name):
    expected = expected.float()
    bound = RTOL[dtype] * float(expected.abs().max()) + 1e-3
    torch.testing.assert_close(actual.cpu().float(), expected, rtol=RTOL[dtype], atol=bound,
                               msg=lambda m: f"{name}: {m}")


def gradients_on_both(q, k, v, do, **features):
    """(GPU gradients, CPU gradients) of one forward's O and LSE (computed on the GPU)."""
    o, lse = tilefmha.attention(q, k, v, return_lse=True, **features)
    on_gpu = tilefmha.attention_backward(q, k, v, o, lse, do, **features)
    on_cpu = tilefmha.attention_backward(q.cpu(), k.cpu(), v.cpu(), o.cpu(), lse.cpu(), do.cpu(),
                                         **features)
    return on_gpu, on_cpu


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("case", CASES, ids=[case[0] for case in CASES])
def test_attention_backward_matches_cpu_reference(case, dtype):
    _, nhead_q, nhead_k, seqlen_q, seqlen_k, hdim, features = case
    generator = torch.Generator(device="cuda").manual_seed(sum(map(ord, case[0])))
    q = draw(generator, dtype, 2, seqlen_q, nhead_q, hdim)
    k = draw(generator, dtype, 2, seqlen_k, nhead_k, hdim)
    v = draw(generator, dtype, 2, seqlen_k, nhead_k, hdim)
    do = draw(generator, dtype, 2, seqlen_q, nhead_q, hdim)
    on_gpu, on_cpu = gradients_on_both(q, k, v, do, **features)
    for name, actual, expected, like in zip("qkv", on_gpu, on_cpu, (q, k, v)):
        assert actual.is_cuda and actual.dtype == like.dtype and actual.shape == like.shape
        assert_close_to(actual, expected, dtype, "d" + name)


def test_varlen_backward_with_an_empty_sequence():
    lengths_q, lengths_k = [40, 0, 130, 1], [35, 20, 200, 64]
    cu_q = torch.tensor([0] + np.cumsum(lengths_q).tolist(), dtype=torch.int64)
    cu_k = torch.tensor([0] + np.cumsum(lengths_k).tolist(), dtype=torch.int64)
    generator = torch.Generator(device="cuda").manual_seed(7)
    q = draw(generator, "float16", int(cu_q[-1]), 8, 128)
    k = draw(generator, "float16", int(cu_k[-1]), 2, 128)
    v = draw(generator, "float16", int(cu_k[-1]), 2, 128)
    do = draw(generator, "float16", int(cu_q[-1]), 8, 128)
    o, lse = tilefmha.attention_varlen(q, k, v, cu_q, cu_k, causal="bottom_right",
                                       return_lse=True)
    on_gpu = tilefmha.attention_backward(q, k, v, o, lse, do, cu_seqlens_q=cu_q,
                                         cu_seqlens_k=cu_k, causal="bottom_right")
    on_cpu = tilefmha.attention_backward(q.cpu(), k.cpu(), v.cpu(), o.cpu(), lse.cpu(), do.cpu(),
                                         cu_seqlens_q=cu_q, cu_seqlens_k=cu_k,
                                         causal="bottom_right")
    for name, actual, expected in zip("qkv", on_gpu, on_cpu):
        assert_close_to(actual, expected, "float16", "d" + name)


def test_deterministic_repeats_are_bit_identical():
    generator = torch.Generator(device="cuda").manual_seed(8)
    q = draw(generator, "bfloat16", 2, 77, 8, 128)
    k, v = (draw(generator, "bfloat16", 2, 300, 2, 128) for _ in range(2))
    do = draw(generator, "bfloat16", 2, 77, 8, 128)
    o, lse = tilefmha.attention(q, k, v, causal=True, return_lse=True)
    first = tilefmha.attention_backward(q, k, v, o, lse, do, causal=True, deterministic=True)
    for _ in range(3):
        again = tilefmha.attention_backward(q, k, v, o, lse, do, causal=True, deterministic=True)
        for a, b in zip(first, again):
            assert torch.equal(a, b)
    on_cpu = tilefmha.attention_backward(q.cpu(), k.cpu(), v.cpu(), o.cpu(), lse.cpu(), do.cpu(),
                                         causal=True)
    for name, actual, expected in zip("qkv", first, on_cpu):
        assert_close_to(actual, expected, "bfloat16", "d" + name)


def test_autograd_backward_runs_on_the_gpu():
    from tilefmha.torch import attention

    generator = torch.Generator(device="cuda").manual_seed(3)
    inputs = [draw(generator, "bfloat16", 1, 64, 2, 64) for _ in range(3)]
    q, k, v = (x.clone().requires_grad_() for x in inputs)
    o = attention(q, k, v, causal=True)
    assert o.is_cuda and o.requires_grad
    o.float().sum().backward()
    q_cpu, k_cpu, v_cpu = (x.cpu().requires_grad_() for x in inputs)
    attention(q_cpu, k_cpu, v_cpu, causal=True).float().sum().backward()
    for name, gpu, cpu in (("dq", q, q_cpu), ("dk", k, k_cpu), ("dv", v, v_cpu)):
        assert gpu.grad.is_cuda
        assert_close_to(gpu.grad, cpu.grad, "bfloat16", name)


def test_bias_gradient_matches_cpu_reference():
    generator = torch.Generator(device="cuda").manual_seed(4)
    q, k, v = (draw(generator, "float16", 2, 80, 2, 64) for _ in range(3))
    do = draw(generator, "float16", 2, 80, 2, 64)
    bias = draw(generator, "float16", 2, 2, 80, 80)
    o, lse = tilefmha.attention(q, k, v, return_lse=True, bias=bias, causal=True)
    on_gpu = tilefmha.attention_backward(q, k, v, o, lse, do, bias=bias, causal=True,
                                         return_dbias=True)
    on_cpu = tilefmha.attention_backward(q.cpu(), k.cpu(), v.cpu(), o.cpu(), lse.cpu(), do.cpu(),
                                         bias=bias.cpu(), causal=True, return_dbias=True)
    for name, actual, expected in zip(("dq", "dk", "dv", "dbias"), on_gpu, on_cpu):
        assert actual.is_cuda
        assert_close_to(actual, expected, "float16", name)


def test_a_broadcast_16_bit_dbias_is_refused_by_name():
    # A dBias summed over broadcast dimensions accumulates in fp32 on the GPU; Python allocates
    # it in the bias dtype, which the kernels refuse rather than round every partial sum.
    generator = torch.Generator(device="cuda").manual_seed(5)
    q, k, v = (draw(generator, "bfloat16", 2, 32, 2, 64) for _ in range(3))
    bias = draw(generator, "bfloat16", 1, 1, 32, 32).expand(2, 2, 32, 32)
    o, lse = tilefmha.attention(q, k, v, return_lse=True, bias=bias)
    with pytest.raises(RuntimeError, match="dbias|bwd_dq_dk_dv"):
        tilefmha.attention_backward(q, k, v, o, lse, o, bias=bias, return_dbias=True)
