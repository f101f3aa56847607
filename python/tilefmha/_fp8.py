"""FP8 inputs of the forward functions: descale factors and O's dtype.

The engine dequantizes fp8 Q, K and V as x = code * descale before any arithmetic. The
descales of one call are of one kind (the engine's Fp8Scales):

- per_tensor: q_descale, k_descale and v_descale are floats (a 0-d or one-element tensor is
  read once); absent ones are 1.0.
- per_block: each is a float32 tensor [batch, heads, ceil(seq / 128)], one factor per
  sequence, head (nhead_q for Q, nhead_k for K and V) and block of 128 tokens. In group mode
  (varlen, batch prefill) batch is the number of sequences, seq the longest, and tokens are
  counted from the start of their sequence.
- per_page (paged calls): k_page_descale and v_page_descale are float32 [num_pages, nhead_k],
  one factor per page and KV head of each pool; Q takes q_descale, a float.

O is bf16 (default) or fp32 for fp8 inputs (`out_dtype`); other inputs give O in their own
dtype, so their `out_dtype` may only name that dtype.
"""

import math
import numbers
from dataclasses import dataclass

from ._dtypes import FP8_DTYPES, canonical_dtype, storage_name

BLOCK_TOKENS = 128  # tokens per per-block factor (the engine's kFp8ScaleBlock)
OUT_DTYPES = ("bf16", "fp32")

_DESCALES = ("q_descale", "k_descale", "v_descale")
_PAGE_DESCALES = ("k_page_descale", "v_page_descale")
_BLOCK_FIELDS = {"q_descale": "fp8.q_block", "k_descale": "fp8.k_block",
                 "v_descale": "fp8.v_block"}
_PAGE_FIELDS = {"k_page_descale": "fp8.k_page", "v_page_descale": "fp8.v_page"}


def _is_block(value):
    """Whether a descale argument is a per-block tensor (3-D), not a scalar."""
    return hasattr(value, "shape") and len(value.shape) == 3


def _scalar(value, name):
    """A per-tensor descale as a float: a Python number, or a 0-d or one-element array or tensor
    (read once; a CUDA tensor is copied to the host)."""
    if isinstance(value, bool):
        raise TypeError(f"{name} = {value!r} must be a float or a float32 tensor")
    if isinstance(value, numbers.Real):
        return float(value)
    if not (hasattr(value, "shape") and hasattr(value, "item")):
        raise TypeError(f"{name} must be a float or a float32 tensor, got {type(value).__name__}")
    if math.prod(value.shape) != 1:
        raise ValueError(
            f"{name}.shape = {list(value.shape)}: expected a float (or a 0-d or one-element "
            f"tensor) for per-tensor scales, or float32 [batch, heads, ceil(seq / "
            f"{BLOCK_TOKENS})] for per-block scales")
    return float(value.item())


def _out_dtype(out_dtype, engine_dtype):
    """O's engine dtype: bf16 (default) or fp32 for fp8 inputs, else the inputs' own."""
    if engine_dtype not in FP8_DTYPES:
        if out_dtype is not None and canonical_dtype(out_dtype, "out_dtype") != engine_dtype:
            raise ValueError(f"out_dtype = {out_dtype!r} but q holds {engine_dtype} data: only "
                             "fp8 inputs give O in another dtype")
        return engine_dtype
    if out_dtype is None:
        return "bf16"
    name = canonical_dtype(out_dtype, "out_dtype")
    if name not in OUT_DTYPES:
        raise ValueError(f"out_dtype = {out_dtype!r}: fp8 inputs give O in 'bf16' or 'fp32'")
    return name


