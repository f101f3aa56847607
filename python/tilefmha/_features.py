"""The attention features every family shares: mask, logit transforms, logit inputs, dropout,
and the forward's split-KV override.

They are the keyword arguments of ``tilefmha.attention``; the other functions take the same
keywords. Values are checked by the engine, whose errors name the field (``mask.window_left``,
``softcap``...); this module only turns the Python spellings into the engine's.
"""

import numbers
from dataclasses import dataclass

_ALIGNMENTS = ("top_left", "bottom_right")

_SPLITS_MEANING = "0 lets the engine choose, 1 forbids splitting, n > 1 forces n splits"


def _window_bounds(window):
    try:
        left, right = window
    except (TypeError, ValueError):
        raise ValueError(f"window = {window!r} must be a pair (left, right); None or -1 is "
                         "unbounded") from None
    return tuple(-1 if bound is None else int(bound) for bound in (left, right))


def mask_spec(causal, window, window_align):
    """(kind, align, window_left, window_right) in the engine's terms."""
    if causal is None or causal is False:
        kind, align = "none", "top_left"
    elif causal is True:
        kind, align = "causal", "top_left"
    elif causal in _ALIGNMENTS:
        kind, align = "causal", causal
    else:
        raise ValueError(f"causal = {causal!r}: expected False, True, 'top_left' or "
                         "'bottom_right'")
    if window is None:
        if window_align != "top_left":
            raise ValueError(f"window_align = {window_align!r} needs a window=(left, right)")
        return kind, align, -1, -1
    if kind != "none":
        raise ValueError("causal and window exclude each other: causal is window=(None, 0) "
                         "with window_align")
    return ("window", window_align) + _window_bounds(window)


def split_count(num_splits):
    """The engine's split.num_splits of a `num_splits=` argument (an int >= 0)."""
    if type(num_splits) is int:  # noqa: E721 - the common case, without the checks below
        count = num_splits
    elif isinstance(num_splits, bool) or not isinstance(num_splits, numbers.Integral):
        raise TypeError(f"num_splits = {num_splits!r} must be an int ({_SPLITS_MEANING})")
    else:
        count = int(num_splits)
    if count < 0:
        raise ValueError(f"num_splits = {count} is negative ({_SPLITS_MEANING})")
    return count


def _uint64(value, name):
    """A dropout seed or offset: an int in [0, 2**64 - 1]. Anything else used to reach the
    extension and fail there as a RuntimeError naming nothing."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} = {value!r} must be an int in [0, 2**64 - 1]")
    if not 0 <= int(value) < 2**64:
        raise ValueError(f"{name} = {value} is outside [0, 2**64 - 1]")
    return int(value)


def scalar_features(causal=False, window=None, window_align="top_left", sink_tokens=0,
                    softcap=0.0, scale=None, dropout_p=0.0, seed=0, offset=0, num_splits=0,
                    accumulate=False):
    """The scalar features as the tuple the extension reads (python/src/features.hpp): mask
    kind, align, window_left, window_right, sink_tokens, scale (None: 1 / sqrt(hdim_q)),
    softcap, dropout_p, seed, offset, num_splits, accumulate. Both the general path
    (Features.configure) and the PyTorch fast path hand this tuple over, so they cannot
    disagree."""
    kind, align, left, right = mask_spec(causal, window, window_align)
    if dropout_p:
        dropout = (float(dropout_p), _uint64(seed, "seed"), _uint64(offset, "offset"))
    else:
        dropout = (0.0, 0, 0)  # without dropout, seed and offset are not read
    return (kind, align, left, right, int(sink_tokens), None if scale is None else float(scale),
            float(softcap)) + dropout + (split_count(num_splits), bool(accumulate))


@dataclass(frozen=True)
class Features:
    """Mask, logits and dropout of one call.

    causal: False, True (= 'top_left'), 'top_left' (key j visible to query i when j <= i) or
        'bottom_right' (j <= i + seqlen_k - seqlen_q).
    window: (left, right): key j visible when d - left <= j <= d + right, d the diagonal of
        window_align; None or -1 leaves a side unbounded. Excludes causal (causal is (None, 0)).
    sink_tokens: the first keys stay visible under a mask (StreamingLLM).
    softcap: s <- cap * tanh(s / cap) after scaling; 0 is off.
    scale: softmax scale; None is 1 / sqrt(hdim_q).
    bias: additive bias broadcastable to [batch, nhead_q, seqlen_q, seqlen_k] (a view, no copy).
    alibi_slopes: float32 [nhead_q] or [batch, nhead_q]; bias = -slope * |i + sk - sq - j|.
    sink_logits: float32 [nhead_q], a learnable sink entering only the softmax denominator.
    dropout_p, seed, offset: dropout probability and its Philox seed and offset.
    num_splits: split-KV of the GPU forward: 0 lets the engine choose split-KV + combine where
        it pays, 1 forbids splitting, n > 1 forces n splits. The CPU reference ignores it.
    accumulate: merge the result into the state the given out and lse_out hold (attention's
        out, lse_out and accumulate).
    """

    causal: object = False
    window: object = None
    window_align: str = "top_left"
    sink_tokens: int = 0
    softcap: float = 0.0
    scale: object = None
    bias: object = None
    alibi_slopes: object = None
    sink_logits: object = None
    dropout_p: float = 0.0
    seed: int = 0
    offset: int = 0
    num_splits: int = 0
    accumulate: bool = False

    def mask(self):
        """(kind, align, window_left, window_right) in the engine's terms."""
        return mask_spec(self.causal, self.window, self.window_align)

    def has_logit_inputs(self):
        """Whether a bias, ALiBi slopes or sink logits come with the call (tensors to attach,
        which the PyTorch fast path leaves to the general path)."""
        return not (self.bias is None and self.alibi_slopes is None and self.sink_logits is None)

    def scalars(self):
        """The scalar_features tuple of these features."""
        return scalar_features(self.causal, self.window, self.window_align, self.sink_tokens,
                               self.softcap, self.scale, self.dropout_p, self.seed, self.offset,
                               self.num_splits, self.accumulate)

    def configure(self, problem):
        """Sets the mask, scale, soft cap, dropout and split count of an engine problem."""
        problem.set_features(self.scalars())

    def attach_logit_inputs(self, problem, backend, score_shape):
        """Attaches bias (broadcast to score_shape), ALiBi slopes and sink logits when given.

        Returns the bias view attached (None without a bias), for a backward that needs dBias
        to broadcast like it.
        """
        bias_view = None
        if self.bias is not None:
            bias = backend.tensor(self.bias, "bias")
            bias_view = backend.broadcast(bias, score_shape, "bias")
            backend.attach(problem, "bias", bias_view)
        if self.alibi_slopes is not None:
            slopes = backend.float32_array(self.alibi_slopes, "alibi_slopes")
            backend.attach(problem, "alibi_slopes", slopes)
        if self.sink_logits is not None:
            sinks = backend.float32_array(self.sink_logits, "sink_logits")
            backend.attach(problem, "sink_logits", sinks)
        return bias_view
