#!/usr/bin/env python3
"""FP8 (e4m3) attention forward: speed beside bf16 and the card's fp8 matmul, and accuracy.

fwd: e4m3 Q, K, V with per-tensor descales (--descale per_block: [batch, heads, blocks] ones),
bf16 O, on the FA3 protocol's long shapes: 16k tokens (2 x 8k, 1 x 16k), heads = 2048 / hdim
(16 at hdim 128, 8 at 256), causal and not. Each row gives fp8 TFLOP/s (FLOPs =
4·b·h·sq·sk·d, halved when causal), our bf16 forward on the same shape, their ratio, and the
share of the fp8 matmul ceiling measured in the same run: torch._scaled_mm on 8192^3 e4m3
operands with bf16 output (fast accumulation), 2·8192^3 FLOPs.

accuracy: one shape per head dim (b1 h16 d128 and b1 h8 d256, 4096 tokens, non-causal).
Inputs are float32 normal values, quantized to e4m3 with power-of-two per-tensor descales, so
that the dequantized values are exact in bf16. Against a float64 reference on the original
values, the error of O (RMSE and max abs) splits into
  quantization: float64 reference on the dequantized inputs vs on the originals;
  kernel:       fp8 kernel vs float64 reference on the dequantized inputs;
beside our bf16 kernel on the (same, exact) dequantized inputs. The kernel's error is set
against what rounding P to e4m3 explains: e4m3 has 3 mantissa bits, a relative rounding of at
most 2^-4 per probability (absolute 2^-10 below its smallest normal, 2^-6), so per element
|dO| <= sum_j max(2^-4 p_j, 2^-10 / l) |v_j|, p_j = u_j / l with u_j = exp(s_j - max) (the
bound, from the reference's probabilities), and for independent roundings its RMS is about
2^-4 / sqrt(3) · sqrt(sum_j p_j^2 v_j^2) (the estimate).

Timing: CUDA events around each call (--timing graph: around CUDA-graph replays), warm-ups,
median of repeats.

    PYTHONPATH=build/python python3 bench/fp8_bench.py --json fp8.json
    PYTHONPATH=build/python python3 bench/fp8_bench.py --only accuracy
    python3 bench/fp8_bench.py --list-shapes        # no torch or GPU needed

Needs PyTorch with CUDA and a GPU for the run; without them it says so and exits 2. Importing
this module needs neither (tests/python/test_fp8_bench.py runs on a CPU host). A shape the
engine refuses in fp8 (no kernel yet) reads "refused: <message>" and the run goes on.
"""

import argparse
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

TOTAL_TOKENS, HIDDEN = 16384, 2048  # the FA3 protocol of bench/fa3_sweep.json
FWD_HDIMS, FWD_SEQLENS = (128, 256), (8192, 16384)
ACCURACY_SHAPES = ({"batch": 1, "nhead": 16, "seqlen": 4096, "hdim": 128, "causal": False},
                   {"batch": 1, "nhead": 8, "seqlen": 4096, "hdim": 256, "causal": False})
CEILING_SIZE = 8192  # the _scaled_mm ceiling: M = N = K
E4M3_MAX = 448.0
P_ROUNDING = 2.0**-4  # e4m3: 3 mantissa bits, half a unit in the last place relative
BF16_ROUNDING = 2.0**-8  # O's own rounding to bf16, relative
FP32_SLACK = 1e-4  # the kernel's fp32 scores and softmax, absolute on O
BLOCK = 128
# DESIGN §10: the fp8 forward target at long sequences on an H100.
TARGET_TFLOPS = 1200
REFERENCE_HEADS_PER_CHUNK = 2  # float64 score matrices per step: 2 x 4096^2 x 8 B = 256 MiB


