#!/usr/bin/env python3
"""Decode attention (short queries, long KV): tilefmha against PyTorch SDPA's cuDNN backend.

Each shape of bench/decode_sweep.json runs q [batch, seqlen_q, nhead_q, hdim] against k, v
[batch, seqlen_k, nhead_k, hdim] (random CUDA tensors; bf16 unless --dtype) through
tilefmha.attention and through scaled_dot_product_attention on [b, h, s, d] views restricted to
the cuDNN backend (enable_gqa=True for GQA; where cuDNN refuses that, K/V heads are repeated and
the row says so). The outputs must agree (max abs error 2e-2 for bf16, 4e-3 for fp16); both are
timed the way bench/compare_sdpa.py times them: median of CUDA-event timings of CUDA-graph
replays, or of eager calls where capture fails (the row records which).

Decode is bound by reading K and V, so each row also gives GB/s (Q, K, V read and O written
once) and its share of the card's copy bandwidth, measured once at the start with a
device-to-device copy timed the same way. Non-causal by default (a decode row sees every key);
--causal masks bottom-right, the alignment of a chunk appended after the cache.

    PYTHONPATH=build/python python3 bench/decode_sweep.py --batch 8 --seqlen-k 8k,32k --csv d.csv
    python3 bench/decode_sweep.py --list-shapes          # no GPU needed

Needs PyTorch with CUDA and a GPU for the timed run; without them it says so and exits 2.
Importing this module needs neither (tests/python/test_decode_sweep.py checks the parsing and
the shapes on a CPU host).
"""

import argparse
import csv
import importlib.util
import json
import math
import os
import pathlib
import sys
import warnings

HERE = pathlib.Path(__file__).resolve().parent
DEFAULT_SWEEP = HERE / "decode_sweep.json"
ELEMENT_BYTES = {"bf16": 2, "fp16": 2}
# The sweep file's keys and what each must hold; anything else is a typo and an error.
SWEEP_LISTS = ("batch", "heads", "hdim", "seqlen_k", "seqlen_q")
SWEEP_KEYS = {"description", "dtype", "max_kv_bytes", *SWEEP_LISTS}
# The summary's bandwidth count covers keys this long and longer: there K/V reads dominate and a
# decode kernel should run near the copy bandwidth; shorter rows are launch- and tail-bound.
LONG_SEQLEN_K = 8192
BANDWIDTH_TARGET_PCT = 90.0
# CSV columns in reading order; keys a row has beyond these follow, sorted.
CSV_FIELDS = [
    "index", "shape", "dtype", "batch", "nhead_q", "nhead_k", "hdim", "seqlen_q", "seqlen_k",
    "causal", "kv_bytes", "bytes", "status", "message",
    "ours_us", "ours_timing", "ours_gbps", "ours_pct_copy",
    "cudnn_us", "cudnn_timing", "cudnn_gbps", "cudnn_pct_copy", "cudnn_mode", "cudnn_note",
    "ratio", "max_abs_error", "agrees", "plan",
]


def load_compare():
    """bench/compare_sdpa.py as a module: its torch probe, timing helpers and tolerances.
    bench/ is not a package, so it is loaded from its path (it imports without torch)."""
    spec = importlib.util.spec_from_file_location("compare_sdpa", HERE / "compare_sdpa.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


compare = load_compare()
TOLERANCE = compare.TOLERANCE


# ---------------------------------------------------------------------------------------------
# Flags and the shape matrix (pure Python: tested on CPU hosts)


def parse_size(text):
    """A positive length: 8192, or with a k suffix (8k = 8192, 128k = 131072)."""
    text = text.strip().lower()
    scale = 1024 if text.endswith("k") else 1
    digits = text[:-1] if scale > 1 else text
    if not digits.isdigit() or int(digits) <= 0:
        raise ValueError(f"'{text}' is not a positive integer (a k suffix means x1024)")
    return int(digits) * scale


def parse_size_list(text):
    try:
        values = [parse_size(item) for item in text.split(",") if item.strip()]
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"expected comma-separated lengths: {error}")
    if not values:
        raise argparse.ArgumentTypeError(f"expected comma-separated lengths, got '{text}'")
    return values


