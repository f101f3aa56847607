"""Plain NumPy softmax attention (float64), forward and backward, written independently of the
engine: the oracle of the Python tests. Shapes are [batch, seq, head, dim]; GQA repeats each
key/value head over its group of query heads."""

import math

import numpy as np

_ALIGNS = ("top_left", "bottom_right")


def visible_mask(seqlen_q, seqlen_k, causal=False, window=None, window_align="top_left",
                 sink_tokens=0):
    """[seqlen_q, seqlen_k] booleans: which keys each query sees."""
    i = np.arange(seqlen_q)[:, None]
    j = np.arange(seqlen_k)[None, :]
    if not causal and window is None:
        return np.ones((seqlen_q, seqlen_k), dtype=bool)
    if causal:
        align = causal if causal in _ALIGNS else "top_left"
        left, right = -1, 0
    else:
        align = window_align
        left, right = (-1 if w is None else w for w in window)
    diagonal = i if align == "top_left" else i + seqlen_k - seqlen_q
    right_ok = (j <= diagonal + right) if right >= 0 else np.ones_like(j + i, dtype=bool)
    left_ok = (j >= diagonal - left) if left >= 0 else np.ones_like(j + i, dtype=bool)
    return right_ok & (left_ok | (j < sink_tokens))


def _logits(q, k, *, scale, softcap, bias, alibi_slopes, mask):
    """Scaled, capped, biased and masked logits [b, h, sq, sk], and tanh of the cap (or None)."""
    seqlen_q, seqlen_k = q.shape[1], k.shape[1]
    s = np.einsum("bihd,bjhd->bhij", q, k) * scale
    capped = None
    if softcap:
        capped = np.tanh(s / softcap)
        s = softcap * capped
    if bias is not None:
        s = s + np.broadcast_to(np.asarray(bias, dtype=np.float64), s.shape)
    if alibi_slopes is not None:
        slopes = np.asarray(alibi_slopes, dtype=np.float64)
        slopes = slopes[None, :] if slopes.ndim == 1 else slopes
        distance = np.abs(np.arange(seqlen_q)[:, None] + seqlen_k - seqlen_q -
                          np.arange(seqlen_k)[None, :])
        s = s - slopes[:, :, None, None] * distance
    return np.where(mask, s, -np.inf), capped