# ---------------------------------------------------------------------------------------------
# Flags, shapes, FLOPs, bounds and the report (pure Python: tested on CPU hosts)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=("fwd", "accuracy"), help="one part (default both)")
    parser.add_argument("--hdim", type=compare.parse_int_list, help="head dims (128, 256)")
    parser.add_argument("--seqlen", type=compare.parse_int_list, help="fwd lengths (8192,16384)")
    parser.add_argument("--causal", type=compare.parse_causal, help="true, false or both")
    parser.add_argument("--descale", choices=("per_tensor", "per_block"), default="per_tensor",
                        help="descales of the timed fp8 calls (default per_tensor)")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--timing", choices=("events", "graph"), default="events",
                        help="events: CUDA events around each call (default); graph: around "
                             "CUDA-graph replays, GPU time alone")
    parser.add_argument("--json", type=pathlib.Path, help="also write rows and summary here")
    parser.add_argument("--list-shapes", action="store_true", help="print the shapes and exit")
    args = parser.parse_args(argv)
    if args.warmup < 0 or args.repeat < 1:
        parser.error(f"--warmup must be >= 0 and --repeat >= 1 (got {args.warmup}, {args.repeat})")
    if args.hdim and any(HIDDEN % d for d in args.hdim):
        parser.error(f"--hdim values must divide the hidden size {HIDDEN} (got {args.hdim})")
    return args


