"""PyTorch autograd for tilefmha attention.

Importing this module imports torch; ``import tilefmha`` alone never does.

    from tilefmha.torch import attention
    o = attention(q, k, v, causal=True)      # q, k, v: [batch, seq, head, dim] torch tensors
    o.sum().backward()                       # fills q.grad, k.grad, v.grad (bias.grad and
                                             # sink_logits.grad when they require grad)

Forward and backward run where the tensors live: the CPU reference, or the GPU dispatcher for
CUDA tensors (the GPU backward refuses dropout, a bias, ALiBi and head dims above 128 with an
error naming the feature; see docs/python.md).

Under torch.compile (and on tensor subclasses such as the fake tensors of tracing) attention and
attention_varlen call the custom operators of tilefmha._torch_ops (tilefmha::attention_forward
and its kin), which the compiler sees through their fake implementations and autograd formulas
without tracing into the engine. Eager calls on plain tensors keep the autograd.Functions below:
they cost no dispatcher round trip per call.
"""

import dataclasses

import torch

from ._backward import attention_backward
from ._features import Features
from ._forward import attention as _attention
from ._forward import attention_varlen as _attention_varlen

if hasattr(torch.library, "custom_op"):
    from . import _torch_ops
else:  # PyTorch before 2.4: eager autograd only
    _torch_ops = None

# True while dynamo traces (torch.compile, torch.export); a constant there, a flag read in eager.
_compiling = torch.compiler.is_compiling if hasattr(torch, "compiler") else lambda: False
_Tensor = torch.Tensor


def _through_operator(q):
    """Whether a call takes the custom operator: under torch.compile, or when q is no plain
    tensor (the fake and functional tensors of make_fx, AOTAutograd or non-strict export cannot
    reach the engine through the autograd.Function, whose forward runs the engine right away).
    Plain tensors in eager mode pay one flag read and one type comparison here."""
    if _compiling():
        if _torch_ops is None:
            raise RuntimeError("tilefmha.torch under torch.compile needs PyTorch 2.4 or later "
                               f"(torch.library.custom_op); this is {torch.__version__}")
        return True
    return type(q) is not _Tensor and _torch_ops is not None


def _feature_keywords(features):
    # dataclasses.asdict would deep-copy the tensors inside.
    return {field.name: getattr(features, field.name) for field in dataclasses.fields(features)}


def _broadcasts(t):
    return any(s == 0 and n > 1 for s, n in zip(t.stride(), t.shape))


def _steppable(t):
    """t itself unless a broadcast (zero) stride or a strided last dimension needs a copy; the
    gradients autograd hands over are often expanded views of a scalar's."""
    return t if t.stride(-1) == 1 and not _broadcasts(t) else t.contiguous()


class AttentionFunction(torch.autograd.Function):
    """apply(q, k, v, bias, sink_logits, features, deterministic) -> (o, lse): attention with
    `features` (a tilefmha._features.Features without its bias and sink logits, which are passed
    separately so that autograd sees them). lse is not differentiable."""

    @staticmethod
    def forward(ctx, q, k, v, bias, sink_logits, features, deterministic=False):
        # A bias that is itself an expanded view gets one gradient per element of the view, so
        # it is materialized rather than handed over with its zero strides (whose dBias the
        # engine would sum).
        if bias is not None and _broadcasts(bias):
            bias = bias.contiguous()
        features = dataclasses.replace(features, bias=bias, sink_logits=sink_logits)
        o, lse = _attention(q, k, v, return_lse=True, **_feature_keywords(features))
        # Sink logits given as a list or array have no gradient; only a tensor is saved.
        sinks = sink_logits if isinstance(sink_logits, torch.Tensor) else None
        ctx.save_for_backward(q, k, v, o, lse, bias, sinks)
        ctx.features = dataclasses.replace(features, bias=None,
                                           sink_logits=None if sinks is not None else sink_logits)
        ctx.deterministic = deterministic
        ctx.mark_non_differentiable(lse)
        return o, lse

    @staticmethod
    def backward(ctx, d_o, d_lse):
        q, k, v, o, lse, bias, sinks = ctx.saved_tensors
        features = dataclasses.replace(ctx.features, bias=bias)
        if sinks is not None:
            features = dataclasses.replace(features, sink_logits=sinks)
        want_dbias = bias is not None and ctx.needs_input_grad[3]
        want_dsink = sinks is not None and ctx.needs_input_grad[4]
        gradients = attention_backward(q, k, v, o, lse, _steppable(d_o),
                                       return_dbias=want_dbias, return_dsink=want_dsink,
                                       deterministic=ctx.deterministic,
                                       **_feature_keywords(features))
        dq, dk, dv = gradients[:3]
        dbias = gradients[3] if want_dbias else None
        # The engine's dsink is float32 on q's device; autograd wants the input's.
        dsink = gradients[-1].to(sinks) if want_dsink else None
        return dq, dk, dv, dbias, dsink, None, None


