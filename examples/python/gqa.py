"""Grouped-query attention: 8 query heads share 2 key/value heads, which equals multi-head
attention with each key/value head repeated over its group (without the copies).

Run from the repository root after building:  PYTHONPATH=build/python python3 examples/python/gqa.py
"""

import numpy as np

import tilefmha

rng = np.random.default_rng(2)
batch, seqlen, nhead_q, nhead_k, dim = 2, 48, 8, 2, 64
q = rng.standard_normal((batch, seqlen, nhead_q, dim), dtype=np.float32)
k = rng.standard_normal((batch, seqlen, nhead_k, dim), dtype=np.float32)
v = rng.standard_normal((batch, seqlen, nhead_k, dim), dtype=np.float32)

o = tilefmha.attention(q, k, v, causal=True)
group = nhead_q // nhead_k
repeated = tilefmha.attention(q, np.repeat(k, group, axis=2), np.repeat(v, group, axis=2),
                              causal=True)
print(f"GQA {nhead_q}/{nhead_k} heads: o {o.shape}, max |GQA - repeated MHA| = "
      f"{np.abs(o - repeated).max():.1e}")
assert np.array_equal(o, repeated)
