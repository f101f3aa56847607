"""Append-KV: new tokens written into a KV cache (contiguous or paged), with optional RoPE on the
new keys and on the queries (family fwd_appendkv).

fp8 caches (e4m3 or e5m2 codes) take a per-tensor scale shared with the new tokens and q, so the
append rotates the stored codes; or, paged, per-page scales that the append itself sets from
fp16 or bf16 new tokens (it quantizes them, k_page_scales / v_page_scales)."""

import numpy as np

from . import _core
from ._backends import is_cuda, select_backend
from ._dtypes import FP8_DTYPES, attention_dtype, storage_name
from ._features import Features
from ._fp8 import Fp8Inputs
from ._forward import inputs
from ._paging import DeviceKeyLengths, PageTable, device_index, key_lengths, page_pools
from ._shapes import index_list, require_rank

_NEW_TOKENS = {
    "k_new": (4, "[batch, seqlen_knew, nhead_k, hdim_q]"),
    "v_new": (4, "[batch, seqlen_knew, nhead_k, hdim_v]"),
    "q": (4, "[batch, seqlen_q, nhead_q, hdim_q]"),
}
_CACHE_DIMS = "[batch, capacity, nhead_k, hdim]"
# NumPy 2 moved TooHardError into numpy.exceptions.
_TOO_HARD = getattr(getattr(np, "exceptions", np), "TooHardError")
_DEFAULT_THETA = 10000.0
_ROPE_KINDS = {None: "none", "none": "none", "interleaved": "interleaved",
               "half_rotated": "half_rotated", "neox": "half_rotated"}


