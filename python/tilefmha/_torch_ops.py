"""tilefmha attention as PyTorch custom operators (torch.library), for torch.compile.

torch.compile cannot trace into the engine: the extension reads data pointers and PyTorch's
current CUDA stream, which a traced (fake) tensor and dynamo's stream objects do not have. An
operator registered with torch.library is opaque to the compiler instead. Dynamo and AOTAutograd
see only its schema, its fake implementation (the shapes, dtypes and strides of its results,
computed without running anything) and its autograd formula; the compiled graph calls the real
implementation, which runs the ordinary eager code on real tensors. Four operators:

    tilefmha::attention_forward(q, k, v, bias, alibi_slopes, sink_logits, <features>)
        -> (o, lse)
    tilefmha::attention_backward(q, k, v, o, lse, do, bias, alibi_slopes, sink_logits,
                                 <features>, want_dbias, want_dsink) -> (dq, dk, dv, dbias, dsink)
    tilefmha::attention_varlen_forward(q, k, v, cu_seqlens_q, cu_seqlens_k, <features>)
        -> (o, lse)
    tilefmha::attention_varlen_backward(q, k, v, o, lse, do, cu_seqlens_q, cu_seqlens_k,
                                        <features>) -> (dq, dk, dv)

<features> are plain scalars (torch.library takes no Python objects): mask ('none', 'causal'
or 'window'), window_align, window_left, window_right (-1: unbounded), sink_tokens, softcap,
scale (None: 1 / sqrt(hdim_q)), dropout_p, seed, offset (the uint64 seed and offset as the
int64 with the same bits: a schema int is signed) and deterministic. dbias is an empty tensor
unless want_dbias, and dsink (float32 [nhead_q], the sink logits' gradient) unless want_dsink
(an operator cannot return an optional tensor). cu_seqlens are host (CPU)
integer tensors, so that new lengths need no recompilation.

tilefmha.torch.attention and attention_varlen call these operators under torch.compile (and on
tensor subclasses: fake tensors, functional tensors); eager calls on plain tensors keep the
autograd.Function path, which skips the dispatcher's per-call cost. Importing this module
imports torch and registers the operators (once per process).
"""

from typing import Optional, Tuple

import torch

from ._backends import torch_empty_like_layout
from ._backward import attention_backward as _attention_backward
from ._features import _uint64, mask_spec
from ._forward import attention as _attention
from ._forward import attention_varlen as _attention_varlen

Tensor = torch.Tensor
_FP8 = tuple(getattr(torch, name) for name in ("float8_e4m3fn", "float8_e5m2")
             if hasattr(torch, name))
_UINT64 = 2**64


def _signed(value):
    """A uint64 as the int64 with the same bits (schema ints are int64)."""
    return value - _UINT64 if value >= 2**63 else value


def _unsigned(value):
    return value % _UINT64


def _broadcasts(t):
    return any(s == 0 and n > 1 for s, n in zip(t.stride(), t.shape))


def _materialized(bias):
    """A bias that is itself an expanded view gets one gradient per element of the view, so it
    is materialized rather than handed over with its zero strides (whose dBias the engine would
    sum); the same rule as AttentionFunction's."""
    return bias.contiguous() if bias is not None and _broadcasts(bias) else bias


def _steppable(t):
    """t itself unless a broadcast (zero) stride or a strided last dimension needs a copy."""
    return t if t.stride(-1) == 1 and not _broadcasts(t) else t.contiguous()


def _feature_keywords(mask, window_align, window_left, window_right, sink_tokens, softcap,
                      scale, dropout_p, seed, offset):
    """The keyword arguments of tilefmha.attention for an operator's scalar features."""
    if mask == "causal":
        causal, window, window_align = window_align, None, "top_left"
    elif mask == "window":
        causal, window = False, (window_left, window_right)
    else:
        causal, window, window_align = False, None, "top_left"
    return {"causal": causal, "window": window, "window_align": window_align,
            "sink_tokens": sink_tokens, "softcap": softcap, "scale": scale,
            "dropout_p": dropout_p, "seed": _unsigned(seed), "offset": _unsigned(offset)}


def _output_like(expected, result):
    """result in expected's strides: the fake implementations promise the strides of
    torch_empty_like_layout, which the GPU path allocates with; the CPU reference allocates in
    NumPy, whose layout can differ where a dimension has one element."""
    if result.stride() == expected.stride():
        return result
    return expected.copy_(result)


