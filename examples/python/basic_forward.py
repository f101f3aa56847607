"""Basic forward attention on the CPU backend, checked against a few lines of NumPy.

Run from the repository root after building:  PYTHONPATH=build/python python3 examples/python/basic_forward.py
"""

import numpy as np

import tilefmha

rng = np.random.default_rng(0)
batch, seqlen, heads, dim = 2, 64, 4, 32
q, k, v = (rng.standard_normal((batch, seqlen, heads, dim), dtype=np.float32) for _ in range(3))

# Causal attention over [batch, seq, head, dim] arrays, with the log-sum-exp of each row.
o, lse = tilefmha.attention(q, k, v, causal=True, return_lse=True)
print(f"o {o.shape} {o.dtype}, lse {lse.shape} {lse.dtype}")

# The same in NumPy: softmax(Q K^T / sqrt(dim)) V with future keys masked out.
scores = np.einsum("bqhd,bkhd->bhqk", q, k, dtype=np.float64) / np.sqrt(dim)
scores[:, :, np.triu(np.ones((seqlen, seqlen), dtype=bool), k=1)] = -np.inf
expected_lse = np.log(np.exp(scores).sum(axis=-1))
expected = np.einsum("bhqk,bkhd->bqhd", np.exp(scores - expected_lse[..., None]), v)
error = np.abs(o - expected).max()
print(f"max |o - numpy| = {error:.2e}, max |lse - numpy| = {np.abs(lse - expected_lse).max():.2e}")
assert error < 1e-5

# bf16: NumPy has no bfloat16, so bf16 data travels as uint16 bit patterns.
q16, k16, v16 = (tilefmha.bf16_from_float32(x) for x in (q, k, v))
o16 = tilefmha.attention(q16, k16, v16, causal=True, dtype="bf16")
error16 = np.abs(tilefmha.bf16_to_float32(o16) - expected).max()
print(f"bf16: max |o - numpy| = {error16:.2e} (inputs and output rounded to bf16)")
assert error16 < 5e-2
