"""bshd and bhsd memory layouts: tilefmha takes logical [batch, seq, head, dim] views with any
strides, so [batch, head, seq, dim] memory is passed as a transposed view, without a copy.
The output follows the query's memory order.

Run from the repository root after building:  PYTHONPATH=build/python python3 examples/python/layouts.py
"""

import numpy as np

import tilefmha

rng = np.random.default_rng(3)
batch, heads, seqlen, dim = 2, 4, 32, 64
# Memory in bhsd order, as many frameworks keep it.
q_bhsd, k_bhsd, v_bhsd = (rng.standard_normal((batch, heads, seqlen, dim), dtype=np.float32)
                          for _ in range(3))

# Logical bshd views over the same memory (np.shares_memory: no copy was made).
q, k, v = (x.transpose(0, 2, 1, 3) for x in (q_bhsd, k_bhsd, v_bhsd))
assert np.shares_memory(q, q_bhsd)
o = tilefmha.attention(q, k, v, window=(8, 0))
print(f"q strides {q.strides} (bhsd memory), o strides {o.strides}")
assert o.transpose(0, 2, 1, 3).flags.c_contiguous  # o is bhsd in memory too

# The same problem from bshd memory gives the same numbers.
o_bshd = tilefmha.attention(*(np.ascontiguousarray(x) for x in (q, k, v)), window=(8, 0))
assert np.array_equal(o, o_bshd)
print("bshd and bhsd inputs agree exactly")
