"""tilefmha.attention on the CPU backend against the NumPy reference of numpy_reference.py."""

import sys
import threading
import time

import numpy as np
import pytest

import numpy_reference as ref
import tilefmha

# (case name, nhead_q, nhead_k, seqlen_q, seqlen_k, hdim_v, features)
CASES = [
    ("plain", 4, 4, 9, 13, 16, {}),
    ("causal_top_left", 4, 4, 9, 13, 16, {"causal": True}),
    ("causal_bottom_right", 4, 4, 9, 13, 16, {"causal": "bottom_right"}),
    ("causal_bottom_right_long_q", 2, 2, 11, 6, 16, {"causal": "bottom_right"}),
    ("window", 4, 4, 9, 13, 16, {"window": (2, 1)}),
    ("window_left_unbounded", 4, 4, 9, 13, 16, {"window": (None, 3)}),
    ("window_bottom_right_sinks", 4, 4, 9, 13, 16,
     {"window": (2, 0), "window_align": "bottom_right", "sink_tokens": 2}),
    ("softcap", 4, 4, 9, 13, 16, {"softcap": 0.7}),
    ("gqa", 8, 2, 9, 13, 16, {"causal": True}),
    ("mqa", 4, 1, 9, 13, 16, {}),
    ("scale", 4, 4, 9, 13, 16, {"scale": 0.61}),
    ("hdim_v_differs", 4, 2, 9, 13, 8, {}),
    ("alibi", 4, 4, 9, 13, 16, {"alibi_slopes": [0.5, 0.25, 0.125, 0.0625]}),
    ("sink_logits", 4, 4, 9, 13, 16, {"sink_logits": [0.3, -1.0, 2.0, 0.0], "causal": True}),
]
TOLERANCE = {np.float32: 2e-6, np.float16: 2e-3}


def random_inputs(rng, dtype, batch, nhead_q, nhead_k, seqlen_q, seqlen_k, hdim_q, hdim_v):
    def draw(*shape):
        return rng.uniform(-1.0, 1.0, shape).astype(dtype)

    return (draw(batch, seqlen_q, nhead_q, hdim_q), draw(batch, seqlen_k, nhead_k, hdim_q),
            draw(batch, seqlen_k, nhead_k, hdim_v))


def assert_lse_close(lse, expected):
    assert lse.dtype == np.float32
    assert np.array_equal(np.isneginf(lse), np.isneginf(expected))
    finite = np.isfinite(expected)
    np.testing.assert_allclose(lse[finite], expected[finite], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["fp32", "fp16"])
@pytest.mark.parametrize("case", CASES, ids=[case[0] for case in CASES])
def test_matches_numpy_reference(case, dtype):
    _, nhead_q, nhead_k, seqlen_q, seqlen_k, hdim_v, features = case
    rng = np.random.default_rng(11)
    q, k, v = random_inputs(rng, dtype, 2, nhead_q, nhead_k, seqlen_q, seqlen_k, 16, hdim_v)
    o, lse = tilefmha.attention(q, k, v, return_lse=True, **features)
    expected_o, expected_lse = ref.attention(q, k, v, **features)
    assert o.dtype == dtype and o.shape == (2, seqlen_q, nhead_q, hdim_v)
    assert lse.shape == (2, nhead_q, seqlen_q)
    np.testing.assert_allclose(o, expected_o, rtol=TOLERANCE[dtype], atol=TOLERANCE[dtype])
    assert_lse_close(lse, expected_lse)


def test_elementwise_bias_broadcasts_without_copy():
    rng = np.random.default_rng(3)
    q, k, v = random_inputs(rng, np.float32, 2, 4, 2, 7, 10, 32, 32)
    bias = rng.standard_normal((4, 7, 10)).astype(np.float32)  # [nhead_q, seqlen_q, seqlen_k]
    o = tilefmha.attention(q, k, v, bias=bias, causal=True)
    expected, _ = ref.attention(q, k, v, bias=bias, causal=True)
    np.testing.assert_allclose(o, expected, rtol=2e-6, atol=2e-6)
    # The bias really changes the result (a test that would pass with the bias ignored is none).
    assert not np.allclose(o, tilefmha.attention(q, k, v, causal=True), atol=1e-3)


def test_transposed_bhsd_view_is_read_in_place():
    rng = np.random.default_rng(5)
    memory = [rng.uniform(-1, 1, (2, 4, 12, 32)).astype(np.float32) for _ in range(3)]
    q, k, v = (x.transpose(0, 2, 1, 3) for x in memory)  # logical bshd over bhsd memory
    assert not q.flags.c_contiguous
    o, lse = tilefmha.attention(q, k, v, causal=True, return_lse=True)
    expected_o, expected_lse = ref.attention(q, k, v, causal=True)
    np.testing.assert_allclose(o, expected_o, rtol=2e-6, atol=2e-6)
    assert_lse_close(lse, expected_lse)
    # O is allocated in q's memory order: bhsd memory, bshd view.
    assert o.transpose(0, 2, 1, 3).flags.c_contiguous


def test_padded_rows_are_respected():
    # Q rows padded to 48 elements per head slot: a seq stride that is no multiple of the shape.
    rng = np.random.default_rng(6)
    storage = rng.uniform(-1, 1, (1, 5, 2, 48)).astype(np.float32)
    q = storage[..., :16]
    k, v = random_inputs(rng, np.float32, 1, 2, 2, 5, 6, 16, 16)[1:]
    expected, _ = ref.attention(q, k, v)
    np.testing.assert_allclose(tilefmha.attention(q, k, v), expected, rtol=2e-6, atol=2e-6)


