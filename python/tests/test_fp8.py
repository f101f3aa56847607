"""fp8 inputs on the CPU backend: the NumPy codecs, every forward function with per-tensor,
per-block and per-page descales against float64 NumPy attention on the dequantized inputs (an
oracle that never sees the engine's dequantization), and the argument errors.

The CPU reference dequantizes exactly and accumulates in double, so the only error left is O's
final rounding: half a unit in the last place, 2^-8 relative for bf16 O (8 significant bits)
and 2^-24 for fp32 O."""

import numpy as np
import pytest

import numpy_reference as ref
import tilefmha
from paged_cache import PagedCache

FORMATS = ["fp8_e4m3", "fp8_e5m2"]
BF16_RTOL = 2.0**-7  # a whole bf16 unit in the last place: twice the rounding bound
FP32_TOL = 1e-6


def quantized(rng, shape, fmt, descale):
    """uint8 codes of values uniform in [-1, 1) divided by `descale`, and their float64
    dequantized values (code values times descale, decoded by the test's own table)."""
    codes = tilefmha.fp8_from_float32(rng.uniform(-1, 1, shape) / descale, fmt)
    return codes, ref.fp8_decode(codes, fmt) * descale


def block_scales(rng, batch, heads, seqlen):
    """float32 [batch, heads, ceil(seqlen / 128)] descales: powers of two in [2^-6, 2^-2], so
    the blocks of one row differ by whole factors."""
    blocks = -(-seqlen // 128)
    return np.ldexp(1.0, rng.integers(-6, -1, (batch, heads, blocks))).astype(np.float32)


def per_token(scales, seqlen):
    """[batch, seqlen, heads, 1] factors of per-block scales [batch, heads, blocks]."""
    return np.repeat(scales, 128, axis=2)[:, :, :seqlen].transpose(0, 2, 1)[..., None]


def assert_bf16_close(o, expected):
    assert o.dtype == np.uint16
    np.testing.assert_allclose(tilefmha.bf16_to_float32(o), expected, rtol=BF16_RTOL, atol=1e-7)


def assert_lse_close(lse, expected):
    finite = np.isfinite(expected)
    assert np.array_equal(finite, np.isfinite(lse))
    np.testing.assert_allclose(lse[finite], expected[finite], rtol=1e-5, atol=1e-5)


# --- The NumPy codecs ---------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_code_decodes_like_the_bit_fields_say_and_encodes_back(fmt):
    codes = np.arange(256, dtype=np.uint8)
    expected = ref.fp8_decode(codes, fmt)
    values = tilefmha.fp8_to_float32(codes, fmt)
    assert values.dtype == np.float32
    np.testing.assert_array_equal(values, expected.astype(np.float32))
    finite = np.isfinite(expected)
    np.testing.assert_array_equal(tilefmha.fp8_from_float32(values[finite], fmt), codes[finite])
    largest = ref.FP8_FORMATS[fmt][2]
    assert np.nanmax(expected[finite]) == largest


@pytest.mark.parametrize("fmt", FORMATS)
def test_encoding_rounds_to_the_nearest_code_ties_to_even_and_saturates(fmt):
    rng = np.random.default_rng(3)
    largest = ref.FP8_FORMATS[fmt][2]
    values = (rng.standard_normal(4000) * np.ldexp(1.0, rng.integers(-18, 17, 4000))).clip(
        -largest, largest).astype(np.float32)
    codes = tilefmha.fp8_from_float32(values, fmt)
    nearest = ref.fp8_decode(ref.fp8_nearest_codes(values, fmt), fmt)
    # Random values are never exactly halfway, so the nearest value is unique.
    np.testing.assert_array_equal(ref.fp8_decode(codes, fmt), nearest)
    # Halfway between 1 and the next code: to 1 (even mantissa); then to the even code above.
    step = 2.0 ** -ref.FP8_FORMATS[fmt][1]
    halfway = np.array([1 + step / 2, 1 + 1.5 * step, -(1 + step / 2)], np.float32)
    np.testing.assert_array_equal(tilefmha.fp8_to_float32(tilefmha.fp8_from_float32(halfway, fmt),
                                                          fmt), [1, 1 + 2 * step, -1])
    beyond = np.array([2 * largest, np.inf, -np.inf, np.nan], np.float32)
    decoded = tilefmha.fp8_to_float32(tilefmha.fp8_from_float32(beyond, fmt), fmt)
    np.testing.assert_array_equal(decoded[:3], [largest, largest, -largest])
    assert np.isnan(decoded[3])
    # Every NaN is 0x7F, as the engine's quantization and the GPU's cvt.rn.satfinite write it.
    np.testing.assert_array_equal(tilefmha.fp8_from_float32([np.nan, -np.nan], fmt), [0x7F] * 2)


def test_codecs_refuse_what_they_cannot_mean():
    with pytest.raises(ValueError, match=r"dtype = 'bf16' is not an fp8 format"):
        tilefmha.fp8_from_float32([1.0], "bf16")
    with pytest.raises(TypeError, match=r"codes\.dtype = float32: fp8_to_float32 takes uint8"):
        tilefmha.fp8_to_float32(np.ones(3, np.float32))
    with pytest.raises(TypeError, match=r"codes\.dtype = int64"):
        tilefmha.fp8_to_float32(np.array([256]))


def test_codecs_agree_with_ml_dtypes():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    rng = np.random.default_rng(4)
    values = rng.uniform(-300, 300, 2000).astype(np.float32)
    for fmt, kind in (("fp8_e4m3", ml_dtypes.float8_e4m3fn), ("fp8_e5m2", ml_dtypes.float8_e5m2)):
        theirs = values.astype(kind)
        np.testing.assert_array_equal(tilefmha.fp8_from_float32(values, fmt),
                                      theirs.view(np.uint8))
        np.testing.assert_array_equal(tilefmha.fp8_to_float32(theirs, fmt),
                                      theirs.astype(np.float32))


# --- Per-tensor descales ------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("features", [{}, {"causal": True}, {"causal": "bottom_right",
                                                             "softcap": 2.0}],
                         ids=["plain", "causal", "bottom_right_softcap"])
