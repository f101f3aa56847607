"""Ring attention over a torch.distributed process group (NCCL), forward and backward.

Every rank holds its zigzag shard of Q, K and V (_zigzag). The engine's ring schedule
(_core.ring_schedule, one source with the C++ entry) lists, for each step, the blocks to compute
against the K/V shard the rank holds then. While a step computes, the shard goes on to the next
rank and the next one arrives from the previous rank, on NCCL's stream. The partial states of
every query row are merged with merge_states. The backward walks the same schedule with the
merged O and LSE: dQ stays local in fp32; dK and dV accumulate in fp32 buffers that travel with
their shard and reach its owner after the last step.

Packed varlen input is reordered once, on entry, so that the local shard holds every document's
front chunk (packed) before every back chunk: each block is then one varlen call over packed
halves with the same prefix sums.
"""

import torch
import torch.distributed as dist

from . import _core
from ._backward import attention_backward
from ._forward import attention, attention_varlen
from ._merge import merge_states

# Partial states held per query half before they are merged into one (bounds the memory of long
# rings at the cost of one more rounding of O per merge).
_STATES_PER_MERGE = 8


class Ring:
    """The ranks of a process group as a ring: each sends to the next and receives from the
    previous."""

    def __init__(self, group):
        self.group = group
        self.world = dist.get_world_size(group)
        self.rank = dist.get_rank(group)
        whole = group if group is not None else dist.group.WORLD
        self.next = dist.get_global_rank(whole, (self.rank + 1) % self.world)
        self.previous = dist.get_global_rank(whole, (self.rank - 1) % self.world)

    def pass_on(self, tensor):
        """Starts sending `tensor` to the next rank and receiving the previous rank's tensor of
        the same shape; returns (requests, received). Wait on the requests before reading
        `received` (the current stream then waits; the host does not)."""
        received = torch.empty_like(tensor)
        operations = [dist.P2POp(dist.isend, tensor, self.next, self.group),
                      dist.P2POp(dist.irecv, received, self.previous, self.group)]
        return dist.batch_isend_irecv(operations), received


def _wait(requests):
    for request in requests:
        request.wait()


class _Pair:
    """K and V (or dK and dV) in one flat buffer, so that one message carries both."""

    def __init__(self, flat, k_shape, v_shape):
        self.flat, self.k_shape, self.v_shape = flat, k_shape, v_shape

    @classmethod
    def pack(cls, k, v, dtype=None):
        flat = torch.cat((k.reshape(-1), v.reshape(-1)))
        return cls(flat if dtype is None else flat.to(dtype), k.shape, v.shape)

    @classmethod
    def zeros_like(cls, pair, dtype):
        return cls(torch.zeros_like(pair.flat, dtype=dtype), pair.k_shape, pair.v_shape)

    def with_flat(self, flat):
        return _Pair(flat, self.k_shape, self.v_shape)

    def views(self):
        k_size = self.k_shape.numel()
        return self.flat[:k_size].view(self.k_shape), self.flat[k_size:].view(self.v_shape)


class Layout:
    """How a rank's shard is cut into the schedule's parts.

    Batch mode: tensors [batch, seq_local, ...] cut along dim 1 (LSE [batch, head, seq] along
    dim 2). Packed: tensors [tokens, ...] with every front chunk before every back chunk, cut
    along dim 0 (LSE [head, tokens] along dim 1), each half with prefix sums `half_seqstarts`."""

    def __init__(self, seq_local, half_seqstarts=None):
        self.packed = half_seqstarts is not None
        self.half = seq_local // 2
        self.half_seqstarts = half_seqstarts
        if self.packed:
            lengths = [b - a for a, b in zip(half_seqstarts, half_seqstarts[1:])]
            self.longest = max(lengths, default=0)

    def part(self, x, part, lse=False):
        if part == "all":
            return x
        dim = (1 if self.packed else 2) if lse else (0 if self.packed else 1)
        return x.narrow(dim, 0 if part == "front" else self.half, self.half)

    def forward(self, q, k, v, causal, features):
        if not self.packed:
            return attention(q, k, v, causal=causal, return_lse=True, **features)
        starts = self.half_seqstarts
        return attention_varlen(q, k, v, starts, starts, causal=causal, return_lse=True,
                                **features)

    def backward(self, q, k, v, o, lse, do, causal, features, deterministic):
        starts = {} if not self.packed else {"cu_seqlens_q": self.half_seqstarts,
                                             "cu_seqlens_k": self.half_seqstarts}
        return attention_backward(q, k, v, o, lse, do, causal=causal,
                                  deterministic=deterministic, **starts, **features)

    def as_batch(self, o, lse):
        """merge_states' [batch, seq, head, dim] / [batch, head, seq] views of a state."""
        return (o[None], lse[None]) if self.packed else (o, lse)


