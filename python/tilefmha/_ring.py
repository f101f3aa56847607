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

from . import _fast
from ._backward import attention_backward
from ._features import scalar_features
from ._forward import attention, attention_varlen
from ._merge import merge_states
from ._schedule import ring_schedule

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

    def pass_on(self, tensors, received):
        """Starts sending `tensors` to the next rank and receiving the previous rank's tensors of
        the same shapes into `received`, one NCCL group after the work the current stream holds;
        returns the requests. Wait on them before reading `received` (the current stream then
        waits; the host does not)."""
        operations = []
        for tensor, arriving in zip(tensors, received):
            operations += [dist.P2POp(dist.isend, tensor, self.next, self.group),
                           dist.P2POp(dist.irecv, arriving, self.previous, self.group)]
        return dist.batch_isend_irecv(operations)


class _Transfer:
    """One pass of a _Pair around the ring, started before the work it overlaps; finish() makes
    the current stream wait for the previous rank's pair and returns it."""

    def __init__(self, ring, pair):
        self.arriving = _Pair(*(torch.empty_like(x) for x in pair.views()))
        self.requests = ring.pass_on(pair.views(), self.arriving.views())

    def finish(self):
        for request in self.requests:
            request.wait()
        return self.arriving


class _Pair:
    """K and V (or dK and dV), which travel in one message group. (Two messages, not one packed
    buffer: packing cost a copy of the shard on the compute stream before the first block.)"""

    def __init__(self, k, v):
        self.k, self.v = k.contiguous(), v.contiguous()  # NCCL sends contiguous buffers

    @classmethod
    def zeros_like(cls, pair, dtype):
        return cls(torch.zeros_like(pair.k, dtype=dtype), torch.zeros_like(pair.v, dtype=dtype))

    def views(self):
        return self.k, self.v


class Layout:
    """How a rank's shard is cut into the schedule's parts.

    Batch mode: tensors [batch, seq_local, ...] cut along dim 1 (LSE [batch, head, seq] along
    dim 2). Packed: tensors [tokens, ...] with every front chunk before every back chunk, cut
    along dim 0 (LSE [head, tokens] along dim 1), each half with prefix sums `half_seqstarts`."""

    def __init__(self, seq_local, half_seqstarts=None):
        self.packed = half_seqstarts is not None
        self.half = seq_local // 2
        self.half_seqstarts = half_seqstarts

    def part(self, x, part, lse=False):
        if part == "all":
            return x
        dim = (1 if self.packed else 2) if lse else (0 if self.packed else 1)
        return x.narrow(dim, 0 if part == "front" else self.half, self.half)

    def forward_into(self, q, k, v, causal, features, o, lse, accumulate=False):
        """Attention of one block written into o and lse (views of the partials' slots), or with
        accumulate merged into the state they hold (the fast path's tensors only:
        _Output.folds)."""
        starts = (self.half_seqstarts, self.half_seqstarts) if self.packed else None
        if _fast.forward_into(q, k, v, o, lse,
                              scalar_features(causal=causal, accumulate=accumulate, **features),
                              starts):
            return
        if accumulate:
            raise AssertionError("the ring folds blocks only on the fast path's tensors")
        # Tensors the fast path does not take (a subclass of torch.Tensor...): the general path.
        if self.packed:
            result = attention_varlen(q, k, v, *starts, causal=causal, return_lse=True,
                                      **features)
        else:
            result = attention(q, k, v, causal=causal, return_lse=True, **features)
        o.copy_(result[0])
        lse.copy_(result[1])

    def backward(self, q, k, v, o, lse, do, causal, features, deterministic):
        starts = {} if not self.packed else {"cu_seqlens_q": self.half_seqstarts,
                                             "cu_seqlens_k": self.half_seqstarts}
        return attention_backward(q, k, v, o, lse, do, causal=causal,
                                  deterministic=deterministic, **starts, **features)

    def empty_state(self, q, v):
        """Uninitialized O and LSE for the shard's query rows: o like q with v's head dim, lse
        float32 [batch, head, seq] ([head, tokens] packed)."""
        o = torch.empty(q.shape[:-1] + (v.shape[-1],), dtype=q.dtype, device=q.device)
        lse_shape = (q.shape[1], q.shape[0]) if self.packed else (q.shape[0], q.shape[2],
                                                                  q.shape[1])
        return o, torch.empty(lse_shape, dtype=torch.float32, device=q.device)

    def as_batch(self, o, lse):
        """merge_states' [batch, seq, head, dim] / [batch, head, seq] views of a state."""
        return (o[None], lse[None]) if self.packed else (o, lse)