def test_per_tensor_matches_attention_on_the_dequantized_inputs(fmt, features):
    rng = np.random.default_rng(11)
    q, q_ref = quantized(rng, (2, 9, 4, 32), fmt, 1 / 64)
    k, k_ref = quantized(rng, (2, 13, 2, 32), fmt, 1 / 128)
    v, v_ref = quantized(rng, (2, 13, 2, 16), fmt, 1 / 32)
    o, lse = tilefmha.attention(q, k, v, dtype=fmt, q_descale=1 / 64, k_descale=1 / 128,
                                v_descale=1 / 32, return_lse=True, **features)
    expected_o, expected_lse = ref.attention(q_ref, k_ref, v_ref, **features)
    assert o.shape == (2, 9, 4, 16)
    assert_bf16_close(o, expected_o)
    assert_lse_close(lse, expected_lse)


def test_descales_default_to_one_and_fp32_output_is_exact_to_float32():
    rng = np.random.default_rng(12)
    q, q_ref = quantized(rng, (1, 7, 2, 16), "fp8_e4m3", 1.0)
    k, k_ref = quantized(rng, (1, 11, 2, 16), "fp8_e4m3", 1.0)
    v, v_ref = quantized(rng, (1, 11, 2, 16), "fp8_e4m3", 1.0)
    o = tilefmha.attention(q, k, v, dtype="fp8_e4m3", out_dtype="fp32")
    assert o.dtype == np.float32
    np.testing.assert_allclose(o, ref.attention(q_ref, k_ref, v_ref)[0], rtol=FP32_TOL,
                               atol=FP32_TOL)
    # A descale given as a 0-d or one-element array is read as a float.
    scaled = tilefmha.attention(q, k, v, dtype="fp8_e4m3", out_dtype="float32",
                                q_descale=np.float32(0.5), k_descale=np.array(1.0),
                                v_descale=np.array([0.25]))
    np.testing.assert_allclose(scaled, ref.attention(q_ref * 0.5, k_ref, v_ref * 0.25)[0],
                               rtol=FP32_TOL, atol=FP32_TOL)


