"""Context parallelism: attention over a sequence sharded across the ranks of a torch.distributed
process group (NCCL), with autograd. Importing this module imports torch.

    import torch.distributed as dist
    from tilefmha import distributed as cp

    dist.init_process_group("nccl")                       # under torchrun, one process per GPU
    q = cp.shard(q_full, world, rank)                      # zigzag: chunks r and 2N-1-r
    o = cp.ring_attention(q, k, v, causal=True)            # this rank's rows of O
    o.sum().backward()                                     # dq, dk, dv of the local shards

Every rank passes its zigzag shard of Q, K and V (``shard``), [batch, seq_local, head, dim], or
packed [tokens, head, dim] with the documents' global prefix sums ``cu_seqlens`` (each document
a multiple of 2 * world tokens, sharded per document). O and LSE come back for the same rows.

``ring_attention`` passes K/V shards around the ring, overlapped with the attention of the shard
at hand (only the K/V heads travel under GQA), and merges the partial states with
``merge_states``; its backward sends dK/dV around the ring and keeps dQ local.
``ulysses_attention`` exchanges sequence shards for head shards (all-to-all) instead.
``attention`` picks one of the two with ``choose_method`` (docs/context_parallel.md).
"""

import functools

import torch
import torch.distributed as dist

from . import _core, _ring, _ulysses
from ._zigzag import shard, unshard
from ._shapes import index_list
from ._backward import attention_backward
from ._forward import attention as _attention
from ._forward import attention_varlen as _attention_varlen

__all__ = ["attention", "choose_method", "ring_attention", "shard", "ulysses_attention",
           "unshard"]

_NVLINK_DOMAIN = 8  # GPUs of one NVLink host (H100 HGX)
# Local shard length (tokens) from which the ring's K/V passes hide behind a step's attention on
# 400 Gb/s InfiniBand: bench/ring_cost_model.py's threshold (bf16, hdim 128, GQA 4:1), rounded.
_RING_HIDES_COMMUNICATION_FROM_ACROSS_HOSTS = 8192


def _check_inputs(q, k, v, packed):
    rank = 3 if packed else 4
    dims = "[tokens, head, dim]" if packed else "[batch, seq_local, head, dim]"
    for name, x in (("q", q), ("k", k), ("v", v)):
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
        if x.ndim != rank:
            raise ValueError(f"{name} must be {rank}-D {dims}, got shape {list(x.shape)}")
    seq_dim = 0 if packed else 1
    if q.shape[seq_dim] != k.shape[seq_dim] or k.shape[:-1] != v.shape[:-1]:
        raise ValueError(f"q, k and v must hold the same local tokens: shapes {list(q.shape)}, "
                         f"{list(k.shape)}, {list(v.shape)}")
    if q.shape[seq_dim] % 2:
        raise ValueError(f"the local shard has {q.shape[seq_dim]} tokens, an odd count: a "
                         "zigzag shard is two equal chunks (shard() makes it)")


@functools.lru_cache(maxsize=64)
def _packed_rows(starts, world, device):
    """Local rows in packed-halves order (every front chunk, then every back chunk), cached."""
    maps = _core.packed_shards(list(starts), world)
    return torch.tensor(maps["front_rows"] + maps["back_rows"], device=device)


def _features(scale, softcap):
    return {"scale": scale, "softcap": softcap}


