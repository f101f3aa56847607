"""append_kv's RoPE base and position offsets, and append_kv_and_attend, on the CPU reference:
the chained call equals append_kv followed by attention over the grown caches, rope_theta equals
tables of the same base, offsets move RoPE positions but not slots; fp8 caches (codes copied,
rotated dims rounded back, the chained attention keeping the descales and out_dtype)."""

import numpy as np
import pytest

import tilefmha

LENGTHS = [5, 0, 9]


def arrays(seed, new=2, dim=16, capacity=16):
    rng = np.random.default_rng(seed)
    k_cache = rng.uniform(-1, 1, (3, capacity, 2, dim)).astype(np.float32)
    v_cache = rng.uniform(-1, 1, (3, capacity, 2, dim)).astype(np.float32)
    k_new = rng.uniform(-1, 1, (3, new, 2, dim)).astype(np.float32)
    v_new = rng.uniform(-1, 1, (3, new, 2, dim)).astype(np.float32)
    q = rng.uniform(-1, 1, (3, new, 4, dim)).astype(np.float32)
    return k_cache, v_cache, k_new, v_new, q


def rotate_half(x, position, theta, rotary_dim):
    half = rotary_dim // 2
    angle = position * theta ** (-2.0 * np.arange(half) / rotary_dim)
    out = x.astype(np.float64).copy()
    x1, x2 = x[..., :half], x[..., half:rotary_dim]
    out[..., :half] = x1 * np.cos(angle) - x2 * np.sin(angle)
    out[..., half:rotary_dim] = x2 * np.cos(angle) + x1 * np.sin(angle)
    return out