def fwd_shapes(hdims=None, seqlens=None, causals=None):
    """The timed shapes: 16k tokens per shape, heads = 2048 / hdim."""
    return [{"batch": max(1, TOTAL_TOKENS // seqlen), "nhead": HIDDEN // hdim, "seqlen": seqlen,
             "hdim": hdim, "causal": causal}
            for hdim in hdims or FWD_HDIMS for seqlen in seqlens or FWD_SEQLENS
            for causal in (causals if causals is not None else (False, True))]


def accuracy_shapes(hdims=None):
    return [dict(shape) for shape in ACCURACY_SHAPES if not hdims or shape["hdim"] in hdims]


def label(shape):
    return (f"d{shape['hdim']} s{shape['seqlen']} b{shape['batch']} h{shape['nhead']} "
            f"{'causal' if shape['causal'] else 'full'}")


def forward_flops(shape):
    """4·b·h·sq·sk·d, halved when causal (DESIGN §9, as FlashAttention counts)."""
    return compare.attention_flops(shape["batch"], shape["nhead"], shape["seqlen"],
                                   shape["seqlen"], shape["hdim"], shape["causal"])


def matmul_flops(size=CEILING_SIZE):
    return 2 * size**3


def tflops(flops, ms):
    return flops / ms / 1e9


def power_of_two_descale(amax):
    """The smallest power of two d with amax / d <= 448 (e4m3's largest value): dequantized
    codes (4 significant bits) times d stay exact in bf16 and float32."""
    if amax <= 0:
        return 1.0
    return 2.0 ** math.ceil(math.log2(amax / E4M3_MAX))


def geomean(values):
    return math.exp(sum(math.log(x) for x in values) / len(values)) if values else None


def summarize(rows, ceiling):
    timed = [r for r in rows if "fp8_tflops" in r]
    both = [r for r in timed if "bf16_tflops" in r]
    long_rows = [r for r in timed if r["seqlen"] == max(FWD_SEQLENS)]
    return {
        "shapes": len(rows),
        "timed": len(timed),
        "best_fp8_tflops": max((r["fp8_tflops"] for r in timed), default=None),
        "best_fp8_shape": max(timed, key=lambda r: r["fp8_tflops"])["shape"] if timed else None,
        "geomean_fp8_over_bf16": geomean([r["fp8_tflops"] / r["bf16_tflops"] for r in both]),
        "long_below_target": [r["shape"] for r in long_rows if r["fp8_tflops"] < TARGET_TFLOPS],
        "ceiling_tflops": ceiling.get("tflops"),
        "refused": [{"shape": r["shape"], "message": r["fp8_error"]}
                    for r in rows if "fp8_error" in r],
    }


def format_summary(summary, accuracy):
    lines = ["summary:"]
    ceiling = summary["ceiling_tflops"]
    lines.append("  fp8 matmul ceiling (_scaled_mm 8192^3 e4m3 -> bf16): "
                 + (f"{ceiling:.0f} TFLOP/s" if ceiling else "not measured"))
    if summary["timed"]:
        ratio = summary["geomean_fp8_over_bf16"]
        lines.append(f"  fp8 forward: best {summary['best_fp8_tflops']:.0f} TFLOP/s "
                     f"({summary['best_fp8_shape']}), fp8/bf16 geomean "
                     f"{'n/a' if ratio is None else f'{ratio:.2f}x'} over {summary['timed']} "
                     "shapes")
        below = summary["long_below_target"]
        lines.append(f"  seqlen {max(FWD_SEQLENS)}: {len(below)} shapes below the "
                     f"{TARGET_TFLOPS} TFLOP/s target" + (f" ({', '.join(below)})" if below
                                                          else ""))
    else:
        lines.append("  fp8 forward: no shape timed")
    refused = summary["refused"]
    if refused:
        by_message = {}
        for entry in refused:
            by_message.setdefault(entry["message"], []).append(entry["shape"])
        lines.append(f"  fp8 refused: {len(refused)} shapes")
        lines.extend(f"    {', '.join(shapes)}: {message}"
                     for message, shapes in by_message.items())
    for report in accuracy:
        lines.append(f"  accuracy {report['shape']}: " + (
            f"fp8 kernel error {'within' if report['fp8_within_bound'] else 'BEYOND'} the "
            "P-rounding bound" if "fp8_within_bound" in report
            else f"fp8 not run ({report.get('fp8_error', 'skipped')})"))
    return lines


def format_row(row):
    cells = [f"{row['shape']:<28}"]
    if "fp8_tflops" in row:
        cells.append(f"fp8 {row['fp8_tflops']:7.1f}")
    else:
        cells.append(f"fp8 refused: {row.get('fp8_error', 'not run')}")
    if "bf16_tflops" in row:
        cells.append(f"bf16 {row['bf16_tflops']:7.1f}")
    elif "bf16_error" in row:
        cells.append(f"bf16 n/a ({row['bf16_error']})")
    if "fp8_tflops" in row and "bf16_tflops" in row:
        cells.append(f"fp8/bf16 {row['fp8_tflops'] / row['bf16_tflops']:.2f}x")
    if "fp8_pct_ceiling" in row:
        cells.append(f"{row['fp8_pct_ceiling']:.0f}% of fp8 matmul")
    if row.get("fp8_finite") is False:
        cells.append("NON-FINITE fp8 O")
    return " | ".join(cells)


def error_line(name, stats):
    return f"    {name:<44} RMSE {stats['rmse']:.3e}  max abs {stats['max_abs']:.3e}"


def format_accuracy(report):
    """The accuracy table of one shape (report: as accuracy_report returns it)."""
    lines = [f"accuracy {report['shape']} (descales q {report['descales'][0]:g}, k "
             f"{report['descales'][1]:g}, v {report['descales'][2]:g}; |O| RMS "
             f"{report['o_rms']:.3g}, max {report['o_max']:.3g}):",
             error_line("quantization (f64 on dequantized vs originals)",
                        report["quantization"])]
    if "fp8_kernel" in report:
        lines.append(error_line("fp8 kernel (vs f64 on dequantized)", report["fp8_kernel"]))
        lines.append(error_line("fp8 total (vs f64 on originals)", report["fp8_total"]))
    else:
        lines.append(f"    fp8 kernel: {report.get('fp8_error', 'not run')}")
    if "bf16_kernel" in report:
        lines.append(error_line("bf16 kernel on dequantized (vs f64 on dequantized)",
                                report["bf16_kernel"]))
        lines.append(error_line("bf16 kernel on dequantized (vs f64 on originals)",
                                report["bf16_total"]))
    bound = report["p_rounding"]
    lines.append(f"    P rounded to e4m3 (relative {P_ROUNDING:g} per probability) explains: max "
                 f"abs <= {bound['max_abs_bound']:.3e} (sum_j max(2^-4 p_j, 2^-10 / l) |v_j|, "
                 f"largest element), RMSE ~ {bound['rmse_estimate']:.3e} (independent "
                 "roundings)")
    if "fp8_within_bound" in report:
        lines.append(f"    fp8 kernel error within that bound + bf16 rounding everywhere: "
                     f"{'yes' if report['fp8_within_bound'] else 'NO'} (worst excess "
                     f"{report['fp8_worst_excess']:.3e})")
    return lines


# ---------------------------------------------------------------------------------------------
# The GPU run


def first_line(error):
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}"[:300]


def quantize(torch, x, descale):
    """e4m3 codes of x / descale (descale a float, or factors broadcasting to x)."""
    return (x / descale).to(torch.float8_e4m3fn)


