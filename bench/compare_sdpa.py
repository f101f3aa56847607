#!/usr/bin/env python3
"""Times tilefmha against PyTorch SDPA (cuDNN and FlashAttention-2 backends) in one process.

Each shape runs through tilefmha.attention (CUDA tensors via DLPack) and through
torch.nn.functional.scaled_dot_product_attention restricted to one backend; the outputs must agree
within a tolerance of the dtype, and each is timed with CUDA events (warm-ups, median of repeats)
around CUDA-graph replays of the call (--timing graph, the default: GPU time alone, where
capture works; else per-call events) and, separately, for its host cost per call.
Shapes follow bench/fa3_sweep.json (the FlashAttention-3 protocol: heads = hidden / hdim,
batch = total_tokens / seqlen) unless narrowed by --hdim, --seqlen, --causal, --dtype.

    PYTHONPATH=build/python python3 bench/compare_sdpa.py --hdim 128 --seqlen 2048 --csv out.csv

Needs PyTorch with CUDA and a GPU; without them it says so and exits 2. Importing this module
needs neither (the tests check the parsing, the shapes and the FLOP count on a CPU host).
"""

import argparse
import csv
import json
import pathlib
import statistics
import sys

DEFAULT_SWEEP = pathlib.Path(__file__).resolve().parent / "fa3_sweep.json"
# Largest |ours - SDPA| accepted per dtype: both sides accumulate in fp32 but round P and O to
# the storage type, so they differ by a few units in the last place of that type.
TOLERANCE = {"bf16": 2e-2, "fp16": 4e-3}
BACKENDS = ("cudnn", "fa2")


def parse_int_list(text):
    try:
        values = [int(item) for item in text.split(",") if item]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got '{text}'")
    if not values or any(value <= 0 for value in values):
        raise argparse.ArgumentTypeError(f"expected positive integers, got '{text}'")
    return values


def parse_causal(text):
    choices = {"true": [True], "false": [False], "both": [False, True]}
    if text not in choices:
        raise argparse.ArgumentTypeError(f"--causal must be true, false or both, got '{text}'")
    return choices[text]


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweep", type=pathlib.Path, default=DEFAULT_SWEEP,
                        help="shape matrix (default bench/fa3_sweep.json)")
    parser.add_argument("--hdim", type=parse_int_list, help="head dims, e.g. 64,128")
    parser.add_argument("--seqlen", type=parse_int_list, help="sequence lengths, e.g. 512,2048")
    parser.add_argument("--causal", type=parse_causal, help="true, false or both")
    parser.add_argument("--dtype", choices=sorted(TOLERANCE), help="element type (default: sweep's)")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--timing", choices=("graph", "events"), default="graph",
                        help="graph: CUDA-graph replays, GPU time alone (default); events: one "
                             "Python call per timed interval, launch cost included")
    parser.add_argument("--csv", type=pathlib.Path, help="also write the rows to this CSV file")
    args = parser.parse_args(argv)
    if args.warmup < 0 or args.repeat < 1:
        parser.error(f"--warmup must be >= 0 and --repeat >= 1 (got {args.warmup}, {args.repeat})")
    return args


def attention_flops(batch, nhead, seqlen_q, seqlen_k, hdim, causal):
    """DESIGN §9: two GEMMs of 2·sq·sk·d per head, halved when causal masks half the scores."""
    flops = 4 * batch * nhead * seqlen_q * seqlen_k * hdim
    return flops // 2 if causal else flops


