#!/usr/bin/env python3
"""Serving benchmarks: paged decode and batch prefill, each beside its contiguous equivalent.

decode: q [batch, 1, nhead_q, hdim] against a KV cache scattered over a shuffled page pool (a
device block table and device key lengths: the serving call, graph-capturable), against
tilefmha.attention on the same bytes held contiguously, and against SDPA's cuDNN backend on the
contiguous tensors. Each row gives paged/contiguous and paged/cuDNN speed ratios (time of the
other over ours: above 1 is faster) and the paged call's share of the card's copy bandwidth for
the K+V bytes (measured once, as bench/decode_sweep.py does).

prefill: packed prompts of tokens_per_seq tokens each against a paged cache holding exactly
their keys (pages of page_size), causal bottom-right, against tilefmha.attention_varlen on the
contiguous keys; TFLOP/s counts the causal half.

append: new K/V tokens into a contiguous cache or a page-16 pool (device key lengths, RoPE from a
base), timed against the copy bandwidth for the bytes read and written; the appended V slots
must equal the new tokens.

Shapes come from bench/serving_sweep.json. Every timed pair is checked to agree (bf16 2e-2).

    PYTHONPATH=build/python python3 bench/serving_bench.py --json serving.json
    python3 bench/serving_bench.py --list-shapes        # no GPU needed
"""

import argparse
import importlib.util
import json
import math
import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent
DEFAULT_SWEEP = HERE / "serving_sweep.json"
DECODE_KEYS = {"batch", "heads", "hdim", "seqlen_k", "page_size", "max_kv_bytes"}
PREFILL_KEYS = {"heads", "hdim", "tokens_per_seq", "total_tokens", "page_size"}
APPEND_KEYS = {"batch", "heads", "hdim", "seqlen_knew", "rope", "page_size"}
# The targets, for the summary lines (benchmarks report; tests never assert timings).
DECODE_VS_CONTIGUOUS = {1: 0.8, 16: 0.95, 1024: 0.95}
LONG_SEQLEN_K, COPY_SHARE_TARGET = 8192, 90.0
PREFILL_VS_VARLEN = 0.95
APPEND_COPY_SHARE_TARGET = 85.0