HALVES = ("front", "back")


class _Partials:
    """The partial states of this rank's queries. Every block writes its O and LSE straight into
    a slot of one preallocated buffer (no copies); each query half is merged from its slots at
    the end. Batch mode has one slot per step (a step has one block, over 'all' or 'back'
    queries, and the steps over 'all' come first, so every half's slots are a range); packed
    input has one buffer per half, its slots in block order. The buffers hold about one O of
    the whole sequence per rank at most (N partials of a 1/N shard)."""

    def __init__(self, layout, schedule, q, v):
        self.layout = layout
        self.slots = {half: [] for half in HALVES}
        if layout.packed:
            counts = {half: sum(queries == half for _, blocks in schedule
                                for queries, _, _ in blocks) for half in HALVES}
            heads, dim_v = q.shape[1], v.shape[-1]
            self.o = {half: q.new_empty((counts[half], layout.half, heads, dim_v))
                      for half in HALVES}
            self.lse = {half: q.new_empty((counts[half], heads, layout.half),
                                          dtype=torch.float32) for half in HALVES}
        else:
            batch, seq, heads, dim_v = q.shape[0], q.shape[1], q.shape[2], v.shape[-1]
            self.o = q.new_empty((len(schedule), batch, seq, heads, dim_v))
            self.lse = q.new_empty((len(schedule), batch, heads, seq), dtype=torch.float32)

    def slot(self, step, queries):
        """The (o, lse) views block `queries` of step `step` writes."""
        if self.layout.packed:
            index = len(self.slots[queries])
            self.slots[queries].append(index)
            return self.o[queries][index], self.lse[queries][index]
        for half in HALVES:
            if queries in ("all", half):
                self.slots[half].append(step)
        o, lse = self.o[step], self.lse[step]
        return self.layout.part(o, queries), self.layout.part(lse, queries, lse=True)

    def whole(self):
        """The one state over every query row, when a single 'all' block made it (a ring of one
        rank in batch mode): the result itself, no merge."""
        if self.layout.packed or self.slots["front"] != [0] or self.slots["back"] != [0]:
            return None
        return self.o[0], self.lse[0]

    def _states(self, half):
        """merge_states' views of the half's slots: o [n, batch, rows, heads, dim], lse [n,
        batch, heads, rows]."""
        slots = self.slots[half]
        if self.layout.packed:
            return self.o[half][:len(slots)].unsqueeze(1), self.lse[half][:len(slots)].unsqueeze(1)
        begin, count = slots[0], len(slots)
        if slots != list(range(begin, begin + count)):
            raise AssertionError(f"the {half} queries' slots {slots} are not a range")
        start = 0 if half == "front" else self.layout.half
        o = self.o[begin:begin + count].narrow(2, start, self.layout.half)
        lse = self.lse[begin:begin + count].narrow(3, start, self.layout.half)
        return o, lse

    def merge_into(self, o, lse):
        for half in HALVES:
            states_o, states_lse = self._states(half)
            out, lse_out = self.layout.as_batch(self.layout.part(o, half),
                                                self.layout.part(lse, half, lse=True))
            if states_o.shape[0] == 1:
                out.copy_(states_o[0])
                lse_out.copy_(states_lse[0])
            else:
                merge_states(states_o, states_lse, out=out, lse_out=lse_out)


