"""Inputs at the edges of the engine's semantics: empty problems and empty keys, NaN inputs,
broadcast and misaligned arrays. Each behaves as documented instead of failing or being
misread."""

import numpy as np
import pytest

import tilefmha


def tensors(batch=1, seqlen_q=4, seqlen_k=5, nhead_q=2, nhead_k=2, hdim=16, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.uniform(-1, 1, (batch, seqlen_q, nhead_q, hdim)).astype(np.float32),
            rng.uniform(-1, 1, (batch, seqlen_k, nhead_k, hdim)).astype(np.float32),
            rng.uniform(-1, 1, (batch, seqlen_k, nhead_k, hdim)).astype(np.float32))


def test_no_query_rows_is_a_valid_empty_problem():
    q, k, v = tensors()
    o, lse = tilefmha.attention(q[:, :0], k, v, return_lse=True)
    assert o.shape == (1, 0, 2, 16) and lse.shape == (1, 2, 0)


def test_no_keys_gives_zero_output_and_minus_inf_lse():
    q, k, v = tensors()
    o, lse = tilefmha.attention(q, k[:, :0], v[:, :0], return_lse=True)
    assert np.all(o == 0) and np.all(lse == -np.inf)


def test_varlen_batch_whose_keys_are_all_padding():
    # Two sequences, both with key length 0: total_k = 0 and every row sees no key.
    q, k, v = tensors(seqlen_q=5)
    o, lse = tilefmha.attention_varlen(q[0], k[0, :0], v[0, :0], [0, 2, 5], [0, 0, 0],
                                       return_lse=True, causal="bottom_right")
    assert o.shape == (5, 2, 16)
    assert np.all(o == 0) and np.all(lse == -np.inf)


def test_paged_sequences_without_keys():
    q, _, _ = tensors(batch=2, seqlen_q=1)
    pool = np.zeros((2, 16, 2, 16), np.float32)
    o, lse = tilefmha.paged_attention(q, pool, pool.copy(), np.zeros((2, 1), np.int32), [0, 0],
                                      return_lse=True)
    assert np.all(o == 0) and np.all(lse == -np.inf)


def test_nan_in_q_reaches_only_its_row():
    q, k, v = tensors()
    clean_o, clean_lse = tilefmha.attention(q, k, v, return_lse=True)
    q[0, 1, 0, 3] = np.nan
    o, lse = tilefmha.attention(q, k, v, return_lse=True)
    assert np.isnan(o[0, 1, 0]).all() and np.isnan(lse[0, 0, 1])
    rest = np.ones(o.shape[:3], bool)
    rest[0, 1, 0] = False
    np.testing.assert_array_equal(o[rest], clean_o[rest])
    assert np.isnan(lse).sum() == 1


def test_broadcast_q_is_read_in_place_and_output_is_row_major():
    # One query row broadcast over the sequence (stride 0): valid input, written nowhere.
    q, k, v = tensors()
    broadcast = np.broadcast_to(q[:, :1], q.shape)
    o = tilefmha.attention(broadcast, k, v)
    expected = tilefmha.attention(np.ascontiguousarray(broadcast), k, v)
    np.testing.assert_array_equal(o, expected)
    assert o.flags.c_contiguous


def test_broadcast_last_dimension_of_q_is_blamed_on_q():
    q, k, v = tensors()
    with pytest.raises(ValueError, match=r"^q\.stride\[3\] = 0 but the last dimension must be "
                                         r"contiguous"):
        tilefmha.attention(np.broadcast_to(q[..., :1], q.shape), k, v)


def test_misaligned_float32_view_reads_the_same_values():
    q, k, v = tensors()
    storage = np.zeros(q.nbytes + 1, np.uint8)
    misaligned = np.ndarray(q.shape, np.float32, buffer=storage, offset=1)
    misaligned[...] = q
    assert misaligned.ctypes.data % 4 != 0
    np.testing.assert_array_equal(tilefmha.attention(misaligned, k, v),
                                  tilefmha.attention(q, k, v))
