"""Zigzag sharding of sequences over the ranks of a context-parallel group (torch tensors).

N ranks cut each sequence into 2N equal chunks; rank r holds chunk r (its front half) then chunk
2N-1-r (its back half), so that under a causal mask every rank does the same work. In packed
varlen input (cu_seqlens) every document is cut that way on its own and the local shard holds,
document after document, the document's front chunk then its back chunk.
"""

import functools

import torch

from . import _core
from ._shapes import index_list


def _chunk_count(world):
    if isinstance(world, bool) or int(world) != world or world < 1:
        raise ValueError(f"world = {world!r} must be a positive int")
    return 2 * int(world)


def _check_rank(world, rank):
    if isinstance(rank, bool) or int(rank) != rank or not 0 <= rank < world:
        raise ValueError(f"rank = {rank!r} is outside the ring of world = {world}")


def global_rows(cu_seqlens, world, rank):
    """The rows of the global packed sequence that rank `rank`'s local shard holds, in local
    order (a list). Every document's length must be a multiple of 2 * world."""
    starts = index_list(cu_seqlens, "cu_seqlens")
    _core.packed_shards(starts, int(world))  # validates, naming the first bad document
    _check_rank(world, rank)
    chunks = _chunk_count(world)
    rows = []
    for begin, end in zip(starts, starts[1:]):
        chunk = (end - begin) // chunks
        for index in (rank, chunks - 1 - rank):
            rows.extend(range(begin + index * chunk, begin + (index + 1) * chunk))
    return rows


@functools.lru_cache(maxsize=64)
def _cached_rows(starts, world, rank, device):
    return torch.tensor(global_rows(list(starts), world, rank), device=device)


def rows_tensor(cu_seqlens, world, rank, device):
    """global_rows as an int64 tensor on `device`, cached: building it from a Python list costs
    milliseconds at a million tokens, more than the call it serves."""
    return _cached_rows(tuple(index_list(cu_seqlens, "cu_seqlens")), int(world), int(rank),
                        torch.device(device))


def shard(x, world, rank, *, cu_seqlens=None, seq_dim=None):
    """Rank `rank`'s zigzag shard of x, a tensor over the whole sequence.

    Batch mode (no cu_seqlens): the sequence runs along seq_dim (default 1, as in [batch, seq,
    head, dim]; 2 for an LSE [batch, head, seq]) and its length must be a multiple of 2 * world.
    Packed varlen (cu_seqlens: the documents' prefix sums over the whole sequence): tokens run
    along seq_dim (default 0, as in [tokens, head, dim]; 1 for an LSE [head, tokens])."""
    chunks = _chunk_count(world)
    _check_rank(world, rank)
    if cu_seqlens is not None:
        rows = rows_tensor(cu_seqlens, world, rank, x.device)
        return x.index_select(0 if seq_dim is None else seq_dim, rows)
    dim = 1 if seq_dim is None else seq_dim
    length = x.shape[dim]
    if length % chunks:
        raise ValueError(f"the sequence has {length} tokens along dim {dim}, not a multiple of "
                         f"2 * world = {chunks}: zigzag sharding cuts it into {chunks} equal "
                         "chunks")
    chunk = length // chunks
    front = x.narrow(dim, rank * chunk, chunk)
    back = x.narrow(dim, (chunks - 1 - rank) * chunk, chunk)
    return torch.cat((front, back), dim=dim)


def unshard(shards, *, cu_seqlens=None, seq_dim=None):
    """The whole sequence from every rank's zigzag shard (shards[r] from rank r); the inverse of
    shard() over all ranks."""
    world = len(shards)
    chunks = _chunk_count(world)
    if cu_seqlens is not None:
        dim = 0 if seq_dim is None else seq_dim
        first = shards[0]
        shape = list(first.shape)
        shape[dim] = sum(int(s.shape[dim]) for s in shards)
        whole = first.new_empty(shape)
        for rank, local in enumerate(shards):
            whole.index_copy_(dim, rows_tensor(cu_seqlens, world, rank, local.device), local)
        return whole
    dim = 1 if seq_dim is None else seq_dim
    pieces = [None] * chunks
    for rank, local in enumerate(shards):
        half = local.shape[dim] // 2
        pieces[rank] = local.narrow(dim, 0, half)
        pieces[chunks - 1 - rank] = local.narrow(dim, half, half)
    return torch.cat(pieces, dim=dim)