class _HalfStates:
    """The partial states of one query half, merged when there are enough of them."""

    def __init__(self, layout):
        self.layout = layout
        self.states = []

    def add(self, o, lse):
        self.states.append(self.layout.as_batch(o, lse))
        if len(self.states) == _STATES_PER_MERGE:
            self.states = [self._merged()]

    def _merged(self, out=None, lse_out=None):
        o_states = torch.stack([o for o, _ in self.states])
        lse_states = torch.stack([lse for _, lse in self.states])
        return merge_states(o_states, lse_states, out=out, lse_out=lse_out)

    def write(self, out, lse_out):
        if len(self.states) == 1:
            out.copy_(self.states[0][0])
            lse_out.copy_(self.states[0][1])
        else:
            self._merged(out, lse_out)


def ring_forward(ring, layout, schedule, q, k, v, features):
    """O and LSE of this rank's queries over every rank's keys; q, k, v in the layout's form."""
    states = {"front": _HalfStates(layout), "back": _HalfStates(layout)}
    kv = _Pair.pack(k, v)
    whole = None  # a step-0 block over the whole shard, returned as it is when alone
    for step, (_, blocks) in enumerate(schedule):
        last = step + 1 == len(schedule)
        if not last:
            requests, arriving = ring.pass_on(kv.flat)
        k_now, v_now = kv.views()
        for queries, keys, causal in blocks:
            o, lse = layout.forward(layout.part(q, queries), layout.part(k_now, keys),
                                    layout.part(v_now, keys), causal, features)
            if queries == "all" and len(schedule) == 1:
                whole = (o, lse)
            for half in (("front", "back") if queries == "all" else (queries,)):
                states[half].add(layout.part(o, half) if queries == "all" else o,
                                 layout.part(lse, half, lse=True) if queries == "all" else lse)
        if not last:
            _wait(requests)
            kv = kv.with_flat(arriving)
    if whole is not None:
        return whole
    o = torch.empty(q.shape[:-1] + (v.shape[-1],), dtype=q.dtype, device=q.device)
    lse_shape = (q.shape[1], q.shape[0]) if layout.packed else (q.shape[0], q.shape[2],
                                                                 q.shape[1])
    lse = torch.empty(lse_shape, dtype=torch.float32, device=q.device)
    for half in ("front", "back"):
        out, lse_out = layout.as_batch(layout.part(o, half), layout.part(lse, half, lse=True))
        states[half].write(out, lse_out)
    return o, lse


def ring_backward(ring, layout, schedule, q, k, v, o, lse, do, features, deterministic):
    """dQ, dK, dV of this rank's shard (the layout's form) for the output gradient do."""
    dq = torch.zeros_like(q, dtype=torch.float32)
    kv = _Pair.pack(k, v)
    gradients = None  # dK/dV of the shard held now, accumulated by the ranks it visited
    for step, (_, blocks) in enumerate(schedule):
        last = step + 1 == len(schedule)
        if not last:
            kv_requests, kv_arriving = ring.pass_on(kv.flat)
        k_now, v_now = kv.views()
        block_gradients = []
        for queries, keys, causal in blocks:
            part = layout.part
            dq_block, dk_block, dv_block = layout.backward(
                part(q, queries), part(k_now, keys), part(v_now, keys), part(o, queries),
                part(lse, queries, lse=True), part(do, queries), causal, features,
                deterministic)
            part(dq, queries).add_(dq_block)
            block_gradients.append((keys, dk_block, dv_block))
        # The blocks above ran while this shard's gradients were still on their way.
        if step == 0:
            gradients = _Pair.zeros_like(kv, torch.float32)
        else:
            _wait(gradient_requests)
            gradients = gradients.with_flat(gradients_arriving)
        dk_now, dv_now = gradients.views()
        for keys, dk_block, dv_block in block_gradients:
            layout.part(dk_now, keys).add_(dk_block)
            layout.part(dv_now, keys).add_(dv_block)
        if ring.world > 1:
            gradient_requests, gradients_arriving = ring.pass_on(gradients.flat)
        if not last:
            _wait(kv_requests)
            kv = kv.with_flat(kv_arriving)
    if ring.world > 1:
        _wait(gradient_requests)
        gradients = gradients.with_flat(gradients_arriving)
    dk, dv = gradients.views()
    return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)


def schedule(ring, causal, packed):
    return _core.ring_schedule(ring.world, ring.rank, bool(causal), bool(packed))