def parse_heads(text):
    """'32/8,64/8,32': (nhead_q, nhead_k) pairs; a single number is MHA (hk = hq)."""
    pairs = []
    for item in (item.strip() for item in text.split(",")):
        if not item:
            continue
        parts = item.split("/")
        if len(parts) > 2 or not all(part.isdigit() and int(part) > 0 for part in parts):
            raise argparse.ArgumentTypeError(
                f"--heads takes HQ/HK pairs of positive integers like 32/8, got '{item}'")
        hq, hk = int(parts[0]), int(parts[-1])
        if hq % hk:
            raise argparse.ArgumentTypeError(f"--heads {item}: nhead_k {hk} does not divide "
                                             f"nhead_q {hq}")
        pairs.append((hq, hk))
    if not pairs:
        raise argparse.ArgumentTypeError("--heads is empty")
    return pairs


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweep", type=pathlib.Path, default=DEFAULT_SWEEP,
                        help="shape matrix (default bench/decode_sweep.json)")
    parser.add_argument("--batch", type=compare.parse_int_list, help="batch sizes, e.g. 1,8")
    parser.add_argument("--heads", type=parse_heads, help="HQ/HK pairs, e.g. 32/8,64/8")
    parser.add_argument("--hdim", type=compare.parse_int_list, help="head dims, e.g. 128")
    parser.add_argument("--seqlen-k", type=parse_size_list, help="KV lengths, e.g. 8k,128k")
    parser.add_argument("--seqlen-q", type=parse_size_list, help="query lengths, e.g. 1,16")
    parser.add_argument("--dtype", choices=sorted(ELEMENT_BYTES),
                        help="element type (default: the sweep file's)")
    parser.add_argument("--causal", action="store_true",
                        help="bottom-right causal mask (default: none, every row sees every key)")
    parser.add_argument("--max-kv-gb", type=float,
                        help="skip shapes whose K+V exceed this many GB (default: the file's "
                             "max_kv_bytes)")
    parser.add_argument("--limit", type=int, help="run only the first N shapes")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--timing", choices=("graph", "events"), default="graph",
                        help="graph: CUDA-graph replays, GPU time alone (default); events: one "
                             "eager call per timed interval, launch cost included")
    parser.add_argument("--copy-gib", type=float, default=4.0,
                        help="size of the device-to-device copy that measures the card's "
                             "bandwidth (default 4 GiB; at least 2 GB)")
    parser.add_argument("--list-shapes", action="store_true",
                        help="print the shapes and exit (no GPU needed)")
    parser.add_argument("--csv", type=pathlib.Path, help="also write the rows to this CSV file")
    parser.add_argument("--json", type=pathlib.Path,
                        help="also write device, copy bandwidth, rows and summary as JSON")
    args = parser.parse_args(argv)
    if args.warmup < 0 or args.repeat < 1:
        parser.error(f"--warmup must be >= 0 and --repeat >= 1 (got {args.warmup}, {args.repeat})")
    if args.limit is not None and args.limit < 1:
        parser.error(f"--limit must be >= 1 (got {args.limit})")
    if args.max_kv_gb is not None and args.max_kv_gb <= 0:
        parser.error(f"--max-kv-gb must be positive (got {args.max_kv_gb})")
    # Below 2 GB the copy could be served partly from L2 or be dominated by its ramp.
    if args.copy_gib * 2**30 < 2e9:
        parser.error(f"--copy-gib must be at least 2 GB (got {args.copy_gib} GiB)")
    return args


def _positive_ints(values, key, where):
    if not isinstance(values, list) or not values:
        raise ValueError(f"{where}: '{key}' must be a non-empty list, got {values!r}")
    for value in values:
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ValueError(f"{where}: '{key}' holds {value!r}, not a positive integer")
    return values