def expand_shapes(sweep, hdims=None, seqlens=None, causals=None, dtype=None):
    """The (batch, nhead, seqlen, hdim, causal, dtype) shapes of a sweep file's protocol."""
    protocol = sweep["protocol"]
    total_tokens, hidden = int(protocol["total_tokens"]), int(protocol["hidden"])
    shapes = []
    for hdim in hdims or sweep["hdim"]:
        if hidden % hdim:
            raise ValueError(f"hdim {hdim} does not divide hidden {hidden}")
        for seqlen in seqlens or sweep["seqlen"]:
            for causal in causals if causals is not None else sweep["causal"]:
                shapes.append({
                    "batch": max(1, total_tokens // seqlen),  # longer than the budget: one sequence
                    "nhead": hidden // hdim,
                    "seqlen": seqlen,
                    "hdim": hdim,
                    "causal": bool(causal),
                    "dtype": dtype or sweep["dtype"],
                })
    return shapes


def torch_or_reason():
    """(torch, None) where PyTorch and a CUDA GPU are usable, else (None, why not)."""
    try:
        import torch
    except ImportError:
        return None, "PyTorch is not installed (pip install torch on the GPU host)"
    if not torch.cuda.is_available():
        return None, f"PyTorch {torch.__version__} sees no CUDA GPU"
    return torch, None


def time_events(torch, call, warmup, repeat):
    """Median of per-call CUDA event times on the current stream (host launch cost included
    wherever it exceeds the GPU time)."""
    for _ in range(warmup):
        call()
    samples = []
    for _ in range(repeat):
        start = torch.cuda.Event(enable_timing=True)
        stop = torch.cuda.Event(enable_timing=True)
        start.record()
        call()
        stop.record()
        stop.synchronize()
        samples.append(start.elapsed_time(stop))
    return statistics.median(samples)


def time_graph(torch, call, warmup, repeat):
    """Median of CUDA-event times of a CUDA graph replaying the call: GPU time alone, the same
    for every implementation (no Python or launch cost)."""
    for _ in range(warmup):
        call()  # first calls compile and load kernels, which a capture must not do
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        call()
    return time_events(torch, graph.replay, warmup, repeat)


def time_ms(torch, call, warmup, repeat, method):
    """(milliseconds, method used): `graph` falls back to `events` where capture fails."""
    if method == "graph":
        try:
            return time_graph(torch, call, warmup, repeat), "graph"
        except Exception:  # noqa: BLE001 - any capture failure (torch's or the engine's)
            torch.cuda.synchronize()
    return time_events(torch, call, warmup, repeat), "events"


def host_us(torch, call, repeat):
    """Host microseconds per call: the wall time of `repeat` back-to-back asynchronous calls."""
    import time

    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(repeat):
        call()
    elapsed = time.perf_counter() - start
    torch.cuda.synchronize()
    return elapsed / repeat * 1e6


def run_shape(torch, tilefmha, shape, warmup, repeat, timing="graph"):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention

    torch_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[shape["dtype"]]
    b, h, s, d = shape["batch"], shape["nhead"], shape["seqlen"], shape["hdim"]
    generator = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=torch_dtype, generator=generator)
               for _ in range(3))
    causal = shape["causal"]
    # SDPA reads [batch, head, seq, dim]: transposed views of the same memory, no copies.
    q_t, k_t, v_t = (x.transpose(1, 2) for x in (q, k, v))
    sdpa_backend = {"cudnn": SDPBackend.CUDNN_ATTENTION, "fa2": SDPBackend.FLASH_ATTENTION}

    def ours():
        return tilefmha.attention(q, k, v, causal=causal)

    row = dict(shape)
    flops = attention_flops(b, h, s, s, d, causal)
    reference = ours()
    row["ours_ms"], row["ours_timing"] = time_ms(torch, ours, warmup, repeat, timing)
    row["ours_tflops"] = flops / row["ours_ms"] / 1e9
    row["ours_host_us"] = host_us(torch, ours, repeat)
    for name in BACKENDS:
        def theirs(name=name):
            with sdpa_kernel([sdpa_backend[name]]):
                return scaled_dot_product_attention(q_t, k_t, v_t, is_causal=causal)

        try:
            expected = theirs().transpose(1, 2)
        except RuntimeError as error:  # the backend refuses this shape or card
            row[f"{name}_error"] = str(error).splitlines()[0]
            continue
        error = (reference.float() - expected.float()).abs().max().item()
        row[f"{name}_max_abs_error"] = error
        row[f"{name}_agrees"] = error <= TOLERANCE[shape["dtype"]]
        row[f"{name}_ms"], row[f"{name}_timing"] = time_ms(torch, theirs, warmup, repeat, timing)
        row[f"{name}_tflops"] = flops / row[f"{name}_ms"] / 1e9
        row[f"{name}_host_us"] = host_us(torch, theirs, repeat)
        row[f"ratio_{name}"] = row["ours_tflops"] / row[f"{name}_tflops"]
    return row


def format_row(row):
    cells = [f"hdim {row['hdim']:>3} seqlen {row['seqlen']:>5} {'causal' if row['causal'] else 'full  '}",
             f"ours {row['ours_tflops']:7.1f} ({row['ours_host_us']:.0f} us host)"]
    for name in BACKENDS:
        if f"{name}_tflops" in row:
            mark = "" if row[f"{name}_agrees"] else f" MISMATCH {row[f'{name}_max_abs_error']:.3g}"
            cells.append(f"{name} {row[f'{name}_tflops']:7.1f} x{row[f'ratio_{name}']:.2f}{mark}")
        else:
            cells.append(f"{name} n/a ({row.get(f'{name}_error', 'not run')})")
    return "  ".join(cells)


def main(argv=None):
    args = parse_args(argv)
    try:
        sweep = json.loads(args.sweep.read_text())
        shapes = expand_shapes(sweep, args.hdim, args.seqlen, args.causal, args.dtype)
    except (OSError, ValueError, KeyError) as error:
        print(f"compare_sdpa: {args.sweep}: {error}", file=sys.stderr)
        return 2
    torch, reason = torch_or_reason()
    if torch is None:
        print(f"compare_sdpa: needs PyTorch with CUDA and a GPU: {reason}", file=sys.stderr)
        return 2
    try:
        import tilefmha
    except ImportError as error:
        print(f"compare_sdpa: cannot import tilefmha ({error}); build the package for this "
              "Python (docs/python.md) and set PYTHONPATH=BUILD/python", file=sys.stderr)
        return 2
    print(f"compare_sdpa: {torch.cuda.get_device_name()}, PyTorch {torch.__version__}, "
          f"{len(shapes)} shapes, TFLOP/s at the median of {args.repeat} {args.timing} timings "
          "(x = ours/theirs; host = Python call cost)")
    rows, mismatches = [], 0
    for shape in shapes:
        row = run_shape(torch, tilefmha, shape, args.warmup, args.repeat, args.timing)
        mismatches += sum(1 for name in BACKENDS if row.get(f"{name}_agrees") is False)
        rows.append(row)
        print(format_row(row), flush=True)
    if args.csv:
        fields = sorted({key for row in rows for key in row})
        with open(args.csv, "w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=fields)
            writer.writeheader()
            writer.writerows(rows)
    if mismatches:
        print(f"compare_sdpa: {mismatches} outputs differ beyond tolerance", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
