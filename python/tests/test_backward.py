"""tilefmha.attention_backward against the analytic NumPy gradients, central finite differences
of tilefmha.attention itself, and PyTorch autograd (tilefmha.torch) when torch imports."""

import numpy as np
import pytest

import numpy_reference as ref
import tilefmha


def random_problem(rng, dtype=np.float32, batch=2, nhead_q=4, nhead_k=2, seqlen_q=7,
                   seqlen_k=9, hdim=16):
    def draw(*shape):
        return rng.uniform(-1, 1, shape).astype(dtype)

    return (draw(batch, seqlen_q, nhead_q, hdim), draw(batch, seqlen_k, nhead_k, hdim),
            draw(batch, seqlen_k, nhead_k, hdim), draw(batch, seqlen_q, nhead_q, hdim))


FEATURES = [
    {},
    {"causal": True},
    {"causal": "bottom_right", "softcap": 0.8},
    {"window": (2, 1), "scale": 0.3},
    {"sink_logits": [0.5, -0.5, 1.0, 0.0]},
    {"alibi_slopes": [0.5, 0.25, 0.125, 0.0625], "causal": True},
]


@pytest.mark.parametrize("features", FEATURES,
                         ids=["plain", "causal", "bottom_right_softcap", "window_scale",
                              "sink_logits", "alibi"])
def test_matches_analytic_gradients(features):
    rng = np.random.default_rng(41)
    q, k, v, do = random_problem(rng)
    o, lse = tilefmha.attention(q, k, v, return_lse=True, **features)
    dq, dk, dv = tilefmha.attention_backward(q, k, v, o, lse, do, **features)
    expected = ref.attention_backward(q, k, v, do, **features)[:3]
    for name, got, want in zip(("dq", "dk", "dv"), (dq, dk, dv), expected):
        assert got.shape == want.shape and got.dtype == np.float32, name
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=name)