def validate_sweep(sweep, where="sweep"):
    """The sweep file's contents, checked: every key known, lists of positive integers, heads
    as [nhead_q, nhead_k] with nhead_k dividing nhead_q. Raises ValueError naming the key."""
    if not isinstance(sweep, dict):
        raise ValueError(f"{where}: expected a JSON object")
    unknown = sorted(set(sweep) - SWEEP_KEYS)
    if unknown:
        raise ValueError(f"{where}: unknown key '{unknown[0]}' "
                         f"(known: {', '.join(sorted(SWEEP_KEYS))})")
    for key in (*SWEEP_LISTS, "dtype", "max_kv_bytes"):
        if key not in sweep:
            raise ValueError(f"{where}: missing key '{key}'")
    for key in ("batch", "hdim", "seqlen_k", "seqlen_q"):
        _positive_ints(sweep[key], key, where)
    if not isinstance(sweep["heads"], list) or not sweep["heads"]:
        raise ValueError(f"{where}: 'heads' must be a non-empty list of [nhead_q, nhead_k]")
    for pair in sweep["heads"]:
        if not isinstance(pair, list) or len(pair) != 2:
            raise ValueError(f"{where}: 'heads' entry {pair!r} is not [nhead_q, nhead_k]")
        _positive_ints(pair, "heads", where)
        if pair[0] % pair[1]:
            raise ValueError(f"{where}: 'heads' entry {pair}: nhead_k does not divide nhead_q")
    if sweep["dtype"] not in ELEMENT_BYTES:
        raise ValueError(f"{where}: 'dtype' {sweep['dtype']!r} is not one of "
                         f"{', '.join(sorted(ELEMENT_BYTES))}")
    limit = sweep["max_kv_bytes"]
    if isinstance(limit, bool) or not isinstance(limit, (int, float)) or limit <= 0:
        raise ValueError(f"{where}: 'max_kv_bytes' must be a positive number, got {limit!r}")
    return sweep


def load_sweep(path):
    """The validated sweep file; OSError or ValueError (JSON errors included) on failure."""
    return validate_sweep(json.loads(pathlib.Path(path).read_text()), str(path))


def kv_bytes(batch, seqlen_k, nhead_k, hdim, dtype):
    """Bytes of K plus V: what one decode step must read at least."""
    return 2 * batch * seqlen_k * nhead_k * hdim * ELEMENT_BYTES[dtype]


def traffic_bytes(shape):
    """Bytes a perfect kernel moves: Q, K, V read once and O written once (the GB/s basis)."""
    qo = 2 * shape["batch"] * shape["seqlen_q"] * shape["nhead_q"] * shape["hdim"]
    return kv_bytes(shape["batch"], shape["seqlen_k"], shape["nhead_k"], shape["hdim"],
                    shape["dtype"]) + qo * ELEMENT_BYTES[shape["dtype"]]


def format_length(n):
    return f"{n // 1024}k" if n >= 1024 and n % 1024 == 0 else str(n)


def shape_label(shape):
    return (f"b{shape['batch']} h{shape['nhead_q']}/{shape['nhead_k']} d{shape['hdim']} "
            f"sq{shape['seqlen_q']} sk{format_length(shape['seqlen_k'])}"
            + (" causal" if shape["causal"] else ""))


def expand_shapes(sweep, batch=None, heads=None, hdim=None, seqlen_k=None, seqlen_q=None,
                  dtype=None, causal=False, max_kv_bytes=None, limit=None):
    """(shapes to run, shapes skipped for exceeding the K+V cap), in run order.

    seqlen_q varies fastest so that consecutive shapes share one K/V allocation (the largest
    are tens of GB and take longer to fill than to time). Query rows longer than the keys are
    left out: with a bottom-right mask some rows would see no key. `limit` keeps the first N."""
    dtype = dtype or sweep["dtype"]
    cap = sweep["max_kv_bytes"] if max_kv_bytes is None else max_kv_bytes
    shapes, skipped = [], []
    for b in batch or sweep["batch"]:
        for sk in seqlen_k or sweep["seqlen_k"]:
            for hq, hk in heads or [tuple(pair) for pair in sweep["heads"]]:
                for d in hdim or sweep["hdim"]:
                    for sq in seqlen_q or sweep["seqlen_q"]:
                        if sq > sk:
                            continue
                        shape = {"dtype": dtype, "batch": b, "nhead_q": hq, "nhead_k": hk,
                                 "hdim": d, "seqlen_q": sq, "seqlen_k": sk, "causal": bool(causal)}
                        shape["kv_bytes"] = kv_bytes(b, sk, hk, d, dtype)
                        shape["bytes"] = traffic_bytes(shape)
                        (skipped if shape["kv_bytes"] > cap else shapes).append(shape)
    if limit is not None:
        shapes = shapes[:limit]
    return shapes, skipped


def bottom_right_last_keys(seqlen_q, seqlen_k):
    """Index of the last key each query row sees under the bottom-right causal mask."""
    return [i + seqlen_k - seqlen_q for i in range(seqlen_q)]


# ---------------------------------------------------------------------------------------------
# Results: rows to a table, a summary and files (pure Python)