def _empty_o(q, v):
    """O's layout: q's shape with v's head dim, q's memory order, q's dtype (fp8: bf16)."""
    dtype = torch.bfloat16 if q.dtype in _FP8 else None
    return torch_empty_like_layout(q, tuple(q.shape[:-1]) + (v.shape[-1],), dtype)


def _empty_lse(q, shape):
    return q.new_empty(shape, dtype=torch.float32)


def _host(results, expected):
    """Results of the CPU reference in the fake implementation's layout (GPU results already
    are: they were allocated by the same helper)."""
    return tuple(r if r.is_cuda else _output_like(e, r) for r, e in zip(results, expected))


# --- dense --------------------------------------------------------------------------------


@torch.library.custom_op("tilefmha::attention_forward", mutates_args=())
def attention_forward(q: Tensor, k: Tensor, v: Tensor, bias: Optional[Tensor],
                      alibi_slopes: Optional[Tensor], sink_logits: Optional[Tensor], mask: str,
                      window_align: str, window_left: int, window_right: int, sink_tokens: int,
                      softcap: float, scale: Optional[float], dropout_p: float, seed: int,
                      offset: int, deterministic: bool) -> Tuple[Tensor, Tensor]:
    """tilefmha.attention(..., return_lse=True); deterministic is read by the backward only."""
    features = _feature_keywords(mask, window_align, window_left, window_right, sink_tokens,
                                 softcap, scale, dropout_p, seed, offset)
    o, lse = _attention(q, k, v, bias=_materialized(bias), alibi_slopes=alibi_slopes,
                        sink_logits=sink_logits, return_lse=True, **features)
    if o.is_cuda:
        return o, lse
    return _host((o, lse), (_empty_o(q, v), _empty_lse(q, _dense_lse_shape(q))))


def _dense_lse_shape(q):
    return (q.shape[0], q.shape[2], q.shape[1])


@attention_forward.register_fake
def _attention_forward_fake(q, k, v, bias, alibi_slopes, sink_logits, *features):
    return _empty_o(q, v), _empty_lse(q, _dense_lse_shape(q))


@torch.library.custom_op("tilefmha::attention_backward", mutates_args=())
def attention_backward(q: Tensor, k: Tensor, v: Tensor, o: Tensor, lse: Tensor, do: Tensor,
                       bias: Optional[Tensor], alibi_slopes: Optional[Tensor],
                       sink_logits: Optional[Tensor], mask: str, window_align: str,
                       window_left: int, window_right: int, sink_tokens: int, softcap: float,
                       scale: Optional[float], dropout_p: float, seed: int, offset: int,
                       deterministic: bool, want_dbias: bool, want_dsink: bool
                       ) -> Tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """tilefmha.attention_backward: (dq, dk, dv, dbias, dsink), dbias empty unless want_dbias,
    dsink unless want_dsink."""
    features = _feature_keywords(mask, window_align, window_left, window_right, sink_tokens,
                                 softcap, scale, dropout_p, seed, offset)
    bias = _materialized(bias)
    gradients = _attention_backward(q, k, v, o, lse, _steppable(do), bias=bias,
                                    alibi_slopes=alibi_slopes, sink_logits=sink_logits,
                                    deterministic=deterministic, return_dbias=want_dbias,
                                    return_dsink=want_dsink, **features)
    dbias = gradients[3] if want_dbias else _empty_dbias(q, bias, False)
    dsink = gradients[-1] if want_dsink else _empty_dsink(q, want_dsink)
    results = tuple(gradients[:3]) + (dbias, dsink)
    if q.is_cuda:
        return results
    return _host(results, _empty_gradients(q, k, v, bias, want_dbias, want_dsink))


def _empty_dbias(q, bias, want_dbias):
    """dBias has the (materialized) bias's shape and dtype, row-major; a placeholder of no
    elements without want_dbias."""
    return bias.new_empty(bias.shape) if want_dbias else q.new_empty((0,))


def _empty_dsink(q, want_dsink):
    """dSink: float32 [nhead_q]; a placeholder of no elements without want_dsink."""
    return q.new_empty((q.shape[2] if want_dsink else 0,), dtype=torch.float32)


