#!/usr/bin/env python3
"""Host cost of tilefmha.attention on CUDA tensors against PyTorch SDPA, and where it goes.

Three measurements in one process on one card (bf16, causal):

1. Host cost per call on a tiny problem (batch 1, length 128, 8 heads, hdim 64): the wall time
   of --calls back-to-back asynchronous calls of tilefmha.attention, SDPA cuDNN and SDPA
   FlashAttention-2, divided by the count. The GPU work is a few microseconds, so this is the
   Python, dispatch and launch path alone.
2. Eager loop against CUDA-graph replay (batch 64, length 256, 32 heads, hdim 64: the FA3
   protocol's 16k tokens at hidden 2048): CUDA events around --loop-calls eager calls, and
   around as many replays of a graph that captured the same call; both per call, for tilefmha
   and cuDNN. Where the eager time exceeds the replay time, the host cost is not hidden behind
   the GPU work.
3. A cProfile of tilefmha.attention calls on the tiny problem (--top entries; 0 skips it), so
   Python-side overhead can be found and cut.

The first line printed is a one-line summary (scripts/gpu_check.sh keeps it); a `summary:` block
follows the measurements. Needs PyTorch with CUDA and the tilefmha package
(PYTHONPATH=BUILD/python); without them it says so and exits 2.

    PYTHONPATH=build/python python3 bench/python_overhead.py --calls 3000
"""

import argparse
import cProfile
import importlib.util
import pathlib
import pstats
import sys
import time
import warnings

TINY = {"batch": 1, "seqlen": 128, "heads": 8, "hdim": 64}
LOOP = {"batch": 64, "seqlen": 256, "heads": 32, "hdim": 64}
LABELS = {"tilefmha": "tilefmha", "cudnn": "SDPA cuDNN", "fa2": "SDPA FA2"}


