"""Forward attention: dense (batch mode), varlen (group mode), paged decode and batch prefill.

Every function takes the feature keywords of ``attention`` (see ``Features``) and the fp8
keywords (``_fp8``: descales and ``out_dtype``), allocates O in the input's dtype (fp8 inputs:
``out_dtype``, bf16 by default) and LSE in float32, and returns ``o`` or ``(o, lse)``.
"""

from . import _core, _fast
from ._backends import is_cuda, select_backend
from ._dtypes import FP8_DTYPES, attention_dtype, require_same_dtype, require_tensor
from ._features import Features, scalar_features
from ._fp8 import Fp8Inputs
from ._paging import DeviceKeyLengths, PageTable, key_lengths, page_pools
from ._shapes import given_output, index_list, longest, require_rank

_WRITES = "this attention writes"  # who writes a caller-given output, for its shape message

# Rank and dimension names of the caller's tensors, for messages about a wrong rank.
BSHD = {
    "q": (4, "[batch, seqlen_q, nhead_q, hdim_q]"),
    "k": (4, "[batch, seqlen_k, nhead_k, hdim_q]"),
    "v": (4, "[batch, seqlen_k, nhead_k, hdim_v]"),
}
THD = {
    "q": (3, "[total_q, nhead_q, hdim_q]"),
    "k": (3, "[total_k, nhead_k, hdim_q]"),
    "v": (3, "[total_k, nhead_k, hdim_v]"),
}


def call_dtypes(q, dtype, out_dtype, kv, **descales):
    """The engine dtype of a forward call and its Fp8Inputs. kv: the caller's K and V by
    argument name, which must hold q's fp8 format when q is fp8."""
    engine_dtype = attention_dtype(q, dtype, fp8=True)
    if engine_dtype in FP8_DTYPES:
        require_same_dtype(engine_dtype, dtype, **kv)
    return engine_dtype, Fp8Inputs.from_arguments(engine_dtype, out_dtype, **descales)


def run_forward(family, backend, dtype, q, k, v, features, return_lse, *, seqstarts=None,
                key_lengths=None, pages=None, fp8=None, out=None, lse_out=None):
    """Builds and runs one forward problem from engine views (arguments as build_forward).
    Returns (o, lse) as engine views (lse None unless return_lse)."""
    problem, o, lse = build_forward(family, backend, dtype, q, k, v, features, return_lse,
                                    seqstarts=seqstarts, key_lengths=key_lengths, pages=pages,
                                    fp8=fp8, out=out, lse_out=lse_out)
    backend.run(problem)
    return o, lse