class VarlenAttentionFunction(torch.autograd.Function):
    """apply(q, k, v, cu_seqlens_q, cu_seqlens_k, features, deterministic) -> (o, lse):
    attention_varlen over packed sequences (host prefix sums) with scalar `features`
    (a Features without logit inputs). lse is not differentiable."""

    @staticmethod
    def forward(ctx, q, k, v, cu_seqlens_q, cu_seqlens_k, features, deterministic):
        o, lse = _attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, return_lse=True,
                                   **_feature_keywords(features))
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.arguments = (cu_seqlens_q, cu_seqlens_k, features, deterministic)
        ctx.mark_non_differentiable(lse)
        return o, lse

    @staticmethod
    def backward(ctx, d_o, d_lse):
        q, k, v, o, lse = ctx.saved_tensors
        cu_seqlens_q, cu_seqlens_k, features, deterministic = ctx.arguments
        dq, dk, dv = attention_backward(q, k, v, o, lse, _steppable(d_o),
                                        cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k,
                                        deterministic=deterministic,
                                        **_feature_keywords(features))
        return dq, dk, dv, None, None, None, None


def attention(q, k, v, *, causal=False, window=None, window_align="top_left", sink_tokens=0,
              softcap=0.0, scale=None, bias=None, alibi_slopes=None, sink_logits=None,
              dropout_p=0.0, seed=0, offset=0, return_lse=False, deterministic=False):
    """tilefmha.attention for torch tensors with autograd (q, k, v, a bias and sink logits may
    require grad). Arguments and results as in tilefmha.attention; deterministic: a backward
    whose dQ does not depend on the order of atomic additions (bit-identical from run to run)."""
    if _through_operator(q):
        o, lse = _torch_ops.attention(
            q, k, v, causal=causal, window=window, window_align=window_align,
            sink_tokens=sink_tokens, softcap=softcap, scale=scale, bias=bias,
            alibi_slopes=alibi_slopes, sink_logits=sink_logits, dropout_p=dropout_p, seed=seed,
            offset=offset, deterministic=deterministic)
        return (o, lse) if return_lse else o
    features = Features(causal, window, window_align, sink_tokens, softcap, scale, None,
                        alibi_slopes, None, dropout_p, seed, offset)
    o, lse = AttentionFunction.apply(q, k, v, bias, sink_logits, features, deterministic)
    return (o, lse) if return_lse else o


def attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, *, causal=False, window=None,
                     window_align="top_left", sink_tokens=0, softcap=0.0, scale=None,
                     return_lse=False, deterministic=False):
    """tilefmha.attention_varlen for torch tensors with autograd, packed [tokens, head, dim]
    with host prefix sums (lists or CPU tensors). Mask and logit keywords as in
    tilefmha.attention; no bias, ALiBi, sink logits or dropout here."""
    if _through_operator(q):
        o, lse = _torch_ops.attention_varlen(
            q, k, v, cu_seqlens_q, cu_seqlens_k, causal=causal, window=window,
            window_align=window_align, sink_tokens=sink_tokens, softcap=softcap, scale=scale,
            deterministic=deterministic)
        return (o, lse) if return_lse else o
    features = Features(causal, window, window_align, sink_tokens, softcap, scale)
    o, lse = VarlenAttentionFunction.apply(q, k, v, cu_seqlens_q, cu_seqlens_k, features,
                                           deterministic)
    return (o, lse) if return_lse else o
