"""Where a call computes: the CPU reference on host arrays, or the GPU dispatcher on CUDA tensors.

Both backends offer the same small interface to the attention functions: turn an argument into
the backend's native tensor (a NumPy array, or the caller's CUDA tensor), allocate outputs,
attach tensors to an engine problem without copying, run it, and hand results back in the
caller's kind of tensor.
"""

import math
import threading

import numpy as np

from . import _core
from ._dtypes import host_storage, storage_name

_DL_CPU = 1
_DL_CUDA = 2
_DL_CUDA_MANAGED = 13
_DL_LEGACY_DEFAULT_STREAM = 1  # the DLPack protocol's name for CUDA stream 0

BACKENDS = ("auto", "cpu", "gpu")
# PyTorch's fp8 storage names (without "torch.").
_FP8_STORAGE = ("float8_e4m3fn", "float8_e5m2")


def _is_torch(x):
    return type(x).__module__.split(".")[0] == "torch"


def _dlpack_device(x):
    query = getattr(x, "__dlpack_device__", None)
    return None if query is None else tuple(int(v) for v in query())


def is_cuda(x):
    """Whether `x` is a DLPack-capable tensor in CUDA memory (a PyTorch CUDA tensor, say)."""
    if _is_torch(x):
        return x.is_cuda
    device = _dlpack_device(x)
    return device is not None and device[0] in (_DL_CUDA, _DL_CUDA_MANAGED)


