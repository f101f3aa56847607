"""The forward's fast path for PyTorch CUDA tensors.

A call through the general path (``_forward.run_forward``) crosses into the extension a dozen
times (problem, dtype, shape, features, one attach per tensor, run) and builds Python objects
along the way; on a small problem that host work costs more than the kernel. Here a call costs
one crossing: ``GpuSession.forward`` reads the tensors' data pointers, sizes, strides, dtypes
and devices itself (python/src/torch_views.hpp), builds the problem, plans it and launches it.
What this module adds in Python is only what needs PyTorch: the outputs' allocation and the
current stream.

The fast path takes plain torch.Tensor q, k, v of one CUDA device with a float dtype (fp32,
fp16, bf16: fp8 inputs need descales, which only the general path sets) and no bias, ALiBi
slopes or sink logits. Everything else, and any call whose tensors it does not
recognise (wrong rank, host tensors, another device...), goes the general path, whose checks
name what is wrong; both paths hand the engine the same problem, so the engine's errors are the
same.

It is enabled when the general path first runs on the GPU (which imports torch), so
``import tilefmha`` never imports torch and NumPy calls never pay for it.
"""

from . import _core
from ._backends import gpu_sessions, stream_query, torch_empty_like_layout


class _NotEnabled:
    """Stands for torch.Tensor until enable(): no object is of this type."""


# torch.Tensor once enable() ran; attention() compares type(q) with it.
Tensor = _NotEnabled
_float32 = None
_dtypes = ()  # the torch dtypes the extension takes here
_current_stream = None


def enable(torch):
    """Registers PyTorch's tensor type and float dtypes with the extension (idempotent)."""
    global Tensor, _float32, _dtypes, _current_stream
    if Tensor is torch.Tensor:
        return
    names = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}
    _core.register_torch(torch.Tensor, names)
    _dtypes = frozenset(names)
    _float32 = torch.float32
    _current_stream = stream_query(torch)
    Tensor = torch.Tensor


def forward(q, k, v, features, return_lse, seqstarts=None):
    """attention() (or attention_varlen() with seqstarts) of plain torch.Tensor q on the fast
    path: o, or (o, lse) with return_lse; None when the call is not the fast path's, having
    launched nothing.

    features: the scalar_features tuple. q, k, v: [batch, seq, head, dim], or packed
    [tokens, head, dim] with seqstarts: (starts_q, starts_k) host lists, or DeviceSeqstarts'
    engine_tuple() for prefix sums on the GPU.
    """
    shape = q.shape
    # Checked before O is allocated: an fp8 q would otherwise cost an allocation per call.
    if (type(k) is not Tensor or type(v) is not Tensor or not q.is_cuda
            or len(shape) != (3 if seqstarts else 4) or q.dtype not in _dtypes):
        return None
    # Allocated before the extension checks the call: a call it turns down frees them unused,
    # which is rarer and cheaper than a second crossing to ask first.
    o = torch_empty_like_layout(q, shape[:-1] + v.shape[-1:])
    lse = None
    if return_lse:
        lse_shape = (shape[1], shape[0]) if seqstarts else (shape[0], shape[2], shape[1])
        lse = q.new_empty(lse_shape, dtype=_float32)
    if not forward_into(q, k, v, o, lse, features, seqstarts):
        return None
    return (o, lse) if return_lse else o


def forward_into(q, k, v, o, lse, features, seqstarts=None):
    """forward() into the caller's o and lse (lse may be None; any strides, last dimension
    contiguous). Returns False, having launched nothing, when the call is not the fast path's
    (the tensors' checks as in forward(); o and lse are then the extension's to refuse)."""
    if (type(q) is not Tensor or type(k) is not Tensor or type(v) is not Tensor
            or not q.is_cuda or q.dtype not in _dtypes):
        return False
    device = q.get_device()
    return gpu_sessions.get(device).forward(q, k, v, o, lse, features, seqstarts,
                                            _current_stream(device))
