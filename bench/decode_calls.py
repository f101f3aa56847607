#!/usr/bin/env python3
"""Decode calls timed as CUDA graphs of many calls, tilefmha beside SDPA's cuDNN backend.

bench/decode_sweep.py times a graph of one call from an idle GPU; at 5-15 us a call that reading
moves by several microseconds between runs on both sides. Here each implementation's graph holds
--calls back-to-back calls (the way a serving loop runs them), its replays are timed --repeat
times with CUDA events, and the median per call is reported, so differences of ~0.3 us show.
Each shape's outputs are compared first (max abs difference against cuDNN). --kernels adds each
kernel's median time under torch.profiler (which kernels a call launches, and how long each
runs). --sweep runs every shape of bench/decode_sweep.json (the engine issue's decode matrix:
query rows 1, 4 and 16 included) this way, and the summary counts the shapes below cuDNN.

With TILEFMHA_TIMELINE=1 in the environment (docs/jit.md), --timeline runs each shape once after
a warm-up instead, and the kernels print their per-CTA latency timeline. --profile runs each
shape's warm-up, then one call of ours and one of cuDNN's between cudaProfilerStart and Stop,
so that `ncu --profile-from-start off` (scripts/ncu_decode.sh) profiles exactly those kernels.
--explain prints our plan for each shape first (tilefmha.explain: each stage's kernel, its launch
form, e.g. "warp MMAs", and the split count).

    PYTHONPATH=build/python python3 bench/decode_calls.py
    PYTHONPATH=build/python python3 bench/decode_calls.py --shapes "1,32,8,128,1024 8,64,8,128,1024,4"
    PYTHONPATH=build/python python3 bench/decode_calls.py --sweep --max-kv-gb 4
    TILEFMHA_TIMELINE=1 PYTHONPATH=build/python python3 bench/decode_calls.py --timeline
    scripts/ncu_decode.sh "32,32,8,64,32768"

A shape is batch,nhead_q,nhead_k,hdim,seqlen_k[,seqlen_q] (bf16, non-causal; one query row
unless given). Needs PyTorch with CUDA and a GPU to run; without them it says so and exits 2.
Importing this module needs neither (tests/python/test_decode_calls.py).
"""

import argparse
import collections
import importlib.util
import math
import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent
# The shapes of docs/performance.md engine v7: short decode, where a call is a few microseconds.
DEFAULT_SHAPES = tuple(shape + (1,) for shape in (
    (1, 32, 8, 128, 1024), (1, 64, 8, 128, 1024), (1, 32, 8, 64, 1024), (1, 64, 8, 64, 1024),
    (1, 32, 32, 64, 1024), (1, 32, 32, 128, 1024), (1, 32, 8, 128, 8192),
    (4, 32, 8, 64, 1024), (8, 32, 8, 128, 1024), (8, 32, 8, 64, 1024), (8, 64, 8, 128, 1024),
))
TOLERANCE = 2e-2  # bf16 outputs against cuDNN's


def parse_shape(text):
    """'b,hq,hk,d,sk[,sq]' -> (b, hq, hk, d, sk, sq) of positive ints (sq 1 when not given),
    nhead_q a multiple of nhead_k."""
    fields = text.split(",")
    if len(fields) not in (5, 6):
        raise ValueError(f"shape {text!r}: expected batch,nhead_q,nhead_k,hdim,seqlen_k"
                         "[,seqlen_q]")
    try:
        values = tuple(int(field) for field in fields)
    except ValueError:
        raise ValueError(f"shape {text!r}: every field must be an integer") from None
    if min(values) < 1:
        raise ValueError(f"shape {text!r}: every field must be positive")
    if values[1] % values[2] != 0:
        raise ValueError(f"shape {text!r}: nhead_q {values[1]} is not a multiple of nhead_k "
                         f"{values[2]}")
    return values if len(values) == 6 else values + (1,)


