"""Backward: dQ, dK, dV from the forward's output and LSE, checked against a finite difference;
with PyTorch installed, the same through autograd (tilefmha.torch).

Run from the repository root after building:  PYTHONPATH=build/python python3 examples/python/backward.py
"""

import numpy as np

import tilefmha

rng = np.random.default_rng(5)
batch, seqlen, heads, dim = 1, 16, 2, 32
q, k, v = (rng.standard_normal((batch, seqlen, heads, dim)).astype(np.float32) for _ in range(3))
do = rng.standard_normal((batch, seqlen, heads, dim)).astype(np.float32)

o, lse = tilefmha.attention(q, k, v, causal=True, return_lse=True)
dq, dk, dv = tilefmha.attention_backward(q, k, v, o, lse, do, causal=True)
print(f"dq {dq.shape}, dk {dk.shape}, dv {dv.shape}")

# The loss sum(o * do) has gradient dq: check one entry by a central difference.
step = 1e-2
bump = np.zeros_like(q)
bump[0, 5, 1, 7] = step
loss = lambda x: float(np.sum(tilefmha.attention(x, k, v, causal=True).astype(np.float64) * do))
numeric = (loss(q + bump) - loss(q - bump)) / (2 * step)
print(f"dq[0, 5, 1, 7] = {dq[0, 5, 1, 7]:.5f}, finite difference {numeric:.5f}")
assert abs(dq[0, 5, 1, 7] - numeric) < 1e-3

try:
    import torch
except ImportError:
    print("PyTorch not installed: skipping the autograd part")
else:
    from tilefmha.torch import attention

    tq, tk, tv = (torch.from_numpy(x).requires_grad_() for x in (q, k, v))
    attention(tq, tk, tv, causal=True).backward(torch.from_numpy(do))
    assert np.allclose(tq.grad.numpy(), dq) and np.allclose(tv.grad.numpy(), dv)
    print("torch autograd through tilefmha.torch.attention gives the same gradients")
