"""Bad input raises the right Python exception, and its message names the offending field."""

import numpy as np
import pytest

import tilefmha


def tensors(batch=1, seqlen_q=4, seqlen_k=5, nhead_q=2, nhead_k=2, hdim=16, dtype=np.float32):
    rng = np.random.default_rng(0)
    return (rng.uniform(-1, 1, (batch, seqlen_q, nhead_q, hdim)).astype(dtype),
            rng.uniform(-1, 1, (batch, seqlen_k, nhead_k, hdim)).astype(dtype),
            rng.uniform(-1, 1, (batch, seqlen_k, nhead_k, hdim)).astype(dtype))


def test_heads_not_a_multiple():
    q, k, v = tensors(nhead_q=3, nhead_k=2)
    with pytest.raises(ValueError, match=r"nhead_q = 3 is not a multiple of nhead_k = 2"):
        tilefmha.attention(q, k, v)


def test_key_head_dim_mismatch_names_k():
    q, _, v = tensors()
    k = np.zeros((1, 5, 2, 32), np.float32)
    with pytest.raises(ValueError, match=r"^k\.shape = \[1, 5, 2, 32\] does not match"):
        tilefmha.attention(q, k, v)


def test_value_length_mismatch_names_v():
    q, k, _ = tensors()
    v = np.zeros((1, 6, 2, 16), np.float32)
    with pytest.raises(ValueError, match=r"^v\.shape"):
        tilefmha.attention(q, k, v)


def test_strided_last_dimension_names_the_stride():
    q, k, v = tensors(hdim=32)
    with pytest.raises(ValueError, match=r"q\.stride\[3\] = 2 but the last dimension must be "
                                         r"contiguous"):
        tilefmha.attention(q[..., ::2], k[..., ::2].copy(), v[..., ::2].copy())


def test_wrong_rank():
    q, k, v = tensors()
    with pytest.raises(ValueError, match=r"q must be 4-D \[batch, seqlen_q, nhead_q, hdim_q\]"):
        tilefmha.attention(q[0], k, v)
    with pytest.raises(ValueError, match=r"k must be 3-D \[total_k, nhead_k, hdim_q\]"):
        tilefmha.attention_varlen(q[0], k, v[0], [0, 4], [0, 5])


def test_unsupported_and_mixed_dtypes():
    q, k, v = tensors()
    with pytest.raises(ValueError, match=r"q\.dtype = float64 is not supported"):
        tilefmha.attention(q.astype(np.float64), k, v)
    with pytest.raises(ValueError, match=r"k\.dtype = fp16 but k must be fp32"):
        tilefmha.attention(q, k.astype(np.float16), v)
    with pytest.raises(ValueError, match=r"dtype='bf16'"):
        tilefmha.attention(*(x.view(np.uint16)[..., ::2] for x in (q, k, v)))
    with pytest.raises(ValueError, match=r"dtype = 'fp16' but q holds float32"):
        tilefmha.attention(q, k, v, dtype="fp16")


def test_head_dim_too_large():
    q, k, v = tensors(hdim=288)
    with pytest.raises(ValueError, match=r"hdim_q = 288 is outside \[1, 256\]"):
        tilefmha.attention(q, k, v)


@pytest.mark.parametrize("features, pattern", [
    ({"window": (-3, 0)}, r"mask\.window_left = -3 is below -1"),
    ({"sink_tokens": 2}, r"mask\.sink_tokens = 2 set on a problem with mask\.kind = none"),
    ({"softcap": -1.0}, r"softcap = -1 must be finite and >= 0"),
    ({"dropout_p": 1.5}, r"dropout\.p = 1\.5 is outside \[0, 1\)"),
    ({"scale": 0.0}, r"softmax_scale = 0 must be finite and non-zero"),
    ({"alibi_slopes": [1.0, 2.0, 3.0]}, r"alibi_slopes\.shape = \[3\] does not match"),
    ({"sink_logits": [1.0]}, r"sink_logits\.shape = \[1\] does not match"),
    ({"causal": True, "window": (1, 1)}, r"causal and window exclude each other"),
    ({"causal": "diagonal"}, r"causal = 'diagonal'"),
    ({"window": 3}, r"window = 3 must be a pair"),
    ({"window": (1, 1), "window_align": "middle"}, r"unknown MaskAlign 'middle'"),
    ({"window_align": "bottom_right"}, r"window_align = 'bottom_right' needs a window"),
    ({"bias": np.zeros((3, 4, 5), np.float32)}, r"bias\.shape = \[3, 4, 5\] does not broadcast"),
], ids=["window_left", "sink_tokens", "softcap", "dropout", "scale", "alibi", "sink_logits",
        "causal_and_window", "causal_value", "window_pair", "window_align", "align_no_window",
        "bias_broadcast"])