def load_decode_sweep():
    """bench/decode_sweep.py as a module (it imports neither torch nor the package)."""
    spec = importlib.util.spec_from_file_location("decode_sweep", HERE / "decode_sweep.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def sweep_shapes(max_kv_gb=None):
    """The decode sweep file's shapes as (b, hq, hk, d, sk, sq), K/V-sharing shapes adjacent,
    and how many were skipped for their K+V bytes (the file's cap, or `max_kv_gb`)."""
    sweep_module = load_decode_sweep()
    sweep = sweep_module.load_sweep(sweep_module.DEFAULT_SWEEP)
    cap = None if max_kv_gb is None else int(max_kv_gb * 1e9)
    shapes, skipped = sweep_module.expand_shapes(sweep, max_kv_bytes=cap)
    return [(s["batch"], s["nhead_q"], s["nhead_k"], s["hdim"], s["seqlen_k"], s["seqlen_q"])
            for s in shapes], len(skipped)


def parse_shapes(text):
    shapes = [parse_shape(part) for part in text.replace(";", " ").split()]
    if not shapes:
        raise ValueError("--shapes: no shape given")
    return shapes


def label(shape):
    b, hq, hk, d, sk, sq = shape
    return f"b{b} {hq}/{hk} d{d} sk{sk}" + (f" sq{sq}" if sq > 1 else "")


def summarize(ratios):
    """'N shapes: geomean x, K below 1.0x (worst ...)' over {label: cuDNN/ours}."""
    if not ratios:
        return "no shape timed"
    geomean = math.exp(sum(math.log(r) for r in ratios.values()) / len(ratios))
    below = sorted((r, name) for name, r in ratios.items() if r < 1.0)
    text = (f"{len(ratios)} shapes: geomean cuDNN/ours {geomean:.3f}x, {len(below)} below "
            "1.0x")
    if below:
        text += " (worst: " + ", ".join(f"{name} {r:.2f}x" for r, name in below[:5]) + ")"
    return text


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", type=parse_shapes, default=None,
                        help="space- or ;-separated b,hq,hk,d,sk[,sq] shapes")
    parser.add_argument("--sweep", action="store_true",
                        help="every shape of bench/decode_sweep.json instead")
    parser.add_argument("--max-kv-gb", type=float, default=None,
                        help="with --sweep: skip shapes whose K+V exceed this many GB")
    parser.add_argument("--calls", type=int, default=20, help="calls captured in one graph")
    parser.add_argument("--repeat", type=int, default=10, help="timed replays per graph")
    parser.add_argument("--kernels", action="store_true", help="also each kernel's time")
    parser.add_argument("--num-splits", type=int, default=0,
                        help="split count for our calls (0: the engine's choice)")
    parser.add_argument("--timeline", action="store_true",
                        help="one call per shape after a warm-up (with TILEFMHA_TIMELINE=1)")
    parser.add_argument("--explain", action="store_true",
                        help="also print our plan for each shape (tilefmha.explain: the kernel "
                        "of each stage, its launch form and split count)")
    parser.add_argument("--profile", action="store_true",
                        help="one call of each side per shape inside cudaProfilerStart/Stop "
                        "(for ncu --profile-from-start off)")
    args = parser.parse_args(argv)
    if args.calls < 1 or args.repeat < 1:
        parser.error("--calls and --repeat must be positive")
    if args.num_splits < 0:
        parser.error("--num-splits must be 0 (the engine's choice) or a split count")
    if args.timeline and args.profile:
        parser.error("--timeline and --profile are alternatives")
    if args.sweep and args.shapes is not None:
        parser.error("--sweep and --shapes are alternatives")
    if args.max_kv_gb is not None and (not args.sweep or args.max_kv_gb <= 0):
        parser.error("--max-kv-gb takes a positive size, with --sweep")
    if args.shapes is None:
        args.shapes = list(DEFAULT_SHAPES)
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


def profile_once(torch, calls, warmup=3):
    """Each call `warmup` times (plans, compiles, caches), then each once inside the profiler
    range, one after the other."""
    for call in calls:
        for _ in range(warmup):
            call()
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    for call in calls:
        call()
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()


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
    if args.sweep:
        args.shapes, skipped = sweep_shapes(args.max_kv_gb)
        print(f"decode sweep: {len(args.shapes)} shapes, {skipped} skipped for their K+V bytes")
    print(f"device: {torch.cuda.get_device_name()}; graphs of {args.calls} calls, median of "
          f"{args.repeat} replays, us a call")
    disagreeing = []
    ratios = {}
    kv_key, k, v = None, None, None
    for shape in args.shapes:
        b, hq, hk, d, sk, sq = shape
        torch.manual_seed(0)
        q = torch.randn(b, sq, hq, d, device="cuda", dtype=torch.bfloat16)
        # Shapes that differ only in their query rows share K and V (the sweep's largest are
        # tens of GB).
        if kv_key != (b, sk, hk, d):
            k = v = None
            k = torch.randn(b, sk, hk, d, device="cuda", dtype=torch.bfloat16)
            v = torch.randn(b, sk, hk, d, device="cuda", dtype=torch.bfloat16)
            kv_key = (b, sk, hk, d)
        ours = lambda: tilefmha.attention(q, k, v, num_splits=args.num_splits)  # noqa: E731
        if args.explain:
            plan = tilefmha.explain(q, k, v, num_splits=args.num_splits)
            print(f"--- {label(shape)}\n" + "".join(f"    {line}\n" for line in
                                                   plan.strip().splitlines()), end="", flush=True)

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
        if args.profile:
            profile_once(torch, (ours, cudnn))
            print(f"=== {label(shape)}: one call of ours, then one of cuDNN's, profiled",
                  flush=True)
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
        ratios[label(shape)] = row["cudnn"] / row["ours"]
        print(f"{label(shape):24} ours {row['ours']:8.2f}  cuDNN {row['cudnn']:8.2f}  "
              f"cuDNN/ours {row['cudnn'] / row['ours']:5.2f}x  max|diff| {error:.1e}", flush=True)
    if not (args.timeline or args.profile):
        print(summarize(ratios))
    if disagreeing:
        print(f"decode_calls: outputs disagree with cuDNN (max abs over {TOLERANCE}): "
              f"{', '.join(disagreeing)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