def test_append_then_attend_equals_append_and_attention_over_the_grown_cache():
    k_cache, v_cache, k_new, v_new, q = arrays(1)
    k2, v2, q2 = k_cache.copy(), v_cache.copy(), q.copy()
    o, lse = tilefmha.append_kv_and_attend(q, k_cache, v_cache, k_new, v_new, LENGTHS,
                                           rope="neox", rotate_q=True, causal="bottom_right",
                                           return_lse=True)
    grown = tilefmha.append_kv(k2, v2, k_new, v_new, LENGTHS, rope="neox", q=q2, rotate_q=True)
    np.testing.assert_array_equal(k_cache, k2)
    np.testing.assert_array_equal(q, q2)
    for b, keys in enumerate(grown):
        expected, expected_lse = tilefmha.attention(q2[b:b + 1], k2[b:b + 1, :keys],
                                                    v2[b:b + 1, :keys], causal="bottom_right",
                                                    return_lse=True)
        np.testing.assert_allclose(o[b:b + 1], expected, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(lse[b:b + 1], expected_lse, rtol=1e-6, atol=1e-6)


def test_paged_append_then_attend_sees_the_new_tokens():
    k_cache, v_cache, k_new, v_new, q = arrays(2, new=1)
    # One page of 16 tokens per sequence, in reverse order.
    block_table = [[2], [1], [0]]
    k_pool, v_pool = k_cache[::-1].copy(), v_cache[::-1].copy()
    o = tilefmha.append_kv_and_attend(q, k_pool, v_pool, k_new, v_new, LENGTHS,
                                      block_table=block_table, causal="bottom_right")
    tilefmha.append_kv(k_cache, v_cache, k_new, v_new, LENGTHS)
    expected = tilefmha.attention_varlen(
        q.reshape(3, 4, 16), np.concatenate([k_cache[b, :n + 1] for b, n in enumerate(LENGTHS)]),
        np.concatenate([v_cache[b, :n + 1] for b, n in enumerate(LENGTHS)]), [0, 1, 2, 3],
        np.cumsum([0] + [n + 1 for n in LENGTHS]).tolist(), causal="bottom_right")
    np.testing.assert_allclose(o.reshape(3, 4, 16), expected, rtol=1e-6, atol=1e-6)


def test_rope_theta_and_position_offsets():
    k_cache, v_cache, k_new, v_new, q = arrays(3)
    offsets = [4, 100, 0]
    tilefmha.append_kv(k_cache, v_cache, k_new, v_new, LENGTHS, rope="neox", rotary_dim=10,
                       rope_theta=500.0, rope_position_offsets=offsets)
    for b, n in enumerate(LENGTHS):
        for t in range(2):
            expected = rotate_half(k_new[b, t], n + t + offsets[b], 500.0, 10)
            np.testing.assert_allclose(k_cache[b, n + t], expected, rtol=1e-6, atol=1e-6)
            np.testing.assert_array_equal(v_cache[b, n + t], v_new[b, t])


def test_default_tables_cover_the_offset_positions():
    k_cache, v_cache, k_new, v_new, _ = arrays(4)
    with_tables = (k_cache.copy(), v_cache.copy())
    tilefmha.append_kv(k_cache, v_cache, k_new, v_new, LENGTHS, rope="interleaved",
                       rope_position_offsets=[0, 50, 2])
    tilefmha.append_kv(*with_tables, k_new, v_new, LENGTHS, rope="interleaved",
                       rope_theta=10000.0, rope_position_offsets=[0, 50, 2])
    np.testing.assert_allclose(k_cache, with_tables[0], rtol=1e-6, atol=1e-6)


def test_rope_base_errors_name_the_argument():
    k_cache, v_cache, k_new, v_new, _ = arrays(5)
    cos, sin = tilefmha.rope_tables(32, 16)
    with pytest.raises(ValueError, match=r"rope_theta and rope_cos/rope_sin are both given"):
        tilefmha.append_kv(k_cache, v_cache, k_new, v_new, LENGTHS, rope="neox", rope_cos=cos,
                           rope_sin=sin, rope_theta=10000.0)
    with pytest.raises(ValueError, match=r"rope_position_offsets has 2 entries but batch = 3"):
        tilefmha.append_kv(k_cache, v_cache, k_new, v_new, LENGTHS, rope="neox",
                           rope_theta=10000.0, rope_position_offsets=[1, 2])
    with pytest.raises(ValueError, match=r"takes no bias"):
        tilefmha.append_kv_and_attend(arrays(5)[4], k_cache, v_cache, k_new, v_new, LENGTHS,
                                      alibi_slopes=np.ones(4, dtype=np.float32))


# --- fp8 caches (per-tensor scales: the append moves codes) --------------------------------------

MANTISSA_BITS = {"fp8_e4m3": 3, "fp8_e5m2": 2}


def fp8_arrays(seed, fmt, new=2, dim=16, capacity=16):
    """arrays() as uint8 codes of `fmt`, with every code (NaN and infinities too) in v_new."""
    codes = [tilefmha.fp8_from_float32(x * 8, fmt) for x in arrays(seed, new, dim, capacity)]
    codes[3] = (np.arange(codes[3].size) % 256).astype(np.uint8).reshape(codes[3].shape)
    return codes


@pytest.mark.parametrize("fmt", ["fp8_e4m3", "fp8_e5m2"])
def test_fp8_append_copies_codes_and_rounds_the_rotated_dims(fmt):
    k_cache, v_cache, k_new, v_new, q = fp8_arrays(6, fmt)
    q_before = q.copy()
    rotary = 8
    grown = tilefmha.append_kv(k_cache, v_cache, k_new, v_new, LENGTHS, rope="neox",
                               rotary_dim=rotary, rope_theta=100.0, q=q, rotate_q=True,
                               dtype=fmt)
    np.testing.assert_array_equal(grown, np.array(LENGTHS) + 2)
    step = 2.0 ** -MANTISSA_BITS[fmt]
    for b, n in enumerate(LENGTHS):
        # Byte copies: V (whose codes include NaN payloads and infinities) and K past rotary_dim.
        np.testing.assert_array_equal(v_cache[b, n:n + 2], v_new[b])
        np.testing.assert_array_equal(k_cache[b, n:n + 2, :, rotary:], k_new[b, :, :, rotary:])
        np.testing.assert_array_equal(q[b, :, :, rotary:], q_before[b, :, :, rotary:])
        # Rotated dims: the rotation of the decoded codes, rounded to the format.
        for t in range(2):
            expected = rotate_half(tilefmha.fp8_to_float32(k_new[b, t], fmt), n + t, 100.0, rotary)
            got = tilefmha.fp8_to_float32(k_cache[b, n + t], fmt)
            np.testing.assert_allclose(got[..., :rotary], expected[..., :rotary], rtol=step,
                                       atol=2.0 ** -9)


def test_fp8_append_then_attend_keeps_the_descales_and_out_dtype():
    fmt = "fp8_e4m3"
    k_cache, v_cache, k_new, v_new, q = fp8_arrays(7, fmt)
    v_new = tilefmha.fp8_from_float32(np.random.default_rng(8).uniform(-8, 8, v_new.shape), fmt)
    k2, v2, q2 = k_cache.copy(), v_cache.copy(), q.copy()
    descales = {"q_descale": 0.5, "k_descale": 0.25, "v_descale": 2.0}
    o = tilefmha.append_kv_and_attend(q, k_cache, v_cache, k_new, v_new, LENGTHS, rope="neox",
                                      rotate_q=True, causal="bottom_right", dtype=fmt,
                                      out_dtype="fp32", **descales)
    assert o.dtype == np.float32
    grown = tilefmha.append_kv(k2, v2, k_new, v_new, LENGTHS, rope="neox", q=q2, rotate_q=True,
                               dtype=fmt)
    np.testing.assert_array_equal(k_cache, k2)
    np.testing.assert_array_equal(q, q2)
    for b, keys in enumerate(grown):
        expected = tilefmha.attention(q2[b:b + 1], k2[b:b + 1, :keys], v2[b:b + 1, :keys],
                                      causal="bottom_right", dtype=fmt, out_dtype="fp32",
                                      **descales)
        np.testing.assert_allclose(o[b:b + 1], expected, rtol=1e-6, atol=1e-6)


def test_fp8_append_refuses_mixed_formats_and_block_descales():
    k_cache, v_cache, k_new, v_new, q = fp8_arrays(9, "fp8_e4m3")
    with pytest.raises(ValueError, match=r"^k_new\.dtype = uint8: pass dtype='fp8_e4m3'"):
        tilefmha.append_kv(k_cache, v_cache, k_new, v_new, LENGTHS)
    with pytest.raises(ValueError, match=r"^v_cache holds fp32 data but k_new holds fp8_e4m3"):
        tilefmha.append_kv(k_cache, np.zeros(v_cache.shape, np.float32), k_new, v_new, LENGTHS,
                           dtype="fp8_e4m3")
    blocks = {name: np.ones((3, heads, 1), np.float32)
              for name, heads in (("q_descale", 4), ("k_descale", 2), ("v_descale", 2))}
    with pytest.raises(ValueError, match=r"^q_descale is a per-block tensor, but append_kv"):
        tilefmha.append_kv_and_attend(q, k_cache, v_cache, k_new, v_new, LENGTHS,
                                      dtype="fp8_e4m3", **blocks)
