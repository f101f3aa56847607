"""attention(..., out=, lse_out=, accumulate=True) on the CPU reference: a state over some keys,
folded with the attention over the others, is the attention over all of them."""

import numpy as np
import pytest

import numpy_reference as ref
import tilefmha


def random(rng, *shape):
    return rng.uniform(-1, 1, shape).astype(np.float32)


def assert_matches(o, lse, expected):
    np.testing.assert_allclose(o, expected[0], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(lse, expected[1], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("bounds", [[0, 13, 40], [0, 1, 7, 22, 40]], ids=["two", "four"])
def test_folding_key_chunks_gives_the_attention_over_all_keys(bounds):
    rng = np.random.default_rng(len(bounds))
    q, k, v = random(rng, 2, 6, 4, 16), random(rng, 2, 40, 2, 16), random(rng, 2, 40, 2, 8)
    o, lse = tilefmha.attention(q, k[:, :bounds[1]], v[:, :bounds[1]], return_lse=True)
    for begin, end in zip(bounds[1:], bounds[2:]):
        result = tilefmha.attention(q, k[:, begin:end], v[:, begin:end], out=o, lse_out=lse,
                                    accumulate=True, return_lse=True)
        assert result[0] is o and result[1] is lse
    assert_matches(o, lse, ref.attention(q, k, v))


def test_causal_chunks_fold_with_a_bottom_right_second_chunk():
    # Keys [0, 9) under the causal mask, then keys [9, 20) bottom-right aligned: query i sees key
    # 9 + j when j <= i - 9, so the first nine rows see none of the second chunk (LSE -inf there).
    rng = np.random.default_rng(3)
    q, k, v = random(rng, 1, 20, 2, 16), random(rng, 1, 20, 2, 16), random(rng, 1, 20, 2, 16)
    o, lse = tilefmha.attention(q, k[:, :9], v[:, :9], causal=True, return_lse=True)
    tilefmha.attention(q, k[:, 9:], v[:, 9:], causal="bottom_right", out=o, lse_out=lse,
                       accumulate=True)
    assert_matches(o, lse, ref.attention(q, k, v, causal=True))


def test_a_state_of_no_key_is_not_read():
    rng = np.random.default_rng(5)
    q, k, v = random(rng, 1, 4, 2, 16), random(rng, 1, 9, 2, 16), random(rng, 1, 9, 2, 16)
    o = np.full((1, 4, 2, 16), np.nan, dtype=np.float32)
    lse = np.full((1, 2, 4), -np.inf, dtype=np.float32)
    tilefmha.attention(q, k, v, out=o, lse_out=lse, accumulate=True)
    assert_matches(o, lse, ref.attention(q, k, v))


def test_given_outputs_without_accumulate_are_overwritten():
    rng = np.random.default_rng(7)
    q, k, v = random(rng, 1, 4, 2, 16), random(rng, 1, 9, 2, 16), random(rng, 1, 9, 2, 16)
    o = np.full((1, 4, 2, 16), np.nan, dtype=np.float32)
    lse = np.full((1, 2, 4), 3.0, dtype=np.float32)
    returned = tilefmha.attention(q, k, v, out=o, lse_out=lse)
    assert returned is o
    assert_matches(o, lse, ref.attention(q, k, v))


def test_bad_calls_name_the_problem():
    rng = np.random.default_rng(9)
    q, k, v = random(rng, 1, 4, 2, 16), random(rng, 1, 9, 2, 16), random(rng, 1, 9, 2, 16)
    o, lse = np.zeros((1, 4, 2, 16), np.float32), np.zeros((1, 2, 4), np.float32)
    with pytest.raises(ValueError, match="pass both"):
        tilefmha.attention(q, k, v, out=o, accumulate=True)
    with pytest.raises(ValueError, match="out has shape"):
        tilefmha.attention(q, k, v, out=np.zeros((1, 4, 2, 8), np.float32), lse_out=lse)
    with pytest.raises(ValueError, match="sink_logits"):
        tilefmha.attention(q, k, v, out=o, lse_out=lse, accumulate=True,
                           sink_logits=np.zeros(2, np.float32))
    with pytest.raises(ValueError, match="one pass"):
        tilefmha.attention(q, k, v, out=o, lse_out=lse, accumulate=True, num_splits=2)
