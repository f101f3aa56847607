"""Variable-length (packed) sequences: one call for sequences of different lengths, including
an empty one, equal to attention over each sequence alone.

Run from the repository root after building:  PYTHONPATH=build/python python3 examples/python/varlen.py
"""

import numpy as np

import tilefmha

rng = np.random.default_rng(1)
heads, dim = 4, 64
lengths = [5, 0, 12, 7]
cu_seqlens = np.concatenate([[0], np.cumsum(lengths)])  # prefix sums: [0, 5, 5, 17, 24]
total = int(cu_seqlens[-1])
q, k, v = (rng.standard_normal((total, heads, dim), dtype=np.float32) for _ in range(3))

o = tilefmha.attention_varlen(q, k, v, cu_seqlens, cu_seqlens, causal=True)
print(f"packed o {o.shape} for sequences of lengths {lengths}")

for b, (start, end) in enumerate(zip(cu_seqlens[:-1], cu_seqlens[1:])):
    alone = tilefmha.attention(q[None, start:end], k[None, start:end], v[None, start:end],
                               causal=True)[0]
    assert np.array_equal(o[start:end], alone), b
    print(f"sequence {b}: rows {start}:{end} equal attention over the sequence alone")
