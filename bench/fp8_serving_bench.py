#!/usr/bin/env python3
"""FP8 serving: paged decode and paged batch prefill over an e4m3 cache beside the same calls
over a bf16 cache.

decode: one query token per sequence against a paged K/V cache (vLLM block table over a
shuffled page pool), the shapes of bench/serving_sweep.json's decode section. The fp8 call
reads half the cache bytes; the row gives both times and the fp8 speedup (the issue's target:
at least 1.8x). prefill: packed prompts against their paged cache, causal (bottom-right),
serving_sweep.json's prefill section; TFLOP/s of both (target at page 16: 1000 for fp8).
append: the quantizing append (bf16 new tokens into an e4m3 page-16 pool with per-page scales
it sets) beside the bf16 append into a bf16 pool, serving_sweep.json's paged append shapes; the
fp8 row's bytes (bf16 new K and V read, e4m3 codes written) against the card's copy bandwidth.
Q, K and V are e4m3 codes with per-tensor descales; O is bf16. Each fp8 output is checked
against the bf16 call on the dequantized values (exact in bf16: power-of-two descales), within
the P-rounding bound 2^-4 max|V| (see tests/fwd_sm90_fp8_gpu_test.cpp).

    PYTHONPATH=build/python python3 bench/fp8_serving_bench.py [--only decode|prefill|append]
        [--json F]
    python3 bench/fp8_serving_bench.py --list-shapes      # no torch or GPU needed

Timing: CUDA-graph replays (GPU time alone), median of repeats.
"""

import argparse
import importlib.util
import json
import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent


def _load(name):
    spec = importlib.util.spec_from_file_location(name, HERE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


compare = _load("compare_sdpa")
serving = _load("serving_bench")
decode_sweep = _load("decode_sweep")
fp8 = _load("fp8_bench")

DECODE_SPEEDUP_TARGET = 1.8
PREFILL_TFLOPS_TARGET = 1000
P_ROUNDING = 2.0**-4


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=("decode", "prefill", "append"),
                        help="one part (default all)")
    parser.add_argument("--sweep", type=pathlib.Path, default=HERE / "serving_sweep.json")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--json", type=pathlib.Path, help="also write the rows here")
    parser.add_argument("--list-shapes", action="store_true", help="print the shapes and exit")
    return parser.parse_args(argv)


def shapes(args):
    sweep = serving.load_sweep(args.sweep)
    decode = serving.decode_shapes(sweep) if args.only in (None, "decode") else []
    # Pages of 1 key stay on the 16-bit portable kernels (sm90_ws reads pages of 8 or more).
    decode = [s for s in decode if s["page_size"] >= 16]
    prefill = serving.prefill_shapes(sweep) if args.only in (None, "prefill") else []
    # Quantizing appends write page pools (their scales are per page).
    append = [dict(s, bytes=s["batch"] * s["seqlen_knew"] * s["nhead_k"] * s["hdim"] * 2 * 3)
              for s in serving.append_shapes(sweep) if s["page_size"]]
    return decode + prefill + (append if args.only in (None, "append") else [])


def to_fp8(torch, *tensors):
    """e4m3 codes of bf16 tensors under power-of-two per-tensor descales, the descales, and the
    dequantized bf16 values (exact)."""
    codes, descales, exact = [], [], []
    for x in tensors:
        descale = fp8.power_of_two_descale(float(x.float().abs().max()))
        code = (x.float() / descale).to(torch.float8_e4m3fn)
        codes.append(code)
        descales.append(descale)
        exact.append((code.float() * descale).to(torch.bfloat16))
    return codes, descales, exact


def codes_of(torch, exact, descale):
    """e4m3 codes of bf16 values that are exact multiples of the descale (no rounding)."""
    return (exact.float() / descale).to(torch.float8_e4m3fn)


def within_bound(o, reference, v_max):
    error = (o.float() - reference.float()).abs()
    return bool((error <= P_ROUNDING * v_max + 2.0**-7 * reference.float().abs()).all())


def timed(torch, call, args):
    ms, _ = compare.time_ms(torch, call, args.warmup, args.repeat, "graph")
    return ms