def build_forward(family, backend, dtype, q, k, v, features, return_lse, *, seqstarts=None,
                  key_lengths=None, pages=None, fp8=None, out=None, lse_out=None):
    """Builds one forward problem from engine views, with its outputs allocated.

    q: [rows, seq, nhead_q, hdim_q] (group mode: rows = 1, seq = total tokens). k, v: the same
    layout, or page pools [num_pages, page_size, nhead_k, hdim] when `pages` is given.
    seqstarts: (seqstart_q, seqstart_k) for group mode (seqstart_k may be empty when paged), or
    DeviceSeqstarts. fp8: the call's Fp8Inputs (None: inputs of `dtype`, not fp8).
    out, lse_out: the caller's O and LSE to write instead of allocating (lse_out implies
    return_lse).
    Returns (problem, o, lse), o and lse as engine views (lse None unless return_lse).
    """
    fp8 = fp8 or Fp8Inputs(dtype, dtype)
    rows, seq, nhead_q, hdim_q = (int(n) for n in q.shape)
    nhead_k, hdim_v = int(k.shape[2]), int(v.shape[3])
    problem = _core.Problem(family)
    problem.set_dtype(dtype)
    fp8.configure(problem)
    problem.set_shape(rows, nhead_q, nhead_k, seq, 0 if pages else int(k.shape[1]), hdim_q,
                      hdim_v)
    batch, seqlen_q, seqlen_k = rows, seq, 0 if pages else int(k.shape[1])
    if isinstance(seqstarts, DeviceSeqstarts):
        problem.set_group_on_device(*seqstarts.engine_tuple())
        batch, seqlen_q, seqlen_k = seqstarts.batch, seqstarts.max_seqlen_q, seqstarts.max_seqlen_k
    elif seqstarts is not None:
        problem.set_group(*seqstarts)
        batch = len(seqstarts[0]) - 1
        seqlen_q, seqlen_k = longest(seqstarts[0]), longest(seqstarts[1])
    if isinstance(key_lengths, DeviceKeyLengths):
        key_lengths.configure(problem)
        seqlen_k = key_lengths.max_seqlen_k
    elif key_lengths is not None:
        problem.set_key_lengths(key_lengths)
        seqlen_k = max([seqlen_k] + key_lengths)
    if pages is not None:
        pages.configure(problem)
    features.configure(problem)
    features.attach_logit_inputs(problem, backend, (batch, nhead_q, seqlen_q, seqlen_k))
    fp8.attach(problem, backend, {"batch": batch, "nhead_q": nhead_q, "nhead_k": nhead_k,
                                  "seqlen_q": seqlen_q, "seqlen_k": seqlen_k,
                                  "num_pages": int(k.shape[0]) if pages else 0})

    if out is None:
        o = backend.empty_like_layout(q, (rows, seq, nhead_q, hdim_v),
                                      None if fp8.out_dtype == dtype else fp8.out_dtype)
    else:
        o = given_output(backend, out, "out", (rows, seq, nhead_q, hdim_v), _WRITES)
    for field, x in (("q", q), ("k", k), ("v", v)):
        backend.attach(problem, field, x, as_dtype=fp8.codes_dtype)
    backend.attach(problem, "o", o, writable=True)
    lse = None
    if lse_out is not None:
        lse = given_output(backend, lse_out, "lse_out", (rows, nhead_q, seq), _WRITES)
    elif return_lse:
        lse = backend.empty_float32((rows, nhead_q, seq))
    if lse is not None:
        backend.attach(problem, "lse", lse, writable=True)
    return problem, o, lse


def explain(q, k, v, *, q_descale=None, k_descale=None, v_descale=None, out_dtype=None,
            return_lse=False, dtype=None, backend="auto", **features):
    """How attention(q, k, v, **features) would run, as text: on the GPU, one line per stage
    with the chosen kernel and why (planning compiles the kernels on first use, but launches
    nothing); on the CPU, the reference. Arguments as in attention()."""
    be = select_backend(backend, q)
    engine_dtype, fp8 = call_dtypes(q, dtype, out_dtype, {"k": k, "v": v}, q_descale=q_descale,
                                    k_descale=k_descale, v_descale=v_descale)
    q, k, v = inputs(be, BSHD, q=q, k=k, v=v)
    problem, _, _ = build_forward("fwd", be, engine_dtype, q, k, v, Features(**features),
                                  return_lse, fp8=fp8)
    return be.plan(problem)


def inputs(backend, shapes, **tensors):
    """The backend's views of the named tensors, each checked for its rank in `shapes`."""
    views = []
    for field, x in tensors.items():
        require_tensor(x, field)
        view = backend.tensor(x, field)
        rank, dims = shapes[field]
        require_rank(view, rank, field, dims)
        views.append(view)
    return views


def _results(backend, o, lse, return_lse):
    if return_lse:
        return backend.result(o), backend.result(lse)
    return backend.result(o)