def _load(name):
    spec = importlib.util.spec_from_file_location(name, HERE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


compare = _load("compare_sdpa")


def load_sweep(path):
    sweep = json.loads(pathlib.Path(path).read_text())
    for section, keys in (("decode", DECODE_KEYS), ("prefill", PREFILL_KEYS),
                          ("append", APPEND_KEYS)):
        given = set(sweep.get(section, {}))
        if given != keys:
            raise ValueError(f"{path}: {section} needs keys {sorted(keys)}, got {sorted(given)}")
    return sweep


def decode_shapes(sweep):
    d = sweep["decode"]
    shapes = []
    for batch in d["batch"]:
        for hq, hk in d["heads"]:
            for hdim in d["hdim"]:
                for seqlen_k in d["seqlen_k"]:
                    kv_bytes = 2 * batch * seqlen_k * hk * hdim * 2
                    if kv_bytes > d["max_kv_bytes"]:
                        continue
                    for page_size in d["page_size"]:
                        shapes.append({"kind": "decode", "batch": batch, "nhead_q": hq,
                                       "nhead_k": hk, "hdim": hdim, "seqlen_k": seqlen_k,
                                       "page_size": page_size, "kv_bytes": kv_bytes})
    return shapes


def prefill_shapes(sweep):
    p = sweep["prefill"]
    return [{"kind": "prefill", "batch": p["total_tokens"] // n, "tokens_per_seq": n,
             "nhead_q": hq, "nhead_k": hk, "hdim": hdim, "page_size": page_size}
            for hq, hk in p["heads"] for hdim in p["hdim"] for n in p["tokens_per_seq"]
            for page_size in p["page_size"]]


def append_shapes(sweep):
    """Appends of seqlen_knew tokens per sequence; page_size 0 is a contiguous cache. bytes: K and
    V new tokens read once and written once into the cache."""
    a = sweep["append"]
    return [{"kind": "append", "batch": b, "nhead_q": hq, "nhead_k": hk, "hdim": d,
             "seqlen_knew": n, "rope": rope, "page_size": page,
             "bytes": 2 * 2 * b * n * hk * d * 2}
            for b in a["batch"] for hq, hk in a["heads"] for d in a["hdim"]
            for n in a["seqlen_knew"] for rope in a["rope"] for page in a["page_size"]]


def label(shape):
    if shape["kind"] == "append":
        cache = f"page{shape['page_size']}" if shape["page_size"] else "contiguous"
        return (f"append b{shape['batch']} hk{shape['nhead_k']} d{shape['hdim']} "
                f"new{shape['seqlen_knew']} {shape['rope']} {cache}")
    if shape["kind"] == "decode":
        return (f"decode b{shape['batch']} h{shape['nhead_q']}/{shape['nhead_k']} "
                f"d{shape['hdim']} sk{shape['seqlen_k']} page{shape['page_size']}")
    return (f"prefill {shape['batch']}x{shape['tokens_per_seq']} h{shape['nhead_q']}/"
            f"{shape['nhead_k']} d{shape['hdim']} page{shape['page_size']}")


def paged_copy(torch, k, v, page_size, generator, page_order="shuffled"):
    """K/V [batch, seqlen, heads, dim] scattered over a shuffled pool of pages: (k_pool, v_pool,
    block_table int32 [batch, pages per sequence] on the device). page_order "sequential" keeps
    each sequence's pages in order and adjacent, the same bytes as the contiguous cache: beside
    "shuffled" it tells the pool's scatter apart from the kernel's own cost."""
    batch, seqlen, heads, dim = k.shape
    per_seq = -(-seqlen // page_size)
    if page_order == "sequential":
        order = torch.arange(batch * per_seq).cuda()
    else:
        order = torch.randperm(batch * per_seq, generator=generator).cuda()
    pools = []
    for x in (k, v):
        padded = torch.zeros(batch, per_seq * page_size, heads, dim, dtype=x.dtype, device="cuda")
        padded[:, :seqlen] = x
        pool = torch.empty(batch * per_seq, page_size, heads, dim, dtype=x.dtype, device="cuda")
        pool[order] = padded.view(batch * per_seq, page_size, heads, dim)
        pools.append(pool)
    table = order.view(batch, per_seq).int()
    return pools[0], pools[1], table


def agree(torch, a, b):
    return (a.float() - b.float()).abs().max().item() <= compare.TOLERANCE["bf16"]


def run_decode(torch, tilefmha, shape, warmup, repeat, copy_gbps, page_order="shuffled"):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    g = torch.Generator().manual_seed(shape["batch"] * 7 + shape["page_size"])
    b, hq, hk, d, sk = (shape[x] for x in ("batch", "nhead_q", "nhead_k", "hdim", "seqlen_k"))
    draw = lambda *s: torch.randn(s, generator=g).to(torch.bfloat16).cuda()  # noqa: E731
    q, k, v = draw(b, 1, hq, d), draw(b, sk, hk, d), draw(b, sk, hk, d)
    k_pool, v_pool, table = paged_copy(torch, k, v, shape["page_size"], g, page_order)
    lengths = torch.full((b,), sk, dtype=torch.int32, device="cuda")
    paged = lambda: tilefmha.paged_attention(q, k_pool, v_pool, table, lengths,  # noqa: E731
                                             max_seqlen_k=sk)
    contiguous = lambda: tilefmha.attention(q, k, v)  # noqa: E731
    qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))

    def cudnn():
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            return torch.nn.functional.scaled_dot_product_attention(qt, kt, vt, enable_gqa=True)

    row = dict(shape, shape=label(shape))
    reference = contiguous()
    row["agrees"] = agree(torch, paged(), reference)
    for name, call in (("paged", paged), ("contiguous", contiguous), ("cudnn", cudnn)):
        try:
            ms, how = compare.time_ms(torch, call, warmup, repeat, "graph")
            row[f"{name}_us"], row[f"{name}_timing"] = ms * 1e3, how
        except Exception as error:  # noqa: BLE001 - a backend that refuses the shape
            row[f"{name}_error"] = str(error).splitlines()[0][:160]
    if "paged_us" in row:
        row["paged_pct_copy"] = 100 * shape["kv_bytes"] / (row["paged_us"] * 1e-6) / 1e9 / copy_gbps
        for other in ("contiguous", "cudnn"):
            if f"{other}_us" in row:
                row[f"vs_{other}"] = row[f"{other}_us"] / row["paged_us"]
    return row