def rope_tables(positions, rotary_dim, base=10000.0):
    """The usual rotary tables: float32 cos and sin [positions, rotary_dim // 2] of the angles
    position * base ** (-2 f / rotary_dim)."""
    frequencies = base ** (-2.0 * np.arange(rotary_dim // 2) / rotary_dim)
    angles = np.arange(positions)[:, None] * frequencies[None, :]
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


def _span(x):
    """[first, last] byte addresses a strided torch tensor touches."""
    if x.numel() == 0:
        return None
    extent = sum((n - 1) * abs(stride) for n, stride in zip(x.shape, x.stride()))
    return x.data_ptr(), x.data_ptr() + (extent + 1) * x.element_size() - 1


def _shares_memory(a, b):
    """Whether two arrays overlap in memory; an overlap too costly to decide counts as one. CUDA
    tensors count as overlapping when their address ranges do (interleaved views of one buffer
    included), which errs on the side of refusing."""
    if hasattr(a, "data_ptr") and hasattr(b, "data_ptr") and (a.is_cuda or b.is_cuda):
        first, second = _span(a), _span(b)
        return bool(first and second and first[0] <= second[1] and second[0] <= first[1])
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


def _append_dtypes(k_new, dtype, out_dtype, others, descales):
    """The engine dtype of an append call and its Fp8Inputs. others: the caches (and q) by
    argument name, which must hold k_new's fp8 format when k_new is fp8. fp8 descales are
    per-tensor floats; absent ones are 1.0 (the append itself moves codes and reads none)."""
    engine_dtype = attention_dtype(k_new, dtype, field="k_new", fp8=True)
    if engine_dtype in FP8_DTYPES:
        for name, x in others.items():
            if x is None:
                continue
            # `dtype` names what uint8 codes hold; other storage names its own dtype.
            found = attention_dtype(x, dtype if storage_name(x) == "uint8" else None, name,
                                    fp8=True)
            if found != engine_dtype:
                raise ValueError(f"{name} holds {found} data but k_new holds {engine_dtype}: the "
                                 "new tokens, the caches and q share one fp8 format")
    fp8 = Fp8Inputs.from_arguments(engine_dtype, out_dtype, **descales)
    if fp8.kind not in ("none", "per_tensor"):
        name = fp8.tensors[0][0]
        raise ValueError(f"{name} is a per-block tensor, but append_kv rotates the stored fp8 "
                         "codes, which needs one scale shared by the new tokens, the cache and q: "
                         "pass per-tensor descales (floats)")
    return engine_dtype, fp8


def _quantizing_dtypes(k_new, v_new, k_cache, v_cache, dtype, paged, rotate_q):
    """The engine dtype (the caches' fp8 format) and Fp8Inputs of a quantizing append: fp16 or
    bf16 new tokens, K's and V's alike, into fp8 page pools with per-page scales. Raises
    ValueError naming the argument."""
    if not paged:
        raise ValueError("k_page_scales and v_page_scales are per-page scales: pass a "
                         "block_table (or page_indptr and page_indices) for paged caches")
    if rotate_q:
        raise ValueError("rotate_q=True with k_page_scales: a quantizing append does not rotate "
                         "q; rotate it in its own dtype before the call")
    new = attention_dtype(k_new, None, "k_new")
    if new not in ("fp16", "bf16"):
        raise ValueError(f"k_new holds {new} data, but a quantizing append (k_page_scales) takes "
                         "fp16 or bf16 new tokens")
    found = attention_dtype(v_new, None, "v_new")
    if found != new:
        raise ValueError(f"v_new holds {found} data but k_new holds {new}: a quantizing append "
                         "takes both in one 16-bit dtype")
    cache = attention_dtype(k_cache, dtype if storage_name(k_cache) == "uint8" else None,
                            "k_cache", fp8=True)
    if cache not in FP8_DTYPES:
        raise ValueError(f"k_cache holds {cache} data, but k_page_scales quantize into an fp8 "
                         "cache (float8_e4m3fn / float8_e5m2, or uint8 codes with dtype=)")
    found = attention_dtype(v_cache, dtype if storage_name(v_cache) == "uint8" else None,
                            "v_cache", fp8=True)
    if found != cache:
        raise ValueError(f"v_cache holds {found} data but k_cache holds {cache}: the pools share "
                         "one fp8 format")
    return cache, Fp8Inputs(cache, "bf16", "per_page")


def _attach_page_scales(be, problem, page_scales, num_pages, nhead_k):
    """Attaches K's and V's page scales, which the append updates in place: float32
    [num_pages, nhead_k] arrays the engine can write (so never copies)."""
    for name, field, value in zip(("k_page_scales", "v_page_scales"), ("fp8.k_page", "fp8.v_page"),
                                  page_scales):
        view = be.tensor(value, name)
        if storage_name(view) != "float32":
            raise ValueError(f"{name}.dtype = {storage_name(view)}: page scales are float32")
        if tuple(int(n) for n in view.shape) != (num_pages, nhead_k):
            raise ValueError(f"{name}.shape = {list(view.shape)} but page scales are "
                             f"[num_pages, nhead_k] = {[num_pages, nhead_k]}")
        be.attach(problem, field, view, writable=True)


def _build_append(be, k_cache, v_cache, k_new, v_new, seqlens_k, *, block_table, page_indptr,
                  page_indices, page_size, layout, rope, rotary_dim, rope_cos, rope_sin,
                  rope_theta, rope_position_offsets, q, rotate_q, max_seqlen_k, dtype,
                  out_dtype=None, descales=None, page_scales=None):
    """The fwd_appendkv problem of one call, its tensors attached (q read-only unless it
    rotates; O not yet). Returns (problem, q view, key lengths, Fp8Inputs) where the lengths are
    a host list or a DeviceKeyLengths."""
    if rope not in _ROPE_KINDS:
        raise ValueError(f"rope = {rope!r}: expected None, 'interleaved' or 'half_rotated'")
    rope_kind = _ROPE_KINDS[rope]
    if rotate_q and q is None:
        # Without q there is nothing to rotate; ignoring the request would leave the caller's
        # queries unrotated against rotated keys.
        raise ValueError("rotate_q=True needs q, the queries to rotate")
    on_device = be.name == "gpu"
    paged = block_table is not None or page_indptr is not None or page_indices is not None
    quantizes = page_scales is not None
    if quantizes:
        engine_dtype, fp8 = _quantizing_dtypes(k_new, v_new, k_cache, v_cache, dtype, paged,
                                               rotate_q)
    else:
        engine_dtype, fp8 = _append_dtypes(
            k_new, dtype, out_dtype,
            {"v_new": v_new, "k_cache": k_cache, "v_cache": v_cache, "q": q}, descales or {})
    named = {"k_new": k_new, "v_new": v_new}
    if q is not None:
        named["q"] = q
    views = dict(zip(named, inputs(be, _NEW_TOKENS, **named)))
    k_new, v_new, q = views["k_new"], views["v_new"], views.get("q")

    pages = None
    if paged:
        k, v, held = page_pools(be, k_cache, v_cache, layout, page_size)
        pages = PageTable.from_arguments(layout, held, int(k.shape[0]), block_table, page_indptr,
                                         page_indices, on_device=on_device)
    else:
        k, v = be.tensor(k_cache, "k_cache"), be.tensor(v_cache, "v_cache")
        require_rank(k, 4, "k_cache", _CACHE_DIMS)
        require_rank(v, 4, "v_cache", _CACHE_DIMS)

    _refuse_aliasing({"k_cache": k, "v_cache": v, "q": q if rotate_q else None})

    batch, seqlen_knew, nhead_k, hdim_q = (int(n) for n in k_new.shape)
    nhead_q, seqlen_q = (int(q.shape[2]), int(q.shape[1])) if q is not None else (nhead_k, 0)
    lengths = key_lengths(seqlens_k, max_seqlen_k, on_device)
    device_offsets = None
    if on_device and rope_position_offsets is not None and is_cuda(rope_position_offsets):
        device_offsets = device_index(rope_position_offsets, "rope_position_offsets", 1, True)
        rope_position_offsets = None
    problem = _core.Problem("fwd_appendkv")
    problem.set_dtype(engine_dtype)
    fp8.configure(problem)
    problem.set_shape(batch, nhead_q, nhead_k, seqlen_q, 0, hdim_q, int(v_new.shape[3]))
    if isinstance(lengths, DeviceKeyLengths):
        lengths.configure(problem)
    else:
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
        if rope_cos is not None and rope_theta is not None:
            raise ValueError("rope_theta and rope_cos/rope_sin are both given: pass the tables "
                             "or the base, not both")
        on_device_positions = isinstance(lengths, DeviceKeyLengths) or device_offsets is not None
        if rope_cos is None and rope_theta is None and on_device_positions:
            # Tables must cover the longest position, which device lengths (or offsets) keep
            # from the host.
            rope_theta = _DEFAULT_THETA
        if rope_cos is None and rope_theta is None:
            rotated = max(seqlen_knew, seqlen_q if rotate_q else 0)
            offsets = ([0] * len(lengths) if rope_position_offsets is None else
                       index_list(rope_position_offsets, "rope_position_offsets"))
            ends = [n + max(offset, 0) for n, offset in zip(lengths, offsets)]
            rope_cos, rope_sin = rope_tables(max(ends, default=0) + rotated, int(rotary_dim))
        if rope_cos is not None:
            be.attach(problem, "append.rope_cos", be.float32_array(rope_cos, "rope_cos"))
            be.attach(problem, "append.rope_sin", be.float32_array(rope_sin, "rope_sin"))
    if rope_theta is not None or rope_position_offsets is not None:
        offsets = [] if rope_position_offsets is None else index_list(rope_position_offsets,
                                                                      "rope_position_offsets")
        problem.set_rope_base(0.0 if rope_theta is None else float(rope_theta), offsets)
    if device_offsets is not None:
        problem.set_rope_offsets_on_device(device_offsets.data_ptr())
    codes = fp8.codes_dtype  # what uint8 arrays hold ('' unless fp8)
    be.attach(problem, "k", k, writable=True, as_dtype=codes)
    be.attach(problem, "v", v, writable=True, as_dtype=codes)
    new_codes = "" if quantizes else codes  # a quantizing append's new tokens are 16-bit
    be.attach(problem, "append.k_new", k_new, as_dtype=new_codes)
    be.attach(problem, "append.v_new", v_new, as_dtype=new_codes)
    if quantizes:
        _attach_page_scales(be, problem, page_scales, int(k.shape[0]), nhead_k)
    if q is not None:
        be.attach(problem, "q", q, writable=bool(rotate_q), as_dtype=codes)
    # The device copies must outlive the launch; the caller's call frame holds them.
    return problem, q, (lengths, device_offsets), fp8


def _lengths_after(lengths, seqlen_knew):
    """seqlens_k + seqlen_knew: a CUDA tensor for device lengths (no host sync), else NumPy."""
    if isinstance(lengths, DeviceKeyLengths):
        return lengths.lengths + seqlen_knew
    return np.asarray(lengths, dtype=np.int64) + seqlen_knew


def append_kv(k_cache, v_cache, k_new, v_new, seqlens_k, *, block_table=None, page_indptr=None,
              page_indices=None, page_size=None, layout="nhd", rope=None, rotary_dim=None,
              rope_cos=None, rope_sin=None, rope_theta=None, rope_position_offsets=None, q=None,
              rotate_q=False, max_seqlen_k=None, dtype=None, k_page_scales=None,
              v_page_scales=None, backend="auto"):
    """Writes k_new/v_new [batch, seqlen_knew, nhead_k, hdim] into the caches in place.

    New token t of sequence b lands at key position seqlens_k[b] + t. The caches are contiguous
    [batch, capacity, nhead_k, hdim] (any strides), or page pools as in paged_attention() when a
    block_table (or page_indptr + page_indices) is given. rope: None, 'interleaved' or
    'half_rotated' (GPT-NeoX, alias 'neox') rotates the new keys by their absolute positions
    over the first rotary_dim (default hdim) dimensions; rotate_q=True also rotates q
    [batch, seqlen_q, nhead_q, hdim] in place, query i at position seqlens_k[b] + i.
    The angles come from rope_cos and rope_sin [positions, rotary_dim // 2], or from a base,
    rope_theta (angle = position * rope_theta ** (-2 f / rotary_dim), computed in double); with
    neither, rope_tables() covering every rotated position (base 10000; on the GPU with CUDA
    seqlens_k, rope_theta = 10000 instead, since the positions stay on the device).
    rope_position_offsets [batch]: added to sequence b's RoPE positions (not to where tokens
    land); a CUDA tensor stays on the device on the GPU (the angles then come from rope_theta).

    fp8 caches: k_new, v_new, the caches and q hold codes of one format (PyTorch float8_e4m3fn /
    float8_e5m2, ml_dtypes, or NumPy uint8 with dtype='fp8_e4m3' or 'fp8_e5m2') under one
    per-tensor scale, so the append moves codes: copies byte for byte, and rotated dims rounded
    back to the format (nearest even, saturating), on the GPU from sm_89 on.

    Quantizing into an fp8 page pool: with k_page_scales and v_page_scales (float32
    [num_pages, nhead_k], the pools' per-page scales, value = code * scale), k_new and v_new are
    fp16 or bf16 and the append quantizes them (K after its RoPE). Per page and KV head that new
    tokens reach, a page that held no key takes the scale mapping its largest new value to the
    format's largest code (448 for e4m3); a page that held keys keeps its scale while the new
    values fit and otherwise grows it, re-encoding its held codes; infinities saturate, NaN
    stays NaN. The scales are updated in place (so they must be writable float32 arrays, never
    copies); q is not rotated (rotate_q=False). Attend afterwards with paged_attention(...,
    k_page_descale=k_page_scales, v_page_descale=v_page_scales).

    CUDA tensors run on the GPU (one kernel for K, V and Q, on the current stream). CUDA
    seqlens_k stay on the device (give max_seqlen_k, the longest cached count): the call
    neither copies nor synchronizes. Returns the key counts after the append, seqlens_k +
    seqlen_knew: an int64 NumPy array, or a CUDA tensor for CUDA seqlens_k.
    """
    be = select_backend(backend, k_new)
    problem, _, (lengths, _offsets), _ = _build_append(
        be, k_cache, v_cache, k_new, v_new, seqlens_k, block_table=block_table,
        page_indptr=page_indptr, page_indices=page_indices, page_size=page_size, layout=layout,
        rope=rope, rotary_dim=rotary_dim, rope_cos=rope_cos, rope_sin=rope_sin,
        rope_theta=rope_theta, rope_position_offsets=rope_position_offsets, q=q,
        rotate_q=rotate_q, max_seqlen_k=max_seqlen_k, dtype=dtype,
        page_scales=_page_scales(k_page_scales, v_page_scales))
    be.run(problem)
    return _lengths_after(lengths, int(k_new.shape[1]))


def _page_scales(k_page_scales, v_page_scales):
    """(K's, V's) page scales of a quantizing append, or None; both or neither."""
    if (k_page_scales is None) != (v_page_scales is None):
        missing = "v_page_scales" if v_page_scales is None else "k_page_scales"
        raise ValueError(f"{missing} is None but its partner is given: a quantizing append "
                         "updates K's and V's page scales together")
    return None if k_page_scales is None else (k_page_scales, v_page_scales)


def append_kv_and_attend(q, k_cache, v_cache, k_new, v_new, seqlens_k, *, block_table=None,
                         page_indptr=None, page_indices=None, page_size=None, layout="nhd",
                         rope=None, rotary_dim=None, rope_cos=None, rope_sin=None,
                         rope_theta=None, rope_position_offsets=None, rotate_q=False,
                         max_seqlen_k=None, q_descale=None, k_descale=None, v_descale=None,
                         out_dtype=None, return_lse=False, dtype=None, backend="auto",
                         **features):
    """append_kv() then attention of q [batch, seqlen_q, nhead_q, hdim] over the cached and the
    new keys (seqlens_k[b] + seqlen_knew of them), as one engine problem: on the GPU one plan,
    the append kernel then the attention kernels on one stream, the attention reading the key
    counts the append kernel wrote (no host round trip, CUDA-graph capturable with CUDA
    seqlens_k and page tables). Arguments as in append_kv(); rotate_q rotates q in place before
    it attends. Feature keywords as in attention() (causal='bottom_right' aligns the queries
    with the newest keys). fp8 inputs as in append_kv(), with per-tensor q_descale, k_descale
    and v_descale (floats, default 1.0) for the attention and O in out_dtype ('bf16', the
    default, or 'fp32'); on the GPU the attention is sm90_ws's fp8 kernel (sm_90). Returns o
    (and lse) as paged_attention() does.
    """
    be = select_backend(backend, q)
    problem, q_view, _, fp8 = _build_append(
        be, k_cache, v_cache, k_new, v_new, seqlens_k, block_table=block_table,
        page_indptr=page_indptr, page_indices=page_indices, page_size=page_size, layout=layout,
        rope=rope, rotary_dim=rotary_dim, rope_cos=rope_cos, rope_sin=rope_sin,
        rope_theta=rope_theta, rope_position_offsets=rope_position_offsets, q=q,
        rotate_q=rotate_q, max_seqlen_k=max_seqlen_k, dtype=dtype, out_dtype=out_dtype,
        descales={"q_descale": q_descale, "k_descale": k_descale, "v_descale": v_descale})
    batch, seqlen_q, nhead_q, _ = (int(n) for n in q_view.shape)
    hdim_v = int(v_new.shape[3])
    feature_set = Features(**features)
    if feature_set.has_logit_inputs():
        raise ValueError("append_kv_and_attend takes no bias, alibi_slopes or sink_logits yet")
    feature_set.configure(problem)
    o = be.empty_like_layout(q_view, (batch, seqlen_q, nhead_q, hdim_v),
                             None if fp8.out_dtype == fp8.input_dtype else fp8.out_dtype)
    be.attach(problem, "o", o, writable=True)
    lse = None
    if return_lse:
        lse = be.empty_float32((batch, nhead_q, seqlen_q))
        be.attach(problem, "lse", lse, writable=True)
    be.run(problem)
    if return_lse:
        return be.result(o), be.result(lse)
    return be.result(o)