class _RingPlan:
    """One rank's ring attention: forward(q, k, v) -> (o, lse, saved) and backward(saved, do)
    -> (dq, dk, dv), plain functions that _Function hands to autograd."""

    def __init__(self, ring, q, k, v, causal, cu_seqlens, features, deterministic):
        packed = cu_seqlens is not None
        _check_inputs(q, k, v, packed)
        self.ring, self.features, self.deterministic = ring, features, deterministic
        self.rows = None  # packed: local rows with every front chunk before every back chunk
        if packed:
            starts = index_list(cu_seqlens, "cu_seqlens")
            maps = _core.packed_shards(starts, ring.world)
            if maps["local_seqstarts"][-1] != q.shape[0]:
                raise ValueError(f"q holds {q.shape[0]} tokens but cu_seqlens gives this rank "
                                 f"{maps['local_seqstarts'][-1]} (total / world)")
            self.layout = _ring.Layout(int(q.shape[0]), maps["half_seqstarts"])
            self.rows = _packed_rows(tuple(starts), ring.world, q.device)
        else:
            self.layout = _ring.Layout(int(q.shape[1]))
        self.schedule = _ring.schedule(ring, causal, packed)

    def forward(self, q, k, v):
        if self.rows is not None:
            q, k, v = (x.index_select(0, self.rows) for x in (q, k, v))
        o, lse = _ring.ring_forward(self.ring, self.layout, self.schedule, q, k, v,
                                    self.features)
        saved = (q, k, v, o, lse)
        if self.rows is not None:
            o = torch.empty_like(o).index_copy_(0, self.rows, o)
            lse = torch.empty_like(lse).index_copy_(1, self.rows, lse)
        return o, lse, saved

    def backward(self, saved, do):
        q, k, v, o, lse = saved
        if self.rows is not None:
            do = do.index_select(0, self.rows)
        dq, dk, dv = _ring.ring_backward(self.ring, self.layout, self.schedule, q, k, v, o, lse,
                                         _steppable(do), self.features, self.deterministic)
        if self.rows is not None:
            dq, dk, dv = (torch.empty_like(x).index_copy_(0, self.rows, x)
                          for x in (dq, dk, dv))
        return dq, dk, dv


class _UlyssesPlan:
    """One rank's head-parallel attention, with _RingPlan's forward and backward."""

    def __init__(self, collective, q, k, v, causal, cu_seqlens, features, deterministic):
        self.packed = cu_seqlens is not None
        _check_inputs(q, k, v, self.packed)
        seq_local = int(q.shape[0] if self.packed else q.shape[1])
        self.exchange = _ulysses.Exchange(collective, seq_local, q.device, cu_seqlens)
        for name, x in (("q", q), ("k", k)):
            self.exchange.heads_per_rank(x, name)
        self.starts = index_list(cu_seqlens, "cu_seqlens") if self.packed else None
        self.causal, self.features, self.deterministic = causal, features, deterministic

    def _to_heads(self, x, name):
        return self.exchange.to_heads(x[None] if self.packed else x, name)

    def _to_sequence(self, y):
        x = self.exchange.to_sequence(y)
        return x[0] if self.packed else x

    def _unbatched(self, x):
        return x[0] if self.packed else x

    def forward(self, q, k, v):
        heads = [self._to_heads(x, name) for x, name in ((q, "q"), (k, "k"), (v, "v"))]
        if self.packed:
            o_heads, lse_heads = _attention_varlen(*(x[0] for x in heads), self.starts,
                                                  self.starts, causal=self.causal,
                                                  return_lse=True, **self.features)
            o_heads, lse_heads = o_heads[None], lse_heads[None]
        else:
            o_heads, lse_heads = _attention(*heads, causal=self.causal, return_lse=True,
                                            **self.features)
        o = self._to_sequence(o_heads)
        # LSE [batch, heads / N, seq] -> [batch, seq_local, heads] -> [batch, heads, seq_local]
        lse = self._to_sequence(lse_heads.transpose(1, 2).contiguous())
        lse = lse.transpose(-1, -2).contiguous()
        return o, lse, tuple(heads) + (o_heads, lse_heads)

    def backward(self, saved, do):
        q, k, v, o, lse = saved
        do_heads = _steppable(self._to_heads(do, "the output gradient"))
        if self.packed:
            gradients = attention_backward(q[0], k[0], v[0], o[0], lse[0], do_heads[0],
                                           cu_seqlens_q=self.starts, cu_seqlens_k=self.starts,
                                           causal=self.causal, deterministic=self.deterministic,
                                           **self.features)
            gradients = [x[None] for x in gradients]
        else:
            gradients = attention_backward(q, k, v, o, lse, do_heads, causal=self.causal,
                                           deterministic=self.deterministic, **self.features)
        return tuple(self._to_sequence(x) for x in gradients)


def _steppable(x):
    return x if x.stride(-1) == 1 else x.contiguous()


