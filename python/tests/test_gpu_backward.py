"""The GPU backward (one plan of bwd_dot_do_o, bwd_dq_dk_dv on sm90_ws or sm80_mma,
bwd_convert_dq) from Python: tilefmha.attention_backward on CUDA tensors and tilefmha.torch
autograd against the CPU reference on the same inputs (masks, GQA, varlen, ALiBi, bias with
dBias, dropout, head dims to 256), the sink logits' gradient against float64 torch and the CPU
reference, deterministic repeats, and what the GPU backward refuses.
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
    expected = expected.float().cpu()
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


def float64_attention_with_sinks(q, k, v, sinks, causal=None):
    """O of attention with a per-head sink logit in the softmax denominator, in float64 torch
    (autograd differentiates it): [b, sq, hq, d] inputs, GQA by repeating KV heads; causal None,
    "top_left" or "bottom_right"."""
    q, k, v = (x.double() for x in (q, k, v))
    group = q.shape[2] // k.shape[2]
    k, v = (x.repeat_interleave(group, dim=2) for x in (k, v))
    scores = torch.einsum("bihd,bjhd->bhij", q, k) / q.shape[3] ** 0.5
    if causal is not None:
        seqlen_q, seqlen_k = q.shape[1], k.shape[1]
        shift = seqlen_k - seqlen_q if causal == "bottom_right" else 0
        i = torch.arange(seqlen_q, device=q.device)[:, None]
        j = torch.arange(seqlen_k, device=q.device)[None, :]
        scores = scores.masked_fill(j > i + shift, float("-inf"))
    sink = sinks.double().view(1, -1, 1, 1).expand(*scores.shape[:3], 1)
    p = torch.softmax(torch.cat([scores, sink], dim=-1), dim=-1)[..., :-1]
    return torch.einsum("bhij,bjhd->bihd", p, v)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("causal", [None, "bottom_right"])
def test_sink_logits_gradient_matches_float64_torch(dtype, causal):
    from tilefmha.torch import attention

    # GQA 4:2; bottom-right causal over 150 queries and 100 keys leaves 50 rows the sink alone.
    generator = torch.Generator(device="cuda").manual_seed(60)
    q = draw(generator, dtype, 2, 150, 4, 64)
    k, v = (draw(generator, dtype, 2, 100, 2, 64) for _ in range(2))
    do = draw(generator, dtype, 2, 150, 4, 64)
    sinks = (torch.rand(4, generator=generator, device="cuda") * 3 + 1).requires_grad_()
    o = attention(q, k, v, sink_logits=sinks, causal=causal or False)
    o.backward(do)
    twin = sinks.detach().clone().requires_grad_()
    float64_attention_with_sinks(q, k, v, twin, causal).backward(do.double())
    assert sinks.grad.is_cuda and sinks.grad.dtype == torch.float32
    assert float(twin.grad.abs().max()) > 1e-2
    assert_close_to(sinks.grad, twin.grad, dtype, "dsink")


def test_dsink_matches_cpu_reference_and_repeats_bitwise():
    # The same O and LSE on both sides: the GPU's fp32 sums against the reference's doubles.
    lengths_q, lengths_k = [40, 0, 130, 1], [35, 20, 200, 0]
    cu_q = torch.tensor([0] + np.cumsum(lengths_q).tolist(), dtype=torch.int64)
    cu_k = torch.tensor([0] + np.cumsum(lengths_k).tolist(), dtype=torch.int64)
    generator = torch.Generator(device="cuda").manual_seed(61)
    q = draw(generator, "bfloat16", int(cu_q[-1]), 8, 128)
    k, v = (draw(generator, "bfloat16", int(cu_k[-1]), 2, 128) for _ in range(2))
    do = draw(generator, "bfloat16", int(cu_q[-1]), 8, 128)
    sinks = torch.rand(8, generator=generator, device="cuda") * 3 + 1
    # The varlen forward takes no sink logits: the dense forward of each sequence gives O, LSE.
    o = torch.zeros_like(do)
    lse = torch.zeros(8, int(cu_q[-1]), device="cuda")
    for b in range(4):
        rows_q, rows_k = slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])
        if lengths_q[b] == 0:
            continue
        if lengths_k[b] == 0:  # only the sink: O = 0, LSE = sink
            lse[:, rows_q] = sinks[:, None]
            continue
        o_b, lse_b = tilefmha.attention(q[None, rows_q], k[None, rows_k], v[None, rows_k],
                                        sink_logits=sinks, causal="bottom_right",
                                        return_lse=True)
        o[rows_q], lse[:, rows_q] = o_b[0], lse_b[0]
    arguments = {"cu_seqlens_q": cu_q, "cu_seqlens_k": cu_k, "causal": "bottom_right",
                 "sink_logits": sinks, "return_dsink": True}
    first = tilefmha.attention_backward(q, k, v, o, lse, do, **arguments)[3]
    on_cpu = tilefmha.attention_backward(q.cpu(), k.cpu(), v.cpu(), o.cpu(), lse.cpu(), do.cpu(),
                                         **dict(arguments, sink_logits=sinks.cpu()))[3]
    assert first.is_cuda and first.shape == (8,)
    assert float(on_cpu.abs().max()) > 1e-2
    torch.testing.assert_close(first.cpu(), on_cpu, rtol=1e-4, atol=1e-4)
    for _ in range(3):
        again = tilefmha.attention_backward(q, k, v, o, lse, do, **arguments)[3]
        assert torch.equal(first, again)
