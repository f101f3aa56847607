"""tilefmha: fused multi-head attention for NVIDIA GPUs, with an exact CPU reference.

NumPy arrays run on the CPU backend (the engine's double-accumulated reference); PyTorch CUDA
tensors (any object with ``__dlpack__`` on a CUDA device) run on the GPU through the
dispatcher, on the tensor's current stream, without copies. See docs/python.md.

    o = tilefmha.attention(q, k, v, causal=True)               # [batch, seq, head, dim]
    o = tilefmha.attention(q8, k8, v8, q_descale=sq, k_descale=sk, v_descale=sv)  # fp8 -> bf16
    o, lse = tilefmha.attention_varlen(q, k, v, cu_q, cu_k, return_lse=True)
    o = tilefmha.paged_attention(q, k_cache, v_cache, block_table, seqlens_k)
    o, lse = tilefmha.merge_states(o_states, lse_states)      # [n, batch, seq, head, dim]
    dq, dk, dv = tilefmha.attention_backward(q, k, v, o, lse, do, causal=True)
    tilefmha.warmup("pytorch", hdims=[128], dtypes=["bf16"])   # JIT ahead of the first call

Engine errors become ValueError (invalid problem or argument, naming the field),
NotImplementedError (not supported yet) or RuntimeError (no kernel, compilation, driver).
The PyTorch autograd wrapper lives in ``tilefmha.torch`` and context parallelism (ring and
head-parallel attention over torch.distributed) in ``tilefmha.distributed``; both import torch.
``python3 -m tilefmha`` prints the environment (GPU, driver, NVRTC, kernel cache).
"""

from ._append import append_kv, append_kv_and_attend, rope_tables
from ._backends import is_cuda
from ._backward import attention_backward
from ._core import gpu_unavailable_reason
from ._dtypes import bf16_from_float32, bf16_to_float32, fp8_from_float32, fp8_to_float32
from ._forward import attention, attention_varlen, batch_prefill, explain, paged_attention
from ._merge import merge_states
from ._schedule import ring_schedule
from ._warmup import WarmupReport, warmup

__all__ = [
    "append_kv",
    "append_kv_and_attend",
    "attention",
    "attention_backward",
    "attention_varlen",
    "batch_prefill",
    "bf16_from_float32",
    "bf16_to_float32",
    "explain",
    "fp8_from_float32",
    "fp8_to_float32",
    "gpu_unavailable_reason",
    "is_cuda",
    "merge_states",
    "paged_attention",
    "ring_schedule",
    "rope_tables",
    "warmup",
    "WarmupReport",
]

__version__ = "0.1.0"
