"""The attention features every family shares: mask, logit transforms, logit inputs, dropout.

They are the keyword arguments of ``tilefmha.attention``; the other functions take the same
keywords. Values are checked by the engine, whose errors name the field (``mask.window_left``,
``softcap``...); this module only turns the Python spellings into the engine's.
"""

from dataclasses import dataclass

_ALIGNMENTS = ("top_left", "bottom_right")


def _window_bounds(window):
    try:
        left, right = window
    except (TypeError, ValueError):
        raise ValueError(f"window = {window!r} must be a pair (left, right); None or -1 is "
                         "unbounded") from None
    return tuple(-1 if bound is None else int(bound) for bound in (left, right))


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

    def mask(self):
        """(kind, align, window_left, window_right) in the engine's terms."""
        causal = self.causal
        if causal is None or causal is False:
            kind, align = "none", "top_left"
        elif causal is True:
            kind, align = "causal", "top_left"
        elif causal in _ALIGNMENTS:
            kind, align = "causal", causal
        else:
            raise ValueError(f"causal = {causal!r}: expected False, True, 'top_left' or "
                             "'bottom_right'")
        if self.window is None:
            if self.window_align != "top_left":
                raise ValueError(f"window_align = {self.window_align!r} needs a window=(left, "
                                 "right)")
            return kind, align, -1, -1
        if kind != "none":
            raise ValueError("causal and window exclude each other: causal is window=(None, 0) "
                             "with window_align")
        return ("window", self.window_align) + _window_bounds(self.window)

    def configure(self, problem):
        """Sets the mask, scale, soft cap and dropout of an engine problem."""
        kind, align, left, right = self.mask()
        problem.set_mask(kind, align, left, right, int(self.sink_tokens))
        if self.scale is not None:
            problem.set_scale(float(self.scale))
        problem.set_softcap(float(self.softcap))
        if self.dropout_p:
            problem.set_dropout(float(self.dropout_p), int(self.seed), int(self.offset))

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
