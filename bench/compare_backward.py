#!/usr/bin/env python3
"""Attention backward: tilefmha against PyTorch SDPA (cuDNN and FlashAttention-2) in one process.

For each shape of bench/fa3_sweep.json (the FA3 protocol of bench/compare_sdpa.py: heads =
hidden / hdim, batch = total_tokens / seqlen), in bf16 or fp16 (--dtype), every implementation
is timed twice: forward + backward, and the backward alone on a precomputed forward (ours:
tilefmha.attention_backward with the forward's o and lse; SDPA: torch.autograd.grad of a kept
output with retain_graph=True). TFLOP/s count the backward as 2.5 forwards (forward FLOPs as
compare_sdpa.attention_flops), so forward + backward is 3.5. Timing is compare_sdpa's:
median of CUDA-event timings of CUDA-graph replays, or of eager calls where capture fails.

dq, dk, dv of each implementation are checked against SDPA's math backend on the same inputs
in float64 (seqlen <= 2048) or float32, over a slice of the batch and heads whose score matrix
fits REF_SCORE_ELEMENTS (each (batch, head) pair's gradients depend on that pair alone, so the
slice is exact), plus a finiteness check of the whole gradients. A shape the GPU backward
refuses reads "refused: <message>" and the sweep goes on.

    PYTHONPATH=build/python python3 bench/compare_backward.py --dtype bf16 --csv b.csv --json b.json
    PYTHONPATH=build/python python3 bench/compare_backward.py --deterministic-too   # + det / default
    python3 bench/compare_backward.py --list-shapes --hdim 128     # no torch or GPU needed

Needs PyTorch with CUDA and a GPU for the timed run; without them it says so and exits 2.
Importing this module needs neither (tests/python/test_compare_backward.py runs on a CPU host).
"""

import argparse
import csv
import importlib.util
import json
import math
import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent


def _load(name):
    # bench/ is not a package: load the sibling from its path (it imports without torch).
    spec = importlib.util.spec_from_file_location(name, HERE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


compare = _load("compare_sdpa")

IMPLEMENTATIONS = ("ours",) + compare.BACKENDS  # ours, cudnn, fa2
# The convention: the backward does 2.5 times the forward's FLOPs (five GEMMs to two).
BACKWARD_FLOPS_NUM, BACKWARD_FLOPS_DEN = 5, 2
# Gradients sum many rounded products, so the bound scales with the largest reference gradient
# (python/tests/test_gpu_backward.py's rule): |ours - ref| <= RTOL * max|ref| + ATOL.
RTOL = {"bf16": 3e-2, "fp16": 1e-2}
ATOL = 1e-3
# The math backend keeps several [batch, heads, s, s] tensors: cap each at 2^27 elements
# (1 GiB in float64) by checking fewer heads and batch entries; one head of 16k is 2^28 in
# float32 (1 GiB), the floor.
REF_SCORE_ELEMENTS = 2**27
FLOAT64_MAX_SEQLEN = 2048
# The target for the backward alone, hdim 128, seqlen 8k, bf16, on an H100.
TARGET = {"hdim": 128, "seqlen": 8192, "dtype": "bf16", "tflops": 560}
# The target for deterministic mode: at most 15% slower than the default backward.
DETERMINISTIC_TARGET = 0.85
CSV_FIELDS = ["shape", "dtype", "batch", "nhead", "seqlen", "hdim", "causal", "status",
              "message", "fwd_flops", "ref_dtype", "ref_batch", "ref_heads",
              "ratio_bwd_cudnn", "ratio_fwdbwd_cudnn", "ratio_bwd_fa2", "ratio_fwdbwd_fa2",
              "ours_det_bwd_ms", "ours_det_bwd_tflops", "ours_det_bwd_timing", "ours_det_agrees",
              "ours_det_error", "ours_det_rounds_ms", "ours_default_rounds_ms",
              "ratio_det_default"] + [
    f"{name}_{key}" for name in IMPLEMENTATIONS
    for key in ("bwd_ms", "bwd_tflops", "fwdbwd_ms", "fwdbwd_tflops", "bwd_timing",
                "fwdbwd_timing", "err_dq", "err_dk", "err_dv", "agrees", "error")]


# ---------------------------------------------------------------------------------------------
# Flags, shapes, FLOPs and the summary (pure Python: tested on CPU hosts)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweep", type=pathlib.Path, default=compare.DEFAULT_SWEEP,
                        help="shape matrix (default bench/fa3_sweep.json)")
    parser.add_argument("--hdim", type=compare.parse_int_list, help="head dims, e.g. 64,128")
    parser.add_argument("--seqlen", type=compare.parse_int_list, help="lengths, e.g. 512,8192")
    parser.add_argument("--causal", type=compare.parse_causal, help="true, false or both")
    parser.add_argument("--dtype", choices=sorted(RTOL), help="element type (default: sweep's)")
    parser.add_argument("--deterministic", action="store_true",
                        help="time our deterministic backward (bit-reproducible dQ)")
    parser.add_argument("--deterministic-too", action="store_true",
                        help="also time our deterministic backward alone beside the default one, "
                             "the two alternating (medians of 3 rounds), and report their ratio")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--timing", choices=("graph", "events"), default="graph",
                        help="graph: CUDA-graph replays where capture works (default); events: "
                             "eager calls")
    parser.add_argument("--csv", type=pathlib.Path, help="also write the rows to this CSV file")
    parser.add_argument("--json", type=pathlib.Path, help="also write rows and summary here")
    parser.add_argument("--list-shapes", action="store_true", help="print the shapes and exit")
    args = parser.parse_args(argv)
    if args.deterministic and args.deterministic_too:
        parser.error("--deterministic-too times both modes; drop --deterministic")
    if args.warmup < 0 or args.repeat < 1:
        parser.error(f"--warmup must be >= 0 and --repeat >= 1 (got {args.warmup}, {args.repeat})")
    return args