def block_descales(torch, x):
    """Per-block descales [batch, heads, ceil(seq / 128)] of x [batch, seq, heads, dim]: the
    power of two that fits each block's largest magnitude into e4m3. Returns (descales,
    per-token factors [batch, seq, heads, 1])."""
    batch, seq, heads, _ = x.shape
    blocks = -(-seq // BLOCK)
    padded = torch.zeros(batch, blocks * BLOCK, heads, device=x.device)
    padded[:, :seq] = x.abs().amax(dim=3)
    amax = padded.view(batch, blocks, BLOCK, heads).amax(dim=2).transpose(1, 2).clamp_min(1e-30)
    descales = torch.exp2(torch.ceil(torch.log2(amax / E4M3_MAX))).float().contiguous()
    factors = descales.repeat_interleave(BLOCK, dim=2)[:, :, :seq].transpose(1, 2)[..., None]
    return descales, factors


def fp8_inputs(torch, q, k, v, kind):
    """(codes q, k, v, descale keywords) of float32 q, k, v under per-tensor or per-block
    power-of-two descales."""
    if kind == "per_tensor":
        descales = [power_of_two_descale(float(x.abs().max())) for x in (q, k, v)]
        codes = [quantize(torch, x, d) for x, d in zip((q, k, v), descales)]
    else:
        pairs = [block_descales(torch, x) for x in (q, k, v)]
        codes = [quantize(torch, x, factors) for x, (_, factors) in zip((q, k, v), pairs)]
        descales = [descale for descale, _ in pairs]
    return codes, dict(zip(("q_descale", "k_descale", "v_descale"), descales))


def measure_ceiling(torch, warmup, repeat, timing):
    """torch._scaled_mm on CEILING_SIZE^3 e4m3 operands (B column-major, as cuBLASLt takes
    it), bf16 out, fast accumulation: the card's fp8 tensor-core rate in this process."""
    size = CEILING_SIZE
    generator = torch.Generator(device="cuda").manual_seed(1)
    a = torch.randn(size, size, device="cuda", generator=generator).to(torch.float8_e4m3fn)
    b = torch.randn(size, size, device="cuda", generator=generator).to(torch.float8_e4m3fn).t()
    one = torch.ones((), device="cuda")

    def call():
        return torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16,
                                use_fast_accum=True)

    try:
        call()
        ms, how = compare.time_ms(torch, call, warmup, repeat, timing)
    except Exception as error:  # noqa: BLE001 - no _scaled_mm on this torch or card
        return {"error": first_line(error)}
    return {"size": size, "ms": ms, "timing": how, "tflops": tflops(matmul_flops(size), ms)}


def run_fwd_shape(torch, tilefmha, shape, args, ceiling):
    row = dict(shape, shape=label(shape), flops=forward_flops(shape), descale=args.descale)
    b, h, s, d, causal = (shape[key] for key in ("batch", "nhead", "seqlen", "hdim", "causal"))
    generator = torch.Generator(device="cuda").manual_seed(s + d)
    originals = [torch.randn(b, s, h, d, device="cuda", generator=generator) for _ in range(3)]
    (q, k, v), descales = fp8_inputs(torch, *originals, args.descale)
    del originals
    try:
        o = tilefmha.attention(q, k, v, causal=causal, **descales)  # compiles on first use
        row["fp8_finite"] = bool(torch.isfinite(o).all())
        del o
        ms, row["fp8_timing"] = compare.time_ms(
            torch, lambda: tilefmha.attention(q, k, v, causal=causal, **descales), args.warmup,
            args.repeat, args.timing)
        row["fp8_ms"], row["fp8_tflops"] = ms, tflops(row["flops"], ms)
        if ceiling.get("tflops"):
            row["fp8_pct_ceiling"] = 100 * row["fp8_tflops"] / ceiling["tflops"]
    except Exception as error:  # noqa: BLE001 - the engine refuses fp8 here (no kernel yet)
        row["fp8_error"] = first_line(error)
        torch.cuda.synchronize()
    # bf16 on the same shape: the dequantized values, exact in bf16 (power-of-two descales).
    deq = [dequantize(torch, x, descales[name]).to(torch.bfloat16)
           for x, name in zip((q, k, v), ("q_descale", "k_descale", "v_descale"))]
    try:
        ms, row["bf16_timing"] = compare.time_ms(
            torch, lambda: tilefmha.attention(*deq, causal=causal), args.warmup, args.repeat,
            args.timing)
        row["bf16_ms"], row["bf16_tflops"] = ms, tflops(row["flops"], ms)
    except Exception as error:  # noqa: BLE001 - keep the fp8 numbers
        row["bf16_error"] = first_line(error)
        torch.cuda.synchronize()
    return row