def gbps(nbytes, microseconds):
    return nbytes / (microseconds * 1e-6) / 1e9


def add_bandwidth(row, name, copy_gbps):
    """<name>_gbps and <name>_pct_copy from <name>_us and the row's traffic bytes."""
    row[f"{name}_gbps"] = gbps(row["bytes"], row[f"{name}_us"])
    if copy_gbps:
        row[f"{name}_pct_copy"] = 100.0 * row[f"{name}_gbps"] / copy_gbps


TABLE_HEADER = (f"{'':9} {'shape':34} {'ours us':>9} {'cuDNN us':>9} {'ratio':>6} "
                f"{'K+V MB':>9} {'ours GB/s':>9} {'%copy':>5} {'cuDNN GB/s':>10} {'%copy':>5}  "
                "cuDNN mode / check")


def format_row(row, total=None, timing="graph"):
    """One table line: ratio = cuDNN time / ours (above 1: ours is faster). A side timed
    otherwise than `timing` asked (a graph capture that failed) is flagged."""
    index = f"[{row.get('index', 0):>3}/{total}]" if total else f"[{row.get('index', 0):>3}]"
    head = f"{index:9} {row['shape']:34}"
    if row.get("status") != "ok":
        return f"{head} {row.get('status', '?')}: {row.get('message', '')}"
    cells = [head, f"{row['ours_us']:9.1f}"]
    if "cudnn_us" in row:
        cells += [f"{row['cudnn_us']:9.1f}", f"{row['ratio']:5.2f}x"]
    else:
        cells += [f"{'n/a':>9}", f"{'':>6}"]
    cells += [f"{row['kv_bytes'] / 1e6:9.1f}", f"{row['ours_gbps']:9.0f}",
              f"{row.get('ours_pct_copy', float('nan')):4.0f}%"]
    if "cudnn_us" in row:
        cells += [f"{row['cudnn_gbps']:10.0f}", f"{row.get('cudnn_pct_copy', float('nan')):4.0f}%"]
        check = "ok" if row["agrees"] else f"MISMATCH {row['max_abs_error']:.3g}"
        tail = f" {row['cudnn_mode']} {check}"
    else:
        cells += [f"{'':>10}", f"{'':>5}"]
        tail = f" cuDNN n/a: {row.get('cudnn_note', '')}"
    if row.get("ours_timing", timing) != timing or row.get("cudnn_timing", timing) != timing:
        tail += f" (timing ours {row.get('ours_timing')}, cuDNN {row.get('cudnn_timing', '-')})"
    if row.get("plan"):
        tail += f" | plan: {row['plan'][:120]}"
    return " ".join(cells) + tail


def summarize(rows):
    """Totals over the rows: ratio = cuDNN time / ours time."""
    ok = [row for row in rows if row.get("status") == "ok"]
    compared = [row for row in ok if "ratio" in row]
    long_rows = [row for row in ok
                 if row["seqlen_k"] >= LONG_SEQLEN_K and "ours_pct_copy" in row]
    summary = {
        "shapes": len(rows),
        "timed": len(ok),
        "failed": len(rows) - len(ok),
        "compared": len(compared),
        "cudnn_unavailable": len(ok) - len(compared),
        "mismatches": sum(1 for row in compared if not row["agrees"]),
        "geomean_ratio": None, "min_ratio": None, "min_ratio_shape": None,
        "below_1x": sum(1 for row in compared if row["ratio"] < 1.0),
        "long_shapes": len(long_rows),
        "long_below_target": sum(1 for row in long_rows
                                 if row["ours_pct_copy"] < BANDWIDTH_TARGET_PCT),
    }
    if compared:
        summary["geomean_ratio"] = math.exp(
            sum(math.log(row["ratio"]) for row in compared) / len(compared))
        worst = min(compared, key=lambda row: row["ratio"])
        summary["min_ratio"], summary["min_ratio_shape"] = worst["ratio"], worst["shape"]
    return summary