def run_prefill(torch, tilefmha, shape, warmup, repeat):
    g = torch.Generator().manual_seed(shape["tokens_per_seq"])
    b, n, hq, hk, d = (shape[x] for x in ("batch", "tokens_per_seq", "nhead_q", "nhead_k", "hdim"))
    draw = lambda *s: torch.randn(s, generator=g).to(torch.bfloat16).cuda()  # noqa: E731
    q, k, v = draw(b * n, hq, d), draw(b, n, hk, d), draw(b, n, hk, d)
    k_pool, v_pool, table = paged_copy(torch, k, v, shape["page_size"], g)
    cu = torch.arange(0, (b + 1) * n, n, dtype=torch.int32, device="cuda")
    lengths = torch.full((b,), n, dtype=torch.int32, device="cuda")
    k_flat, v_flat = k.reshape(b * n, hk, d), v.reshape(b * n, hk, d)
    paged = lambda: tilefmha.batch_prefill(  # noqa: E731
        q, k_pool, v_pool, cu, lengths, block_table=table, max_seqlen_q=n, max_seqlen_k=n,
        causal="bottom_right")
    varlen = lambda: tilefmha.attention_varlen(  # noqa: E731
        q, k_flat, v_flat, cu, cu, max_seqlen_q=n, max_seqlen_k=n, causal="bottom_right")
    row = dict(shape, shape=label(shape))
    row["agrees"] = agree(torch, paged(), varlen())
    flops = compare.attention_flops(b, hq, n, n, d, True)
    for name, call in (("paged", paged), ("varlen", varlen)):
        ms, how = compare.time_ms(torch, call, warmup, repeat, "graph")
        row[f"{name}_us"], row[f"{name}_timing"] = ms * 1e3, how
        row[f"{name}_tflops"] = flops / (ms * 1e-3) / 1e12
    row["vs_varlen"] = row["varlen_us"] / row["paged_us"]
    return row


