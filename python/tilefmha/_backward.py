"""Attention backward: dQ, dK, dV (and dBias, dSink) from the forward's inputs, O, LSE and dO.

Host tensors run on the CPU reference; CUDA tensors on the GPU backward (one plan of three
stages: D = rowsum(dO * O), dQ/dK/dV, dQ to the output dtype; head dims up to 256), which
runs every forward feature with its gradient; it refuses a broadcast dBias that is not fp32 (or
is deterministic) with an error naming bwd.dbias.
"""

from . import _core
from ._backends import select_backend
from ._dtypes import attention_dtype
from ._features import Features
from ._forward import BSHD, THD, inputs
from ._shapes import index_list, longest

_BSHD_GRADIENTS = dict(BSHD, o=(4, "[batch, seqlen_q, nhead_q, hdim_v]"),
                       do=(4, "[batch, seqlen_q, nhead_q, hdim_v]"),
                       lse=(3, "[batch, nhead_q, seqlen_q]"))
_THD_GRADIENTS = dict(THD, o=(3, "[total_q, nhead_q, hdim_v]"),
                      do=(3, "[total_q, nhead_q, hdim_v]"), lse=(2, "[nhead_q, total_q]"))


def attention_backward(q, k, v, o, lse, do, *, cu_seqlens_q=None, cu_seqlens_k=None,
                       deterministic=False, return_dbias=False, return_dsink=False, dtype=None,
                       backend="auto", **features):
    """Gradients of attention(q, k, v, **features) for the output gradient `do`.

    o and lse are the forward's outputs (attention(..., return_lse=True)); the feature keywords
    must be the forward's (mask, scale, soft cap, bias, ALiBi, sink logits, dropout with the same
    seed and offset). Tensors are [batch, seq, head, dim] with lse [batch, nhead_q, seqlen_q],
    or, with cu_seqlens_q and cu_seqlens_k, packed [total, head, dim] with lse [nhead_q, total_q].
    GQA gradients dk, dv are summed over each group of query heads.

    Returns (dq, dk, dv) in the inputs' dtype and memory order, with return_dbias also dbias
    (the bias's shape, summed over the dimensions it broadcasts), and with return_dsink last the
    sink logits' gradient dsink: float32 [nhead_q], -sum over every query row of its head of
    exp(sink - lse) * rowsum(do * o).
    """
    feature_set = Features(**features)
    be = select_backend(backend, q)
    if return_dbias and feature_set.bias is None:
        raise ValueError("return_dbias=True needs a bias")
    if return_dsink and feature_set.sink_logits is None:
        raise ValueError("return_dsink=True needs sink_logits")
    engine_dtype = attention_dtype(q, dtype)
    group = cu_seqlens_q is not None or cu_seqlens_k is not None
    if group and (cu_seqlens_q is None or cu_seqlens_k is None):
        raise ValueError("varlen backward needs both cu_seqlens_q and cu_seqlens_k")
    tensors = inputs(be, _THD_GRADIENTS if group else _BSHD_GRADIENTS, q=q, k=k, v=v, o=o,
                     lse=lse, do=do)
    if group:
        tensors = [x[None] for x in tensors]
    q, k, v, o, lse, do = tensors

    rows, seq, nhead_q, hdim_q = (int(n) for n in q.shape)
    nhead_k, seqlen_k, hdim_v = int(k.shape[2]), int(k.shape[1]), int(v.shape[3])
    problem = _core.Problem("bwd_dq_dk_dv")
    problem.set_dtype(engine_dtype)
    problem.set_shape(rows, nhead_q, nhead_k, seq, seqlen_k, hdim_q, hdim_v)
    score_shape = (rows, nhead_q, seq, seqlen_k)
    if group:
        starts_q = index_list(cu_seqlens_q, "cu_seqlens_q")
        starts_k = index_list(cu_seqlens_k, "cu_seqlens_k")
        problem.set_group(starts_q, starts_k)
        score_shape = (len(starts_q) - 1, nhead_q, longest(starts_q), longest(starts_k))
    problem.set_deterministic(bool(deterministic))
    feature_set.configure(problem)
    bias_view = feature_set.attach_logit_inputs(problem, be, score_shape)

    gradients = [be.empty_like_layout(x, x.shape) for x in (q, k, v)]
    for field, x in (("q", q), ("k", k), ("v", v), ("o", o), ("lse", lse), ("bwd.d_o", do)):
        be.attach(problem, field, x)
    for field, x in zip(("bwd.dq", "bwd.dk", "bwd.dv"), gradients):
        be.attach(problem, field, x, writable=True)
    dbias = None
    if return_dbias:
        dbias, dbias_view = be.dbias_like(bias_view, be.tensor(feature_set.bias, "bias").shape)
        be.attach(problem, "bwd.dbias", dbias_view, writable=True)
    dsink = None
    if return_dsink:
        dsink = be.empty_float32((nhead_q,))
        be.attach(problem, "bwd.dsink", dsink, writable=True)
    be.run(problem)

    if group:
        gradients = [x[0] for x in gradients]
    results = tuple(be.result(x) for x in gradients)
    if return_dbias:
        results += (be.result(dbias),)
    if return_dsink:
        results += (be.result(dsink),)
    return results