def dequantize(torch, codes, descale):
    """float32 values of e4m3 codes under a per-tensor descale (float) or per-block descales
    [batch, heads, blocks] (codes [batch, seq, heads, dim])."""
    values = codes.float()
    if torch.is_tensor(descale):
        seq = codes.shape[1]
        descale = descale.repeat_interleave(BLOCK, dim=2)[:, :, :seq].transpose(1, 2)[..., None]
    return values * descale


def reference(torch, q, k, v, causal, bounds=False):
    """float64 attention of [batch, seq, heads, dim] q, k, v (any float dtype), a few heads at a
    time: O [batch, seq, heads, dv] float64 on the GPU, and with `bounds` also, per element,
    the bound and the RMS estimate of what rounding P to e4m3 explains (p_rounding_terms)."""
    batch, seq, heads, dim = q.shape
    scale = 1.0 / math.sqrt(dim)
    shape = (batch, seq, heads, v.shape[3])
    o = torch.empty(shape, dtype=torch.float64, device="cuda")
    bound, variance = (torch.empty(shape, dtype=torch.float64, device="cuda")
                       if bounds else None for _ in range(2))
    mask = None
    if causal:
        mask = torch.ones(seq, k.shape[1], dtype=torch.bool, device="cuda").tril()
    for bi in range(batch):
        for h0 in range(0, heads, REFERENCE_HEADS_PER_CHUNK):
            heads_here = slice(h0, min(heads, h0 + REFERENCE_HEADS_PER_CHUNK))
            qh, kh, vh = (x[bi, :, heads_here].double().transpose(0, 1) for x in (q, k, v))
            scores = (qh @ kh.transpose(1, 2)) * scale
            if mask is not None:
                scores = scores.masked_fill(~mask, float("-inf"))
            # Unnormalized probabilities u = exp(s - max) in (0, 1], as the kernel rounds them.
            u = torch.exp(scores - scores.amax(dim=-1, keepdim=True))
            del scores
            total = u.sum(dim=-1, keepdim=True)
            o[bi, :, heads_here] = ((u @ vh) / total).transpose(0, 1)
            if bounds:
                terms = p_rounding_terms(torch, u, total, vh)
                bound[bi, :, heads_here], variance[bi, :, heads_here] = (
                    t.transpose(0, 1) for t in terms)
            del u
    return o, bound, variance


def p_rounding_terms(torch, u, total, v):
    """Per element of O: the largest error rounding each u_j to e4m3 can cause, sum_j
    max(2^-4 u_j, 2^-10) |v_j| / l (2^-10: half the smallest subnormal step, for u below the
    smallest normal 2^-6; the kernel rounds u relative to a running maximum, which only makes
    its u larger), and the variance of independent uniform relative roundings,
    (2^-4)^2 / 3 * sum_j u_j^2 v_j^2 / l^2."""
    step = torch.clamp(u * P_ROUNDING, min=2.0**-10)
    bound = (step @ v.abs()) / total
    variance = (P_ROUNDING**2 / 3) * ((u * u) @ (v * v)) / (total * total)
    return bound, variance


def error_stats(torch, got, want):
    diff = got.double() - want
    return {"rmse": float(diff.square().mean().sqrt()), "max_abs": float(diff.abs().max())}