def run_append(torch, tilefmha, shape, warmup, repeat, copy_gbps):
    """One append of seqlen_knew tokens behind 128 cached keys per sequence, key lengths on the
    device (so RoPE angles come from the base and the call is graph-capturable). A replay writes
    the same slots again, so every timed call moves the same bytes."""
    g = torch.Generator().manual_seed(shape["batch"] + shape["seqlen_knew"])
    b, hk, d, n = (shape[x] for x in ("batch", "nhead_k", "hdim", "seqlen_knew"))
    cached = 128
    capacity = cached + n
    draw = lambda *s: torch.randn(s, generator=g).to(torch.bfloat16).cuda()  # noqa: E731
    k_new, v_new = draw(b, n, hk, d), draw(b, n, hk, d)
    lengths = torch.full((b,), cached, dtype=torch.int32, device="cuda")
    rope = None if shape["rope"] == "none" else shape["rope"]
    if shape["page_size"]:
        k_cache, v_cache, table = paged_copy(torch, draw(b, capacity, hk, d),
                                             draw(b, capacity, hk, d), shape["page_size"], g)
        pages = {"block_table": table}
    else:
        k_cache, v_cache, pages = draw(b, capacity, hk, d), draw(b, capacity, hk, d), {}
    call = lambda: tilefmha.append_kv(k_cache, v_cache, k_new, v_new, lengths,  # noqa: E731
                                      max_seqlen_k=cached, rope=rope, **pages)
    call()
    # V is never rotated: its new slots must hold v_new exactly.
    positions = torch.arange(cached, cached + n, device="cuda")
    if shape["page_size"]:
        size = shape["page_size"]
        written = v_cache[table[:, positions // size].long(), positions % size]
    else:
        written = v_cache[:, cached:cached + n]
    row = dict(shape, shape=label(shape), agrees=bool(torch.equal(written, v_new)))
    ms, how = compare.time_ms(torch, call, warmup, repeat, "graph")
    row["append_us"], row["append_timing"] = ms * 1e3, how
    row["append_pct_copy"] = 100 * shape["bytes"] / (ms * 1e-3) / 1e9 / copy_gbps
    return row


def format_row(row):
    cells = [f"{row['shape']:<44}"]
    for key in ("paged_us", "contiguous_us", "cudnn_us", "varlen_us", "append_us"):
        if key in row:
            cells.append(f"{key[:-3]} {row[key]:8.1f} us")
    for key in ("vs_contiguous", "vs_cudnn", "vs_varlen"):
        if key in row:
            cells.append(f"{key} {row[key]:.2f}x")
    if "paged_pct_copy" in row:
        cells.append(f"{row['paged_pct_copy']:.0f}% copy")
    if "append_pct_copy" in row:
        cells.append(f"{row['append_pct_copy']:.0f}% copy")
    if "paged_tflops" in row:
        cells.append(f"{row['paged_tflops']:.0f} TFLOP/s")
    cells.append("agrees" if row["agrees"] else "MISMATCH")
    return " | ".join(cells)


def geomean(values):
    return math.exp(sum(math.log(x) for x in values) / len(values)) if values else float("nan")


def summary_lines(rows):
    lines = []
    decode = [r for r in rows if r["kind"] == "decode" and "paged_us" in r]
    for page, target in DECODE_VS_CONTIGUOUS.items():
        at = [r for r in decode if r["page_size"] == page and "vs_contiguous" in r]
        if not at:
            continue
        below = [r["shape"] for r in at if r["vs_contiguous"] < target]
        cudnn = [r["vs_cudnn"] for r in at if "vs_cudnn" in r]
        lines.append(f"decode page {page}: paged/contiguous geomean "
                     f"{geomean([r['vs_contiguous'] for r in at]):.3f} (target >= {target}; "
                     f"{len(below)} of {len(at)} below), paged/cuDNN geomean "
                     f"{geomean(cudnn):.3f} ({sum(x < 1 for x in cudnn)} below 1.0)")
    long_rows = [r for r in decode if r["seqlen_k"] >= LONG_SEQLEN_K]
    if long_rows:
        low = sum(r["paged_pct_copy"] < COPY_SHARE_TARGET for r in long_rows)
        lines.append(f"decode sk >= {LONG_SEQLEN_K}: {low} of {len(long_rows)} below "
                     f"{COPY_SHARE_TARGET:.0f}% of copy bandwidth")
    prefill = [r for r in rows if r["kind"] == "prefill"]
    if prefill:
        lines.append("prefill: paged/varlen " + ", ".join(
            f"{r['tokens_per_seq']} tok {r['vs_varlen']:.2f}x ({r['paged_tflops']:.0f} TFLOP/s)"
            for r in prefill) + f" (target >= {PREFILL_VS_VARLEN})")
    appends = [r for r in rows if r["kind"] == "append" and "append_pct_copy" in r]
    if appends:
        big = [r for r in appends if r["bytes"] >= 2**24]
        low = sum(r["append_pct_copy"] < APPEND_COPY_SHARE_TARGET for r in big)
        lines.append(f"append (>= 16 MiB moved): {low} of {len(big)} below "
                     f"{APPEND_COPY_SHARE_TARGET:.0f}% of copy bandwidth; best "
                     f"{max(r['append_pct_copy'] for r in appends):.0f}%")
    mismatches = sum(not r["agrees"] for r in rows)
    lines.append(f"mismatches: {mismatches} of {len(rows)}")
    return lines


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sweep", default=DEFAULT_SWEEP, type=pathlib.Path)
    parser.add_argument("--only", choices=("decode", "prefill", "append"))
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--json", type=pathlib.Path, help="also write the rows here")
    parser.add_argument("--list-shapes", action="store_true")
    parser.add_argument("--page-size", type=int, nargs="+",
                        help="only the decode and prefill shapes of these page sizes")
    parser.add_argument("--page-order", choices=("shuffled", "sequential"), default="shuffled",
                        help="decode pools: pages shuffled (the default, as a serving cache "
                             "ends up) or each sequence's pages in order (the scatter's cost)")
    args = parser.parse_args(argv)
    sweep = load_sweep(args.sweep)
    shapes = decode_shapes(sweep) if args.only in (None, "decode") else []
    shapes += prefill_shapes(sweep) if args.only in (None, "prefill") else []
    shapes += append_shapes(sweep) if args.only in (None, "append") else []
    if args.page_size:
        sizes = sorted({s["page_size"] for s in shapes if s["kind"] != "append"})
        shapes = [s for s in shapes if s["kind"] == "append" or s["page_size"] in args.page_size]
        if sizes and not any(s["kind"] != "append" for s in shapes):
            parser.error(f"--page-size {' '.join(map(str, args.page_size))}: the sweep's decode "
                         f"and prefill shapes have page sizes {sizes}")
    if args.list_shapes:
        for shape in shapes:
            print(label(shape))
        return 0
    torch, why = compare.torch_or_reason()
    if torch is None:
        print(f"serving_bench: {why}", file=sys.stderr)
        return 2
    import tilefmha

    decode_sweep = _load("decode_sweep")
    copy = decode_sweep.measure_copy_gbps(torch, 2, args.warmup, args.repeat)
    print(f"{torch.cuda.get_device_name()}: copy bandwidth {copy['gbps']:.0f} GB/s", flush=True)
    rows = []
    for shape in shapes:
        if shape["kind"] == "decode":
            row = run_decode(torch, tilefmha, shape, args.warmup, args.repeat, copy["gbps"],
                             args.page_order)
        elif shape["kind"] == "append":
            row = run_append(torch, tilefmha, shape, args.warmup, args.repeat, copy["gbps"])
        else:
            row = run_prefill(torch, tilefmha, shape, args.warmup, args.repeat)
        rows.append(row)
        print(format_row(row), flush=True)
        torch.cuda.empty_cache()
    print("summary:")
    for line in summary_lines(rows):
        print("  " + line)
    if args.json:
        args.json.write_text(json.dumps({"device": torch.cuda.get_device_name(),
                                         "copy_gbps": copy["gbps"], "rows": rows}, indent=1))
    return 1 if any(not r["agrees"] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