def _empty_gradients(q, k, v, bias, want_dbias, want_dsink=False):
    return tuple(torch_empty_like_layout(x, x.shape) for x in (q, k, v)) + (
        _empty_dbias(q, bias, want_dbias), _empty_dsink(q, want_dsink))


@attention_backward.register_fake
def _attention_backward_fake(q, k, v, o, lse, do, bias, alibi_slopes, sink_logits, mask,
                             window_align, window_left, window_right, sink_tokens, softcap, scale,
                             dropout_p, seed, offset, deterministic, want_dbias, want_dsink):
    return _empty_gradients(q, k, v, _materialized(bias), want_dbias, want_dsink)


# Positions of the forward operator's arguments.
_DENSE_TENSORS = 6  # q, k, v, bias, alibi_slopes, sink_logits
_DENSE_ARGUMENTS = _DENSE_TENSORS + 11  # features (10 scalars) and deterministic


def _setup_dense(ctx, inputs, output):
    q, k, v, bias, alibi_slopes, sink_logits = inputs[:_DENSE_TENSORS]
    o, lse = output
    ctx.save_for_backward(q, k, v, o, lse, bias, alibi_slopes, sink_logits)
    ctx.scalars = tuple(inputs[_DENSE_TENSORS:])  # the features, then deterministic
    ctx.mark_non_differentiable(lse)


def _backward_dense(ctx, d_o, d_lse):
    q, k, v, o, lse, bias, alibi_slopes, sink_logits = ctx.saved_tensors
    want_dbias = bias is not None and ctx.needs_input_grad[3]
    want_dsink = sink_logits is not None and ctx.needs_input_grad[5]
    dq, dk, dv, dbias, dsink = torch.ops.tilefmha.attention_backward(
        q, k, v, o, lse, d_o, bias, alibi_slopes, sink_logits, *ctx.scalars, want_dbias,
        want_dsink)
    # No gradients for ALiBi slopes (the engine computes none) or the scalars.
    return (dq, dk, dv, dbias if want_dbias else None, None,
            dsink if want_dsink else None) + (None,) * (_DENSE_ARGUMENTS - _DENSE_TENSORS)


attention_forward.register_autograd(_backward_dense, setup_context=_setup_dense)


# --- varlen -------------------------------------------------------------------------------


@torch.library.custom_op("tilefmha::attention_varlen_forward", mutates_args=())
def attention_varlen_forward(q: Tensor, k: Tensor, v: Tensor, cu_seqlens_q: Tensor,
                             cu_seqlens_k: Tensor, mask: str, window_align: str,
                             window_left: int, window_right: int, sink_tokens: int,
                             softcap: float, scale: Optional[float], dropout_p: float, seed: int,
                             offset: int, deterministic: bool) -> Tuple[Tensor, Tensor]:
    """tilefmha.attention_varlen(..., return_lse=True) with host cu_seqlens."""
    features = _feature_keywords(mask, window_align, window_left, window_right, sink_tokens,
                                 softcap, scale, dropout_p, seed, offset)
    o, lse = _attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, return_lse=True,
                               **features)
    if o.is_cuda:
        return o, lse
    return _host((o, lse), (_empty_o(q, v), _empty_lse(q, _varlen_lse_shape(q))))


def _varlen_lse_shape(q):
    return (q.shape[1], q.shape[0])


@attention_varlen_forward.register_fake
def _attention_varlen_forward_fake(q, k, v, cu_seqlens_q, cu_seqlens_k, *features):
    return _empty_o(q, v), _empty_lse(q, _varlen_lse_shape(q))


@torch.library.custom_op("tilefmha::attention_varlen_backward", mutates_args=())
def attention_varlen_backward(q: Tensor, k: Tensor, v: Tensor, o: Tensor, lse: Tensor,
                              do: Tensor, cu_seqlens_q: Tensor, cu_seqlens_k: Tensor, mask: str,
                              window_align: str, window_left: int, window_right: int,
                              sink_tokens: int, softcap: float, scale: Optional[float],
                              dropout_p: float, seed: int, offset: int, deterministic: bool
                              ) -> Tuple[Tensor, Tensor, Tensor]:
    """tilefmha.attention_backward with cu_seqlens: (dq, dk, dv)."""
    features = _feature_keywords(mask, window_align, window_left, window_right, sink_tokens,
                                 softcap, scale, dropout_p, seed, offset)
    gradients = _attention_backward(q, k, v, o, lse, _steppable(do), cu_seqlens_q=cu_seqlens_q,
                                    cu_seqlens_k=cu_seqlens_k, deterministic=deterministic,
                                    **features)
    if q.is_cuda:
        return tuple(gradients)
    return _host(gradients, _empty_gradients(q, k, v, None, False)[:3])