def format_summary(summary):
    if summary["geomean_ratio"] is None:
        ratios = "no shape compared with cuDNN"
    else:
        ratios = (f"geomean cuDNN/ours {summary['geomean_ratio']:.3f}x, min "
                  f"{summary['min_ratio']:.3f}x ({summary['min_ratio_shape']}), "
                  f"{summary['below_1x']} of {summary['compared']} below 1.0x")
    return (f"summary: {ratios}; {summary['long_below_target']} of {summary['long_shapes']} "
            f"shapes with sk >= {format_length(LONG_SEQLEN_K)} below "
            f"{BANDWIDTH_TARGET_PCT:.0f}% of copy bandwidth; {summary['timed']} timed, "
            f"{summary['failed']} failed, {summary['mismatches']} mismatches, "
            f"{summary['cudnn_unavailable']} without cuDNN")


def _replace_atomically(path, write):
    """Writes beside the target, then renames, so an interrupted run leaves no half file."""
    path = pathlib.Path(path)
    partial = path.with_name(path.name + ".partial")
    with open(partial, "w", newline="") as handle:
        write(handle)
    os.replace(partial, path)


def write_csv(path, rows):
    extra = sorted({key for row in rows for key in row} - set(CSV_FIELDS))

    def write(handle):
        writer = csv.DictWriter(handle, fieldnames=CSV_FIELDS + extra, restval="")
        writer.writeheader()
        writer.writerows(rows)

    _replace_atomically(path, write)


def write_json(path, report):
    _replace_atomically(path, lambda handle: handle.write(json.dumps(report, indent=1) + "\n"))


# ---------------------------------------------------------------------------------------------
# The GPU run


TORCH_DTYPES = {"bf16": "bfloat16", "fp16": "float16"}


def _time_copy(torch, nbytes, warmup, repeat):
    # The buffers are this function's locals: they are freed when it returns.
    src = torch.empty(nbytes, dtype=torch.uint8, device="cuda").fill_(1)
    dst = torch.empty_like(src)
    return compare.time_events(torch, lambda: dst.copy_(src), warmup, repeat)


def measure_copy_gbps(torch, gib, warmup, repeat):
    """The card's device-to-device copy bandwidth: bytes read plus written per second.

    Timed eagerly with CUDA events, not as a graph replay: a copy captured in a CUDA graph
    becomes a memcpy node that the driver hands to a copy engine, about a third slower than
    the SM copy an eager copy_ launches (H200: 2.7 against 4.3 TB/s), and one launch is
    negligible against a copy of milliseconds."""
    nbytes = int(gib * 2**30)
    ms = _time_copy(torch, nbytes, warmup, repeat)
    torch.cuda.empty_cache()
    return {"bytes": nbytes, "ms": ms, "timing": "events",
            "gbps": 2 * nbytes / (ms * 1e-3) / 1e9}


class KvInputs:
    """K and V of the current shape, kept while the next shapes share them (only seqlen_q
    changes), and K/V with heads repeated for cuDNN where it refuses GQA."""

    def __init__(self, torch):
        self.torch = torch
        self.key = None
        self.k = self.v = None
        self.repeated = None

    def get(self, shape):
        key = (shape["batch"], shape["seqlen_k"], shape["nhead_k"], shape["hdim"], shape["dtype"])
        if key != self.key:
            self.release()  # free the old pair before filling the new one: both may be large
            torch = self.torch
            dtype = getattr(torch, TORCH_DTYPES[shape["dtype"]])
            generator = torch.Generator(device="cuda").manual_seed(1)
            size = (shape["batch"], shape["seqlen_k"], shape["nhead_k"], shape["hdim"])
            self.k = torch.randn(size, device="cuda", dtype=dtype, generator=generator)
            self.v = torch.randn(size, device="cuda", dtype=dtype, generator=generator)
            self.key = key
        return self.k, self.v

    def repeated_heads(self, group):
        if self.repeated is None or self.repeated[0] != group:
            self.repeated = None
            self.repeated = (group, self.k.repeat_interleave(group, dim=2),
                             self.v.repeat_interleave(group, dim=2))
        return self.repeated[1], self.repeated[2]

    def release(self):
        self.key = None
        self.k = self.v = self.repeated = None
        self.torch.cuda.empty_cache()