def attention(q, k, v, *, causal=False, window=None, window_align="top_left", sink_tokens=0,
              softcap=0.0, scale=None, bias=None, alibi_slopes=None, sink_logits=None,
              dropout_p=0.0, seed=0, offset=0, num_splits=0, q_descale=None, k_descale=None,
              v_descale=None, out_dtype=None, return_lse=False, dtype=None, backend="auto",
              out=None, lse_out=None, accumulate=False):
    """Attention over [batch, seq, head, dim] tensors: O = softmax(scale * Q K^T + bias) V.

    q: [batch, seqlen_q, nhead_q, hdim_q]; k: [batch, seqlen_k, nhead_k, hdim_q];
    v: [batch, seqlen_k, nhead_k, hdim_v]; nhead_q a multiple of nhead_k (GQA/MQA). Any strides
    (a transposed [batch, head, seq, dim] array works without a copy); the last dimension must
    be contiguous.

    dtype: NumPy float32 and float16 are read as they are; bf16 comes as PyTorch bfloat16, as
    ml_dtypes bfloat16, or as NumPy uint16 bit patterns with dtype='bf16'. fp8 (e4m3 or e5m2,
    one format for q, k and v) comes as PyTorch float8_e4m3fn / float8_e5m2, as the ml_dtypes
    types of those names, or as NumPy uint8 codes with dtype='fp8_e4m3' or 'fp8_e5m2'
    (fp8_from_float32 makes them).
    q_descale, k_descale, v_descale: fp8 inputs are dequantized as code * descale. Floats (or
    0-d / one-element tensors, read once): one factor per tensor, 1.0 when absent. float32
    tensors [batch, heads, ceil(seq / 128)] (heads: nhead_q for q, nhead_k for k and v): one
    factor per sequence, head and block of 128 tokens; then all three are tensors.
    out_dtype: O's dtype for fp8 inputs, 'bf16' (default) or 'fp32' (or torch dtypes); other
    inputs give O in their own dtype, which is all out_dtype may name for them.
    backend: 'cpu' (the exact CPU reference), 'gpu' (CUDA tensors through the dispatcher, on the
    current PyTorch stream) or 'auto' (where q lives).

    num_splits: split-KV on the GPU: 0 lets the engine split long key rows over several CTAs
    and merge the partials where that pays (decode), 1 forbids it, n > 1 forces n splits.

    Returns o [batch, seqlen_q, nhead_q, hdim_v] in q's dtype (fp8: out_dtype; bf16 on NumPy
    as uint16 bit patterns, or ml_dtypes bfloat16 beside ml_dtypes inputs) and memory order,
    and with return_lse the float32 log-sum-exp [batch, nhead_q, seqlen_q] (natural log; -inf
    for rows that see no key).

    out, lse_out: write O (and LSE) into these instead of allocating; they are what is
    returned. accumulate=True: out and lse_out already hold an attention state of the same
    query rows over other keys (as attention(..., return_lse=True) or merge_states give it;
    LSE -inf: no key, O not read), and the result over k and v is merged into them, as
    merge_states would merge the two (context parallelism folds each ring step in this way).
    It needs out and lse_out, 16-bit inputs, no sink_logits and one pass (num_splits 0 or 1);
    on the GPU it runs on Hopper's sm90_ws kernels.
    """
    if accumulate and (out is None or lse_out is None):
        raise ValueError("accumulate=True merges into the state out and lse_out hold: pass both")
    if (type(q) is _fast.Tensor and dtype is None and backend != "cpu" and bias is None
            and alibi_slopes is None and sink_logits is None and q_descale is None
            and k_descale is None and v_descale is None and out_dtype is None):
        scalars = scalar_features(causal, window, window_align, sink_tokens, softcap, scale,
                                  dropout_p, seed, offset, num_splits, accumulate)
        if out is None and lse_out is None:
            result = _fast.forward(q, k, v, scalars, return_lse)
            if result is not None:
                return result
        elif (type(out) is _fast.Tensor and (lse_out is None or type(lse_out) is _fast.Tensor)
              and _fast.forward_into(q, k, v, out, lse_out, scalars)):
            return (out, lse_out) if return_lse else out
    features = Features(causal, window, window_align, sink_tokens, softcap, scale, bias,
                        alibi_slopes, sink_logits, dropout_p, seed, offset, num_splits,
                        accumulate)
    be = select_backend(backend, q)
    engine_dtype, fp8 = call_dtypes(q, dtype, out_dtype, {"k": k, "v": v}, q_descale=q_descale,
                                    k_descale=k_descale, v_descale=v_descale)
    q, k, v = inputs(be, BSHD, q=q, k=k, v=v)
    o, lse = run_forward("fwd", be, engine_dtype, q, k, v, features, return_lse, fp8=fp8,
                         out=out, lse_out=lse_out)
    if out is not None:
        o = out
    if lse_out is not None:
        lse = lse_out
    return _results(be, o, lse, return_lse)