@attention_varlen_backward.register_fake
def _attention_varlen_backward_fake(q, k, v, o, lse, do, *arguments):
    return _empty_gradients(q, k, v, None, False)[:3]


_VARLEN_TENSORS = 5  # q, k, v, cu_seqlens_q, cu_seqlens_k
_VARLEN_ARGUMENTS = _VARLEN_TENSORS + 11


def _setup_varlen(ctx, inputs, output):
    q, k, v, cu_seqlens_q, cu_seqlens_k = inputs[:_VARLEN_TENSORS]
    o, lse = output
    ctx.save_for_backward(q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k)
    ctx.scalars = tuple(inputs[_VARLEN_TENSORS:])
    ctx.mark_non_differentiable(lse)


def _backward_varlen(ctx, d_o, d_lse):
    q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k = ctx.saved_tensors
    dq, dk, dv = torch.ops.tilefmha.attention_varlen_backward(
        q, k, v, o, lse, d_o, cu_seqlens_q, cu_seqlens_k, *ctx.scalars)
    return (dq, dk, dv) + (None,) * (_VARLEN_ARGUMENTS - 3)


attention_varlen_forward.register_autograd(_backward_varlen, setup_context=_setup_varlen)


# --- callers' spellings -------------------------------------------------------------------


def _scalar_arguments(causal, window, window_align, sink_tokens, softcap, scale, dropout_p, seed,
                      offset, deterministic):
    """The operators' scalar arguments from tilefmha.attention's keywords, checked as the eager
    path checks them (mask_spec's and the seed's errors)."""
    mask, align, left, right = mask_spec(causal, window, window_align)
    if dropout_p:
        seed, offset = _uint64(seed, "seed"), _uint64(offset, "offset")
    else:
        seed = offset = 0  # without dropout, seed and offset are not read
    return (mask, align, left, right, int(sink_tokens), float(softcap),
            None if scale is None else float(scale), float(dropout_p), _signed(seed),
            _signed(offset), bool(deterministic))


def _float32_on(x, q):
    """ALiBi slopes or sink logits (tensor, list or array) as a float32 tensor on q's device,
    as the eager path reads them."""
    return None if x is None else torch.as_tensor(x, dtype=torch.float32, device=q.device)


def _host_starts(cu_seqlens):
    """cu_seqlens as a tensor (a list becomes a CPU int64 tensor; tensors pass as they are, and
    the operator refuses device ones as the eager path does)."""
    if isinstance(cu_seqlens, torch.Tensor):
        return cu_seqlens
    return torch.tensor(cu_seqlens, dtype=torch.int64)


def attention(q, k, v, *, causal=False, window=None, window_align="top_left", sink_tokens=0,
              softcap=0.0, scale=None, bias=None, alibi_slopes=None, sink_logits=None,
              dropout_p=0.0, seed=0, offset=0, deterministic=False):
    """(o, lse) of tilefmha.torch.attention through tilefmha::attention_forward."""
    return torch.ops.tilefmha.attention_forward(
        q, k, v, bias, _float32_on(alibi_slopes, q), _float32_on(sink_logits, q),
        *_scalar_arguments(causal, window, window_align, sink_tokens, softcap, scale, dropout_p,
                           seed, offset, deterministic))


def attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, *, causal=False, window=None,
                     window_align="top_left", sink_tokens=0, softcap=0.0, scale=None,
                     deterministic=False):
    """(o, lse) of tilefmha.torch.attention_varlen through
    tilefmha::attention_varlen_forward."""
    return torch.ops.tilefmha.attention_varlen_forward(
        q, k, v, _host_starts(cu_seqlens_q), _host_starts(cu_seqlens_k),
        *_scalar_arguments(causal, window, window_align, sink_tokens, softcap, scale, 0.0, 0, 0,
                           deterministic))
