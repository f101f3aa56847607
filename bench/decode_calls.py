#!/usr/bin/env python3
"""Decode calls of a few microseconds: tilefmha against SDPA's cuDNN backend, timed as CUDA
graphs of many calls.

bench/decode_sweep.py times a graph of one call from an idle GPU; at 5-15 us a call that reading
moves by several microseconds between runs on both sides. Here each implementation's graph holds
--calls back-to-back calls (the way a serving loop runs them), its replays are timed --repeat
times with CUDA events, and the median per call is reported, so differences of ~0.3 us show.
Each shape's outputs are compared first (max abs difference against cuDNN). --kernels adds each
kernel's median time under torch.profiler (which kernels a call launches, and how long each
runs).

With TILEFMHA_TIMELINE=1 in the environment (docs/jit.md), --timeline runs each shape once after
a warm-up instead, and the kernels print their per-CTA latency timeline.

    PYTHONPATH=build/python python3 bench/decode_calls.py
    PYTHONPATH=build/python python3 bench/decode_calls.py --shapes "1,32,8,128,1024 8,64,8,128,1024"
    TILEFMHA_TIMELINE=1 PYTHONPATH=build/python python3 bench/decode_calls.py --timeline

A shape is batch,nhead_q,nhead_k,hdim,seqlen_k (bf16, one query row, non-causal). Needs
PyTorch with CUDA and a GPU to run; without them it says so and exits 2. Importing this module
needs neither (tests/python/test_decode_calls.py).
"""

import argparse
import collections
import sys

# The shapes of docs/performance.md engine v7: short decode, where a call is a few microseconds.
DEFAULT_SHAPES = (
    (1, 32, 8, 128, 1024), (1, 64, 8, 128, 1024), (1, 32, 8, 64, 1024), (1, 64, 8, 64, 1024),
    (1, 32, 32, 64, 1024), (1, 32, 32, 128, 1024), (1, 32, 8, 128, 8192),
    (4, 32, 8, 64, 1024), (8, 32, 8, 128, 1024), (8, 32, 8, 64, 1024), (8, 64, 8, 128, 1024),
)
TOLERANCE = 2e-2  # bf16 outputs against cuDNN's


def parse_shape(text):
    """'b,hq,hk,d,sk' -> a tuple of five positive ints, nhead_q a multiple of nhead_k."""
    fields = text.split(",")
    if len(fields) != 5:
        raise ValueError(f"shape {text!r}: expected batch,nhead_q,nhead_k,hdim,seqlen_k")
    try:
        values = tuple(int(field) for field in fields)
    except ValueError:
        raise ValueError(f"shape {text!r}: every field must be an integer") from None
    if min(values) < 1:
        raise ValueError(f"shape {text!r}: every field must be positive")
    if values[1] % values[2] != 0:
        raise ValueError(f"shape {text!r}: nhead_q {values[1]} is not a multiple of nhead_k "
                         f"{values[2]}")
    return values


def parse_shapes(text):
    shapes = [parse_shape(part) for part in text.replace(";", " ").split()]
    if not shapes:
        raise ValueError("--shapes: no shape given")
    return shapes


def label(shape):
    b, hq, hk, d, sk = shape
    return f"b{b} {hq}/{hk} d{d} sk{sk}"


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", type=parse_shapes, default=list(DEFAULT_SHAPES),
                        help="space- or ;-separated b,hq,hk,d,sk shapes")
    parser.add_argument("--calls", type=int, default=20, help="calls captured in one graph")
    parser.add_argument("--repeat", type=int, default=10, help="timed replays per graph")
    parser.add_argument("--kernels", action="store_true", help="also each kernel's time")
    parser.add_argument("--num-splits", type=int, default=0,
                        help="split count for our calls (0: the engine's choice)")
    parser.add_argument("--timeline", action="store_true",
                        help="one call per shape after a warm-up (with TILEFMHA_TIMELINE=1)")
    args = parser.parse_args(argv)
    if args.calls < 1 or args.repeat < 1:
        parser.error("--calls and --repeat must be positive")
    if args.num_splits < 0:
        parser.error("--num-splits must be 0 (the engine's choice) or a split count")
    return args


def time_graph(torch, call, calls, repeat):
    """Median us per call over `repeat` replays of a graph of `calls` calls."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream):
        call()  # plans and compiles outside the capture
        torch.cuda.synchronize()
        with torch.cuda.graph(graph):
            for _ in range(calls):
                call()
    torch.cuda.current_stream().wait_stream(stream)
    graph.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    samples = []
    for _ in range(repeat):
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) * 1000 / calls)
    samples.sort()
    return samples[len(samples) // 2], graph


def kernel_times(torch, graph, replays=5):
    """Median device time of each kernel a replay of `graph` runs, by name (first 60 chars)."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as profile:
        for _ in range(replays):
            graph.replay()
        torch.cuda.synchronize()
    times = collections.defaultdict(list)
    for event in profile.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            times[event.name[:60]].append(event.device_time)
    return {name: sorted(values)[len(values) // 2] for name, values in times.items()}


def main(argv=None):
    args = parse_args(argv)
    try:
        import torch
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel

        import tilefmha
    except ImportError as error:
        print(f"decode_calls: needs PyTorch and the tilefmha package ({error})", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("decode_calls: needs a CUDA GPU", file=sys.stderr)
        return 2
    print(f"device: {torch.cuda.get_device_name()}; graphs of {args.calls} calls, median of "
          f"{args.repeat} replays, us a call")
    disagreeing = []
    for shape in args.shapes:
        b, hq, hk, d, sk = shape
        torch.manual_seed(0)
        q = torch.randn(b, 1, hq, d, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(b, sk, hk, d, device="cuda", dtype=torch.bfloat16)
        v = torch.randn(b, sk, hk, d, device="cuda", dtype=torch.bfloat16)
        ours = lambda: tilefmha.attention(q, k, v, num_splits=args.num_splits)  # noqa: E731

        def cudnn():
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                return F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                                      v.transpose(1, 2), enable_gqa=True)

        if args.timeline:
            for _ in range(3):
                ours()
            torch.cuda.synchronize()
            print(f"=== {label(shape)}", flush=True)
            ours()
            torch.cuda.synchronize()
            continue
        error = (cudnn().transpose(1, 2).float() - ours().float()).abs().max().item()
        if not error <= TOLERANCE:  # NaN included
            disagreeing.append(label(shape))
        row = {}
        for name, call in (("ours", ours), ("cudnn", cudnn)):
            row[name], graph = time_graph(torch, call, args.calls, args.repeat)
            if args.kernels:
                for kernel, us in kernel_times(torch, graph).items():
                    print(f"    {name:5} {us:8.2f} us  {kernel}")
        print(f"{label(shape):24} ours {row['ours']:8.2f}  cuDNN {row['cudnn']:8.2f}  "
              f"cuDNN/ours {row['cudnn'] / row['ours']:5.2f}x  max|diff| {error:.1e}", flush=True)
    if disagreeing:
        print(f"decode_calls: outputs disagree with cuDNN (max abs over {TOLERANCE}): "
              f"{', '.join(disagreeing)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