def _torch_dtype(torch, engine_dtype):
    return {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[engine_dtype]


def _cuda_device_index(x):
    return x.device.index if _is_torch(x) else _dlpack_device(x)[1]


def select_backend(backend, q):
    """The backend of a call: 'auto' follows where q lives."""
    if backend not in BACKENDS:
        raise ValueError(f"backend = {backend!r}: expected 'auto', 'cpu' or 'gpu'")
    cuda = is_cuda(q)
    if backend == "auto":
        backend = "gpu" if cuda else "cpu"
    if backend == "cpu":
        if cuda:
            raise ValueError("backend='cpu' computes on host arrays, but q is on a CUDA device "
                             "(use backend='gpu' or move the tensors to the host)")
        return HostBackend(torch_results=_is_torch(q))
    if not cuda:
        raise ValueError(
            f"backend='gpu' takes CUDA tensors (objects with __dlpack__ on a CUDA device, such "
            f"as PyTorch CUDA tensors), but q is a host {type(q).__name__}")
    return CudaBackend(_cuda_device_index(q))


def _memory_order(strides, shape):
    """Axes from outermost to innermost by stride (ties keep axis order). A broadcast axis
    (zero stride, more than one element) has no place in memory, so an input with one has no
    order to mirror: row-major then (sorting it innermost would leave the output's last axis
    strided, and the error would blame the output instead of the input)."""
    if any(stride == 0 and size > 1 for stride, size in zip(strides, shape)):
        return list(range(len(strides)))
    return sorted(range(len(strides)), key=lambda axis: (-abs(strides[axis]), axis))


def _inverse(permutation):
    return [permutation.index(axis) for axis in range(len(permutation))]


def _kept_shape(shape, strides):
    """The extents a broadcast view stores: 1 wherever its stride is 0."""
    return [1 if stride == 0 else int(size) for size, stride in zip(shape, strides)]


def _as_bias_shape(sums, bias_shape):
    """The caller's bias shape when it holds the same elements (it broadcast plainly)."""
    elements = math.prod(int(n) for n in bias_shape)
    stored = sums.numel() if hasattr(sums, "numel") else sums.size
    return sums.reshape(tuple(bias_shape)) if elements == stored else sums


class HostBackend:
    """NumPy arrays (and PyTorch CPU tensors, viewed as NumPy) through the CPU reference."""

    name = "cpu"

    def __init__(self, torch_results=False):
        # PyTorch CPU inputs get PyTorch results, sharing memory with the NumPy outputs.
        self._torch_results = torch_results

    def tensor(self, x, field):
        if isinstance(x, np.ndarray):
            return x
        if is_cuda(x):
            raise ValueError(f"{field} is on a CUDA device but the call runs on the CPU backend")
        if _is_torch(x):
            import torch

            t = x.detach()
            if t.dtype == torch.bfloat16:
                return t.view(torch.int16).numpy().view(np.uint16)
            if storage_name(t) in _FP8_STORAGE:
                # NumPy has no fp8: the codes as uint8, read as the call's fp8 dtype (as_dtype).
                return t.view(torch.uint8).numpy()
            return t.numpy()
        return np.asarray(x)

    def float32_array(self, x, field):
        return np.ascontiguousarray(self.tensor(x, field), dtype=np.float32)

    def contiguous(self, x):
        """x in row-major order (x itself when it already is)."""
        return np.ascontiguousarray(x)

    def broadcast(self, x, shape, field):
        try:
            return np.broadcast_to(x, shape)
        except ValueError:
            raise ValueError(f"{field}.shape = {list(x.shape)} does not broadcast to "
                             f"[batch, nhead_q, seqlen_q, seqlen_k] = {list(shape)}") from None

    def empty_like_layout(self, like, shape, dtype=None):
        """An uninitialized array of `shape`, axes in like's memory order, of like's dtype or of
        engine dtype `dtype` (bf16: uint16 bit patterns, or ml_dtypes bfloat16 beside ml_dtypes
        inputs)."""
        order = _memory_order(like.strides, like.shape)
        storage = np.empty([shape[axis] for axis in order],
                           dtype=like.dtype if dtype is None else host_storage(dtype, like))
        return storage.transpose(_inverse(order))

    def empty_float32(self, shape):
        return np.empty(shape, dtype=np.float32)

    def dbias_like(self, bias_view, bias_shape):
        """dBias storage summed over the dimensions the bias broadcasts, and its [batch,
        nhead_q, seqlen_q, seqlen_k] view with zero strides exactly where the bias view has
        them."""
        kept = _kept_shape(bias_view.shape, bias_view.strides)
        sums = np.empty(kept, dtype=bias_view.dtype)
        strides = [0 if stride == 0 else own for stride, own in zip(bias_view.strides,
                                                                     sums.strides)]
        view = np.lib.stride_tricks.as_strided(sums, bias_view.shape, strides, writeable=True)
        return _as_bias_shape(sums, bias_shape), view

    def attach(self, problem, field, x, writable=False, as_dtype=""):
        """as_dtype: the fp8 dtype uint8 codes are read as (ProblemHandle::attach_host)."""
        problem.attach_host(field, x, writable, as_dtype)

    def run(self, problem):
        problem.run_reference()

    def plan(self, problem):
        """What run() would do, as text (the problem is not validated here)."""
        return f"cpu reference (double-accumulated, exact): {problem.describe()}"

    def result(self, array):
        if not self._torch_results:
            return array
        import torch

        if array.dtype == np.uint16:  # bf16 bit patterns from a PyTorch bfloat16 input
            return torch.from_numpy(array.view(np.int16)).view(torch.bfloat16)
        return torch.from_numpy(array)


class _GpuSessions:
    """One engine GPU session (dispatcher, plan cache, loaded kernels) per device per process."""

    def __init__(self):
        self._lock = threading.Lock()
        self._sessions = {}

    def get(self, device):
        # A dict read is atomic under the GIL, so calls after the first take no lock.
        session = self._sessions.get(device)
        if session is not None:
            return session
        with self._lock:
            if device not in self._sessions:
                self._sessions[device] = _core.GpuSession(device)
            return self._sessions[device]


gpu_sessions = _GpuSessions()


def stream_query(torch):
    """device index -> the handle (an int) of PyTorch's current CUDA stream on that device.

    PyTorch's raw-stream query costs a fraction of torch.cuda.current_stream(), which builds a
    Stream object; the public call is the fallback where the private one is missing.
    """
    raw = getattr(getattr(torch, "_C", None), "_cuda_getCurrentRawStream", None)
    if raw is not None:
        return raw
    return lambda device: torch.cuda.current_stream(device).cuda_stream


def torch_empty_like_layout(like, shape, dtype=None):
    """An uninitialized PyTorch tensor of `shape` with like's device and dtype (or the torch
    dtype `dtype`), its axes in like's memory order (so that bhsd inputs give bhsd outputs)."""
    options = {} if dtype is None else {"dtype": dtype}
    if like.is_contiguous():
        # Row-major strides already are the memory order _memory_order would find.
        return like.new_empty(shape, **options)
    order = _memory_order(like.stride(), like.shape)
    return like.new_empty([shape[axis] for axis in order], **options).permute(_inverse(order))


class CudaBackend:
    """CUDA tensors through the GPU dispatcher, on the current PyTorch stream of their device.

    Tensors travel by DLPack (no copies, strides kept). Outputs are allocated with PyTorch, which
    is imported only here; without PyTorch the GPU backend cannot allocate its outputs.
    """

    name = "gpu"

    def __init__(self, device):
        self.device = device
        try:
            import torch
        except ImportError:
            torch = None
        self._torch = torch
        # The DLPack producer orders its pending work before this stream; the kernels run on it.
        self.stream = stream_query(torch)(device) if torch else 0
        if torch is not None:
            # Later calls on PyTorch tensors take the fast path (imported here: it needs torch).
            from . import _fast

            _fast.enable(torch)

    def _require_torch(self):
        if self._torch is None:
            raise RuntimeError("backend='gpu' allocates its outputs as PyTorch tensors, but torch "
                               "does not import")
        return self._torch

    def tensor(self, x, field):
        if not is_cuda(x):
            raise ValueError(f"{field} is on the host but backend='gpu' needs CUDA tensors")
        device = _cuda_device_index(x)
        if device != self.device:
            raise ValueError(f"{field} is on cuda:{device} but q is on cuda:{self.device}")
        return x.detach() if _is_torch(x) else x

    def float32_array(self, x, field):
        torch = self._require_torch()
        return torch.as_tensor(x, dtype=torch.float32, device=f"cuda:{self.device}").contiguous()

    def contiguous(self, x):
        """x in row-major order (x itself when it already is, or is no PyTorch tensor)."""
        return x.contiguous() if _is_torch(x) else x

    def broadcast(self, x, shape, field):
        try:
            return x.expand(shape)
        except RuntimeError:
            raise ValueError(f"{field}.shape = {list(x.shape)} does not broadcast to "
                             f"[batch, nhead_q, seqlen_q, seqlen_k] = {list(shape)}") from None

    def empty_like_layout(self, like, shape, dtype=None):
        """As HostBackend's; `dtype` is an engine dtype name (fp32, fp16, bf16)."""
        torch = self._require_torch()
        return torch_empty_like_layout(like, shape, None if dtype is None else
                                       _torch_dtype(torch, dtype))

    def empty_float32(self, shape):
        torch = self._require_torch()
        return torch.empty(shape, dtype=torch.float32, device=f"cuda:{self.device}")

    def dbias_like(self, bias_view, bias_shape):
        """As HostBackend's, as a CUDA tensor (the kernel zeroes a broadcast one before it sums
        into it)."""
        torch = self._require_torch()
        kept = _kept_shape(bias_view.shape, bias_view.stride())
        sums = torch.empty(kept, dtype=bias_view.dtype, device=f"cuda:{self.device}")
        strides = [0 if stride == 0 else own for stride, own in zip(bias_view.stride(),
                                                                     sums.stride())]
        view = sums.as_strided(tuple(bias_view.shape), strides)
        return _as_bias_shape(sums, bias_shape), view

    def attach(self, problem, field, x, writable=False, as_dtype=""):
        """as_dtype: the fp8 dtype uint8 codes are read as (ProblemHandle::attach_torch)."""
        if _is_torch(x):
            # PyTorch's own description of the tensor: its __dlpack__ would cost more than the
            # kernel launch in stream and device queries, and the kernels run on its current
            # stream anyway, so no stream handshake is needed.
            problem.attach_torch(field, x.data_ptr(), str(x.dtype).removeprefix("torch."),
                                 tuple(x.shape), x.stride(), x.device.index, x, as_dtype)
            return
        stream = self.stream or _DL_LEGACY_DEFAULT_STREAM
        problem.attach_device(field, x.__dlpack__(stream=stream), writable, as_dtype)

    def run(self, problem):
        gpu_sessions.get(self.device).run(problem, self.stream)

    def plan(self, problem):
        """The dispatcher's plan for the problem, as text; plans without launching."""
        return gpu_sessions.get(self.device).plan(problem)

    def result(self, tensor):
        return tensor
