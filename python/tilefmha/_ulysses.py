"""Head-parallel (Ulysses) context parallelism: all-to-all from sequence shards to head shards.

Every rank holds its zigzag shard of the sequence with all heads. One all-to-all per tensor gives
every rank the whole sequence for 1/N of the heads; attention then runs locally, and one more
all-to-all brings O (and LSE) back to sequence shards. Four collectives that do not overlap the
attention, against the ring's N - 1 overlapped K/V passes: distributed.choose_method says
which wins where.
"""

import functools

import torch
import torch.distributed as dist

from ._shapes import index_list
from ._zigzag import rows_tensor


class Collective:
    """The all-to-all of a process group."""

    def __init__(self, group):
        self.group = group
        self.world = dist.get_world_size(group)

    def all_to_all(self, incoming, outgoing):
        """incoming[j] <- rank j's outgoing[this rank] (contiguous [world, ...] tensors)."""
        dist.all_to_all_single(incoming, outgoing, group=self.group)


@functools.lru_cache(maxsize=16)
def _orders(documents, world, device):
    """(rank_major, position_order): rank_major[i] is the global row of row i of the ranks'
    shards laid end to end; position_order its inverse permutation. `documents`: the global
    prefix sums (batch mode is one document of world * seq_local tokens)."""
    rank_major = torch.cat([rows_tensor(documents, world, rank, device)
                            for rank in range(world)])
    return rank_major, torch.argsort(rank_major)


class Exchange:
    """The all-to-all between a rank's sequence shard [batch, seq_local, heads, ...] and its head
    shard [batch, seq, heads / N, ...] over the whole sequence in position order."""

    def __init__(self, collective, seq_local, device, cu_seqlens=None):
        self.collective = collective
        self.world = collective.world
        documents = (0, self.world * int(seq_local)) if cu_seqlens is None else tuple(
            index_list(cu_seqlens, "cu_seqlens"))
        self.rank_major, self.position_order = _orders(documents, self.world,
                                                       torch.device(device))

    def heads_per_rank(self, x, name):
        heads = x.shape[-2]
        if heads % self.world:
            raise ValueError(f"{name} has {heads} heads, not a multiple of the group's "
                             f"{self.world} ranks: head-parallel attention gives each rank "
                             "heads / ranks of them (ring_attention has no such limit)")
        return heads // self.world

    def to_heads(self, x, name):
        """[batch, seq_local, heads, *rest] -> [batch, seq, heads / N, *rest], position order."""
        share = self.heads_per_rank(x, name)
        if self.world == 1:
            return x
        batch, seq_local, rest = x.shape[0], x.shape[1], x.shape[3:]
        outgoing = x.reshape(batch, seq_local, self.world, share, *rest).movedim(2, 0)
        incoming = torch.empty_like(outgoing, memory_format=torch.contiguous_format)
        self.collective.all_to_all(incoming, outgoing.contiguous())
        # incoming[j]: rank j's shard of this rank's heads.
        gathered = incoming.movedim(0, 1).reshape(batch, self.world * seq_local, share, *rest)
        return gathered.index_select(1, self.position_order)

    def to_sequence(self, y):
        """The inverse of to_heads: [batch, seq, heads / N, *rest] -> [batch, seq_local, heads,
        *rest]."""
        if self.world == 1:
            return y
        batch, share, rest = y.shape[0], y.shape[2], y.shape[3:]
        seq_local = y.shape[1] // self.world
        rank_major = y.index_select(1, self.rank_major)
        outgoing = rank_major.reshape(batch, self.world, seq_local, share, *rest).movedim(1, 0)
        incoming = torch.empty_like(outgoing, memory_format=torch.contiguous_format)
        self.collective.all_to_all(incoming, outgoing.contiguous())
        # incoming[j]: this rank's rows of rank j's heads.
        return incoming.movedim(0, 2).reshape(batch, seq_local, self.world * share, *rest)