def test_transposed_codes_are_read_in_place_and_o_follows_q_memory_order():
    rng = np.random.default_rng(13)
    q, q_ref = quantized(rng, (2, 4, 6, 16), "fp8_e5m2", 1 / 8)  # [batch, head, seq, dim]
    k, k_ref = quantized(rng, (2, 4, 10, 16), "fp8_e5m2", 1 / 8)
    v, v_ref = quantized(rng, (2, 4, 10, 16), "fp8_e5m2", 1 / 8)
    views = [x.transpose(0, 2, 1, 3) for x in (q, k, v)]
    o = tilefmha.attention(*views, dtype="fp8_e5m2", q_descale=1 / 8, k_descale=1 / 8,
                           v_descale=1 / 8)
    assert o.strides[1] < o.strides[2]  # bhsd in, bhsd out
    expected = ref.attention(*(x.transpose(0, 2, 1, 3) for x in (q_ref, k_ref, v_ref)))[0]
    assert_bf16_close(o, expected)


def test_explain_names_the_fp8_problem():
    codes = np.zeros((1, 4, 2, 16), np.uint8)
    text = tilefmha.explain(codes, codes, codes, dtype="fp8_e4m3", q_descale=0.5)
    assert "cpu reference" in text and "fp8_e4m3" in text and "per_tensor" in text


# --- Per-block descales -------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", FORMATS)
def test_per_block_dequantizes_each_block_of_128_tokens(fmt):
    rng = np.random.default_rng(21)
    batch, hq, hk, sq, sk = 2, 4, 2, 130, 260  # 2 query blocks, 3 key blocks (the last short)
    scales = {"q": block_scales(rng, batch, hq, sq), "k": block_scales(rng, batch, hk, sk),
              "v": block_scales(rng, batch, hk, sk)}
    codes, values = {}, {}
    for name, shape in (("q", (batch, sq, hq, 16)), ("k", (batch, sk, hk, 16)),
                        ("v", (batch, sk, hk, 16))):
        codes[name] = tilefmha.fp8_from_float32(rng.uniform(-8, 8, shape), fmt)
        values[name] = ref.fp8_decode(codes[name], fmt) * per_token(scales[name], shape[1])
    # A strided (column-major) scale array is copied, not refused.
    o, lse = tilefmha.attention(codes["q"], codes["k"], codes["v"], dtype=fmt, causal=True,
                                q_descale=np.asfortranarray(scales["q"]), k_descale=scales["k"],
                                v_descale=scales["v"], return_lse=True)
    expected_o, expected_lse = ref.attention(values["q"], values["k"], values["v"], causal=True)
    assert_bf16_close(o, expected_o)
    assert_lse_close(lse, expected_lse)


@pytest.mark.parametrize("fmt", FORMATS)
def test_per_block_in_group_mode_counts_tokens_from_each_sequence_start(fmt):
    rng = np.random.default_rng(22)
    lengths_q, lengths_k = [130, 0, 5], [3, 140, 129]
    cu_q = np.concatenate([[0], np.cumsum(lengths_q)])
    cu_k = np.concatenate([[0], np.cumsum(lengths_k)])
    hq, hk = 2, 1
    q = tilefmha.fp8_from_float32(rng.uniform(-8, 8, (cu_q[-1], hq, 16)), fmt)
    k = tilefmha.fp8_from_float32(rng.uniform(-8, 8, (cu_k[-1], hk, 16)), fmt)
    v = tilefmha.fp8_from_float32(rng.uniform(-8, 8, (cu_k[-1], hk, 16)), fmt)
    # [sequences, heads, ceil(longest / 128)]: 2 blocks of queries, 2 of keys.
    q_scales, k_scales, v_scales = (block_scales(rng, 3, hq, 130), block_scales(rng, 3, hk, 140),
                                    block_scales(rng, 3, hk, 140))
    o, lse = tilefmha.attention_varlen(q, k, v, cu_q, cu_k, dtype=fmt, causal="bottom_right",
                                       q_descale=q_scales, k_descale=k_scales,
                                       v_descale=v_scales, return_lse=True)
    assert o.shape == (135, hq, 16) and lse.shape == (hq, 135)
    for b in range(3):
        rows_q, rows_k = slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])
        q_ref = ref.fp8_decode(q[rows_q], fmt)[None] * per_token(q_scales[b:b + 1], lengths_q[b])
        k_ref = ref.fp8_decode(k[rows_k], fmt)[None] * per_token(k_scales[b:b + 1], lengths_k[b])
        v_ref = ref.fp8_decode(v[rows_k], fmt)[None] * per_token(v_scales[b:b + 1], lengths_k[b])
        expected_o, expected_lse = ref.attention(q_ref, k_ref, v_ref, causal="bottom_right")
        assert_bf16_close(o[rows_q], expected_o[0])
        assert_lse_close(lse[:, rows_q], expected_lse[0])