class DeviceSeqstarts:
    """Prefix sums that stay on the GPU: int64 copies of the caller's CUDA cu_seqlens (kept
    alive until the launch is enqueued) and the longest lengths the caller vouches for. A paged
    cache has no key prefix sums (cu_seqlens_k None): its key counts come per sequence."""

    def __init__(self, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k):
        paged = cu_seqlens_k is None
        for name, value in (("max_seqlen_q", max_seqlen_q), ("max_seqlen_k", max_seqlen_k)):
            if value is None and paged and name == "max_seqlen_k":
                continue
            if value is None:
                raise ValueError(f"{name} is required with cu_seqlens on the GPU: reading the "
                                 "longest sequence from device memory would synchronize")
            if isinstance(value, bool) or int(value) != value or value < 0:
                raise ValueError(f"{name} = {value!r} must be a non-negative int")
        starts = []
        for name, cu in (("cu_seqlens_q", cu_seqlens_q), ("cu_seqlens_k", cu_seqlens_k)):
            if cu is None:
                continue
            if not is_cuda(cu):
                raise ValueError(f"{name} must be on the GPU like the other cu_seqlens")
            if cu.ndim != 1 or cu.dtype.is_floating_point or cu.dtype.is_complex:
                raise ValueError(f"{name} must be a 1-D integer tensor, got {cu.dtype} of shape "
                                 f"{list(cu.shape)}")
            starts.append(cu.long().contiguous())
        if starts[0].shape[0] < 1 or (not paged and starts[0].shape != starts[1].shape):
            raise ValueError(f"cu_seqlens_q and cu_seqlens_k must both hold batch + 1 >= 1 "
                             f"entries, got {[int(x.shape[0]) for x in starts]}")
        self.starts = starts
        self.batch = int(starts[0].shape[0]) - 1
        self.max_seqlen_q = int(max_seqlen_q)
        self.max_seqlen_k = 0 if max_seqlen_k is None else int(max_seqlen_k)

    def engine_tuple(self):
        """(pointer q, pointer k or 0, batch, max_seqlen_q, max_seqlen_k) as the extension reads
        it."""
        pointer_k = self.starts[1].data_ptr() if len(self.starts) > 1 else 0
        return (self.starts[0].data_ptr(), pointer_k, self.batch, self.max_seqlen_q,
                self.max_seqlen_k)


def attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, *, max_seqlen_q=None,
                     max_seqlen_k=None, q_descale=None, k_descale=None, v_descale=None,
                     out_dtype=None, return_lse=False, dtype=None, backend="auto", **features):
    """Variable-length attention over packed sequences (group mode).

    q: [total_q, nhead_q, hdim_q]; k: [total_k, nhead_k, hdim_q]; v: [total_k, nhead_k, hdim_v].
    Sequence b owns rows cu_seqlens_q[b]:cu_seqlens_q[b+1] of q and cu_seqlens_k[b]:
    cu_seqlens_k[b+1] of k and v (prefix sums starting at 0; empty sequences allowed). Masks
    apply per sequence. Feature keywords as in attention(); a bias is
    [batch, nhead_q, max seqlen_q, max seqlen_k] indexed by local positions.

    cu_seqlens on the GPU (CUDA integer tensors, as flash-attn takes them) stay there: give
    max_seqlen_q and max_seqlen_k, the longest lengths, and the call neither copies nor
    synchronizes (so it can be captured in a CUDA graph and replayed with new lengths written
    into the same tensors). Host cu_seqlens (lists, arrays) need no maximums; on the CPU
    backend, CUDA cu_seqlens are copied to the host.

    fp8 inputs and their descales as in attention(); per-block descales are [batch, heads,
    ceil(max seqlen / 128)] with batch the number of sequences and tokens counted from the
    start of their sequence.

    Returns o [total_q, nhead_q, hdim_v] and with return_lse lse [nhead_q, total_q].
    """
    if backend != "cpu" and is_cuda(q) and (is_cuda(cu_seqlens_q) or is_cuda(cu_seqlens_k)):
        seqstarts = DeviceSeqstarts(cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k)
        engine_starts = seqstarts.engine_tuple()
    else:
        seqstarts = (index_list(cu_seqlens_q, "cu_seqlens_q"), index_list(cu_seqlens_k,
                                                                          "cu_seqlens_k"))
        engine_starts = seqstarts
    fast = Features(**features)
    if (type(q) is _fast.Tensor and dtype is None and backend != "cpu"
            and not fast.has_logit_inputs() and q_descale is None and k_descale is None
            and v_descale is None and out_dtype is None):
        result = _fast.forward(q, k, v, fast.scalars(), return_lse, seqstarts=engine_starts)
        if result is not None:
            return result
    be = select_backend(backend, q)
    engine_dtype, fp8 = call_dtypes(q, dtype, out_dtype, {"k": k, "v": v}, q_descale=q_descale,
                                    k_descale=k_descale, v_descale=v_descale)
    q, k, v = inputs(be, THD, q=q, k=k, v=v)
    o, lse = run_forward("fwd", be, engine_dtype, q[None], k[None], v[None], fast, return_lse,
                         seqstarts=seqstarts, fp8=fp8)
    return _results(be, o[0], None if lse is None else lse[0], return_lse)


def paged_attention(q, k_cache, v_cache, block_table, seqlens_k, page_size=None, layout="nhd", *,
                    page_indptr=None, page_indices=None, max_seqlen_k=None, q_descale=None,
                    k_descale=None, v_descale=None, k_page_descale=None, v_page_descale=None,
                    out_dtype=None, return_lse=False, check_tables=False, dtype=None,
                    backend="auto", **features):
    """Attention of [batch, seqlen_q, nhead_q, hdim] queries (decode: seqlen_q = 1) over a paged
    KV cache (family fwd_pagedkv).

    k_cache, v_cache: page pools [num_pages, page_size, nhead_k, hdim] (layout 'nhd') or
    [num_pages, nhead_k, page_size, hdim] ('hnd'). block_table: int [batch, max_pages]; key j of
    sequence b lives in page block_table[b, j // page_size], slot j % page_size. Or an SGLang page
    list: block_table=None with page_indptr [batch + 1] and page_indices, sequence b's pages
    being page_indices[page_indptr[b]:page_indptr[b+1]]. seqlens_k: the
    key count of each sequence. page_size defaults to the pools' (and must match it when given).
    Feature keywords as in attention() (a bottom_right causal mask aligns the queries with the
    newest keys). Returns o (and lse) as attention() does.

    On the GPU, a CUDA block_table and CUDA seqlens_k stay on the device (give max_seqlen_k, the
    longest key count): the call neither copies nor synchronizes, so it can be captured in a
    CUDA graph and replayed after new lengths and pages are written into the same tensors. Their
    entries are trusted, not checked: check_tables=True synchronizes, copies them to the host and
    validates them first, raising a ValueError that names the first bad entry instead of reading
    out of bounds (a debugging mode; it cannot be graph-captured).

    fp8 q and pools take attention()'s descales, or per-page ones: k_page_descale and
    v_page_descale, float32 [num_pages, nhead_k], dequantize each page and KV head of the pools
    (q then takes q_descale, a float).
    """
    be = select_backend(backend, q)
    on_device = be.name == "gpu"
    engine_dtype, fp8 = call_dtypes(q, dtype, out_dtype, {"k_cache": k_cache, "v_cache": v_cache},
                                    q_descale=q_descale, k_descale=k_descale,
                                    v_descale=v_descale, k_page_descale=k_page_descale,
                                    v_page_descale=v_page_descale)
    (q,) = inputs(be, BSHD, q=q)
    k, v, held = page_pools(be, k_cache, v_cache, layout, page_size)
    pages = PageTable.from_arguments(layout, held, int(k.shape[0]), block_table, page_indptr,
                                     page_indices, on_device=on_device, checked=check_tables)
    o, lse = run_forward("fwd_pagedkv", be, engine_dtype, q, k, v, Features(**features),
                         return_lse, key_lengths=key_lengths(seqlens_k, max_seqlen_k, on_device),
                         pages=pages, fp8=fp8)
    return _results(be, o, lse, return_lse)


