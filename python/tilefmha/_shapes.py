"""Argument checks the engine cannot make itself: ranks of the caller's tensors (before they
are reshaped into engine views) and index metadata turned into Python lists."""

import numpy as np


def require_rank(x, rank, field, dims):
    """Raises ValueError unless x has `rank` dimensions; `dims` names them, e.g.
    '[batch, seqlen_q, nhead_q, hdim_q]'."""
    if x.ndim != rank:
        raise ValueError(f"{field} must be {rank}-D {dims}, got shape {list(x.shape)}")


def given_output(backend, x, field, shape, writer):
    """The backend's view of a caller-given output, which must have `shape`; `writer` says who
    writes it, for the message ('the merged states need')."""
    view = backend.tensor(x, field)
    if tuple(int(d) for d in view.shape) != shape:
        raise ValueError(f"{field} has shape {list(view.shape)} but {writer} {list(shape)}")
    return view


def index_array(x, field, ndim):
    """An int64 NumPy copy of integer metadata (a list, array or tensor, on any device)."""
    values = np.asarray(x.tolist() if hasattr(x, "tolist") else x)
    if values.ndim != ndim:
        raise ValueError(f"{field} must be {ndim}-D, got shape {list(values.shape)}")
    if values.size and values.dtype.kind not in "iu":
        raise ValueError(f"{field} must hold integers, got {values.dtype}")
    return values.astype(np.int64)


def index_list(x, field):
    """The entries of 1-D integer metadata as a list of ints."""
    return index_array(x, field, 1).tolist()


def longest(starts):
    """The longest sequence of a prefix-sum array (0 when there is none)."""
    return max((end - begin for begin, end in zip(starts, starts[1:])), default=0)