# --- Paged caches: per-page and per-tensor descales ----------------------------------------------


def fp8_pages(rng, fmt, lengths, heads, dim, page_size, layout):
    """A PagedCache over uint8 codes whose unused slots hold 0x7f (NaN in both formats, so a
    slot read by mistake shows) and per-page float32 descales [num_pages, heads]. Returns
    (cache, k_scales, v_scales)."""
    capacity = max(lengths)
    k = tilefmha.fp8_from_float32(rng.uniform(-8, 8, (len(lengths), capacity, heads, dim)), fmt)
    v = tilefmha.fp8_from_float32(rng.uniform(-8, 8, (len(lengths), capacity, heads, dim)), fmt)
    cache = PagedCache(rng, k, v, lengths, page_size, layout, fill=0x7F)
    pages = cache.k_pool.shape[0]
    k_scales = np.ldexp(1.0, rng.integers(-6, -1, (pages, heads))).astype(np.float32)
    v_scales = np.ldexp(1.0, rng.integers(-6, -1, (pages, heads))).astype(np.float32)
    return cache, k_scales, v_scales


def dequantized_keys(cache, pool, scales, fmt, b, length):
    """Sequence b's first `length` keys [length, heads, dim], each page's codes times its
    per-page, per-head descale."""
    rows = cache.gather(pool, b, length)
    if not length:
        return np.zeros(rows.shape)
    pages = cache.block_table[b, np.arange(length) // cache.page_size]
    return ref.fp8_decode(rows, fmt) * scales[pages][:, :, None]


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("layout", ["nhd", "hnd"])
def test_paged_attention_with_per_page_descales(fmt, layout):
    rng = np.random.default_rng(31)
    lengths, hq, hk, dim = [13, 0, 21], 4, 2, 16
    cache, k_scales, v_scales = fp8_pages(rng, fmt, lengths, hk, dim, 4, layout)
    q, q_ref = quantized(rng, (3, 2, hq, dim), fmt, 1 / 16)
    o, lse = tilefmha.paged_attention(q, cache.k_pool, cache.v_pool, cache.block_table, lengths,
                                      layout=layout, dtype=fmt, causal="bottom_right",
                                      q_descale=1 / 16, k_page_descale=k_scales,
                                      v_page_descale=v_scales, return_lse=True)
    for b, length in enumerate(lengths):
        k_ref = dequantized_keys(cache, cache.k_pool, k_scales, fmt, b, length)
        v_ref = dequantized_keys(cache, cache.v_pool, v_scales, fmt, b, length)
        expected_o, expected_lse = ref.attention(q_ref[b:b + 1], k_ref[None], v_ref[None],
                                                 causal="bottom_right")
        assert_bf16_close(o[b:b + 1], expected_o)
        assert_lse_close(lse[b:b + 1], expected_lse)


@pytest.mark.parametrize("fmt", FORMATS)
def test_batch_prefill_with_per_page_and_per_tensor_descales(fmt):
    rng = np.random.default_rng(32)
    lengths_q, lengths_k, hq, hk, dim = [3, 0, 6], [9, 4, 6], 2, 1, 32
    cu_q = np.concatenate([[0], np.cumsum(lengths_q)])
    cache, k_scales, v_scales = fp8_pages(rng, fmt, lengths_k, hk, dim, 4, "nhd")
    q, q_ref = quantized(rng, (int(cu_q[-1]), hq, dim), fmt, 1 / 4)
    pages = {"page_indptr": cache.page_indptr, "page_indices": cache.page_indices}
    o = tilefmha.batch_prefill(q, cache.k_pool, cache.v_pool, cu_q, lengths_k, dtype=fmt,
                               causal="bottom_right", q_descale=0.25, k_page_descale=k_scales,
                               v_page_descale=v_scales, out_dtype="fp32", **pages)
    # The same codes under per-tensor descales: every page scaled alike.
    o_tensor = tilefmha.batch_prefill(q, cache.k_pool, cache.v_pool, cu_q, lengths_k, dtype=fmt,
                                      causal="bottom_right", q_descale=0.25, k_descale=0.5,
                                      v_descale=0.125, **pages)
    for b in range(3):
        rows = slice(cu_q[b], cu_q[b + 1])
        k_codes = ref.fp8_decode(cache.gather(cache.k_pool, b, lengths_k[b]), fmt)
        v_codes = ref.fp8_decode(cache.gather(cache.v_pool, b, lengths_k[b]), fmt)
        k_ref = dequantized_keys(cache, cache.k_pool, k_scales, fmt, b, lengths_k[b])
        v_ref = dequantized_keys(cache, cache.v_pool, v_scales, fmt, b, lengths_k[b])
        expected = ref.attention(q_ref[rows][None], k_ref[None], v_ref[None],
                                 causal="bottom_right")[0][0]
        np.testing.assert_allclose(o[rows], expected, rtol=FP32_TOL, atol=FP32_TOL)
        expected = ref.attention(q_ref[rows][None], k_codes[None] * 0.5, v_codes[None] * 0.125,
                                 causal="bottom_right")[0][0]
        assert_bf16_close(o_tensor[rows], expected)


def test_paged_attention_with_per_block_descales_counts_keys_per_sequence():
    rng = np.random.default_rng(33)
    lengths, hq, hk, dim, fmt = [140, 3], 2, 1, 16, "fp8_e4m3"
    cache, _, _ = fp8_pages(rng, fmt, lengths, hk, dim, 16, "nhd")
    q = tilefmha.fp8_from_float32(rng.uniform(-8, 8, (2, 1, hq, dim)), fmt)
    # [batch, heads, ceil(longest key count / 128)]: two key blocks.
    q_scales, k_scales, v_scales = (block_scales(rng, 2, hq, 1), block_scales(rng, 2, hk, 140),
                                    block_scales(rng, 2, hk, 140))
    o = tilefmha.paged_attention(q, cache.k_pool, cache.v_pool, cache.block_table, lengths,
                                 dtype=fmt, q_descale=q_scales, k_descale=k_scales,
                                 v_descale=v_scales, out_dtype="fp32")
    for b, length in enumerate(lengths):
        k_ref = (ref.fp8_decode(cache.gather(cache.k_pool, b, length), fmt)[None]
                 * per_token(k_scales[b:b + 1], length))
        v_ref = (ref.fp8_decode(cache.gather(cache.v_pool, b, length), fmt)[None]
                 * per_token(v_scales[b:b + 1], length))
        q_ref = ref.fp8_decode(q[b:b + 1], fmt) * per_token(q_scales[b:b + 1], 1)
        np.testing.assert_allclose(o[b:b + 1], ref.attention(q_ref, k_ref, v_ref)[0],
                                   rtol=FP32_TOL, atol=FP32_TOL)


# --- Argument errors ----------------------------------------------------------------------------


def fp8_tensors(batch=1, seqlen_q=4, seqlen_k=5, nhead_q=2, nhead_k=2, dim=16):
    rng = np.random.default_rng(41)
    return tuple(tilefmha.fp8_from_float32(rng.uniform(-1, 1, (batch, s, h, dim)))
                 for s, h in ((seqlen_q, nhead_q), (seqlen_k, nhead_k), (seqlen_k, nhead_k)))


def test_descales_and_output_dtype_of_inputs_that_are_not_fp8():
    q = np.zeros((1, 4, 2, 16), np.float32)
    with pytest.raises(ValueError, match=r"^k_descale is a descale factor of fp8 inputs, but q "
                                         r"holds fp32"):
        tilefmha.attention(q, q, q, k_descale=0.5)
    with pytest.raises(ValueError, match=r"^out_dtype = 'bf16' but q holds fp32 data: only fp8"):
        tilefmha.attention(q, q, q, out_dtype="bf16")
    assert tilefmha.attention(q, q, q, out_dtype="fp32").dtype == np.float32
    with pytest.raises(ValueError, match=r"^out_dtype = 'fp64' is not supported"):
        tilefmha.attention(q, q, q, out_dtype="fp64")


def test_fp8_dtype_errors():
    q, k, v = fp8_tensors()
    with pytest.raises(ValueError, match=r"^q\.dtype = uint8: pass dtype='fp8_e4m3' or "
                                         r"dtype='fp8_e5m2'"):
        tilefmha.attention(q, k, v)
    with pytest.raises(ValueError, match=r"^q\.dtype = uint8: pass dtype='fp8_e4m3'"):
        tilefmha.attention(q, k, v, dtype="bf16")
    with pytest.raises(ValueError, match=r"^k holds fp32 data but q holds fp8_e4m3: q, k and v "
                                         r"must share one fp8 format"):
        tilefmha.attention(q, k.astype(np.float32), v, dtype="fp8_e4m3")
    with pytest.raises(ValueError, match=r"^v_cache\.dtype = uint16: pass dtype='bf16'"):
        tilefmha.paged_attention(q, k, v.view(np.uint16), [[0]], [1], dtype="fp8_e4m3")
    with pytest.raises(ValueError, match=r"^out_dtype = 'fp16': fp8 inputs give O in 'bf16' or "
                                         r"'fp32'"):
        tilefmha.attention(q, k, v, dtype="fp8_e4m3", out_dtype="fp16")
    with pytest.raises(ValueError, match=r"^dtype = 'fp8_e5m2' but q holds float32"):
        tilefmha.attention(q.astype(np.float32), k, v, dtype="fp8_e5m2")


def test_fp8_inputs_are_forward_only():
    q, k, v = fp8_tensors()
    o = np.zeros((1, 4, 2, 16), np.float32)
    lse = np.zeros((1, 2, 4), np.float32)
    with pytest.raises(ValueError, match=r"^q\.dtype = uint8 is not supported"):
        tilefmha.attention_backward(q, k, v, o, lse, o, dtype="fp8_e4m3")


def test_scalar_descale_errors():
    q, k, v = fp8_tensors()
    with pytest.raises(TypeError, match=r"^q_descale = True must be a float"):
        tilefmha.attention(q, k, v, dtype="fp8_e4m3", q_descale=True)
    with pytest.raises(TypeError, match=r"^v_descale must be a float or a float32 tensor, got "
                                        r"list"):
        tilefmha.attention(q, k, v, dtype="fp8_e4m3", v_descale=[0.5])
    with pytest.raises(ValueError, match=r"^k_descale\.shape = \[2, 3\]: expected a float"):
        tilefmha.attention(q, k, v, dtype="fp8_e4m3", k_descale=np.ones((2, 3), np.float32))
    with pytest.raises(ValueError, match=r"fp8\.q_descale = -1 must be finite and > 0"):
        tilefmha.attention(q, k, v, dtype="fp8_e4m3", q_descale=-1.0)
    with pytest.raises(ValueError, match=r"fp8\.v_descale = inf must be finite"):
        tilefmha.attention(q, k, v, dtype="fp8_e4m3", v_descale=float("inf"))


def test_block_descale_errors():
    q, k, v = fp8_tensors()  # batch 1, heads 2, 4 queries and 5 keys: one block each
    block = np.ones((1, 2, 1), np.float32)
    with pytest.raises(ValueError, match=r"^k_descale is a scalar but q_descale is a per-block "
                                         r"tensor"):
        tilefmha.attention(q, k, v, dtype="fp8_e4m3", q_descale=block, k_descale=0.5,
                           v_descale=block)
    with pytest.raises(ValueError, match=r"^q_descale is missing: k_descale is a per-block "
                                         r"tensor"):
        tilefmha.attention(q, k, v, dtype="fp8_e4m3", k_descale=block, v_descale=block)
    with pytest.raises(ValueError, match=r"^v_descale\.dtype = float64: per_block descales must "
                                         r"be float32"):
        tilefmha.attention(q, k, v, dtype="fp8_e4m3", q_descale=block, k_descale=block,
                           v_descale=block.astype(np.float64))
    with pytest.raises(ValueError, match=r"^q_descale\.shape = \[1, 2, 2\] but per_block "
                                         r"descales are \[batch, nhead_q, ceil\(seqlen_q / 128\)\] "
                                         r"= \[1, 2, 1\]"):
        tilefmha.attention(q, k, v, dtype="fp8_e4m3", q_descale=np.ones((1, 2, 2), np.float32),
                           k_descale=block, v_descale=block)


class _CudaLookalike:
    """A 3-D float32 tensor that says it lives on a CUDA device (DLPack device type 2)."""

    shape, dtype, ndim = (1, 2, 1), np.dtype(np.float32), 3

    def __dlpack_device__(self):
        return (2, 0)


def test_block_descales_must_live_where_the_call_runs():
    q, k, v = fp8_tensors()
    block = np.ones((1, 2, 1), np.float32)
    with pytest.raises(ValueError, match=r"^v_descale is on a CUDA device but the call runs on "
                                         r"the CPU backend"):
        tilefmha.attention(q, k, v, dtype="fp8_e4m3", q_descale=block, k_descale=block,
                           v_descale=_CudaLookalike())


def test_page_descale_errors():
    q, k, v = fp8_tensors(seqlen_q=1, seqlen_k=4)  # a pool of one page of 4 keys
    pages = np.ones((1, 2), np.float32)
    call = dict(block_table=[[0]], seqlens_k=[3], dtype="fp8_e4m3")
    with pytest.raises(ValueError, match=r"^v_page_descale is missing: k_page_descale and "
                                         r"v_page_descale come together"):
        tilefmha.paged_attention(q, k, v, k_page_descale=pages, **call)
    with pytest.raises(ValueError, match=r"^k_descale cannot be combined with k_page_descale"):
        tilefmha.paged_attention(q, k, v, k_page_descale=pages, v_page_descale=pages,
                                 k_descale=0.5, **call)
    with pytest.raises(ValueError, match=r"^q_descale must be a float with per-page scales"):
        tilefmha.paged_attention(q, k, v, k_page_descale=pages, v_page_descale=pages,
                                 q_descale=np.ones((1, 2, 1), np.float32), **call)
    with pytest.raises(ValueError, match=r"^v_page_descale\.shape = \[2, 2\] but per_page "
                                         r"descales are \[num_pages, nhead_k\] = \[1, 2\]"):
        tilefmha.paged_attention(q, k, v, k_page_descale=pages,
                                 v_page_descale=np.ones((2, 2), np.float32), **call)
    with pytest.raises(ValueError, match=r"^k_page_descale is a descale factor of fp8 inputs"):
        tilefmha.paged_attention(q.astype(np.float32), k.astype(np.float32),
                                 v.astype(np.float32), [[0]], [3], k_page_descale=pages)
    with pytest.raises(TypeError, match=r"k_page_descale"):
        tilefmha.attention(q, k, v, dtype="fp8_e4m3", k_page_descale=pages)


# --- Other fp8 storage: ml_dtypes arrays, PyTorch CPU tensors -----------------------------------


def test_ml_dtypes_arrays_are_read_as_they_are():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    rng = np.random.default_rng(51)
    q, q_ref = quantized(rng, (1, 6, 2, 16), "fp8_e4m3", 1 / 32)
    k, k_ref = quantized(rng, (1, 8, 2, 16), "fp8_e4m3", 1 / 32)
    v, v_ref = quantized(rng, (1, 8, 2, 16), "fp8_e4m3", 1 / 32)
    typed = [x.view(ml_dtypes.float8_e4m3fn) for x in (q, k, v)]
    o = tilefmha.attention(*typed, q_descale=1 / 32, k_descale=1 / 32, v_descale=1 / 32)
    assert o.dtype == ml_dtypes.bfloat16
    np.testing.assert_allclose(o.astype(np.float32), ref.attention(q_ref, k_ref, v_ref)[0],
                               rtol=BF16_RTOL, atol=1e-7)
    with pytest.raises(ValueError, match=r"^v holds fp8_e5m2 data but q holds fp8_e4m3"):
        tilefmha.attention(typed[0], typed[1], v.view(ml_dtypes.float8_e5m2))


def test_pytorch_cpu_tensors_give_pytorch_results():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(52)
    values = [rng.uniform(-1, 1, shape).astype(np.float32)
              for shape in ((1, 6, 2, 16), (1, 8, 2, 16), (1, 8, 2, 16))]
    q, k, v = (torch.from_numpy(x * 16).to(torch.float8_e4m3fn) for x in values)
    o = tilefmha.attention(q, k, v, q_descale=1 / 16, k_descale=1 / 16, v_descale=1 / 16)
    assert o.dtype == torch.bfloat16
    dequantized = [x.float().double().numpy() / 16 for x in (q, k, v)]
    np.testing.assert_allclose(o.float().numpy(), ref.attention(*dequantized)[0],
                               rtol=BF16_RTOL, atol=1e-7)
    o32 = tilefmha.attention(q, k, v, out_dtype=torch.float32)
    assert o32.dtype == torch.float32
    with pytest.raises(ValueError, match=r"^k holds fp8_e5m2 data but q holds fp8_e4m3"):
        tilefmha.attention(q, k.to(torch.float8_e5m2), v)
