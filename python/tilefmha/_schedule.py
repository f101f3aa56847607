"""The ring schedule of context parallelism, as plain values (no torch needed).

tilefmha.distributed walks it with PyTorch and NCCL, the C++ RingAttention with NCCL directly;
anyone with another transport can walk it too (examples/python/ring_attention.py does, on the
CPU).
"""

from . import _core


def ring_schedule(world, rank, *, causal=False, packed=False):
    """The ring steps of rank `rank` in a ring of `world` ranks over zigzag shards (rank r holds
    chunks r and 2N-1-r of the 2N chunks of every sequence: its 'front' and 'back' halves).

    Returns [(source_rank, [(queries, keys, causal), ...]), ...], one entry per step: at step i
    the rank holds the K/V shard of source_rank = (rank - i) mod world, and each block is one
    attention call of its query part against that shard's key part ('all', 'front' or 'back'),
    causal (top-left, equal lengths) or not. Partial states of a query row merge with
    merge_states. packed: parts of packed varlen shards, where 'all' is not position order, so
    blocks name only 'front' and 'back'."""
    return _core.ring_schedule(int(world), int(rank), bool(causal), bool(packed))
