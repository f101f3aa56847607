"""Paged KV caches: paged_attention and batch_prefill against contiguous attention over the same
keys, and append_kv (contiguous and paged caches, RoPE) against NumPy."""

import numpy as np
import pytest

import numpy_reference as ref
import tilefmha
from paged_cache import PagedCache


def per_sequence(q, k, v, lengths, **features):
    """o and lse of each batch row b against its first lengths[b] keys."""
    outputs, lses = [], []
    for b, length in enumerate(lengths):
        o, lse = ref.attention(q[b:b + 1], k[b:b + 1, :length], v[b:b + 1, :length], **features)
        outputs.append(o)
        lses.append(lse)
    return np.concatenate(outputs), np.concatenate(lses)


@pytest.mark.parametrize("layout", ["nhd", "hnd"])
@pytest.mark.parametrize("page_size", [1, 4, 16])
@pytest.mark.parametrize("seqlen_q", [1, 3])
def test_paged_attention_matches_contiguous(layout, page_size, seqlen_q):
    rng = np.random.default_rng(31)
    lengths = [13, 5, 0, 21]
    k = rng.uniform(-1, 1, (4, 24, 2, 16)).astype(np.float32)
    v = rng.uniform(-1, 1, (4, 24, 2, 16)).astype(np.float32)
    q = rng.uniform(-1, 1, (4, seqlen_q, 4, 16)).astype(np.float32)
    cache = PagedCache(rng, k, v, lengths, page_size, layout)
    o, lse = tilefmha.paged_attention(q, cache.k_pool, cache.v_pool, cache.block_table, lengths,
                                      layout=layout, causal="bottom_right", return_lse=True)
    expected_o, expected_lse = per_sequence(q, k, v, lengths, causal="bottom_right")
    np.testing.assert_allclose(o, expected_o, rtol=2e-6, atol=2e-6)
    finite = np.isfinite(expected_lse)
    assert np.array_equal(finite, np.isfinite(lse))
    np.testing.assert_allclose(lse[finite], expected_lse[finite], rtol=1e-5, atol=1e-5)


def test_paged_attention_over_a_page_list_matches_the_block_table():
    rng = np.random.default_rng(35)
    lengths = [9, 0, 30]
    k = rng.uniform(-1, 1, (3, 30, 2, 16)).astype(np.float32)
    v = rng.uniform(-1, 1, (3, 30, 2, 16)).astype(np.float32)
    q = rng.uniform(-1, 1, (3, 2, 4, 16)).astype(np.float32)
    cache = PagedCache(rng, k, v, lengths, 4, "nhd")
    by_table = tilefmha.paged_attention(q, cache.k_pool, cache.v_pool, cache.block_table, lengths,
                                        causal="bottom_right")
    by_list = tilefmha.paged_attention(q, cache.k_pool, cache.v_pool, None, lengths,
                                       page_indptr=cache.page_indptr,
                                       page_indices=cache.page_indices, causal="bottom_right")
    np.testing.assert_array_equal(by_list, by_table)
    with pytest.raises(ValueError, match=r"either block_table or page_indptr"):
        tilefmha.paged_attention(q, cache.k_pool, cache.v_pool, cache.block_table, lengths,
                                 page_indptr=cache.page_indptr, page_indices=cache.page_indices)


@pytest.mark.parametrize("table", ["block_table", "page_list"])
def test_batch_prefill_matches_varlen(table):
    rng = np.random.default_rng(32)
    lengths_q, lengths_k = [3, 0, 6], [9, 4, 6]
    cu_q = np.concatenate([[0], np.cumsum(lengths_q)])
    k = rng.uniform(-1, 1, (3, 9, 1, 32)).astype(np.float16)
    v = rng.uniform(-1, 1, (3, 9, 1, 32)).astype(np.float16)
    q = rng.uniform(-1, 1, (int(cu_q[-1]), 2, 32)).astype(np.float16)
    cache = PagedCache(rng, k, v, lengths_k, 4, "nhd")
    pages = ({"block_table": cache.block_table} if table == "block_table" else
             {"page_indptr": cache.page_indptr, "page_indices": cache.page_indices})
    o = tilefmha.batch_prefill(q, cache.k_pool, cache.v_pool, cu_q, lengths_k, causal="bottom_right",
                               **pages)
    packed_k = np.concatenate([k[b, :n] for b, n in enumerate(lengths_k)])
    packed_v = np.concatenate([v[b, :n] for b, n in enumerate(lengths_k)])
    cu_k = np.concatenate([[0], np.cumsum(lengths_k)])
    expected = tilefmha.attention_varlen(q, packed_k, packed_v, cu_q, cu_k, causal="bottom_right")
    assert o.dtype == np.float16 and o.shape == q.shape
    np.testing.assert_array_equal(o, expected)


def test_append_kv_writes_new_tokens_behind_the_cached_ones():
    rng = np.random.default_rng(33)
    k_cache = rng.uniform(-1, 1, (2, 10, 2, 16)).astype(np.float32)
    v_cache = rng.uniform(-1, 1, (2, 10, 2, 8)).astype(np.float32)
    before_k, before_v = k_cache.copy(), v_cache.copy()
    k_new = rng.uniform(-1, 1, (2, 3, 2, 16)).astype(np.float32)
    v_new = rng.uniform(-1, 1, (2, 3, 2, 8)).astype(np.float32)
    lengths = tilefmha.append_kv(k_cache, v_cache, k_new, v_new, [4, 7])
    np.testing.assert_array_equal(lengths, [7, 10])
    for b, start in enumerate([4, 7]):
        np.testing.assert_array_equal(k_cache[b, start:start + 3], k_new[b])
        np.testing.assert_array_equal(v_cache[b, start:start + 3], v_new[b])
        np.testing.assert_array_equal(k_cache[b, :start], before_k[b, :start])
        np.testing.assert_array_equal(k_cache[b, start + 3:], before_k[b, start + 3:])
        np.testing.assert_array_equal(v_cache[b, :start], before_v[b, :start])