def accuracy_report(torch, tilefmha, shape):
    b, h, s, d, causal = (shape[key] for key in ("batch", "nhead", "seqlen", "hdim", "causal"))
    generator = torch.Generator(device="cuda").manual_seed(11 * d)
    originals = [torch.randn(b, s, h, d, device="cuda", generator=generator) for _ in range(3)]
    (q, k, v), descales = fp8_inputs(torch, *originals, "per_tensor")
    deq = [dequantize(torch, x, descales[name])
           for x, name in zip((q, k, v), ("q_descale", "k_descale", "v_descale"))]
    exact, _, _ = reference(torch, *originals, causal)
    on_deq, bound, variance = reference(torch, *deq, causal, bounds=True)
    report = {"shape": label(shape), **shape, "descales": list(descales.values()),
              "o_rms": float(exact.square().mean().sqrt()), "o_max": float(exact.abs().max()),
              "quantization": error_stats(torch, on_deq, exact),
              "p_rounding": {"max_abs_bound": float(bound.max()),
                             "rmse_estimate": float(variance.mean().sqrt())}}
    try:
        o = tilefmha.attention(q, k, v, causal=causal, **descales)
        report["fp8_kernel"] = error_stats(torch, o, on_deq)
        report["fp8_total"] = error_stats(torch, o, exact)
        # Per element: the P-rounding bound, O's own rounding to bf16, and 1e-4 for the fp32
        # arithmetic of the scores and the softmax (errors near 1e-6 in the logits).
        excess = ((o.double() - on_deq).abs() - bound - BF16_ROUNDING * on_deq.abs()
                  - FP32_SLACK)
        report["fp8_worst_excess"] = float(excess.max())
        report["fp8_within_bound"] = report["fp8_worst_excess"] <= 0
    except Exception as error:  # noqa: BLE001 - the engine refuses fp8 here (no kernel yet)
        report["fp8_error"] = first_line(error)
        torch.cuda.synchronize()
    o_bf16 = tilefmha.attention(*(x.to(torch.bfloat16) for x in deq), causal=causal)
    report["bf16_kernel"] = error_stats(torch, o_bf16, on_deq)
    report["bf16_total"] = error_stats(torch, o_bf16, exact)
    return report


def main(argv=None):
    args = parse_args(argv)
    shapes = fwd_shapes(args.hdim, args.seqlen, args.causal) if args.only != "accuracy" else []
    checks = accuracy_shapes(args.hdim) if args.only != "fwd" else []
    if args.list_shapes:
        for shape in shapes:
            print(f"fwd {label(shape)}")
        for shape in checks:
            print(f"accuracy {label(shape)}")
        return 0
    torch, reason = compare.torch_or_reason()
    if torch is None:
        print(f"fp8_bench: needs PyTorch with CUDA and a GPU: {reason}", file=sys.stderr)
        return 2
    try:
        import tilefmha
    except ImportError as error:
        print(f"fp8_bench: cannot import tilefmha ({error}); build the package for this Python "
              "(docs/python.md) and set PYTHONPATH=BUILD/python", file=sys.stderr)
        return 2
    device = torch.cuda.get_device_name()
    print(f"fp8_bench: {device}, PyTorch {torch.__version__}; TFLOP/s at the median of "
          f"{args.repeat} {args.timing} timings; fp8 = e4m3 Q/K/V ({args.descale}) -> bf16 O",
          flush=True)
    ceiling = measure_ceiling(torch, args.warmup, args.repeat, args.timing) if shapes else {}
    if shapes:
        print("fp8 matmul ceiling: " + (f"{ceiling['tflops']:.0f} TFLOP/s (_scaled_mm "
                                        f"{CEILING_SIZE}^3)" if "tflops" in ceiling
                                        else ceiling["error"]), flush=True)
    rows = []
    for shape in shapes:
        rows.append(run_fwd_shape(torch, tilefmha, shape, args, ceiling))
        print(format_row(rows[-1]), flush=True)
        torch.cuda.empty_cache()
    reports = []
    for shape in checks:
        reports.append(accuracy_report(torch, tilefmha, shape))
        for line in format_accuracy(reports[-1]):
            print(line)
        torch.cuda.empty_cache()
    summary = summarize(rows, ceiling)
    for line in format_summary(summary, reports):
        print(line)
    if args.json:
        args.json.write_text(json.dumps({"device": device, "torch": torch.__version__,
                                         "timing": args.timing, "ceiling": ceiling, "rows": rows,
                                         "accuracy": reports, "summary": summary},
                                        indent=1) + "\n")
    failed = any(r.get("fp8_finite") is False for r in rows) or any(
        r.get("fp8_within_bound") is False for r in reports)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
