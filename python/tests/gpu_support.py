"""What the GPU test suites share: PyTorch when it is installed, and why GPU tests skip."""

import tilefmha

try:
    import torch
except ImportError:
    torch = None


def gpu_skip_reason():
    """Empty when PyTorch, a CUDA GPU and a usable driver are present, else why not."""
    if torch is None:
        return "PyTorch is not installed"
    if not torch.cuda.is_available():
        return "PyTorch sees no CUDA GPU"
    return tilefmha.gpu_unavailable_reason()