class _Function(torch.autograd.Function):
    """A plan's forward and backward under autograd; the LSE carries no gradient."""

    @staticmethod
    def forward(ctx, q, k, v, plan):
        o, lse, saved = plan.forward(q, k, v)
        ctx.plan = plan
        ctx.save_for_backward(*saved)
        ctx.mark_non_differentiable(lse)
        return o, lse

    @staticmethod
    def backward(ctx, do, d_lse):
        return ctx.plan.backward(ctx.saved_tensors, do) + (None,)


def _apply(plan, q, k, v, return_lse):
    o, lse = _Function.apply(q, k, v, plan)
    return (o, lse) if return_lse else o


def ring_attention(q, k, v, *, group=None, causal=False, cu_seqlens=None, scale=None,
                   softcap=0.0, return_lse=False, deterministic=False):
    """Ring attention over this rank's zigzag shard; see the module's docstring.

    q: [batch, seq_local, nhead_q, hdim_q]; k, v: [batch, seq_local, nhead_k, hdim] (nhead_q a
    multiple of nhead_k); or packed [tokens, head, dim] with cu_seqlens, the global prefix sums
    (a host list or tensor; every rank passes the same). CUDA tensors of one device per rank.
    group: the process group (None: the default group). scale, softcap: as in
    tilefmha.attention. deterministic: a backward that is bit-identical from run to run.

    Returns o (q's rows, hdim_v) and with return_lse the float32 LSE [batch, nhead_q,
    seq_local] ([nhead_q, tokens] packed) over the whole sequence. The LSE carries no gradient.
    """
    plan = _RingPlan(_ring.Ring(group), q, k, v, bool(causal), cu_seqlens,
                     _features(scale, softcap), bool(deterministic))
    return _apply(plan, q, k, v, return_lse)


def ulysses_attention(q, k, v, *, group=None, causal=False, cu_seqlens=None, scale=None,
                      softcap=0.0, return_lse=False, deterministic=False):
    """Head-parallel attention over this rank's zigzag shard: arguments and results as in
    ring_attention. nhead_q and nhead_k must be multiples of the group's size."""
    plan = _UlyssesPlan(_ulysses.Collective(group), q, k, v, bool(causal), cu_seqlens,
                        _features(scale, softcap), bool(deterministic))
    return _apply(plan, q, k, v, return_lse)


def choose_method(nhead_q, nhead_k, world, seq_local, *, within_host=True):
    """'ring' or 'ulysses' for a problem of these sizes (docs/context_parallel.md, "Ring or
    Ulysses").

    Within one NVLink host the ring: measured on two H100s it was as fast as Ulysses or faster
    at every length from 4k to 256k tokens, its K/V passes hidden behind compute, while
    Ulysses' four all-to-alls are not. Across hosts the ring's passes stop hiding below the cost
    model's threshold (S/N about 7.4k tokens on 400 Gb/s InfiniBand, GQA 4:1, hdim 128), and
    there Ulysses, whose traffic does not grow with the number of steps, is chosen where both
    head counts divide the ranks."""
    if nhead_q % world or nhead_k % world:
        return "ring"
    if within_host and world <= _NVLINK_DOMAIN:
        return "ring"
    return "ulysses" if seq_local < _RING_HIDES_COMMUNICATION_FROM_ACROSS_HOSTS else "ring"


def attention(q, k, v, *, group=None, method="auto", within_host=True, **arguments):
    """Context-parallel attention by `method`: 'ring', 'ulysses' or 'auto' (choose_method, with
    within_host: whether the group's GPUs share one NVLink host). Other arguments as in
    ring_attention."""
    if method == "auto":
        packed = arguments.get("cu_seqlens") is not None
        seq_local = int(q.shape[0] if packed else q.shape[1])
        method = choose_method(int(q.shape[-2]), int(k.shape[-2]),
                               dist.get_world_size(group), seq_local, within_host=within_host)
    if method == "ring":
        return ring_attention(q, k, v, group=group, **arguments)
    if method == "ulysses":
        return ulysses_attention(q, k, v, group=group, **arguments)
    raise ValueError(f"method = {method!r}: expected 'ring', 'ulysses' or 'auto'")