def shape_label(shape):
    return (f"d{shape['hdim']} s{shape['seqlen']} b{shape['batch']} h{shape['nhead']} "
            f"{'causal' if shape['causal'] else 'full'} {shape['dtype']}")


def forward_flops(shape):
    b, h, s, d = shape["batch"], shape["nhead"], shape["seqlen"], shape["hdim"]
    return compare.attention_flops(b, h, s, s, d, shape["causal"])


def backward_flops(shape):
    """2.5 forwards, exact: the forward's count (4·b·h·s²·d, halved when causal) is even."""
    return forward_flops(shape) * BACKWARD_FLOPS_NUM // BACKWARD_FLOPS_DEN


def reference_slice(shape):
    """(batch entries, heads, dtype) the math-backend reference covers for this shape."""
    scores = shape["seqlen"] ** 2
    heads = min(shape["nhead"], max(1, REF_SCORE_ELEMENTS // scores))
    batch = min(shape["batch"], max(1, REF_SCORE_ELEMENTS // (heads * scores)))
    return batch, heads, "float64" if shape["seqlen"] <= FLOAT64_MAX_SEQLEN else "float32"


def within_tolerance(errors, scales, dtype):
    """Each gradient's max abs error against RTOL of its largest reference element."""
    return all(e <= RTOL[dtype] * s + ATOL for e, s in zip(errors, scales))


def tflops(flops, ms):
    return flops / ms / 1e9


def geomean(values):
    return math.exp(sum(math.log(x) for x in values) / len(values)) if values else None


def graph_timed(row, names=("ours", "cudnn")):
    """Whether every backward time of `names` in the row is a graph replay (not an eager fallback,
    whose time includes launch and Python cost)."""
    return all(row.get(f"{name}_bwd_timing") == "graph" for name in names)


def summarize(rows):
    """Totals over the rows; ratio = ours TFLOP/s over cuDNN's (above 1: ours is faster)."""
    both = [r for r in rows if "ratio_bwd_cudnn" in r]
    graphed = [r for r in both if graph_timed(r)]
    summary = {
        "shapes": len(rows),
        "compared": len(both),
        "geomean_bwd_cudnn": geomean([r["ratio_bwd_cudnn"] for r in both]),
        # Where cuDNN (or ours) could not be captured, its eager time flatters the other side.
        "compared_graph_timed": len(graphed),
        "geomean_bwd_cudnn_graph_timed": geomean([r["ratio_bwd_cudnn"] for r in graphed]),
        "geomean_fwdbwd_cudnn": geomean([r["ratio_fwdbwd_cudnn"] for r in both
                                         if "ratio_fwdbwd_cudnn" in r]),
        "worst_shape": None, "worst_ratio": None,
        "refused": [{"shape": r["shape"], "message": r.get("message", "")}
                    for r in rows if r["status"] == "refused"],
        "errors": [r["shape"] for r in rows if r["status"] == "error"],
        "mismatches": [r["shape"] for r in rows if r.get("ours_agrees") is False
                       or r.get("ours_det_agrees") is False],
        "target": {},
    }
    deterministic = [r for r in rows if "ratio_det_default" in r]
    if deterministic:
        lowest = min(deterministic, key=lambda r: r["ratio_det_default"])
        summary["deterministic"] = {
            "compared": len(deterministic),
            "geomean": geomean([r["ratio_det_default"] for r in deterministic]),
            "lowest_shape": lowest["shape"], "lowest": lowest["ratio_det_default"],
            "below_target": [r["shape"] for r in deterministic
                             if r["ratio_det_default"] < DETERMINISTIC_TARGET],
        }
    if both:
        worst = min(both, key=lambda r: r["ratio_bwd_cudnn"])
        summary["worst_shape"], summary["worst_ratio"] = worst["shape"], worst["ratio_bwd_cudnn"]
    for r in rows:
        if (r["hdim"], r["seqlen"], r["dtype"]) == (TARGET["hdim"], TARGET["seqlen"],
                                                   TARGET["dtype"]) and "ours_bwd_tflops" in r:
            summary["target"]["causal" if r["causal"] else "full"] = r["ours_bwd_tflops"]
    return summary


def format_summary(summary):
    lines = ["summary:"]
    if summary["geomean_bwd_cudnn"] is None:
        lines.append("  no shape ran on both ours and cuDNN")
    else:
        fwdbwd = summary["geomean_fwdbwd_cudnn"]
        lines.append(f"  backward ours/cuDNN: geomean {summary['geomean_bwd_cudnn']:.3f}x over "
                     f"{summary['compared']} shapes (forward+backward "
                     f"{'n/a' if fwdbwd is None else f'{fwdbwd:.3f}x'}); worst "
                     f"{summary['worst_shape']} {summary['worst_ratio']:.3f}x")
        graphed = summary["geomean_bwd_cudnn_graph_timed"]
        if summary["compared_graph_timed"] < summary["compared"]:
            lines.append(f"  graph-timed on both sides: geomean "
                         f"{'n/a' if graphed is None else f'{graphed:.3f}x'} over "
                         f"{summary['compared_graph_timed']} shapes (the others ran eagerly)")
    target = summary["target"]
    where = f"hdim {TARGET['hdim']} seqlen {TARGET['seqlen']} {TARGET['dtype']} backward"
    if target:
        values = ", ".join(f"{mask} {value:.0f}" for mask, value in sorted(target.items(),
                                                                           reverse=True))
        lines.append(f"  {where}: {values} TFLOP/s (target {TARGET['tflops']} on H100)")
    else:
        lines.append(f"  {where}: not in this run (target {TARGET['tflops']} on H100)")
    deterministic = summary.get("deterministic")
    if deterministic:
        below = deterministic["below_target"]
        lines.append(f"  deterministic / default backward: geomean {deterministic['geomean']:.3f}x "
                     f"over {deterministic['compared']} shapes, lowest "
                     f"{deterministic['lowest_shape']} {deterministic['lowest']:.3f}x; "
                     f"{len(below)} below {DETERMINISTIC_TARGET}x (at most 15% slower)"
                     + (f" ({', '.join(below)})" if below else ""))
    refused = summary["refused"]
    lines.append(f"  refused: {len(refused)} shapes")
    by_message = {}
    for entry in refused:
        by_message.setdefault(entry["message"], []).append(entry["shape"])
    for message, shapes in by_message.items():
        lines.append(f"    {', '.join(shapes)}: {message}")
    if summary["errors"]:
        lines.append(f"  failed after a first successful call: {', '.join(summary['errors'])}")
    lines.append(f"  gradients out of tolerance (ours): {len(summary['mismatches'])}"
                 + (f" ({', '.join(summary['mismatches'])})" if summary["mismatches"] else ""))
    return lines


def format_row(row, timing="graph"):
    cells = [f"{row['shape']:<30}"]
    for name in IMPLEMENTATIONS:
        if f"{name}_bwd_tflops" in row:
            check = "" if row.get(f"{name}_agrees", True) else (
                f" MISMATCH dq {row[f'{name}_err_dq']:.3g} dk {row[f'{name}_err_dk']:.3g} "
                f"dv {row[f'{name}_err_dv']:.3g}")
            cells.append(f"{name} bwd {row[f'{name}_bwd_tflops']:6.1f} "
                         f"f+b {row[f'{name}_fwdbwd_tflops']:6.1f}{check}")
        elif name == "ours" and row["status"] == "refused":
            cells.append(f"ours refused: {row.get('message', '')}")
        else:
            cells.append(f"{name} n/a ({row.get(f'{name}_error', 'not run')})")
    if "ratio_bwd_cudnn" in row:
        cells.append(f"x{row['ratio_bwd_cudnn']:.2f} vs cuDNN")
    if "ratio_det_default" in row:
        check = "" if row.get("ours_det_agrees", True) else " MISMATCH"
        cells.append(f"det bwd {row['ours_det_bwd_tflops']:6.1f} "
                     f"x{row['ratio_det_default']:.2f} default{check}")
    elif "ours_det_error" in row:
        cells.append(f"det n/a ({row['ours_det_error']})")
    # Graph capture failed for these: their times include launch and Python cost.
    eager = [f"{name} {kind}" for name in IMPLEMENTATIONS + ("ours_det",)
             for kind in ("fwdbwd", "bwd") if row.get(f"{name}_{kind}_timing") == "events"]
    if eager and timing == "graph":
        cells.append(f"eager: {', '.join(eager)}")
    return " | ".join(cells)


def write_csv(path, rows):
    extra = sorted({key for row in rows for key in row} - set(CSV_FIELDS))
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=CSV_FIELDS + extra, restval="")
        writer.writeheader()
        writer.writerows(rows)


# ---------------------------------------------------------------------------------------------
# The GPU run


def first_line(error):
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}"[:300]


def reference_gradients(torch, q, k, v, do, causal, batch, heads, dtype):
    """dq, dk, dv of SDPA's math backend for q[:batch, :, :heads] etc., in `dtype`, laid out
    [batch, seq, heads, dim] like the inputs. Plain fp32 matmuls: PyTorch leaves TF32 off."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    leaves = [x[:batch, :, :heads].transpose(1, 2).to(dtype).requires_grad_() for x in (q, k, v)]
    with sdpa_kernel([SDPBackend.MATH]):
        out = torch.nn.functional.scaled_dot_product_attention(*leaves, is_causal=causal)
    grad_out = do[:batch, :, :heads].transpose(1, 2).to(dtype)
    return [g.transpose(1, 2) for g in torch.autograd.grad(out, leaves, grad_out)]


def check_gradients(torch, row, name, grads, reference, ref_batch, ref_heads):
    errors, scales = [], []
    for axis, grad, ref in zip("qkv", grads, reference):
        part = grad[:ref_batch, :, :ref_heads].to(ref.dtype)
        errors.append((part - ref).abs().max().item())
        scales.append(ref.abs().max().item())
        row[f"{name}_err_d{axis}"] = errors[-1]
    # The slice checks values; NaN or inf anywhere else in the full gradients fails too.
    finite = all(bool(torch.isfinite(g).all()) for g in grads)
    row[f"{name}_agrees"] = finite and within_tolerance(errors, scales, row["dtype"])


def captured_forward(torch, forward):
    """forward()'s output with its autograd nodes recorded on the stream CUDA-graph capture
    uses: backward nodes run on their forward's stream, so a captured autograd.grad works only
    when the forward ran there (torch.cuda.make_graphed_callables does the same). Returns
    (output, graph to keep alive: the output lives in its pool); eager where capture fails."""
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            out = forward()
        graph.replay()
        return out, graph
    except Exception:  # noqa: BLE001 - any capture failure: the backward is then timed eagerly
        torch.cuda.synchronize()
        return forward(), None


def time_pair(torch, row, name, fwd_bwd, bwd, shape, args):
    fwd_flops = row["fwd_flops"]
    ms, how = compare.time_ms(torch, fwd_bwd, args.warmup, args.repeat, args.timing)
    row[f"{name}_fwdbwd_ms"], row[f"{name}_fwdbwd_timing"] = ms, how
    row[f"{name}_fwdbwd_tflops"] = tflops(fwd_flops + backward_flops(shape), ms)
    ms, how = compare.time_ms(torch, bwd, args.warmup, args.repeat, args.timing)
    row[f"{name}_bwd_ms"], row[f"{name}_bwd_timing"] = ms, how
    row[f"{name}_bwd_tflops"] = tflops(backward_flops(shape), ms)


def run_ours(torch, tilefmha, row, shape, q, k, v, do, reference, args):
    causal = shape["causal"]
    deterministic = args.deterministic

    def fwd_bwd():
        o, lse = tilefmha.attention(q, k, v, causal=causal, return_lse=True)
        return tilefmha.attention_backward(q, k, v, o, lse, do, causal=causal,
                                           deterministic=deterministic)

    try:
        grads = fwd_bwd()  # compiles the kernels; the GPU backward's refusals raise here
    except Exception as error:  # noqa: BLE001 - ValueError, NotImplementedError, RuntimeError
        row["status"], row["message"] = "refused", first_line(error)
        return
    check_gradients(torch, row, "ours", grads, reference, row["ref_batch"], row["ref_heads"])
    del grads
    o, lse = tilefmha.attention(q, k, v, causal=causal, return_lse=True)
    time_pair(torch, row, "ours", fwd_bwd,
              lambda: tilefmha.attention_backward(q, k, v, o, lse, do, causal=causal,
                                                  deterministic=deterministic), shape, args)
    if args.deterministic_too:
        run_ours_deterministic(torch, tilefmha, row, shape, q, k, v, o, lse, do, reference, args)


# Rounds of the deterministic-against-default comparison. A lone reading of either mode moved by
# up to 10% with its place in the run (two modes planning the same kernel read 1.09x apart,
# docs/performance.md), so the modes alternate and the ratio takes each mode's median.
DETERMINISTIC_ROUNDS = 3


def run_ours_deterministic(torch, tilefmha, row, shape, q, k, v, o, lse, do, reference, args):
    """Our deterministic backward alone on the same forward, checked and timed beside the
    default one, the two alternating: row["ratio_det_default"] is the deterministic median
    TFLOP/s over the default's."""

    def backward(deterministic):
        return lambda: tilefmha.attention_backward(q, k, v, o, lse, do, causal=shape["causal"],
                                                   deterministic=deterministic)

    try:
        check_gradients(torch, row, "ours_det", backward(True)(), reference, row["ref_batch"],
                        row["ref_heads"])
        det_ms, default_ms = [], [row["ours_bwd_ms"]]
        for round_index in range(DETERMINISTIC_ROUNDS):
            ms, how = compare.time_ms(torch, backward(True), args.warmup, args.repeat,
                                      args.timing)
            det_ms.append(ms)
            if round_index + 1 < DETERMINISTIC_ROUNDS:
                default_ms.append(compare.time_ms(torch, backward(False), args.warmup,
                                                  args.repeat, args.timing)[0])
    except Exception as error:  # noqa: BLE001 - report it in the row, keep the sweep going
        row["ours_det_error"] = first_line(error)
        torch.cuda.synchronize()
        return
    det_median, default_median = median(det_ms), median(default_ms)
    row["ours_det_rounds_ms"] = " ".join(f"{ms:.4f}" for ms in det_ms)
    row["ours_default_rounds_ms"] = " ".join(f"{ms:.4f}" for ms in default_ms)
    row["ours_det_bwd_ms"], row["ours_det_bwd_timing"] = det_median, how
    row["ours_det_bwd_tflops"] = tflops(backward_flops(shape), det_median)
    row["ratio_det_default"] = default_median / det_median


def median(values):
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def run_sdpa(torch, row, name, shape, q, k, v, do, reference, args):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backend = {"cudnn": SDPBackend.CUDNN_ATTENTION, "fa2": SDPBackend.FLASH_ATTENTION}[name]
    # New leaves sharing q, k, v's memory (tilefmha cannot take tensors that require grad);
    # SDPA reads [batch, head, seq, dim] views, as compare_sdpa passes them.
    leaves = [x.detach().requires_grad_() for x in (q, k, v)]
    views = [x.transpose(1, 2) for x in leaves]
    do_view = do.transpose(1, 2)

    def forward():
        with sdpa_kernel([backend]):
            return torch.nn.functional.scaled_dot_product_attention(*views,
                                                                    is_causal=shape["causal"])

    def fwd_bwd():
        return torch.autograd.grad(forward(), leaves, do_view)

    try:
        grads = fwd_bwd()
    except RuntimeError as error:  # the backend refuses this shape, dtype or card
        row[f"{name}_error"] = first_line(error)
        return
    check_gradients(torch, row, name, grads, reference, row["ref_batch"], row["ref_heads"])
    del grads
    out, graph = captured_forward(torch, forward)  # `graph` holds out's memory until we return
    time_pair(torch, row, name, fwd_bwd,
              lambda: torch.autograd.grad(out, leaves, do_view, retain_graph=True), shape, args)


def run_shape(torch, tilefmha, shape, args):
    row = dict(shape, shape=shape_label(shape), status="ok", fwd_flops=forward_flops(shape))
    ref_batch, ref_heads, ref_dtype = reference_slice(shape)
    row.update(ref_batch=ref_batch, ref_heads=ref_heads, ref_dtype=ref_dtype)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[shape["dtype"]]
    generator = torch.Generator(device="cuda").manual_seed(0)
    q, k, v, do = (torch.randn(shape["batch"], shape["seqlen"], shape["nhead"], shape["hdim"],
                               device="cuda", dtype=dtype, generator=generator)
                   for _ in range(4))
    reference = reference_gradients(torch, q, k, v, do, shape["causal"], ref_batch, ref_heads,
                                    getattr(torch, ref_dtype))
    torch.cuda.empty_cache()  # the math backend's score matrices are gone; give their memory back
    for name in IMPLEMENTATIONS:
        try:
            if name == "ours":
                run_ours(torch, tilefmha, row, shape, q, k, v, do, reference, args)
            else:
                run_sdpa(torch, row, name, shape, q, k, v, do, reference, args)
        except Exception as error:  # noqa: BLE001 - a failure after the first call: keep going
            row[f"{name}_error"] = first_line(error)
            if name == "ours":
                row["status"], row["message"] = "error", row["ours_error"]
            torch.cuda.synchronize()
    for other in compare.BACKENDS:
        for kind in ("bwd", "fwdbwd"):
            if f"ours_{kind}_tflops" in row and f"{other}_{kind}_tflops" in row:
                row[f"ratio_{kind}_{other}"] = (row[f"ours_{kind}_tflops"]
                                                / row[f"{other}_{kind}_tflops"])
    return row


def main(argv=None):
    args = parse_args(argv)
    try:
        sweep = json.loads(args.sweep.read_text())
        shapes = compare.expand_shapes(sweep, args.hdim, args.seqlen, args.causal, args.dtype)
    except (OSError, ValueError, KeyError) as error:
        print(f"compare_backward: {args.sweep}: {error}", file=sys.stderr)
        return 2
    if args.list_shapes:
        for shape in shapes:
            print(shape_label(shape))
        print(f"{len(shapes)} shapes")
        return 0
    torch, reason = compare.torch_or_reason()
    if torch is None:
        print(f"compare_backward: needs PyTorch with CUDA and a GPU: {reason}", file=sys.stderr)
        return 2
    try:
        import tilefmha
    except ImportError as error:
        print(f"compare_backward: cannot import tilefmha ({error}); build the package for this "
              "Python (docs/python.md) and set PYTHONPATH=BUILD/python", file=sys.stderr)
        return 2
    device = torch.cuda.get_device_name()
    print(f"compare_backward: {device}, PyTorch {torch.__version__}, {len(shapes)} shapes, "
          f"TFLOP/s (backward = 2.5 forwards) at the median of {args.repeat} {args.timing} "
          "timings; bwd = backward alone, f+b = forward + backward; x = ours/cuDNN backward"
          + ("; ours deterministic" if args.deterministic else "")
          + ("; det = ours deterministic backward alone" if args.deterministic_too else ""),
          flush=True)
    rows = []
    for shape in shapes:
        row = run_shape(torch, tilefmha, shape, args)
        rows.append(row)
        print(format_row(row, args.timing), flush=True)
        torch.cuda.empty_cache()
    summary = summarize(rows)
    for line in format_summary(summary):
        print(line)
    if args.csv:
        write_csv(args.csv, rows)
    if args.json:
        args.json.write_text(json.dumps({"device": device, "torch": torch.__version__,
                                         "timing": args.timing, "rows": rows,
                                         "summary": summary}, indent=1) + "\n")
    return 1 if summary["mismatches"] or summary["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