def load_compare():
    """bench/compare_sdpa.py (its torch probe and host timer); bench/ is not a package."""
    path = pathlib.Path(__file__).resolve().parent / "compare_sdpa.py"
    spec = importlib.util.spec_from_file_location("compare_sdpa", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def describe(problem):
    return (f"b{problem['batch']} s{problem['seqlen']} h{problem['heads']} d{problem['hdim']} "
            "causal bf16")


def make_calls(torch, tilefmha, problem, names):
    """name -> zero-argument call on one set of random [b, s, h, d] tensors."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention

    size = (problem["batch"], problem["seqlen"], problem["heads"], problem["hdim"])
    q, k, v = (torch.randn(size, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    q_t, k_t, v_t = (x.transpose(1, 2) for x in (q, k, v))  # SDPA's [b, h, s, d] views
    backends = {"cudnn": SDPBackend.CUDNN_ATTENTION, "fa2": SDPBackend.FLASH_ATTENTION}

    def sdpa(backend):
        def call():
            with sdpa_kernel([backend]):
                return scaled_dot_product_attention(q_t, k_t, v_t, is_causal=True)
        return call

    calls = {"tilefmha": lambda: tilefmha.attention(q, k, v, causal=True)}
    calls.update({name: sdpa(backends[name]) for name in names if name in backends})
    return calls


def usable(torch, calls):
    """The calls that run here (the first call plans, compiles and loads; never timed), and why
    the others do not."""
    ready, refused = {}, {}
    for name, call in calls.items():
        try:
            call()
            torch.cuda.synchronize()
            ready[name] = call
        except (RuntimeError, ValueError) as error:  # a backend refusing this card or shape
            refused[name] = str(error).strip().splitlines()[0] if str(error).strip() else "refused"
    return ready, refused


def timed_loop(torch, call, count):
    """(GPU-side us per call from events around the whole loop, host us per call)."""
    torch.cuda.synchronize()
    start = torch.cuda.Event(enable_timing=True)
    stop = torch.cuda.Event(enable_timing=True)
    begin = time.perf_counter()
    start.record()
    for _ in range(count):
        call()
    host = time.perf_counter() - begin
    stop.record()
    stop.synchronize()
    return start.elapsed_time(stop) * 1e3 / count, host * 1e6 / count


def eager_and_graph(torch, call, count):
    """Per-call times of an eager loop and of back-to-back replays of the captured call."""
    for _ in range(5):
        call()
    eager, host = timed_loop(torch, call, count)
    result = {"eager_us": eager, "eager_host_us": host}
    try:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            call()
        for _ in range(5):
            graph.replay()
        result["graph_us"], _ = timed_loop(torch, graph.replay, count)
    except Exception as error:  # noqa: BLE001 - any capture failure (torch's or the engine's)
        torch.cuda.synchronize()
        result["graph_error"] = str(error).strip().splitlines()[0] if str(error).strip() else \
            type(error).__name__
    return result


def format_value(value, unit=""):
    return "n/a" if value is None else f"{value:.1f}{unit}"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=3000,
                        help="back-to-back calls per host-cost measurement (default 3000)")
    parser.add_argument("--loop-calls", type=int, default=500,
                        help="calls (and replays) per eager-vs-graph measurement (default 500)")
    parser.add_argument("--top", type=int, default=25, help="profile entries to print (0: none)")
    args = parser.parse_args(argv)
    if args.calls < 1 or args.loop_calls < 1 or args.top < 0:
        parser.error("--calls and --loop-calls must be >= 1 and --top >= 0")
    compare = load_compare()
    torch, reason = compare.torch_or_reason()
    if torch is None:
        print(f"python_overhead: needs PyTorch with CUDA and a GPU: {reason}", file=sys.stderr)
        return 2
    try:
        import tilefmha
    except ImportError as error:
        print(f"python_overhead: cannot import tilefmha ({error}); set PYTHONPATH=BUILD/python",
              file=sys.stderr)
        return 2
    warnings.filterwarnings("ignore", message=".*kernel not used because.*")
    warnings.filterwarnings("ignore", message=".*has been runtime disabled.*")

    # 1. Host cost per call, tiny problem. Each implementation warms up first (20 calls), then
    # compare_sdpa's host timer runs the back-to-back calls.
    tiny_calls, tiny_refused = usable(torch, make_calls(torch, tilefmha, TINY, ("cudnn", "fa2")))
    if "tilefmha" not in tiny_calls:
        print(f"python_overhead: tilefmha.attention failed on {describe(TINY)}: "
              f"{tiny_refused['tilefmha']}", file=sys.stderr)
        return 1
    host = {}
    for name, call in tiny_calls.items():
        for _ in range(20):
            call()
        host[name] = compare.host_us(torch, call, args.calls)

    # 2. Eager loop against graph replay of the same call.
    loop_calls, loop_refused = usable(torch, make_calls(torch, tilefmha, LOOP, ("cudnn",)))
    loop = {name: eager_and_graph(torch, call, args.loop_calls)
            for name, call in loop_calls.items()}

    print(f"python_overhead: host us per call ({describe(TINY)}, {args.calls} calls): "
          + ", ".join(f"{LABELS[name]} {format_value(host.get(name))}" for name in LABELS))
    print(f"device: {torch.cuda.get_device_name()}, PyTorch {torch.__version__}")
    for name, why in tiny_refused.items():
        print(f"  {LABELS[name]} refused the tiny problem: {why}")
    print(f"\neager loop vs CUDA-graph replay ({describe(LOOP)}, {args.loop_calls} calls; "
          "us per call, GPU events around the whole loop):")
    for name in ("tilefmha", "cudnn"):
        if name in loop_refused:
            print(f"  {LABELS[name]:11} refused: {loop_refused[name]}")
            continue
        result = loop[name]
        graph = result.get("graph_us")
        cells = [f"  {LABELS[name]:11} eager {result['eager_us']:7.1f} "
                 f"(host {result['eager_host_us']:6.1f})",
                 f"graph replay {format_value(graph)}"]
        if graph is not None:
            cells.append(f"eager / graph {result['eager_us'] / graph:.2f}x")
        else:
            cells.append(f"capture failed: {result['graph_error']}")
        print("  ".join(cells))

    print("\nsummary:")
    ours = host["tilefmha"]
    relative = [f"{LABELS[name]} {host[name]:.1f} us (tilefmha / it = {ours / host[name]:.2f}x)"
                for name in ("cudnn", "fa2") if name in host]
    print(f"  host cost per call, tiny problem: tilefmha {ours:.1f} us"
          + (f" vs {', '.join(relative)}" if relative else ""))
    for name in ("tilefmha", "cudnn"):
        result = loop.get(name)
        if result is None or result.get("graph_us") is None:
            continue
        exposed = result["eager_us"] - result["graph_us"]
        print(f"  {describe(LOOP)}, {LABELS[name]}: eager {result['eager_us']:.1f} us/call, "
              f"graph {result['graph_us']:.1f} us/call: "
              + (f"{exposed:.1f} us/call of host cost not hidden by the GPU work"
                 if exposed > 0.05 * result["graph_us"] else "host cost hidden by the GPU work"))

    if args.top:
        call = tiny_calls["tilefmha"]
        profile = cProfile.Profile()
        profile.enable()
        for _ in range(args.calls):
            call()
        profile.disable()
        torch.cuda.synchronize()
        print(f"\ncProfile of {args.calls} tilefmha.attention calls ({describe(TINY)}), "
              "by own time:")
        pstats.Stats(profile, stream=sys.stdout).sort_stats("tottime").print_stats(args.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