class _Output:
    """The rank's O and LSE, into which every block folds its state in the attention's epilogue
    (Problem::accumulate): the first block over a query part writes it, later ones merge into
    it. No partial states are kept and no merge runs at the end. Hopper's sm90_ws kernels fold;
    elsewhere the ring keeps _Partials."""

    def __init__(self, layout, q, v):
        self.layout = layout
        self.o, self.lse = layout.empty_state(q, v)
        self.written = set()

    @staticmethod
    def folds(q, k, v):
        return (all(type(x) is torch.Tensor for x in (q, k, v)) and q.is_cuda
                and q.dtype in (torch.float16, torch.bfloat16)
                and torch.cuda.get_device_capability(q.device)[0] == 9)

    def parts(self, queries):
        """[(part, accumulate)]: the block's query part, or its halves where only one of them
        holds a state yet."""
        halves = HALVES if queries == "all" else (queries,)
        seen = [half in self.written for half in halves]
        self.written.update(halves)
        if all(seen) or not any(seen):
            return [(queries, seen[0])]
        return list(zip(halves, seen))

    def result(self):
        """(o, lse), with rows that no block covered set to the state of no key."""
        for half in HALVES:
            if half not in self.written:
                self.layout.part(self.o, half).zero_()
                self.layout.part(self.lse, half, lse=True).fill_(float("-inf"))
        return self.o, self.lse


def ring_forward(ring, layout, schedule, q, k, v, features):
    """O and LSE of this rank's queries over every rank's keys; q, k, v in the layout's form.

    A step's K/V pass is issued before its blocks: NCCL's kernel then takes its SMs before the
    attention fills them, and the transfer overlaps the blocks. (Issued after them, on a side
    stream, the pass saved the host's NCCL call before the first kernel, 0.3 ms at 8k tokens,
    but its kernel waited for the attention to free SMs: 0.4 ms exposed at 32k.)"""
    folded = _Output(layout, q, v) if _Output.folds(q, k, v) else None
    partials = None if folded else _Partials(layout, schedule, q, v)
    kv = _Pair(k, v)
    for step, (_, blocks) in enumerate(schedule):
        last = step + 1 == len(schedule)
        if not last:
            transfer = _Transfer(ring, kv)
        k_now, v_now = kv.views()
        for queries, keys, causal in blocks:
            k_part, v_part = layout.part(k_now, keys), layout.part(v_now, keys)
            if folded is None:
                o, lse = partials.slot(step, queries)
                layout.forward_into(layout.part(q, queries), k_part, v_part, causal, features, o,
                                    lse)
                continue
            for part, accumulate in folded.parts(queries):
                layout.forward_into(layout.part(q, part), k_part, v_part, causal, features,
                                    layout.part(folded.o, part),
                                    layout.part(folded.lse, part, lse=True), accumulate)
        if not last:
            kv = transfer.finish()
    if folded is not None:
        return folded.result()
    whole = partials.whole()
    if whole is not None:
        return whole
    o, lse = layout.empty_state(q, v)
    partials.merge_into(o, lse)
    return o, lse


def ring_backward(ring, layout, schedule, q, k, v, o, lse, do, features, deterministic):
    """dQ, dK, dV of this rank's shard (the layout's form) for the output gradient do."""
    dq = torch.zeros_like(q, dtype=torch.float32)
    kv = _Pair(k, v)
    gradients = None  # dK/dV of the shard held now, accumulated by the ranks it visited
    for step, (_, blocks) in enumerate(schedule):
        last = step + 1 == len(schedule)
        if not last:
            kv_transfer = _Transfer(ring, kv)
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
            gradients = gradient_transfer.finish()
        dk_now, dv_now = gradients.views()
        for keys, dk_block, dv_block in block_gradients:
            layout.part(dk_now, keys).add_(dk_block)
            layout.part(dv_now, keys).add_(dv_block)
        if ring.world > 1:
            gradient_transfer = _Transfer(ring, gradients)
        if not last:
            kv = kv_transfer.finish()
    if ring.world > 1:
        gradients = gradient_transfer.finish()
    dk, dv = gradients.views()
    return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)


def schedule(ring, causal, packed):
    return ring_schedule(ring.world, ring.rank, causal=causal, packed=packed)
