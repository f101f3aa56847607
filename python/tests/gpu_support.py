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


def captured(call):
    """(graph, outputs): `call` run once on a side stream (so planning and JIT compiling stay
    outside the capture), then captured in a CUDA graph whose replays rewrite `outputs`."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        call()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outputs = call()
    return graph, outputs
