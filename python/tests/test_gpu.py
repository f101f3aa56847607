"""The GPU backend on PyTorch CUDA tensors against the CPU reference. Skipped (and reported as
skipped) without PyTorch, a CUDA GPU or a usable driver."""

import numpy as np
import pytest

import tilefmha

from gpu_support import gpu_skip_reason, torch


pytestmark = pytest.mark.skipif(bool(gpu_skip_reason()), reason=gpu_skip_reason() or "GPU")

TOLERANCE = {"float16": 2e-3, "bfloat16": 1.6e-2}

# (case name, nhead_q, nhead_k, seqlen_q, seqlen_k, hdim, features)
CASES = [
    ("plain_d128", 4, 4, 200, 200, 128, {}),
    ("causal_gqa_d64", 8, 2, 130, 257, 64, {"causal": "bottom_right"}),
    ("window_softcap_d64", 4, 4, 96, 96, 64, {"window": (32, 0), "softcap": 20.0}),
]


def cuda_inputs(dtype, batch, nhead_q, nhead_k, seqlen_q, seqlen_k, hdim, seed=0):
    generator = torch.Generator(device="cuda").manual_seed(seed)

    def draw(*shape):
        return torch.rand(shape, generator=generator, device="cuda", dtype=torch.float32).sub(
            0.5).mul(2).to(getattr(torch, dtype))

    return (draw(batch, seqlen_q, nhead_q, hdim), draw(batch, seqlen_k, nhead_k, hdim),
            draw(batch, seqlen_k, nhead_k, hdim))


def assert_matches_reference(o, lse, q, k, v, dtype, **features):
    expected_o, expected_lse = tilefmha.attention(q.cpu(), k.cpu(), v.cpu(), return_lse=True,
                                                  **features)
    torch.testing.assert_close(o.cpu().float(), expected_o.float(), rtol=TOLERANCE[dtype],
                               atol=TOLERANCE[dtype])
    finite = torch.isfinite(expected_lse)
    assert torch.equal(torch.isfinite(lse.cpu()), finite)
    torch.testing.assert_close(lse.cpu()[finite], expected_lse[finite], rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("case", CASES, ids=[case[0] for case in CASES])
def test_forward_matches_cpu_reference(case, dtype):
    _, nhead_q, nhead_k, seqlen_q, seqlen_k, hdim, features = case
    q, k, v = cuda_inputs(dtype, 2, nhead_q, nhead_k, seqlen_q, seqlen_k, hdim)
    o, lse = tilefmha.attention(q, k, v, return_lse=True, **features)
    assert o.is_cuda and o.dtype == q.dtype and o.shape == q.shape[:3] + (hdim,)
    assert lse.is_cuda and lse.dtype == torch.float32 and lse.shape == (2, nhead_q, seqlen_q)
    assert_matches_reference(o, lse, q, k, v, dtype, **features)


def test_bhsd_views_on_a_side_stream():
    q, k, v = (x.transpose(1, 2).contiguous().transpose(1, 2)  # bshd views of bhsd memory
               for x in cuda_inputs("float16", 2, 4, 4, 160, 160, 64, seed=1))
    assert not q.is_contiguous()
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        o, lse = tilefmha.attention(q, k, v, causal=True, return_lse=True, backend="gpu")
    stream.synchronize()
    assert o.transpose(1, 2).is_contiguous()  # o follows q's memory order
    assert_matches_reference(o, lse, q, k, v, "float16", causal=True)


def test_varlen_on_the_gpu():
    lengths = [37, 0, 130, 64]
    cu = torch.tensor([0] + np.cumsum(lengths).tolist(), dtype=torch.int64)
    q, k, v = (x[0] for x in cuda_inputs("bfloat16", 1, 4, 4, int(cu[-1]), int(cu[-1]), 64, 2))
    o, lse = tilefmha.attention_varlen(q, k, v, cu, cu, causal=True, return_lse=True)
    expected_o, expected_lse = tilefmha.attention_varlen(q.cpu(), k.cpu(), v.cpu(), cu, cu,
                                                         causal=True, return_lse=True)
    torch.testing.assert_close(o.cpu().float(), expected_o.float(), rtol=1.6e-2, atol=1.6e-2)
    torch.testing.assert_close(lse.cpu(), expected_lse, rtol=1e-3, atol=1e-3)


def test_host_tensors_with_backend_gpu_are_refused():
    q = torch.zeros(1, 4, 2, 64, dtype=torch.float16)
    with pytest.raises(ValueError, match=r"backend='gpu' takes CUDA tensors"):
        tilefmha.attention(q, q, q, backend="gpu")
