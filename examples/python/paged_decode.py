"""Decoding with a paged KV cache: a vLLM-style block table maps each sequence's keys to pages
of a shared pool; append_kv writes each new token into its page, paged_attention reads them.

Run from the repository root after building:  PYTHONPATH=build/python python3 examples/python/paged_decode.py
"""

import numpy as np

import tilefmha

rng = np.random.default_rng(4)
batch, nhead_q, nhead_k, dim, page_size, num_pages = 2, 8, 2, 64, 16, 8
k_cache = np.zeros((num_pages, page_size, nhead_k, dim), np.float32)  # layout 'nhd'
v_cache = np.zeros_like(k_cache)
# Sequence 0 owns pages 5 and 2, sequence 1 owns pages 0, 7 and 3 (any order, any pages).
block_table = np.array([[5, 2, 0], [0, 7, 3]], np.int32)
seqlens = np.array([0, 0])

# Prefill with prompts of 20 and 35 tokens, then decode 3 tokens one at a time.
history_k, history_v = [[], []], [[], []]
for step, new_tokens in enumerate([(20, 35), (1, 1), (1, 1), (1, 1)]):
    width = max(new_tokens)
    k_new = rng.standard_normal((batch, width, nhead_k, dim), dtype=np.float32)
    v_new = rng.standard_normal((batch, width, nhead_k, dim), dtype=np.float32)
    if width != min(new_tokens):  # ragged prompts: append each sequence's own tokens
        for b in range(batch):
            lengths = tilefmha.append_kv(k_cache, v_cache, k_new[b:b + 1, :new_tokens[b]],
                                         v_new[b:b + 1, :new_tokens[b]], seqlens[b:b + 1],
                                         block_table=block_table[b:b + 1])
            seqlens[b] = lengths[0]
    else:
        seqlens = tilefmha.append_kv(k_cache, v_cache, k_new, v_new, seqlens,
                                     block_table=block_table)
    for b in range(batch):
        history_k[b].append(k_new[b, :new_tokens[b]])
        history_v[b].append(v_new[b, :new_tokens[b]])

    q = rng.standard_normal((batch, 1, nhead_q, dim), dtype=np.float32)
    o = tilefmha.paged_attention(q, k_cache, v_cache, block_table, seqlens)
    for b in range(batch):
        keys = np.concatenate(history_k[b])[None]
        values = np.concatenate(history_v[b])[None]
        expected = tilefmha.attention(q[b:b + 1], keys, values)
        assert np.allclose(o[b:b + 1], expected, atol=1e-6)
    print(f"step {step}: key lengths {seqlens.tolist()}, paged decode equals contiguous attention")