def first_call(call):
    """(output, None) or (None, why SDPA refused): SDPA explains a refused backend in warnings
    and raises a bare 'No available kernel', so the warnings carry the reason."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            return call(), None
        except (RuntimeError, ValueError) as error:
            reasons = [str(w.message).strip().splitlines()[0] for w in caught if str(w.message)]
            reasons.append(str(error).strip().splitlines()[0] if str(error).strip() else
                           type(error).__name__)
            return None, "; ".join(dict.fromkeys(reasons))[:300]


def plan_text(tilefmha, q, k, v, causal):
    """The dispatcher's plan for the call, where the package exposes it (tilefmha.explain);
    None otherwise. The GPU session computes the explanation but, so far, no public function
    returns it, so this column is normally absent."""
    explain = getattr(tilefmha, "explain", None)
    if not callable(explain):
        return None
    try:
        return " | ".join(str(explain(q, k, v, causal=causal)).strip().splitlines())
    except Exception as error:  # noqa: BLE001 - a diagnostic column must not stop the sweep
        return f"explain failed: {error}"


def run_shape(torch, tilefmha, shape, kv, warmup, repeat, timing, copy_gbps=None):
    """One row: ours and cuDNN on the same tensors, checked and timed."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention

    row = dict(shape, shape=shape_label(shape), status="ok")
    b, sq, sk = shape["batch"], shape["seqlen_q"], shape["seqlen_k"]
    hq, hk, d = shape["nhead_q"], shape["nhead_k"], shape["hdim"]
    dtype = getattr(torch, TORCH_DTYPES[shape["dtype"]])
    try:
        k, v = kv.get(shape)
        generator = torch.Generator(device="cuda").manual_seed(0)
        q = torch.randn(b, sq, hq, d, device="cuda", dtype=dtype, generator=generator)
    except torch.cuda.OutOfMemoryError as error:
        kv.release()
        return dict(row, status="oom", message=str(error).splitlines()[0])
    # A single query row sees every key under the bottom-right mask: no mask needed then.
    masked = shape["causal"] and sq > 1
    causal = "bottom_right" if shape["causal"] else False

    def ours():
        return tilefmha.attention(q, k, v, causal=causal)

    try:
        out = ours()  # the first call of a signature plans and JIT-compiles: never timed
        ms, row["ours_timing"] = compare.time_ms(torch, ours, warmup, repeat, timing)
    except (NotImplementedError, RuntimeError, ValueError) as error:
        torch.cuda.synchronize()
        return dict(row, status="error", message=f"{type(error).__name__}: "
                                                 f"{str(error).strip().splitlines()[0]}")
    row["ours_us"] = ms * 1e3
    add_bandwidth(row, "ours", copy_gbps)
    plan = plan_text(tilefmha, q, k, v, causal)
    if plan is not None:
        row["plan"] = plan

    # SDPA reads [batch, head, seq, dim]: transposed views of the same memory, no copies.
    mask = None
    if masked:
        last = torch.tensor(bottom_right_last_keys(sq, sk), device="cuda")
        # True: attend. 4-D so that every backend broadcasts it over batch and heads.
        mask = (torch.arange(sk, device="cuda")[None, :] <= last[:, None])[None, None]
    q_t = q.transpose(1, 2)

    def cudnn_call(k_t, v_t, gqa):
        def call():
            with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                return scaled_dot_product_attention(q_t, k_t, v_t, attn_mask=mask,
                                                    enable_gqa=gqa)
        return call

    theirs = cudnn_call(k.transpose(1, 2), v.transpose(1, 2), hq != hk)
    expected, note = first_call(theirs)
    row["cudnn_mode"] = "gqa" if hq != hk else "mha"
    if expected is None and hq != hk:
        # cuDNN refused the grouped call: give it K/V with each head repeated per query head,
        # which reads group times the bytes (the row's mode says so), if that fits in memory.
        group = hq // hk
        free, _ = torch.cuda.mem_get_info()
        need = group * shape["kv_bytes"]
        if need > 0.9 * free:
            note += f"; repeating K/V heads needs {need / 1e9:.1f} GB, {free / 1e9:.1f} GB free"
        else:
            k_r, v_r = kv.repeated_heads(group)
            theirs = cudnn_call(k_r.transpose(1, 2), v_r.transpose(1, 2), False)
            expected, repeat_note = first_call(theirs)
            if expected is not None:
                row["cudnn_mode"] = "repeat_kv"
            else:
                note += f"; with repeated K/V heads: {repeat_note}"
    if note:
        row["cudnn_note"] = note
    if expected is None:
        del row["cudnn_mode"]
        return row
    error = (out.float() - expected.transpose(1, 2).float()).abs().max().item()
    row["max_abs_error"] = error
    row["agrees"] = error <= TOLERANCE[shape["dtype"]]  # NaN compares False: a mismatch
    del out, expected
    ms, row["cudnn_timing"] = compare.time_ms(torch, theirs, warmup, repeat, timing)
    row["cudnn_us"] = ms * 1e3
    add_bandwidth(row, "cudnn", copy_gbps)
    row["ratio"] = row["cudnn_us"] / row["ours_us"]
    return row