def test_rows_that_see_no_key_give_zero_output_and_negative_infinite_lse():
    rng = np.random.default_rng(7)
    q, k, v = random_inputs(rng, np.float32, 1, 2, 2, 6, 3, 16, 16)
    o, lse = tilefmha.attention(q, k, v, causal="bottom_right", return_lse=True)
    # Bottom-right causal with 6 queries and 3 keys: queries 0..2 precede every key.
    assert np.all(o[:, :3] == 0) and np.all(np.isneginf(lse[:, :, :3]))
    assert np.all(np.isfinite(lse[:, :, 3:]))
    assert not np.any(np.isnan(o))


def test_lse_is_returned_only_when_asked():
    rng = np.random.default_rng(8)
    q, k, v = random_inputs(rng, np.float32, 1, 2, 2, 4, 4, 16, 16)
    assert isinstance(tilefmha.attention(q, k, v), np.ndarray)
    assert len(tilefmha.attention(q, k, v, return_lse=True)) == 2


def test_bf16_bit_patterns_with_dtype_override():
    rng = np.random.default_rng(9)
    q, k, v = (tilefmha.bf16_from_float32(x)
               for x in random_inputs(rng, np.float32, 2, 4, 2, 8, 11, 32, 32))
    o = tilefmha.attention(q, k, v, causal=True, dtype="bf16")
    assert o.dtype == np.uint16
    expected, _ = ref.attention(*(tilefmha.bf16_to_float32(x) for x in (q, k, v)), causal=True)
    # bf16 keeps 8 significant bits: the output's rounding is within 2^-8 relative.
    np.testing.assert_allclose(tilefmha.bf16_to_float32(o), expected, rtol=8e-3, atol=8e-3)


def test_bf16_conversion_rounds_to_nearest_even():
    values = np.array([1.0, -2.5, 1 + 2 ** -8, 1 + 3 * 2 ** -8, np.inf, np.nan], np.float32)
    back = tilefmha.bf16_to_float32(tilefmha.bf16_from_float32(values))
    np.testing.assert_array_equal(back[:5], [1.0, -2.5, 1.0, 1 + 2 ** -6, np.inf])
    assert np.isnan(back[5])


def test_dropout_is_reproducible_by_seed():
    rng = np.random.default_rng(10)
    q, k, v = random_inputs(rng, np.float32, 1, 2, 2, 16, 16, 16, 16)
    first = tilefmha.attention(q, k, v, dropout_p=0.3, seed=42)
    again = tilefmha.attention(q, k, v, dropout_p=0.3, seed=42)
    other_seed = tilefmha.attention(q, k, v, dropout_p=0.3, seed=43)
    other_offset = tilefmha.attention(q, k, v, dropout_p=0.3, seed=42, offset=1)
    without = tilefmha.attention(q, k, v)
    np.testing.assert_array_equal(first, again)
    assert not np.allclose(first, other_seed)
    assert not np.allclose(first, other_offset)
    assert not np.allclose(first, without)


def test_compute_releases_the_gil():
    rng = np.random.default_rng(12)
    q, k, v = random_inputs(rng, np.float32, 1, 8, 8, 512, 512, 64, 64)
    ticks, running, stop = [0], threading.Event(), threading.Event()

    def tick():
        running.set()
        while not stop.is_set():
            ticks[0] += 1
            time.sleep(0)  # hands the GIL back at once

    ticker = threading.Thread(target=tick)
    ticker.start()
    running.wait()
    # No forced GIL switches: the ticker runs only if the compute itself releases the GIL.
    interval = sys.getswitchinterval()
    sys.setswitchinterval(100.0)
    try:
        before = ticks[0]
        tilefmha.attention(q, k, v)
        after = ticks[0]
    finally:
        sys.setswitchinterval(interval)
        stop.set()
        ticker.join()
    assert after - before > 100


def test_torch_cpu_tensors_give_torch_results():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(13)
    q, k, v = random_inputs(rng, np.float32, 2, 4, 2, 6, 9, 16, 16)
    o = tilefmha.attention(*(torch.from_numpy(x) for x in (q, k, v)), causal=True)
    assert isinstance(o, torch.Tensor) and o.dtype == torch.float32
    np.testing.assert_allclose(o.numpy(), tilefmha.attention(q, k, v, causal=True), rtol=0,
                               atol=0)
    q16, k16, v16 = (torch.from_numpy(x).to(torch.bfloat16) for x in (q, k, v))
    o16 = tilefmha.attention(q16, k16, v16, causal=True)
    assert o16.dtype == torch.bfloat16
    expected, _ = ref.attention(q16.float().numpy(), k16.float().numpy(), v16.float().numpy(),
                                causal=True)
    np.testing.assert_allclose(o16.float().numpy(), expected, rtol=8e-3, atol=8e-3)


def test_empty_sequences_in_batch_mode():
    rng = np.random.default_rng(14)
    q, k, v = random_inputs(rng, np.float32, 2, 2, 2, 0, 5, 16, 16)
    assert tilefmha.attention(q, k, v).shape == (2, 0, 2, 16)
    q, k, v = random_inputs(rng, np.float32, 2, 2, 2, 3, 0, 16, 16)
    o, lse = tilefmha.attention(q, k, v, return_lse=True)
    assert np.all(o == 0) and np.all(np.isneginf(lse))