def run_decode(torch, tilefmha, shape, args):
    g = torch.Generator().manual_seed(shape["batch"] * 7 + shape["page_size"])
    b, hq, hk, d, sk = (shape[x] for x in ("batch", "nhead_q", "nhead_k", "hdim", "seqlen_k"))
    draw = lambda *s: torch.randn(s, generator=g).to(torch.bfloat16).cuda()  # noqa: E731
    (q, _, _), descales, (q16, k16, v16) = to_fp8(torch, draw(b, 1, hq, d), draw(b, sk, hk, d),
                                                  draw(b, sk, hk, d))
    k16_pool, v16_pool, table = serving.paged_copy(torch, k16, v16, shape["page_size"], g)
    k_pool, v_pool = codes_of(torch, k16_pool, descales[1]), codes_of(torch, v16_pool, descales[2])
    lengths = torch.full((b,), sk, dtype=torch.int32, device="cuda")
    scales = dict(zip(("q_descale", "k_descale", "v_descale"), descales))
    fp8_call = lambda: tilefmha.paged_attention(q, k_pool, v_pool, table, lengths,  # noqa: E731
                                                max_seqlen_k=sk, **scales)
    bf16_call = lambda: tilefmha.paged_attention(q16, k16_pool, v16_pool, table,  # noqa: E731
                                                 lengths, max_seqlen_k=sk)
    row = dict(shape, shape=serving.label(shape))
    row["agrees"] = within_bound(fp8_call(), bf16_call(), float(v16.float().abs().max()))
    row["fp8_us"] = timed(torch, fp8_call, args) * 1e3
    row["bf16_us"] = timed(torch, bf16_call, args) * 1e3
    row["speedup"] = row["bf16_us"] / row["fp8_us"]
    return row


def run_prefill(torch, tilefmha, shape, args):
    g = torch.Generator().manual_seed(shape["tokens_per_seq"])
    b, n, hq, hk, d = (shape[x] for x in ("batch", "tokens_per_seq", "nhead_q", "nhead_k", "hdim"))
    draw = lambda *s: torch.randn(s, generator=g).to(torch.bfloat16).cuda()  # noqa: E731
    (q, _, _), descales, (q16, k16, v16) = to_fp8(torch, draw(b * n, hq, d), draw(b, n, hk, d),
                                                  draw(b, n, hk, d))
    k16_pool, v16_pool, table = serving.paged_copy(torch, k16, v16, shape["page_size"], g)
    k_pool, v_pool = codes_of(torch, k16_pool, descales[1]), codes_of(torch, v16_pool, descales[2])
    cu = torch.arange(0, (b + 1) * n, n, dtype=torch.int32, device="cuda")
    lengths = torch.full((b,), n, dtype=torch.int32, device="cuda")
    scales = dict(zip(("q_descale", "k_descale", "v_descale"), descales))
    common = dict(block_table=table, max_seqlen_q=n, max_seqlen_k=n, causal="bottom_right")
    fp8_call = lambda: tilefmha.batch_prefill(q, k_pool, v_pool, cu, lengths,  # noqa: E731
                                              **common, **scales)
    bf16_call = lambda: tilefmha.batch_prefill(q16, k16_pool, v16_pool, cu,  # noqa: E731
                                               lengths, **common)
    row = dict(shape, shape=serving.label(shape))
    row["agrees"] = within_bound(fp8_call(), bf16_call(), float(v16.float().abs().max()))
    flops = compare.attention_flops(b, hq, n, n, d, True)
    for name, call in (("fp8", fp8_call), ("bf16", bf16_call)):
        ms = timed(torch, call, args)
        row[f"{name}_us"], row[f"{name}_tflops"] = ms * 1e3, flops / (ms * 1e-3) / 1e12
    row["speedup"] = row["bf16_us"] / row["fp8_us"]
    return row