def test_feature_errors_name_the_field(features, pattern):
    with pytest.raises(ValueError, match=pattern):
        tilefmha.attention(*tensors(), **features)


def test_backend_choice():
    q, k, v = tensors()
    with pytest.raises(ValueError, match=r"backend = 'tpu'"):
        tilefmha.attention(q, k, v, backend="tpu")
    with pytest.raises(ValueError, match=r"backend='gpu' takes CUDA tensors"):
        tilefmha.attention(q, k, v, backend="gpu")


@pytest.mark.parametrize("cu_q, cu_k, pattern", [
    ([1, 4], [0, 5], r"seqstart_q\[0\] = 1 must be 0"),
    ([0, 3, 2], [0, 2, 5], r"seqstart_q is not non-decreasing at index 2"),
    ([0, 4], [0, 2, 5], r"seqstart_k has 3 entries but batch = 1"),
    ([0, 9], [0, 5], r"q\.shape = \[1, 4, 2, 16\] does not match"),
    ([0.5, 4], [0, 5], r"cu_seqlens_q must hold integers"),
])
def test_varlen_prefix_sum_errors(cu_q, cu_k, pattern):
    q, k, v = (x[0] for x in tensors())
    with pytest.raises(ValueError, match=pattern):
        tilefmha.attention_varlen(q, k, v, cu_q, cu_k)


def test_page_table_errors():
    q = np.zeros((2, 1, 2, 16), np.float32)
    pool = np.zeros((3, 4, 2, 16), np.float32)
    with pytest.raises(ValueError, match=r"paged\.block_table\[2\] = 7 points past the pool "
                                         r"\(num_pages = 3\)"):
        tilefmha.paged_attention(q, pool, pool, [[0, 1], [7, 2]], [5, 3])
    with pytest.raises(ValueError, match=r"page_size = 8 but k_cache holds pages of 4 tokens"):
        tilefmha.paged_attention(q, pool, pool, [[0, 1], [2, 0]], [5, 3], page_size=8)
    with pytest.raises(ValueError, match=r"paged\.max_pages_per_seq = 2 but sequence 0 needs 3"):
        tilefmha.paged_attention(q, pool, pool, [[0, 1], [2, 0]], [9, 3])
    with pytest.raises(ValueError, match=r"layout = 'dhn'"):
        tilefmha.paged_attention(q, pool, pool, [[0, 1], [2, 0]], [5, 3], layout="dhn")


def test_read_only_cache_is_refused_before_writing():
    cache = np.zeros((1, 4, 1, 16), np.float32)
    cache.flags.writeable = False
    v_cache = np.zeros((1, 4, 1, 16), np.float32)
    new = np.ones((1, 1, 1, 16), np.float32)
    with pytest.raises(ValueError, match=r"k is a read-only array"):
        tilefmha.append_kv(cache, v_cache, new, new, [2])
    assert np.all(v_cache == 0)


class FakeCudaTensor:
    """Looks like a CUDA tensor to the backend choice (the DLPack device query) and nothing else."""

    shape = (1, 4, 2, 16)
    dtype = "float16"

    def __dlpack_device__(self):
        return (2, 0)


def test_backend_cpu_refuses_device_tensors():
    fake = FakeCudaTensor()
    with pytest.raises(ValueError, match=r"backend='cpu' computes on host arrays"):
        tilefmha.attention(fake, fake, fake, backend="cpu")


def test_gpu_session_without_a_gpu_says_why():
    reason = tilefmha.gpu_unavailable_reason()
    if not reason:
        pytest.skip("a GPU is usable here")
    from tilefmha import _core

    with pytest.raises(ValueError, match=r"the GPU backend is unavailable"):
        _core.GpuSession(0)