def _expand_heads(k, nhead_q):
    return np.repeat(np.asarray(k, dtype=np.float64), nhead_q // k.shape[2], axis=2)


def _softmax(s, sink_logits):
    """Probabilities with an optional per-head sink in the denominator, and the LSE; rows that
    see nothing give zero probabilities and LSE -inf."""
    top = s.max(axis=-1, keepdims=True, initial=-np.inf)
    sink = None
    if sink_logits is not None:
        sink = np.asarray(sink_logits, dtype=np.float64)[None, :, None, None]
        top = np.maximum(top, sink)
    safe_top = np.where(np.isfinite(top), top, 0.0)
    weights = np.exp(s - safe_top)
    denominator = weights.sum(axis=-1, keepdims=True)
    if sink is not None:
        denominator = denominator + np.exp(sink - safe_top)
    with np.errstate(divide="ignore", invalid="ignore"):
        p = np.where(denominator > 0, weights / denominator, 0.0)
        lse = np.where(denominator > 0, safe_top + np.log(denominator), -np.inf)
    return p, lse[..., 0]


def attention(q, k, v, *, causal=False, window=None, window_align="top_left", sink_tokens=0,
              softcap=0.0, scale=None, bias=None, alibi_slopes=None, sink_logits=None):
    """o [b, sq, hq, dv] and lse [b, hq, sq] in float64."""
    q = np.asarray(q, dtype=np.float64)
    nhead_q = q.shape[2]
    k, v = _expand_heads(k, nhead_q), _expand_heads(v, nhead_q)
    scale = 1.0 / np.sqrt(q.shape[3]) if scale is None else scale
    mask = visible_mask(q.shape[1], k.shape[1], causal, window, window_align, sink_tokens)
    s, _ = _logits(q, k, scale=scale, softcap=softcap, bias=bias, alibi_slopes=alibi_slopes,
                   mask=mask)
    p, lse = _softmax(s, sink_logits)
    return np.einsum("bhij,bjhd->bihd", p, v), lse


def attention_backward(q, k, v, do, *, causal=False, window=None, window_align="top_left",
                       sink_tokens=0, softcap=0.0, scale=None, bias=None, alibi_slopes=None,
                       sink_logits=None):
    """dq, dk, dv (GQA: summed over each group) and dbias [b, hq, sq, sk], in float64."""
    q = np.asarray(q, dtype=np.float64)
    do = np.asarray(do, dtype=np.float64)
    nhead_q, nhead_k = q.shape[2], k.shape[2]
    ke, ve = _expand_heads(k, nhead_q), _expand_heads(v, nhead_q)
    scale = 1.0 / np.sqrt(q.shape[3]) if scale is None else scale
    mask = visible_mask(q.shape[1], ke.shape[1], causal, window, window_align, sink_tokens)
    s, capped = _logits(q, ke, scale=scale, softcap=softcap, bias=bias,
                        alibi_slopes=alibi_slopes, mask=mask)
    p, _ = _softmax(s, sink_logits)
    o = np.einsum("bhij,bjhd->bihd", p, ve)
    dp = np.einsum("bihd,bjhd->bhij", do, ve)
    row_dot = np.einsum("bihd,bihd->bhi", do, o)[..., None]
    ds = p * (dp - row_dot)  # gradient of the final logits (bias gradient)
    d_dot = ds * scale * (1.0 - capped ** 2) if capped is not None else ds * scale
    dq = np.einsum("bhij,bjhd->bihd", d_dot, ke)
    dk = np.einsum("bhij,bihd->bjhd", d_dot, q)
    dv = np.einsum("bhij,bihd->bjhd", p, do)
    group = nhead_q // nhead_k

    def per_kv_head(g):
        return g.reshape(g.shape[0], g.shape[1], nhead_k, group, g.shape[3]).sum(axis=3)

    return dq, per_kv_head(dk), per_kv_head(dv), ds


def sink_gradient(q, k, v, do, *, sink_logits, **features):
    """dsink [hq] in float64: the sink takes exp(sink - lse) of each row's softmax and has no
    value row, so dsink[h] = -sum over the rows of head h of exp(sink[h] - lse) * rowsum(do * o)."""
    o, lse = attention(q, k, v, sink_logits=sink_logits, **features)
    row_dot = np.einsum("bihd,bihd->bhi", np.asarray(do, dtype=np.float64), o)
    sink = np.asarray(sink_logits, dtype=np.float64)[None, :, None]
    return -(np.exp(sink - lse) * row_dot).sum(axis=(0, 2))


# The OCP fp8 formats by engine name: exponent bits, mantissa bits, largest finite value.
FP8_FORMATS = {"fp8_e4m3": (4, 3, 448.0), "fp8_e5m2": (5, 2, 57344.0)}


def _fp8_value(code, exp_bits, man_bits):
    """The value of one fp8 code, from its sign, exponent and mantissa fields."""
    sign = -1.0 if code >> 7 else 1.0
    exponent = (code >> man_bits) & ((1 << exp_bits) - 1)
    mantissa = code & ((1 << man_bits) - 1)
    bias = 2 ** (exp_bits - 1) - 1
    if exp_bits == 4 and exponent == 15 and mantissa == 7:
        return math.nan  # e4m3fn: no infinities, S.1111.111 is NaN
    if exp_bits == 5 and exponent == 31:
        return sign * math.inf if mantissa == 0 else math.nan
    if exponent == 0:
        return sign * math.ldexp(mantissa, 1 - bias - man_bits)
    return sign * math.ldexp((1 << man_bits) + mantissa, exponent - bias - man_bits)


def fp8_decode(codes, fmt):
    """float64 values of uint8 fp8 codes of format `fmt` ('fp8_e4m3' or 'fp8_e5m2')."""
    exp_bits, man_bits, _ = FP8_FORMATS[fmt]
    table = np.array([_fp8_value(c, exp_bits, man_bits) for c in range(256)])
    return table[np.asarray(codes, dtype=np.uint8)]


def fp8_nearest_codes(values, fmt):
    """uint8 codes of the finite fp8 values nearest to `values` (saturating), by search over
    the whole table: a test-side quantizer that needs no rounding rule of its own."""
    table = fp8_decode(np.arange(256), fmt)
    candidates = np.flatnonzero(np.isfinite(table))
    distance = np.abs(np.asarray(values, dtype=np.float64)[..., None] - table[candidates])
    return candidates[np.argmin(distance, axis=-1)].astype(np.uint8)