@pytest.mark.parametrize("layout", ["nhd", "hnd"])
def test_append_into_pages_then_decode(layout):
    rng = np.random.default_rng(34)
    lengths = [5, 11]
    k = rng.uniform(-1, 1, (2, 14, 2, 16)).astype(np.float32)
    v = rng.uniform(-1, 1, (2, 14, 2, 16)).astype(np.float32)
    cache = PagedCache(rng, k, v, lengths, 4, layout, spare_pages=1)
    k_new = rng.uniform(-1, 1, (2, 1, 2, 16)).astype(np.float32)
    v_new = rng.uniform(-1, 1, (2, 1, 2, 16)).astype(np.float32)
    grown = tilefmha.append_kv(cache.k_pool, cache.v_pool, k_new, v_new, lengths,
                               block_table=cache.block_table, layout=layout)
    q = rng.uniform(-1, 1, (2, 1, 4, 16)).astype(np.float32)
    o = tilefmha.paged_attention(q, cache.k_pool, cache.v_pool, cache.block_table, grown,
                                 layout=layout)
    for b, length in enumerate(lengths):
        keys = np.concatenate([k[b, :length], k_new[b]])
        values = np.concatenate([v[b, :length], v_new[b]])
        np.testing.assert_array_equal(cache.gather(cache.k_pool, b, length + 1), keys)
        expected, _ = ref.attention(q[b:b + 1], keys[None], values[None])
        np.testing.assert_allclose(o[b:b + 1], expected, rtol=2e-6, atol=2e-6)


def rotate(x, positions, rotary_dim, kind):
    """NumPy RoPE of x [..., tokens, heads, dim] at the given absolute positions."""
    cos, sin = tilefmha.rope_tables(int(max(positions)) + 1, rotary_dim)
    c, s = cos[positions][:, None, :], sin[positions][:, None, :]
    out = x.astype(np.float64)
    half = rotary_dim // 2
    first = np.arange(0, rotary_dim, 2) if kind == "interleaved" else np.arange(half)
    second = first + 1 if kind == "interleaved" else np.arange(half) + half
    x1, x2 = out[..., first].copy(), out[..., second].copy()
    out[..., first] = x1 * c - x2 * s
    out[..., second] = x2 * c + x1 * s
    return out


@pytest.mark.parametrize("kind", ["interleaved", "half_rotated"])
def test_append_kv_rotates_new_keys_and_queries(kind):
    rng = np.random.default_rng(35)
    k_cache = np.zeros((2, 8, 2, 16), np.float32)
    v_cache = np.zeros((2, 8, 2, 16), np.float32)
    k_new = rng.uniform(-1, 1, (2, 2, 2, 16)).astype(np.float32)
    v_new = rng.uniform(-1, 1, (2, 2, 2, 16)).astype(np.float32)
    q = rng.uniform(-1, 1, (2, 2, 4, 16)).astype(np.float32)
    q_before = q.copy()
    tilefmha.append_kv(k_cache, v_cache, k_new, v_new, [3, 5], rope=kind, rotary_dim=8, q=q,
                       rotate_q=True)
    for b, start in enumerate([3, 5]):
        positions = np.arange(start, start + 2)
        np.testing.assert_allclose(k_cache[b, start:start + 2],
                                   rotate(k_new[b], positions, 8, kind), rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(q[b], rotate(q_before[b], positions, 8, kind), rtol=1e-6,
                                   atol=1e-6)
        np.testing.assert_array_equal(v_cache[b, start:start + 2], v_new[b])  # V is not rotated


def test_a_page_id_outside_int32_is_named_by_its_entry():
    q = np.zeros((2, 1, 2, 16), dtype=np.float32)
    pool = np.zeros((6, 4, 2, 16), dtype=np.float32)
    with pytest.raises(ValueError, match=r"block_table .* entry 3 \(flattened\) = 4294967296"):
        tilefmha.paged_attention(q, pool, pool, [[0, 1], [2, 2**32]], [5, 3])
    with pytest.raises(ValueError, match=r"page_indices .* entry 1 \(flattened\) = -2147483649"):
        tilefmha.batch_prefill(q[:, 0], pool, pool, [0, 1, 2], [5, 3], page_indptr=[0, 2, 4],
                               page_indices=[0, -2**31 - 1, 2, 3])


def test_check_tables_must_be_a_bool_and_changes_nothing_on_the_cpu():
    rng = np.random.default_rng(12)
    q = rng.uniform(-1, 1, (2, 1, 2, 16)).astype(np.float32)
    pool = rng.uniform(-1, 1, (4, 8, 2, 16)).astype(np.float32)
    table = [[0, 1], [2, 3]]
    plain = tilefmha.paged_attention(q, pool, pool, table, [9, 16])
    checked = tilefmha.paged_attention(q, pool, pool, table, [9, 16], check_tables=True)
    assert np.array_equal(plain, checked)
    with pytest.raises(TypeError, match=r"check_tables = 'yes' must be a bool"):
        tilefmha.paged_attention(q, pool, pool, table, [9, 16], check_tables="yes")