def test_bias_gradient_sums_over_broadcast_dimensions():
    rng = np.random.default_rng(42)
    q, k, v, do = random_problem(rng)
    bias = rng.uniform(-1, 1, (4, 1, 9)).astype(np.float32)  # per head and key: [h, 1, sk]
    o, lse = tilefmha.attention(q, k, v, bias=bias, causal=True, return_lse=True)
    dq, dk, dv, dbias = tilefmha.attention_backward(q, k, v, o, lse, do, bias=bias, causal=True,
                                                    return_dbias=True)
    _, _, _, ds = ref.attention_backward(q, k, v, do, bias=bias, causal=True)
    assert dbias.shape == bias.shape
    np.testing.assert_allclose(dbias, ds.sum(axis=(0, 2))[:, None, :], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(dq, ref.attention_backward(q, k, v, do, bias=bias,
                                                          causal=True)[0], rtol=1e-5, atol=1e-5)


def test_matches_finite_differences_of_the_forward():
    rng = np.random.default_rng(43)
    q, k, v, _ = random_problem(rng, batch=1, nhead_q=2, nhead_k=1, seqlen_q=4, seqlen_k=5,
                                hdim=8)
    q, k, v = (x.astype(np.float64) for x in (q, k, v))
    weights = rng.uniform(-1, 1, (1, 4, 2, 8))  # loss = sum(o * weights), so dO = weights

    def loss(q_, k_, v_):
        o = tilefmha.attention(*(x.astype(np.float32) for x in (q_, k_, v_)), causal=True,
                               softcap=2.0)
        return float(np.sum(o.astype(np.float64) * weights))

    o, lse = tilefmha.attention(*(x.astype(np.float32) for x in (q, k, v)), causal=True,
                                softcap=2.0, return_lse=True)
    gradients = tilefmha.attention_backward(*(x.astype(np.float32) for x in (q, k, v)), o, lse,
                                            weights.astype(np.float32), causal=True, softcap=2.0)
    step = 1e-2
    for index, (tensor, gradient) in enumerate(zip((q, k, v), gradients)):
        for flat in rng.choice(tensor.size, 6, replace=False):
            at = np.unravel_index(flat, tensor.shape)
            plus, minus = [list(x) for x in ((q, k, v), (q, k, v))]
            plus[index], minus[index] = tensor.copy(), tensor.copy()
            plus[index][at] += step
            minus[index][at] -= step
            numeric = (loss(*plus) - loss(*minus)) / (2 * step)
            assert abs(gradient[at] - numeric) < 2e-3, (index, at, gradient[at], numeric)


def test_varlen_backward_matches_per_sequence():
    rng = np.random.default_rng(44)
    lengths_q, lengths_k = [3, 0, 5], [4, 2, 6]
    cu_q = np.concatenate([[0], np.cumsum(lengths_q)])
    cu_k = np.concatenate([[0], np.cumsum(lengths_k)])
    q = rng.uniform(-1, 1, (8, 2, 16)).astype(np.float32)
    k = rng.uniform(-1, 1, (12, 1, 16)).astype(np.float32)
    v = rng.uniform(-1, 1, (12, 1, 16)).astype(np.float32)
    do = rng.uniform(-1, 1, (8, 2, 16)).astype(np.float32)
    o, lse = tilefmha.attention_varlen(q, k, v, cu_q, cu_k, causal=True, return_lse=True)
    dq, dk, dv = tilefmha.attention_backward(q, k, v, o, lse, do, cu_seqlens_q=cu_q,
                                             cu_seqlens_k=cu_k, causal=True)
    for b in range(3):
        rows_q, rows_k = slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])
        want = ref.attention_backward(q[rows_q][None], k[rows_k][None], v[rows_k][None],
                                      do[rows_q][None], causal=True)
        np.testing.assert_allclose(dq[rows_q], want[0][0], rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(dk[rows_k], want[1][0], rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(dv[rows_k], want[2][0], rtol=1e-5, atol=1e-5)


SINKS = [1.5, -0.5, 0.8, 0.2]


@pytest.mark.parametrize("features", [{}, {"causal": "bottom_right"}, {"window": (2, 0)}],
                         ids=["plain", "bottom_right_rows_only_the_sink_sees", "window"])
def test_sink_gradient_matches_analytic(features):
    # seqlen_q 9 over seqlen_k 7: bottom-right causal leaves the first two rows the sink alone.
    rng = np.random.default_rng(50)
    q, k, v, do = random_problem(rng, seqlen_q=9, seqlen_k=7)
    o, lse = tilefmha.attention(q, k, v, return_lse=True, sink_logits=SINKS, **features)
    dq, dk, dv, dsink = tilefmha.attention_backward(q, k, v, o, lse, do, sink_logits=SINKS,
                                                    return_dsink=True, **features)
    want = ref.sink_gradient(q, k, v, do, sink_logits=SINKS, **features)
    assert dsink.shape == (4,) and dsink.dtype == np.float32
    assert np.abs(want).max() > 1e-2
    np.testing.assert_allclose(dsink, want, rtol=1e-5, atol=1e-5)
    # Asking for dsink changes none of the other gradients.
    for got, plain in zip((dq, dk, dv), tilefmha.attention_backward(q, k, v, o, lse, do,
                                                                    sink_logits=SINKS,
                                                                    **features)):
        np.testing.assert_array_equal(got, plain)


def test_sink_gradient_matches_finite_differences_of_the_forward():
    rng = np.random.default_rng(51)
    q, k, v, _ = random_problem(rng, batch=2, nhead_q=2, nhead_k=1, seqlen_q=5, seqlen_k=4,
                                hdim=8)
    weights = rng.uniform(-1, 1, (2, 5, 2, 8))  # loss = sum(o * weights), so dO = weights
    sinks = np.array([0.7, -0.3])
    features = {"causal": "bottom_right"}

    def loss(sinks_):
        o = tilefmha.attention(q, k, v, sink_logits=sinks_.astype(np.float32), **features)
        return float(np.sum(o.astype(np.float64) * weights))

    o, lse = tilefmha.attention(q, k, v, sink_logits=sinks, return_lse=True, **features)
    dsink = tilefmha.attention_backward(q, k, v, o, lse, weights.astype(np.float32),
                                        sink_logits=sinks, return_dsink=True, **features)[3]
    step = 1e-2
    for h in range(2):
        plus, minus = sinks.copy(), sinks.copy()
        plus[h] += step
        minus[h] -= step
        numeric = (loss(plus) - loss(minus)) / (2 * step)
        assert abs(numeric) > 1e-2
        assert abs(dsink[h] - numeric) < 2e-3, (h, dsink[h], numeric)


def test_varlen_sink_gradient_sums_every_sequence():
    # Sequence 1 has no queries, sequence 2 has queries but no keys (O = 0: nothing to add).
    rng = np.random.default_rng(52)
    lengths_q, lengths_k = [3, 0, 2, 4], [4, 2, 0, 5]
    cu_q = np.concatenate([[0], np.cumsum(lengths_q)])
    cu_k = np.concatenate([[0], np.cumsum(lengths_k)])
    q = rng.uniform(-1, 1, (9, 2, 16)).astype(np.float32)
    k = rng.uniform(-1, 1, (11, 1, 16)).astype(np.float32)
    v = rng.uniform(-1, 1, (11, 1, 16)).astype(np.float32)
    do = rng.uniform(-1, 1, (9, 2, 16)).astype(np.float32)
    sinks = [0.9, -0.4]
    # The Python varlen forward takes no sink logits: O and LSE come from the reference per
    # sequence, in float32 like the engine's.
    o = np.zeros((9, 2, 16), np.float32)
    lse = np.zeros((2, 9), np.float32)
    want = np.zeros(2)
    for b in range(4):
        rows_q, rows_k = slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])
        if lengths_q[b] == 0:
            continue
        o_b, lse_b = ref.attention(q[rows_q][None], k[rows_k][None], v[rows_k][None],
                                   causal=True, sink_logits=sinks)
        o[rows_q], lse[:, rows_q] = o_b[0], lse_b[0]
        want += ref.sink_gradient(q[rows_q][None], k[rows_k][None], v[rows_k][None],
                                  do[rows_q][None], sink_logits=sinks, causal=True)
    dsink = tilefmha.attention_backward(q, k, v, o, lse, do, cu_seqlens_q=cu_q,
                                        cu_seqlens_k=cu_k, causal=True, sink_logits=sinks,
                                        return_dsink=True)[3]
    np.testing.assert_allclose(dsink, want, rtol=1e-5, atol=1e-5)


