"""tilefmha.attention_varlen (group mode) against per-sequence NumPy attention."""

import numpy as np
import pytest

import numpy_reference as ref
import tilefmha


def packed(rng, lengths, heads, dim):
    return rng.uniform(-1, 1, (int(np.sum(lengths)), heads, dim)).astype(np.float32)


def prefix_sums(lengths):
    return np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)


def per_sequence_reference(q, k, v, cu_q, cu_k, **features):
    """o [total_q, h, dv] and lse [h, total_q] from the batch reference on each sequence."""
    outputs, lses = [], []
    for b in range(len(cu_q) - 1):
        rows_q, rows_k = slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])
        o, lse = ref.attention(q[rows_q][None], k[rows_k][None], v[rows_k][None], **features)
        outputs.append(o[0])
        lses.append(lse[0])
    return np.concatenate(outputs, axis=0), np.concatenate(lses, axis=1)


@pytest.mark.parametrize("features", [{}, {"causal": "bottom_right"}, {"window": (3, 1)},
                                      {"softcap": 1.5, "causal": True}],
                         ids=["plain", "causal_bottom_right", "window", "softcap_causal"])
def test_matches_per_sequence_reference_with_an_empty_sequence(features):
    rng = np.random.default_rng(21)
    lengths_q = [5, 0, 9, 3]  # sequence 1 has no queries
    lengths_k = [7, 4, 0, 12]  # sequence 2 has no keys: its queries see nothing
    cu_q, cu_k = prefix_sums(lengths_q), prefix_sums(lengths_k)
    q, k, v = packed(rng, lengths_q, 4, 16), packed(rng, lengths_k, 2, 16), packed(
        rng, lengths_k, 2, 16)
    o, lse = tilefmha.attention_varlen(q, k, v, cu_q, cu_k, return_lse=True, **features)
    expected_o, expected_lse = per_sequence_reference(q, k, v, cu_q, cu_k, **features)
    assert o.shape == (17, 4, 16) and lse.shape == (4, 17)
    np.testing.assert_allclose(o, expected_o, rtol=2e-6, atol=2e-6)
    assert np.array_equal(np.isneginf(lse), np.isneginf(expected_lse))
    finite = np.isfinite(expected_lse)
    np.testing.assert_allclose(lse[finite], expected_lse[finite], rtol=1e-5, atol=1e-5)
    # Sequence 2 (queries 5..13) has no keys.
    assert np.all(o[5:14] == 0) and np.all(np.isneginf(lse[:, 5:14]))


def test_equal_lengths_match_batch_mode():
    rng = np.random.default_rng(22)
    q = rng.uniform(-1, 1, (3, 6, 2, 32)).astype(np.float32)
    k = rng.uniform(-1, 1, (3, 8, 2, 32)).astype(np.float32)
    v = rng.uniform(-1, 1, (3, 8, 2, 32)).astype(np.float32)
    dense, dense_lse = tilefmha.attention(q, k, v, causal=True, return_lse=True)
    flat = [x.reshape(-1, 2, 32) for x in (q, k, v)]
    o, lse = tilefmha.attention_varlen(*flat, [0, 6, 12, 18], [0, 8, 16, 24], causal=True,
                                       return_lse=True)
    np.testing.assert_array_equal(o.reshape(3, 6, 2, 32), dense)
    np.testing.assert_array_equal(lse.reshape(2, 3, 6).transpose(1, 0, 2), dense_lse)


def test_fp16_and_lists_as_prefix_sums():
    rng = np.random.default_rng(23)
    q, k, v = (packed(rng, [4, 6], 2, 16).astype(np.float16) for _ in range(3))
    o = tilefmha.attention_varlen(q, k, v, [0, 4, 10], [0, 4, 10])
    expected, _ = per_sequence_reference(q, k, v, [0, 4, 10], [0, 4, 10])
    assert o.dtype == np.float16
    np.testing.assert_allclose(o, expected, rtol=2e-3, atol=2e-3)