def batch_prefill(q, k_cache, v_cache, cu_seqlens_q, seqlens_k, *, block_table=None,
                  page_indptr=None, page_indices=None, page_size=None, layout="nhd",
                  max_seqlen_q=None, max_seqlen_k=None, q_descale=None, k_descale=None,
                  v_descale=None, k_page_descale=None, v_page_descale=None, out_dtype=None,
                  return_lse=False, check_tables=False, dtype=None, backend="auto", **features):
    """Packed variable-length queries against a paged KV cache (family batch_prefill).

    q: [total_q, nhead_q, hdim] with cu_seqlens_q as in attention_varlen; k_cache, v_cache and
    seqlens_k as in paged_attention. Pages come from a vLLM block_table [batch, max_pages] or an
    SGLang page list: sequence b's pages are page_indices[page_indptr[b]:page_indptr[b+1]].
    Returns o [total_q, nhead_q, hdim_v] and with return_lse lse [nhead_q, total_q].

    On the GPU, CUDA cu_seqlens_q, seqlens_k and page tables stay on the device (give
    max_seqlen_q and max_seqlen_k): no copy, no synchronize, graph-capturable, as in
    paged_attention; check_tables=True validates them first, as there.

    fp8 inputs and descales as in paged_attention (per-block: batch is the number of
    sequences, as in attention_varlen).
    """
    be = select_backend(backend, q)
    on_device = be.name == "gpu"
    engine_dtype, fp8 = call_dtypes(q, dtype, out_dtype, {"k_cache": k_cache, "v_cache": v_cache},
                                    q_descale=q_descale, k_descale=k_descale,
                                    v_descale=v_descale, k_page_descale=k_page_descale,
                                    v_page_descale=v_page_descale)
    (q,) = inputs(be, THD, q=q)
    k, v, held = page_pools(be, k_cache, v_cache, layout, page_size)
    pages = PageTable.from_arguments(layout, held, int(k.shape[0]), block_table, page_indptr,
                                     page_indices, on_device=on_device, checked=check_tables)
    if on_device and is_cuda(cu_seqlens_q):
        seqstarts = DeviceSeqstarts(cu_seqlens_q, None, max_seqlen_q, max_seqlen_k)
    else:
        seqstarts = (index_list(cu_seqlens_q, "cu_seqlens_q"), [])
    o, lse = run_forward("batch_prefill", be, engine_dtype, q[None], k, v, Features(**features),
                         return_lse, seqstarts=seqstarts,
                         key_lengths=key_lengths(seqlens_k, max_seqlen_k, on_device), pages=pages,
                         fp8=fp8)
    return _results(be, o[0], None if lse is None else lse[0], return_lse)
