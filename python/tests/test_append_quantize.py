"""append_kv quantizing fp16/bf16 new tokens into an fp8 page pool with per-page scales (CPU
reference): fresh pages' scales map their largest new value to e4m3's 448, a held page keeps its
scale while the new values fit and otherwise grows it and re-encodes its codes, the scales are
updated in place, and bad arguments raise ValueError naming them."""

import numpy as np
import pytest

import tilefmha

FMT = "fp8_e4m3"
PAGE, HEADS, DIM, NEW = 4, 2, 16, 3
# Sequence 0 holds 2 keys in page 3 and appends into its slots 2-3 and page 1; sequence 1 fills
# page 0 from empty; sequence 2 holds a full page 5 and appends into page 4; page 2 stays unused.
HELD = [2, 0, 4]
BLOCK_TABLE = [[3, 1], [0, 2], [5, 4]]


def pool_and_tokens(seed, new_dtype=np.float16):
    rng = np.random.default_rng(seed)
    k_cache = tilefmha.fp8_from_float32(rng.uniform(-300, 300, (6, PAGE, HEADS, DIM)), FMT)
    v_cache = tilefmha.fp8_from_float32(rng.uniform(-300, 300, (6, PAGE, HEADS, DIM)), FMT)
    k_new = rng.uniform(-2, 2, (3, NEW, HEADS, DIM)).astype(new_dtype)
    v_new = rng.uniform(-2, 2, (3, NEW, HEADS, DIM)).astype(new_dtype)
    k_scales = np.full((6, HEADS), 0.5, np.float32)
    v_scales = np.full((6, HEADS), 0.5, np.float32)
    k_scales[3] = 0.001  # too small for values of +-2: grows
    v_scales[3] = 0.05  # 0.05 * 448 = 22.4 holds them: stays
    return k_cache, v_cache, k_new, v_new, k_scales, v_scales


def append(k_cache, v_cache, k_new, v_new, k_scales, v_scales, **kwargs):
    return tilefmha.append_kv(k_cache, v_cache, k_new, v_new, HELD, block_table=BLOCK_TABLE,
                              dtype=FMT, k_page_scales=k_scales, v_page_scales=v_scales, **kwargs)


def values(codes):
    return tilefmha.fp8_to_float32(codes, FMT).astype(np.float64)


def test_quantizing_append_sets_grows_and_keeps_page_scales():
    k_cache, v_cache, k_new, v_new, k_scales, v_scales = pool_and_tokens(1)
    before = [x.copy() for x in (k_cache, v_cache, k_scales, v_scales)]
    grown = append(k_cache, v_cache, k_new, v_new, k_scales, v_scales)
    np.testing.assert_array_equal(grown, np.array(HELD) + NEW)
    for h in range(HEADS):
        # Page 3 (sequence 0's first): K's scale grew to its new values' and its two held rows
        # were re-encoded; V's stayed and its held codes too.
        k_grown = np.float32(np.abs(k_new[0, :2, h].astype(np.float64)).max()) / np.float32(448)
        assert k_scales[3, h] == k_grown
        np.testing.assert_allclose(values(k_cache[3, :2, h]) * k_grown,
                                   values(before[0][3, :2, h]) * 0.001, rtol=2 ** -4, atol=1e-9)
        assert v_scales[3, h] == np.float32(0.05)
        np.testing.assert_array_equal(v_cache[3, :2, h], before[1][3, :2, h])
        # Fresh pages: the scale of their largest new value, whose code is 448.
        for page, b, tokens in ((1, 0, slice(2, 3)), (0, 1, slice(0, 3)), (4, 2, slice(0, 3))):
            for cache, new, scales in ((k_cache, k_new, k_scales), (v_cache, v_new, v_scales)):
                fresh = new[b, tokens, h].astype(np.float64)
                scale = np.float32(np.abs(fresh).max()) / np.float32(448)
                assert scales[page, h] == scale
                count = fresh.shape[0]
                stored = values(cache[page, :count, h])
                assert np.abs(stored).max() == 448
                np.testing.assert_allclose(stored * scale, fresh, rtol=2 ** -4, atol=1e-3 * scale)
        # New rows of page 3 at its scale.
        for cache, new, scale in ((k_cache, k_new, k_grown), (v_cache, v_new, np.float32(0.05))):
            np.testing.assert_allclose(values(cache[3, 2:, h]) * scale,
                                       new[0, :2, h].astype(np.float64), rtol=2 ** -4,
                                       atol=1e-3 * scale)
    # Unused page 2 and the full page 5: codes and scales untouched.
    for page in (2, 5):
        np.testing.assert_array_equal(k_cache[page], before[0][page])
        np.testing.assert_array_equal(v_cache[page], before[1][page])
        np.testing.assert_array_equal(k_scales[page], before[2][page])
        np.testing.assert_array_equal(v_scales[page], before[3][page])


def test_bf16_new_tokens_quantize_alike():
    torch = pytest.importorskip("torch")  # NumPy has no bf16; PyTorch CPU tensors carry it
    k_cache, v_cache, k_new, v_new, k_scales, v_scales = pool_and_tokens(2, np.float32)
    k_bf16, v_bf16 = (torch.from_numpy(x).to(torch.bfloat16) for x in (k_new, v_new))
    tilefmha.append_kv(k_cache, v_cache, k_bf16, v_bf16, HELD, block_table=BLOCK_TABLE,
                       dtype=FMT, k_page_scales=k_scales, v_page_scales=v_scales)
    fresh = k_bf16[1, :, 0].float().numpy().astype(np.float64)
    assert k_scales[0, 0] == np.float32(np.abs(fresh).max()) / np.float32(448)


def test_quantizing_append_errors_name_the_argument():
    k_cache, v_cache, k_new, v_new, k_scales, v_scales = pool_and_tokens(3)
    with pytest.raises(ValueError, match=r"^v_page_scales is None but its partner is given"):
        tilefmha.append_kv(k_cache, v_cache, k_new, v_new, HELD, block_table=BLOCK_TABLE,
                           dtype=FMT, k_page_scales=k_scales)
    with pytest.raises(ValueError, match=r"^rotate_q=True with k_page_scales"):
        append(k_cache, v_cache, k_new, v_new, k_scales, v_scales, rope="neox",
               q=np.zeros((3, NEW, HEADS, DIM), np.float16), rotate_q=True)
    with pytest.raises(ValueError, match=r"^k_page_scales and v_page_scales are per-page scales"):
        tilefmha.append_kv(np.zeros((3, 8, HEADS, DIM), np.uint8),
                           np.zeros((3, 8, HEADS, DIM), np.uint8), k_new, v_new, HELD, dtype=FMT,
                           k_page_scales=k_scales, v_page_scales=v_scales)
    with pytest.raises(ValueError, match=r"^v_new holds fp32 data but k_new holds fp16"):
        append(k_cache, v_cache, k_new, v_new.astype(np.float32), k_scales, v_scales)
    with pytest.raises(ValueError, match=r"^k_page_scales\.shape = \[5, 2\]"):
        append(k_cache, v_cache, k_new, v_new, k_scales[:5], v_scales)
    with pytest.raises(ValueError, match=r"^k_cache holds fp16 data"):
        tilefmha.append_kv(np.zeros((6, PAGE, HEADS, DIM), np.float16),
                           np.zeros((6, PAGE, HEADS, DIM), np.float16), k_new, v_new, HELD,
                           block_table=BLOCK_TABLE, k_page_scales=k_scales,
                           v_page_scales=v_scales)