@pytest.mark.parametrize("args, pattern", [
    (("q", 0, "float64", [1, 2], [2, 1], 0), r"^q\.dtype = float64 is not supported"),
    (("k", 0, "float16", [1, 2], [1], 0), r"^k: 2 sizes but 1 strides"),
    (("v", 0, "float16", [1] * 6, [1] * 6, 0), r"^v has 6 dimensions; at most 5"),
    (("o", 0, "float16", [1], [1], -1), r"^o is not on a CUDA device"),
])
def test_pytorch_fast_path_errors_name_the_field(args, pattern):
    # The engine side of the PyTorch fast path (no PyTorch needed to reach its checks).
    problem = tilefmha._core.Problem("fwd")
    with pytest.raises(ValueError, match=pattern):
        problem.attach_torch(*args, owner=None)


@pytest.mark.parametrize("bad", [None, [[1.0]], 3.0])
def test_q_that_is_not_an_array_names_q(bad):
    _, k, v = tensors()
    with pytest.raises(TypeError, match=r"^q must be a NumPy array or a tensor"):
        tilefmha.attention(bad, k, v)


def test_k_that_is_a_list_names_k():
    q, k, v = tensors()
    with pytest.raises(TypeError, match=r"^k must be a NumPy array or a tensor .* got list"):
        tilefmha.attention(q, k.tolist(), v)


def test_bf16_to_float32_refuses_float_data():
    with pytest.raises(TypeError, match=r"bits\.dtype = float32"):
        tilefmha.bf16_to_float32(np.float32([1.5]))
    with pytest.raises(TypeError, match=r"bits\.dtype = int64"):
        tilefmha.bf16_to_float32([70000])
    np.testing.assert_array_equal(tilefmha.bf16_to_float32([0x3FC0]), np.float32([1.5]))


@pytest.mark.parametrize("value", [np.inf, -np.inf, np.nan])
def test_non_finite_sink_logits_are_refused(value):
    q, k, v = tensors()
    with pytest.raises(ValueError, match=r"^sink_logits\[1\] = (-?inf|nan) must be finite"):
        tilefmha.attention(q, k, v, sink_logits=np.float32([0.5, value]))


def test_append_kv_refuses_one_array_as_both_caches():
    _, k, v = tensors()
    cache = np.zeros((1, 8, 2, 16), np.float32)
    with pytest.raises(ValueError, match=r"^k_cache and v_cache share memory"):
        tilefmha.append_kv(cache, cache, k[:, :2], v[:, :2], [0])
    assert np.all(cache == 0)
    # Halves of one buffer do not overlap and are accepted.
    both = np.zeros((2, 1, 8, 2, 16), np.float32)
    tilefmha.append_kv(both[0], both[1], k[:, :2], v[:, :2], [0])
    np.testing.assert_array_equal(both[1, :, :2], v[:, :2])


def test_append_kv_refuses_q_rotated_into_a_cache():
    _, k, v = tensors()
    k_cache, v_cache = np.zeros((1, 8, 2, 16), np.float32), np.zeros((1, 8, 2, 16), np.float32)
    with pytest.raises(ValueError, match=r"^k_cache and q share memory"):
        tilefmha.append_kv(k_cache, v_cache, k[:, :2], v[:, :2], [0], rope="neox",
                           q=k_cache[:, :1], rotate_q=True)


def test_append_capacity_overflow_blames_the_capacity_not_the_rope_tables():
    _, k, v = tensors()
    k_cache, v_cache = np.zeros((1, 8, 2, 16), np.float32), np.zeros((1, 8, 2, 16), np.float32)
    cos, sin = tilefmha.rope_tables(8, 16)  # tables sized to the capacity
    with pytest.raises(ValueError, match=r"^k\.shape\[1\] = 8 \(cache capacity\) cannot hold "
                                         r"sequence 0's seqlen_k_per_batch\[0\] = 6 cached"):
        tilefmha.append_kv(k_cache, v_cache, k[:, :4], v[:, :4], [6], rope="neox", rope_cos=cos,
                           rope_sin=sin)
    assert np.all(k_cache == 0) and np.all(v_cache == 0)
