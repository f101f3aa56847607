"""tilefmha.merge_states and the split-count keyword on the CPU reference: states computed over
disjoint key sets merge into attention over their union."""

import numpy as np
import pytest

import numpy_reference as ref
import tilefmha


def random(rng, *shape):
    return rng.uniform(-1, 1, shape).astype(np.float32)


def states_over_key_chunks(q, k, v, bounds, **features):
    """o_states [n, batch, seq, head, dim] and lse_states [n, batch, head, seq] of attention over
    the key ranges [bounds[i], bounds[i + 1])."""
    outputs, lses = [], []
    for begin, end in zip(bounds, bounds[1:]):
        o, lse = tilefmha.attention(q, k[:, begin:end], v[:, begin:end], return_lse=True,
                                    **features)
        outputs.append(o)
        lses.append(lse)
    return np.stack(outputs), np.stack(lses)


@pytest.mark.parametrize("bounds", [[0, 40], [0, 13, 40], [0, 1, 7, 22, 40]],
                         ids=["one", "two", "four"])
def test_states_over_key_chunks_merge_into_the_full_attention(bounds):
    rng = np.random.default_rng(len(bounds))
    q, k, v = random(rng, 2, 6, 3, 16), random(rng, 2, 40, 3, 16), random(rng, 2, 40, 3, 16)
    o_states, lse_states = states_over_key_chunks(q, k, v, bounds)
    o, lse = tilefmha.merge_states(o_states, lse_states)
    expected_o, expected_lse = ref.attention(q, k, v)
    assert o.shape == (2, 6, 3, 16) and o.dtype == np.float32
    assert lse.shape == (2, 3, 6) and lse.dtype == np.float32
    np.testing.assert_allclose(o, expected_o, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(lse, expected_lse, rtol=1e-5, atol=1e-5)


def test_given_outputs_are_written_in_place_and_nothing_around_them():
    rng = np.random.default_rng(11)
    q, k, v = random(rng, 2, 6, 3, 16), random(rng, 2, 40, 3, 16), random(rng, 2, 40, 3, 16)
    o_states, lse_states = states_over_key_chunks(q, k, v, [0, 17, 40])
    expected_o, expected_lse = tilefmha.merge_states(o_states, lse_states)
    # Slices of larger buffers, as context parallelism merges into halves of its output.
    o_buffer = np.full((2, 12, 3, 16), 5.0, dtype=np.float32)
    lse_buffer = np.full((2, 3, 12), 5.0, dtype=np.float32)
    o, lse = tilefmha.merge_states(o_states, lse_states, out=o_buffer[:, 6:],
                                   lse_out=lse_buffer[:, :, 6:])
    np.testing.assert_array_equal(o_buffer[:, 6:], expected_o)
    np.testing.assert_array_equal(lse_buffer[:, :, 6:], expected_lse)
    np.testing.assert_array_equal(o, expected_o)
    assert np.all(o_buffer[:, :6] == 5.0) and np.all(lse_buffer[:, :, :6] == 5.0)


@pytest.mark.parametrize("given, message", [
    ({"out": np.zeros((2, 6, 3, 8), np.float32)}, "out has shape"),
    ({"out": np.zeros((2, 6, 3, 16), np.float16)}, "o.dtype = fp16"),
    ({"lse_out": np.zeros((2, 6, 3), np.float32)}, "lse_out has shape"),
    ({"lse_out": np.zeros((2, 3, 6), np.float32), "return_lse": False}, "return_lse=False"),
])
def test_bad_given_outputs_are_refused_naming_them(given, message):
    rng = np.random.default_rng(12)
    o_states, lse_states = random(rng, 2, 2, 6, 3, 16), random(rng, 2, 2, 3, 6)
    with pytest.raises(ValueError, match=message):
        tilefmha.merge_states(o_states, lse_states, **given)


def test_a_state_that_saw_no_key_carries_no_weight_whatever_its_o_holds():
    rng = np.random.default_rng(5)
    o_states = random(rng, 3, 1, 4, 2, 8)
    lse_states = random(rng, 3, 1, 2, 4)
    o_states[1] = np.nan  # never read: its LSE is -inf
    lse_states[1] = -np.inf
    o, lse = tilefmha.merge_states(o_states, lse_states)
    kept_o, kept_lse = tilefmha.merge_states(o_states[[0, 2]], lse_states[[0, 2]])
    np.testing.assert_allclose(o, kept_o, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(lse, kept_lse, rtol=1e-6, atol=1e-6)


def test_rows_whose_states_all_saw_no_key_give_zero_and_minus_infinity():
    o_states = np.full((2, 1, 3, 1, 4), 7.0, dtype=np.float32)
    lse_states = np.full((2, 1, 1, 3), -np.inf, dtype=np.float32)
    o, lse = tilefmha.merge_states(o_states, lse_states)
    assert np.all(o == 0) and np.all(lse == -np.inf)


def test_a_sink_logit_joins_the_denominator_once():
    rng = np.random.default_rng(9)
    q, k, v = random(rng, 1, 5, 2, 8), random(rng, 1, 30, 2, 8), random(rng, 1, 30, 2, 8)
    sinks = np.array([0.5, -1.0], dtype=np.float32)
    o_states, lse_states = states_over_key_chunks(q, k, v, [0, 11, 30])
    o, lse = tilefmha.merge_states(o_states, lse_states, sink_logits=sinks)
    expected_o, expected_lse = tilefmha.attention(q, k, v, sink_logits=sinks, return_lse=True)
    np.testing.assert_allclose(o, expected_o, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(lse, expected_lse, rtol=1e-5, atol=1e-5)


def test_without_return_lse_only_o_comes_back():
    rng = np.random.default_rng(2)
    o = tilefmha.merge_states(random(rng, 2, 1, 3, 1, 8), random(rng, 2, 1, 1, 3),
                              return_lse=False)
    assert isinstance(o, np.ndarray) and o.shape == (1, 3, 1, 8)


def test_mismatched_states_are_refused_naming_the_field():
    rng = np.random.default_rng(3)
    with pytest.raises(ValueError, match=r"o_states must be 5-D"):
        tilefmha.merge_states(random(rng, 1, 3, 1, 8), random(rng, 2, 1, 1, 3))
    with pytest.raises(ValueError, match=r"split\.lse_acc"):
        tilefmha.merge_states(random(rng, 2, 1, 3, 1, 8), random(rng, 3, 1, 1, 3))


@pytest.mark.parametrize("value, error, message", [
    (-1, ValueError, r"num_splits = -1 is negative"),
    (True, TypeError, r"num_splits = True must be an int"),
    (2.5, TypeError, r"num_splits = 2.5 must be an int"),
])
def test_bad_split_counts_are_refused(value, error, message):
    x = np.zeros((1, 4, 1, 8), dtype=np.float32)
    with pytest.raises(error, match=message):
        tilefmha.attention(x, x, x, num_splits=value)


def test_the_cpu_reference_ignores_the_split_count():
    rng = np.random.default_rng(4)
    q, k, v = random(rng, 1, 3, 2, 8), random(rng, 1, 50, 2, 8), random(rng, 1, 50, 2, 8)
    np.testing.assert_array_equal(tilefmha.attention(q, k, v, num_splits=4),
                                  tilefmha.attention(q, k, v))


def test_explain_on_the_cpu_names_the_reference():
    x = np.zeros((1, 4, 2, 8), dtype=np.float32)
    text = tilefmha.explain(x, x, x, causal=True)
    assert "cpu reference" in text and "fwd" in text