def run_append(torch, tilefmha, shape, args, copy_gbps):
    """A quantizing append of seqlen_knew bf16 tokens behind 128 cached keys per sequence (so its
    pages are fresh and each replay sets the same scales), beside the bf16 append; device key
    lengths, RoPE from the base. Agrees when V's new slots dequantize to v_new within e4m3's
    rounding (2^-4 relative, or half the subnormal step times the page's scale)."""
    g = torch.Generator().manual_seed(shape["batch"] + shape["seqlen_knew"])
    b, hk, d, n, page = (shape[x] for x in ("batch", "nhead_k", "hdim", "seqlen_knew",
                                            "page_size"))
    cached = 128
    draw = lambda *s: torch.randn(s, generator=g).to(torch.bfloat16).cuda()  # noqa: E731
    k_new, v_new = draw(b, n, hk, d), draw(b, n, hk, d)
    k16, v16, table = serving.paged_copy(torch, draw(b, cached + n, hk, d),
                                         draw(b, cached + n, hk, d), page, g)
    k8, v8 = (x.float().mul(64).to(torch.float8_e4m3fn) for x in (k16, v16))
    k_scales, v_scales = (torch.full((k8.shape[0], hk), 1 / 64, device="cuda") for _ in range(2))
    lengths = torch.full((b,), cached, dtype=torch.int32, device="cuda")
    common = dict(block_table=table, max_seqlen_k=cached,
                  rope=None if shape["rope"] == "none" else shape["rope"])
    fp8_call = lambda: tilefmha.append_kv(k8, v8, k_new, v_new, lengths,  # noqa: E731
                                          k_page_scales=k_scales, v_page_scales=v_scales, **common)
    bf16_call = lambda: tilefmha.append_kv(k16, v16, k_new, v_new, lengths,  # noqa: E731
                                           **common)
    fp8_call()
    positions = torch.arange(cached, cached + n, device="cuda")
    pages = table[:, positions // page].long()
    written = v8[pages, positions % page].float() * v_scales[pages].unsqueeze(-1)
    error = (written - v_new.float()).abs()
    row = dict(shape, shape=serving.label(shape) + " quantize e4m3")
    # Codes under e4m3's smallest normal (2^-6) are subnormals, spaced 2^-9 apart.
    subnormal_rounding = v_scales[pages].unsqueeze(-1) * 2.0**-10
    row["agrees"] = bool((error <= P_ROUNDING * v_new.float().abs() + subnormal_rounding).all())
    row["fp8_us"] = timed(torch, fp8_call, args) * 1e3
    row["bf16_us"] = timed(torch, bf16_call, args) * 1e3
    row["speedup"] = row["bf16_us"] / row["fp8_us"]
    row["fp8_pct_copy"] = 100 * shape["bytes"] / (row["fp8_us"] * 1e-6) / 1e9 / copy_gbps
    return row


def format_row(row):
    if "error" in row:
        return f"{row['shape']:<44} | error: {row['error']}"
    rates = (f" | fp8 {row['fp8_tflops']:6.1f} bf16 {row['bf16_tflops']:6.1f} TFLOP/s"
             if "fp8_tflops" in row else "")
    if "fp8_pct_copy" in row:
        rates = f" | fp8 {row['fp8_pct_copy']:.0f}% of copy"
    return (f"{row['shape']:<44} | fp8 {row['fp8_us']:9.1f} us | bf16 {row['bf16_us']:9.1f} us"
            f" | fp8 {row['speedup']:.2f}x{rates}{'' if row['agrees'] else ' | DISAGREES'}")


def summary_lines(rows):
    lines = ["summary:"]
    decode = [r for r in rows if r.get("kind") == "decode" and "speedup" in r]
    if decode:
        lines.append(f"  decode fp8/bf16 speedup geomean {fp8.geomean([r['speedup'] for r in decode]):.2f}x "
                     f"over {len(decode)} shapes (target {DECODE_SPEEDUP_TARGET}x); "
                     f"{sum(r['speedup'] < DECODE_SPEEDUP_TARGET for r in decode)} below")
    prefill = [r for r in rows if r.get("kind") == "prefill" and "fp8_tflops" in r]
    for page in sorted({r["page_size"] for r in prefill}):
        best = max(r["fp8_tflops"] for r in prefill if r["page_size"] == page)
        lines.append(f"  prefill page {page}: fp8 best {best:.0f} TFLOP/s (target at page 16: "
                     f"{PREFILL_TFLOPS_TARGET})")
    append = [r for r in rows if r.get("kind") == "append" and "fp8_pct_copy" in r]
    if append:
        lines.append(f"  quantizing append: {min(r['fp8_pct_copy'] for r in append):.0f}-"
                     f"{max(r['fp8_pct_copy'] for r in append):.0f}% of copy bandwidth over "
                     f"{len(append)} shapes")
    lines.append(f"  disagreeing rows: {sum(not r.get('agrees', True) for r in rows)}")
    return lines


def main(argv=None):
    args = parse_args(argv)
    todo = shapes(args)
    if args.list_shapes:
        for shape in todo:
            print(serving.label(shape))
        return 0
    torch, reason = compare.torch_or_reason()
    if torch is None:
        print(f"fp8_serving_bench: needs PyTorch with CUDA and a GPU: {reason}", file=sys.stderr)
        return 2
    import tilefmha

    print(f"fp8_serving_bench: {torch.cuda.get_device_name()}; CUDA-graph replays, median of "
          f"{args.repeat}", flush=True)
    copy_gbps = None
    if any(shape["kind"] == "append" for shape in todo):
        copy_gbps = decode_sweep.measure_copy_gbps(torch, 2, args.warmup, args.repeat)["gbps"]
        print(f"copy bandwidth: {copy_gbps:.0f} GB/s", flush=True)
    rows = []
    for shape in todo:
        try:
            if shape["kind"] == "append":
                rows.append(run_append(torch, tilefmha, shape, args, copy_gbps))
            else:
                run = run_decode if shape["kind"] == "decode" else run_prefill
                rows.append(run(torch, tilefmha, shape, args))
        except Exception as error:  # noqa: BLE001 - report the shape and go on
            rows.append(dict(shape, shape=serving.label(shape), error=fp8.first_line(error)))
            torch.cuda.synchronize()
        print(format_row(rows[-1]), flush=True)
        torch.cuda.empty_cache()
    for line in summary_lines(rows):
        print(line)
    if args.json:
        args.json.write_text(json.dumps({"rows": rows}, indent=1) + "\n")
    return 1 if any(not r.get("agrees", True) for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