@dataclass(frozen=True)
class Fp8Inputs:
    """The fp8 part of one forward call: the inputs' and O's engine dtypes, the descale kind, the
    per-tensor factors and the block or page scale tensors as the caller gave them. Calls whose
    inputs are not fp8 get kind 'none' (nothing to set) and their own dtype for O."""

    input_dtype: str
    out_dtype: str
    kind: str = "none"
    factors: tuple = (1.0, 1.0, 1.0)  # q, k, v (per_page: only q's is read)
    tensors: tuple = ()  # (argument name, tensor): per_block's q, k, v or per_page's k, v

    @staticmethod
    def from_arguments(engine_dtype, out_dtype=None, **descales):
        """From a call's engine dtype and its keywords q_descale, k_descale, v_descale (and
        k_page_descale, v_page_descale on paged calls). Raises ValueError (TypeError for what
        is no number or tensor) naming the argument."""
        given = {name: value for name, value in descales.items() if value is not None}
        output = _out_dtype(out_dtype, engine_dtype)
        if engine_dtype not in FP8_DTYPES:
            if given:
                raise ValueError(f"{next(iter(given))} is a descale factor of fp8 inputs, but q "
                                 f"holds {engine_dtype} data")
            return Fp8Inputs(engine_dtype, output)
        if any(name in given for name in _PAGE_DESCALES):
            return Fp8Inputs(engine_dtype, output, "per_page", *Fp8Inputs._per_page(given))
        blocks = [name for name in _DESCALES if _is_block(given.get(name))]
        if blocks:
            return Fp8Inputs(engine_dtype, output, "per_block",
                             tensors=Fp8Inputs._per_block(given, blocks[0]))
        factors = tuple(_scalar(given[name], name) if name in given else 1.0
                        for name in _DESCALES)
        return Fp8Inputs(engine_dtype, output, "per_tensor", factors)

    @staticmethod
    def _per_block(given, first):
        """The (name, tensor) pairs of per-block descales, all three of which must be tensors."""
        for name in _DESCALES:
            if name not in given:
                raise ValueError(f"{name} is missing: {first} is a per-block tensor, so "
                                 "q_descale, k_descale and v_descale must all be float32 "
                                 f"[batch, heads, ceil(seq / {BLOCK_TOKENS})] tensors")
            if not _is_block(given[name]):
                raise ValueError(f"{name} is a scalar but {first} is a per-block tensor: one "
                                 "call's descales are all scalars or all per-block tensors")
        return tuple((name, given[name]) for name in _DESCALES)

    @staticmethod
    def _per_page(given):
        """(factors, tensors) of per-page descales: Q's factor, and the K and V page scales."""
        for name in _PAGE_DESCALES:
            if name not in given:
                raise ValueError(f"{name} is missing: k_page_descale and v_page_descale come "
                                 "together (per-page scales dequantize both pools)")
        for name in ("k_descale", "v_descale"):
            if name in given:
                raise ValueError(f"{name} cannot be combined with k_page_descale and "
                                 "v_page_descale, which already dequantize the pools")
        q_factor = 1.0
        if "q_descale" in given:
            if _is_block(given["q_descale"]):
                raise ValueError("q_descale must be a float with per-page scales (Q is not "
                                 "paged), got a 3-D tensor")
            q_factor = _scalar(given["q_descale"], "q_descale")
        return (q_factor, 1.0, 1.0), tuple((name, given[name]) for name in _PAGE_DESCALES)

    @property
    def codes_dtype(self):
        """The engine dtype uint8 storage of Q, K and V is read as ('' when not fp8)."""
        return "" if self.kind == "none" else self.input_dtype

    def configure(self, problem):
        """Sets the descale kind, the per-tensor factors and O's dtype (after set_dtype)."""
        if self.kind == "none":
            return
        problem.set_fp8(self.kind, *self.factors)
        problem.set_out_dtype(self.out_dtype)

    def attach(self, problem, backend, dims):
        """Checks and attaches the block or page scales. dims: batch, nhead_q, nhead_k,
        seqlen_q, seqlen_k (group mode: sequences and the longest lengths) and num_pages."""
        if not self.tensors:
            return
        expected = self._expected_shapes(dims)
        fields = _BLOCK_FIELDS if self.kind == "per_block" else _PAGE_FIELDS
        for name, value in self.tensors:
            view = backend.tensor(value, name)
            if storage_name(view) != "float32":
                raise ValueError(f"{name}.dtype = {storage_name(view)}: {self.kind} descales "
                                 "must be float32")
            shape, dims_text = expected[name]
            if tuple(int(n) for n in view.shape) != shape:
                raise ValueError(f"{name}.shape = {list(view.shape)} but {self.kind} descales "
                                 f"are {dims_text} = {list(shape)}")
            # Scales are tiny: a strided view is copied rather than refused.
            backend.attach(problem, fields[name], backend.contiguous(view))

    @staticmethod
    def _expected_shapes(dims):
        """argument name -> (shape, its dimension names) of the block and page scales."""
        def blocks(seqlen):
            return -(-seqlen // BLOCK_TOKENS)

        def per_block(heads, seq):
            return ((dims["batch"], dims[heads], blocks(dims[seq])),
                    f"[batch, {heads}, ceil({seq} / {BLOCK_TOKENS})]")

        page = ((dims["num_pages"], dims["nhead_k"]), "[num_pages, nhead_k]")
        return {"q_descale": per_block("nhead_q", "seqlen_q"),
                "k_descale": per_block("nhead_k", "seqlen_k"),
                "v_descale": per_block("nhead_k", "seqlen_k"),
                "k_page_descale": page, "v_page_descale": page}