def device_info(torch):
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    return {"name": props.name, "sm_count": props.multi_processor_count,
            "memory_gb": props.total_memory / 1e9, "torch": torch.__version__,
            "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version()}


def main(argv=None):
    args = parse_args(argv)
    try:
        sweep = load_sweep(args.sweep)
        shapes, skipped = expand_shapes(
            sweep, args.batch, args.heads, args.hdim, args.seqlen_k, args.seqlen_q, args.dtype,
            args.causal, None if args.max_kv_gb is None else args.max_kv_gb * 1e9, args.limit)
    except (OSError, ValueError) as error:
        print(f"decode_sweep: {args.sweep}: {error}", file=sys.stderr)
        return 2
    if not shapes:
        print(f"decode_sweep: no shape left after the flags ({len(skipped)} over the K+V cap)",
              file=sys.stderr)
        return 2
    if args.list_shapes:
        for index, shape in enumerate(shapes, 1):
            print(f"[{index:>3}/{len(shapes)}] {shape_label(shape):34} "
                  f"K+V {shape['kv_bytes'] / 1e6:10.1f} MB")
        print(f"decode_sweep: {len(shapes)} shapes, {len(skipped)} skipped over the K+V cap")
        return 0
    torch, reason = compare.torch_or_reason()
    if torch is None:
        print(f"decode_sweep: needs PyTorch with CUDA and a GPU: {reason}", file=sys.stderr)
        return 2
    try:
        import tilefmha
    except ImportError as error:
        print(f"decode_sweep: cannot import tilefmha ({error}); build the package for this "
              "Python (docs/python.md) and set PYTHONPATH=BUILD/python", file=sys.stderr)
        return 2
    # SDPA warns once per refused backend; first_call records those reasons into the rows.
    warnings.filterwarnings("ignore", message=".*kernel not used because.*")
    warnings.filterwarnings("ignore", message=".*has been runtime disabled.*")

    device = device_info(torch)
    print(f"decode_sweep: {device['name']} ({device['sm_count']} SMs), PyTorch {device['torch']}, "
          f"CUDA {device['cuda']}, cuDNN {device['cudnn']}; {len(shapes)} shapes "
          f"({len(skipped)} skipped over the K+V cap), {args.dtype or sweep['dtype']}, "
          f"{'bottom-right causal' if args.causal else 'non-causal'}, median of {args.repeat} "
          f"{args.timing} timings", flush=True)
    copy = measure_copy_gbps(torch, args.copy_gib, args.warmup, args.repeat)
    print(f"copy bandwidth: {copy['gbps']:.0f} GB/s (device-to-device copy of "
          f"{copy['bytes'] / 1e9:.2f} GB, read + written, {copy['timing']} timing)")
    print("ratio = cuDNN us / ours us (above 1: ours faster); GB/s = (Q + K + V + O bytes) / time; "
          "%copy = GB/s / copy bandwidth (a read-mostly kernel can pass 100%)")
    print(TABLE_HEADER, flush=True)

    kv = KvInputs(torch)
    rows = []
    for index, shape in enumerate(shapes, 1):
        row = run_shape(torch, tilefmha, shape, kv, args.warmup, args.repeat, args.timing,
                        copy["gbps"])
        row["index"] = index
        rows.append(row)
        print(format_row(row, len(shapes), args.timing), flush=True)
    kv.release()

    summary = summarize(rows)
    print(format_summary(summary), flush=True)
    if args.csv:
        write_csv(args.csv, rows)
    if args.json:
        write_json(args.json, {
            "device": device, "copy_bandwidth": copy, "sweep": str(args.sweep),
            "timing": {"method": args.timing, "warmup": args.warmup, "repeat": args.repeat},
            "skipped_over_kv_cap": [shape_label(shape) for shape in skipped],
            "rows": rows, "summary": summary})
    if summary["failed"] or summary["mismatches"]:
        print(f"decode_sweep: {summary['failed']} shapes failed, {summary['mismatches']} outputs "
              "differ beyond tolerance", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