def test_return_dsink_needs_sink_logits():
    rng = np.random.default_rng(53)
    q, k, v, do = random_problem(rng)
    o, lse = tilefmha.attention(q, k, v, return_lse=True)
    with pytest.raises(ValueError, match="return_dsink=True needs sink_logits"):
        tilefmha.attention_backward(q, k, v, o, lse, do, return_dsink=True)


def test_deterministic_and_fp16():
    rng = np.random.default_rng(45)
    q, k, v, do = random_problem(rng, dtype=np.float16)
    o, lse = tilefmha.attention(q, k, v, return_lse=True)
    first = tilefmha.attention_backward(q, k, v, o, lse, do, deterministic=True)
    second = tilefmha.attention_backward(q, k, v, o, lse, do, deterministic=True)
    expected = ref.attention_backward(q, k, v, do)[:3]
    for got, again, want in zip(first, second, expected):
        assert got.dtype == np.float16
        np.testing.assert_array_equal(got, again)
        np.testing.assert_allclose(got, want, rtol=5e-3, atol=5e-3)


def test_dropout_backward_replays_the_forward_mask():
    # With dropout, loss(v) = sum(o * dO) is linear in v: dV is exact against a difference.
    rng = np.random.default_rng(46)
    q, k, v, do = random_problem(rng, batch=1, nhead_q=2, nhead_k=2, seqlen_q=6, seqlen_k=6)
    features = {"dropout_p": 0.4, "seed": 7, "offset": 3}
    o, lse = tilefmha.attention(q, k, v, return_lse=True, **features)
    _, _, dv = tilefmha.attention_backward(q, k, v, o, lse, do, **features)
    bump = np.zeros_like(v)
    bump[0, 2, 1, 5] = 1.0
    moved = tilefmha.attention(q, k, v + bump, **features)
    change = float(np.sum((moved.astype(np.float64) - o) * do))
    assert abs(dv[0, 2, 1, 5] - change) < 1e-4
    assert not np.allclose(dv, tilefmha.attention_backward(q, k, v, o, lse, do)[2], atol=1e-3)


def test_torch_autograd_matches_tilefmha_backward():
    torch = pytest.importorskip("torch")
    from tilefmha.torch import attention as torch_attention

    rng = np.random.default_rng(47)
    q, k, v, do = random_problem(rng)
    bias = rng.uniform(-1, 1, (1, 4, 7, 9)).astype(np.float32)
    tq, tk, tv, tbias = (torch.tensor(x, requires_grad=True) for x in (q, k, v, bias))
    out = torch_attention(tq, tk, tv, bias=tbias, causal=True, softcap=1.5)
    out.backward(torch.from_numpy(do))
    want = ref.attention_backward(q, k, v, do, bias=bias, causal=True, softcap=1.5)
    for got, expected in zip((tq.grad, tk.grad, tv.grad), want[:3]):
        np.testing.assert_allclose(got.numpy(), expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(tbias.grad.numpy(), want[3].sum(axis=0, keepdims=True),
                               rtol=1e-5, atol=1e-5)


def test_torch_autograd_against_torch_math():
    torch = pytest.importorskip("torch")
    from tilefmha.torch import attention as torch_attention

    rng = np.random.default_rng(48)
    q, k, v, _ = random_problem(rng, nhead_k=4)
    tensors = [torch.tensor(x, dtype=torch.float64).float().requires_grad_() for x in (q, k, v)]
    twins = [t.detach().clone().requires_grad_() for t in tensors]
    torch_attention(*tensors, causal=True).square().sum().backward()
    # The same attention in plain torch ops, differentiated by torch itself.
    tq, tk, tv = (t.transpose(1, 2) for t in twins)
    scores = tq @ tk.transpose(-1, -2) / 4.0
    scores = scores.masked_fill(torch.ones(7, 9).triu(1).bool(), float("-inf"))
    (torch.softmax(scores, -1) @ tv).transpose(1, 2).square().sum().backward()
    for ours, theirs in zip(tensors, twins):
        np.testing.assert_allclose(ours.grad.numpy(), theirs.grad.numpy(), rtol=1e-4, atol=1e-5)
