"""Append-KV: new tokens written into a KV cache (contiguous or paged), with optional RoPE on the
new keys and on the queries (family fwd_appendkv)."""

import numpy as np

from . import _core
from ._backends import select_backend
from ._dtypes import attention_dtype
from ._forward import inputs
from ._paging import PageTable, page_pools
from ._shapes import index_list, require_rank

_NEW_TOKENS = {
    "k_new": (4, "[batch, seqlen_knew, nhead_k, hdim_q]"),
    "v_new": (4, "[batch, seqlen_knew, nhead_k, hdim_v]"),
    "q": (4, "[batch, seqlen_q, nhead_q, hdim_q]"),
}
_CACHE_DIMS = "[batch, capacity, nhead_k, hdim]"
# NumPy 2 moved TooHardError into numpy.exceptions.
_TOO_HARD = getattr(getattr(np, "exceptions", np), "TooHardError")
_ROPE_KINDS = {None: "none", "none": "none", "interleaved": "interleaved",
               "half_rotated": "half_rotated", "neox": "half_rotated"}


def rope_tables(positions, rotary_dim, base=10000.0):
    """The usual rotary tables: float32 cos and sin [positions, rotary_dim // 2] of the angles
    position * base ** (-2 f / rotary_dim)."""
    frequencies = base ** (-2.0 * np.arange(rotary_dim // 2) / rotary_dim)
    angles = np.arange(positions)[:, None] * frequencies[None, :]
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


def _shares_memory(a, b):
    """Whether two arrays overlap in memory; an overlap too costly to decide counts as one."""
    try:
        return np.shares_memory(a, b, max_work=1 << 20)
    except _TOO_HARD:
        return np.may_share_memory(a, b)


def _refuse_aliasing(written):
    """Raises ValueError when two of the arrays append_kv writes overlap: the second write would
    overwrite the first (the same array as k_cache and v_cache would end up holding V)."""
    named = [(field, x) for field, x in written.items() if x is not None]
    for n, (first, a) in enumerate(named):
        for second, b in named[n + 1:]:
            if _shares_memory(a, b):
                raise ValueError(f"{first} and {second} share memory, but append_kv writes both "
                                 "in place; pass separate arrays")


def append_kv(k_cache, v_cache, k_new, v_new, seqlens_k, *, block_table=None, page_indptr=None,
              page_indices=None, page_size=None, layout="nhd", rope=None, rotary_dim=None,
              rope_cos=None, rope_sin=None, q=None, rotate_q=False, dtype=None, backend="auto"):
    """Writes k_new/v_new [batch, seqlen_knew, nhead_k, hdim] into the caches in place.

    New token t of sequence b lands at key position seqlens_k[b] + t. The caches are contiguous
    [batch, capacity, nhead_k, hdim] (any strides), or page pools as in paged_attention() when a
    block_table (or page_indptr + page_indices) is given. rope: None, 'interleaved' or
    'half_rotated' (GPT-NeoX, alias 'neox') rotates the new keys by their absolute positions
    over the first rotary_dim (default hdim) dimensions; rotate_q=True also rotates q
    [batch, seqlen_q, nhead_q, hdim] in place, query i at position seqlens_k[b] + i. rope_cos and
    rope_sin default to rope_tables() covering every rotated position.

    Runs on the CPU reference (CUDA tensors raise NotImplementedError). Returns the key counts
    after the append, seqlens_k + seqlen_knew, as an int64 NumPy array.
    """
    be = select_backend(backend, k_new)
    if be.name != "cpu":
        raise NotImplementedError("append_kv runs on the CPU reference only so far (no GPU "
                                  "append-KV kernel yet); pass host tensors")
    if rope not in _ROPE_KINDS:
        raise ValueError(f"rope = {rope!r}: expected None, 'interleaved' or 'half_rotated'")
    rope_kind = _ROPE_KINDS[rope]
    if rotate_q and q is None:
        # Without q there is nothing to rotate; ignoring the request would leave the caller's
        # queries unrotated against rotated keys.
        raise ValueError("rotate_q=True needs q, the queries to rotate")
    engine_dtype = attention_dtype(k_new, dtype, field="k_new")
    named = {"k_new": k_new, "v_new": v_new}
    if q is not None:
        named["q"] = q
    views = dict(zip(named, inputs(be, _NEW_TOKENS, **named)))
    k_new, v_new, q = views["k_new"], views["v_new"], views.get("q")

    paged = block_table is not None or page_indptr is not None or page_indices is not None
    pages = None
    if paged:
        k, v, held = page_pools(be, k_cache, v_cache, layout, page_size)
        pages = PageTable.from_arguments(layout, held, int(k.shape[0]), block_table, page_indptr,
                                         page_indices)
    else:
        k, v = be.tensor(k_cache, "k_cache"), be.tensor(v_cache, "v_cache")
        require_rank(k, 4, "k_cache", _CACHE_DIMS)
        require_rank(v, 4, "v_cache", _CACHE_DIMS)

    _refuse_aliasing({"k_cache": k, "v_cache": v, "q": q if rotate_q else None})

    batch, seqlen_knew, nhead_k, hdim_q = (int(n) for n in k_new.shape)
    nhead_q, seqlen_q = (int(q.shape[2]), int(q.shape[1])) if q is not None else (nhead_k, 0)
    lengths = index_list(seqlens_k, "seqlens_k")
    problem = _core.Problem("fwd_appendkv")
    problem.set_dtype(engine_dtype)
    problem.set_shape(batch, nhead_q, nhead_k, seqlen_q, 0, hdim_q, int(v_new.shape[3]))
    problem.set_key_lengths(lengths)
    if pages is not None:
        pages.configure(problem)
    if rope_kind != "none" and rotary_dim is None:
        rotary_dim = hdim_q
    problem.set_append(seqlen_knew, rope_kind, int(rotary_dim or 0), bool(rotate_q))

    if rope_kind != "none":
        if (rope_cos is None) != (rope_sin is None):
            # One table alone used to reach the engine as a None turned into an array, blamed
            # on its shape.
            missing = "rope_sin" if rope_sin is None else "rope_cos"
            raise ValueError(f"{missing} is None but its partner table is given: pass rope_cos "
                             "and rope_sin together, or neither (rope_tables() defaults)")
        if rope_cos is None and rope_sin is None:
            rotated = max(seqlen_knew, seqlen_q if rotate_q else 0)
            rope_cos, rope_sin = rope_tables(max(lengths, default=0) + rotated, int(rotary_dim))
        be.attach(problem, "append.rope_cos", be.float32_array(rope_cos, "rope_cos"))
        be.attach(problem, "append.rope_sin", be.float32_array(rope_sin, "rope_sin"))
    be.attach(problem, "k", k, writable=True)
    be.attach(problem, "v", v, writable=True)
    be.attach(problem, "append.k_new", k_new)
    be.attach(problem, "append.v_new", v_new)
    if q is not None:
        be.attach(problem, "q", q, writable=bool(rotate_q))
    be.run(problem)
    return np.asarray(lengths, dtype=np.int64) + seqlen_knew
