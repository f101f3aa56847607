#!/usr/bin/env python3
"""Cost model of context-parallel ring attention (zigzag sharding): per ring step, the bytes a
rank sends, the compute and communication times, whether the step is compute-bound, and the
predicted time, speedup and efficiency of N GPUs over one. docs/ring_cost_model.md derives it.

With L = S / N tokens per rank (S the sequence length, N the GPUs), H query heads, Hk K/V heads,
head dim d and b bytes per element:

  forward flops of a block of q query rows and k key rows: 4 * q * k * d * H (2 for Q K^T, 2
  for P V; a causal block counts its visible half); the backward does 2.5 times that.
  causal zigzag: every step of every rank covers L^2 / 2 (query, key) pairs, so a step's
  forward does 2 * L^2 * d * H flops (full attention: L^2 pairs, twice that).
  forward bytes per step: the K and V shard, 2 * L * Hk * d * b; the backward also sends the
  shard's dK and dV in fp32, 2 * L * Hk * d * 4.
  compute time = flops / rate; communication time = latency + bytes / bandwidth.

Compute per step falls as (S/N)^2 and bytes as S/N, so the ring hides its communication once
S/N reaches a threshold that depends on the link, the heads and the rates but not on N: the
minimum sequence length at which the ring is compute-bound is N times that threshold.

    python3 bench/ring_cost_model.py                      # default tables and thresholds
    python3 bench/ring_cost_model.py --seqlen 256k --gpus 8,16 --link ib_ndr400 --json o.json

Python 3 standard library only; data/context_parallel/ holds the default links and rates.
"""

import argparse
import json
import math
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
DATA = ROOT / "data" / "context_parallel"
INTERCONNECTS = DATA / "interconnects.json"
COST_MODEL = DATA / "cost_model.json"

FORWARD_FLOPS_PER_PAIR_HEAD_DIM = 4  # 2 for S = Q K^T, 2 for O = P V, per (pair, head, dim)
PASSES = ("forward", "backward")


def load_json(path):
    return json.loads(pathlib.Path(path).read_text())


def load_links(path=INTERCONNECTS):
    """The named links of interconnects.json: {name: {bandwidth_gbs, latency_us, ...}}."""
    links = load_json(path)["links"]
    for name, link in links.items():
        for key in ("bandwidth_gbs", "latency_us"):
            if not isinstance(link.get(key), (int, float)) or link[key] < 0:
                raise ValueError(f"{path}: link '{name}' needs a non-negative number '{key}'")
        if link["bandwidth_gbs"] <= 0:
            raise ValueError(f"{path}: link '{name}' has bandwidth_gbs {link['bandwidth_gbs']}")
    return links


def load_defaults(path=COST_MODEL):
    return load_json(path)


# ---------------------------------------------------------------------------------------------
# The model


def block_forward_flops(q_rows, k_rows, hdim, heads):
    """Forward flops of a block of q_rows queries against k_rows keys with no mask."""
    return FORWARD_FLOPS_PER_PAIR_HEAD_DIM * q_rows * k_rows * hdim * heads


def step_pairs(shard_tokens, causal=True):
    """(query, key) pairs one ring step covers on every rank: L^2 / 2 under zigzag causal (the
    own shard's causal half at step 0, a front or back half of the shard at every other step),
    L^2 without a mask."""
    return shard_tokens * shard_tokens / (2 if causal else 1)


def step_flops(shard_tokens, hdim, heads, causal=True, backward_ratio=2.5, pass_="forward"):
    pairs = step_pairs(shard_tokens, causal)
    forward = FORWARD_FLOPS_PER_PAIR_HEAD_DIM * pairs * hdim * heads
    return forward * (backward_ratio if pass_ == "backward" else 1.0)


def step_bytes(shard_tokens, kv_heads, hdim, dtype_bytes, gradient_bytes=4, pass_="forward"):
    """Bytes a rank sends per step: its held K and V shard; the backward adds dK and dV."""
    kv = 2 * shard_tokens * kv_heads * hdim * dtype_bytes
    if pass_ == "backward":
        kv += 2 * shard_tokens * kv_heads * hdim * gradient_bytes
    return kv


def home_bytes(shard_tokens, kv_heads, hdim, gradient_bytes=4):
    """The backward's last hop: dK and dV only, back to the shard's owner."""
    return 2 * shard_tokens * kv_heads * hdim * gradient_bytes


def comm_seconds(nbytes, link):
    return link["latency_us"] * 1e-6 + nbytes / (link["bandwidth_gbs"] * 1e9)


def one_gpu_flops(seqlen, hdim, heads, causal=True, backward_ratio=2.5, pass_="forward"):
    """The whole sequence on one GPU: S^2 / 2 pairs causal (S^2 full)."""
    return step_flops(seqlen, hdim, heads, causal, backward_ratio, pass_)


class Model:
    """The shape, rates and flop ratios of one set of predictions."""

    def __init__(self, heads, kv_heads, hdim, dtype_bytes, forward_tflops, backward_tflops,
                 backward_ratio=2.5, gradient_bytes=4, causal=True):
        if heads <= 0 or kv_heads <= 0 or heads % kv_heads:
            raise ValueError(f"kv heads {kv_heads} must divide heads {heads}")
        self.heads, self.kv_heads, self.hdim = heads, kv_heads, hdim
        self.dtype_bytes, self.gradient_bytes = dtype_bytes, gradient_bytes
        self.rates = {"forward": forward_tflops * 1e12, "backward": backward_tflops * 1e12}
        self.backward_ratio, self.causal = backward_ratio, causal

    @classmethod
    def from_defaults(cls, defaults, **overrides):
        shape = defaults["default_shape"]
        values = {
            "heads": shape["heads"], "kv_heads": shape["kv_heads"], "hdim": shape["hdim"],
            "dtype_bytes": shape["dtype_bytes"],
            "forward_tflops": defaults["forward_causal_bf16_hdim128_tflops"],
            "backward_tflops": defaults["backward_causal_bf16_hdim128_tflops"],
            "backward_ratio": defaults["backward_flops_per_forward_flop"],
            "gradient_bytes": defaults["gradient_bytes"],
        }
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)

    def compute_seconds(self, shard_tokens, pass_):
        flops = step_flops(shard_tokens, self.hdim, self.heads, self.causal,
                           self.backward_ratio, pass_)
        return flops / self.rates[pass_]

    def bytes(self, shard_tokens, pass_):
        return step_bytes(shard_tokens, self.kv_heads, self.hdim, self.dtype_bytes,
                          self.gradient_bytes, pass_)

    def step(self, seqlen, gpus, link, pass_="forward"):
        """One pass of the ring: per-step figures, the predicted time and the speedup.

        The next shard's transfer overlaps the current step's compute, so a step that sends
        takes max(compute, comm). The forward's last step sends nothing; the backward's last
        step is followed by one hop that brings dK/dV home, with no compute to hide behind."""
        shard = seqlen / gpus
        compute = self.compute_seconds(shard, pass_)
        nbytes = self.bytes(shard, pass_) if gpus > 1 else 0
        comm = comm_seconds(nbytes, link) if gpus > 1 else 0.0
        time = (gpus - 1) * max(compute, comm) + compute
        if pass_ == "backward" and gpus > 1:
            time += comm_seconds(home_bytes(shard, self.kv_heads, self.hdim,
                                            self.gradient_bytes), link)
        single = one_gpu_flops(seqlen, self.hdim, self.heads, self.causal, self.backward_ratio,
                               pass_) / self.rates[pass_]
        return {
            "pass": pass_, "seqlen": seqlen, "gpus": gpus, "shard_tokens": shard,
            "bytes_per_step": nbytes, "compute_s": compute, "comm_s": comm,
            "compute_bound": comm <= compute, "time_s": time, "one_gpu_s": single,
            "speedup": single / time, "efficiency": single / time / gpus,
        }

    def threshold_shard_tokens(self, link, pass_="forward"):
        """The least S/N at which a step's compute covers its communication: the positive
        root of  a L^2 - m L - latency = 0  with compute = a L^2 and comm = latency + m L."""
        a = self.compute_seconds(1.0, pass_)
        m = self.bytes(1.0, pass_) / (link["bandwidth_gbs"] * 1e9)
        latency = link["latency_us"] * 1e-6
        return (m + math.sqrt(m * m + 4 * a * latency)) / (2 * a)

    def threshold_seqlen(self, gpus, link, pass_="forward"):
        """The least S, a multiple of 2N (zigzag), whose ring of N GPUs is compute-bound."""
        unit = 2 * gpus
        shard = self.threshold_shard_tokens(link, pass_)
        seqlen = math.ceil(shard * gpus / unit) * unit
        # Rounding in the root must not leave the step a hair short of compute-bound.
        while not self.step(seqlen, gpus, link, pass_)["compute_bound"]:
            seqlen += unit
        return seqlen


def within_domain(link, gpus):
    return link.get("max_gpus") is None or gpus <= link["max_gpus"]


def predict(model, links, seqlens, gpus_list):
    """Every (link, seqlen, N, pass) row, N beyond a link's domain left out (and listed), and the
    thresholds of every (link, N)."""
    rows, left_out, thresholds = [], [], []
    for name, link in links.items():
        for gpus in gpus_list:
            if not within_domain(link, gpus):
                left_out.append({"link": name, "gpus": gpus})
                continue
            entry = {"link": name, "gpus": gpus}
            for pass_ in PASSES:
                entry[f"{pass_}_shard_tokens"] = model.threshold_shard_tokens(link, pass_)
                entry[f"{pass_}_seqlen"] = model.threshold_seqlen(gpus, link, pass_)
            thresholds.append(entry)
            for seqlen in seqlens:
                for pass_ in PASSES:
                    rows.append({"link": name, **model.step(seqlen, gpus, link, pass_)})
    return rows, left_out, thresholds


# ---------------------------------------------------------------------------------------------
# Output


def tokens(n):
    """8192 -> 8k, 1048576 -> 1M; other counts as they are."""
    n = int(round(n))
    if n >= 2**20 and n % 2**20 == 0:
        return f"{n // 2**20}M"
    if n >= 1024 and n % 1024 == 0:
        return f"{n // 1024}k"
    return str(n)


def table(rows, link, name):
    out = [f"{link['name']} ({name}): {link['bandwidth_gbs']:g} GB/s per direction effective, "
           f"{link['latency_us']:g} us per message",
           f"{'pass':<9}{'S':>6}{'N':>4}{'S/N':>7}{'MB/step':>9}{'compute ms':>12}"
           f"{'comm ms':>9}{'bound':>9}{'time ms':>10}{'speedup':>9}{'eff':>6}"]
    for r in rows:
        out.append(f"{r['pass']:<9}{tokens(r['seqlen']):>6}{r['gpus']:>4}"
                   f"{tokens(r['shard_tokens']):>7}{r['bytes_per_step'] / 1e6:>9.1f}"
                   f"{r['compute_s'] * 1e3:>12.3f}{r['comm_s'] * 1e3:>9.3f}"
                   f"{'compute' if r['compute_bound'] else 'comm':>9}{r['time_s'] * 1e3:>10.2f}"
                   f"{r['speedup']:>9.2f}{r['efficiency']:>6.2f}")
    return "\n".join(out)


def threshold_table(thresholds):
    out = ["Compute-bound when S/N >= threshold (independent of N); least S (a multiple of 2N):",
           f"{'link':<12}{'N':>4}{'fwd S/N':>9}{'fwd S':>9}{'bwd S/N':>9}{'bwd S':>9}"]
    for t in thresholds:
        out.append(f"{t['link']:<12}{t['gpus']:>4}{math.ceil(t['forward_shard_tokens']):>9}"
                   f"{tokens(t['forward_seqlen']):>9}{math.ceil(t['backward_shard_tokens']):>9}"
                   f"{tokens(t['backward_seqlen']):>9}")
    return "\n".join(out)


def report(model, links, rows, left_out, thresholds):
    causal = "causal" if model.causal else "no mask"
    parts = [f"Ring attention cost model: H = {model.heads}, Hk = {model.kv_heads}, "
             f"d = {model.hdim}, {model.dtype_bytes} bytes per element, {causal}; forward "
             f"{model.rates['forward'] / 1e12:g} TFLOP/s, backward "
             f"{model.rates['backward'] / 1e12:g} TFLOP/s (x{model.backward_ratio:g} flops)."]
    for name, link in links.items():
        mine = [r for r in rows if r["link"] == name]
        if mine:
            parts.append(table(mine, link, name))
        skipped = [e["gpus"] for e in left_out if e["link"] == name]
        if skipped:
            parts.append(f"{name}: N = {', '.join(map(str, skipped))} left out: the link joins "
                         f"at most {link['max_gpus']} GPUs (one host); a larger NVLink domain "
                         "(e.g. NVL72) is other hardware with other rates.")
    parts.append(threshold_table(thresholds))
    return "\n\n".join(parts)


# ---------------------------------------------------------------------------------------------
# Command line


def parse_size(text):
    """A positive length: 131072, or with a k (x1024) or M (x1048576) suffix."""
    text = text.strip()
    scale = {"k": 1024, "K": 1024, "m": 2**20, "M": 2**20}.get(text[-1:], 1)
    digits = text[:-1] if scale > 1 else text
    if not digits.isdigit() or int(digits) <= 0:
        raise argparse.ArgumentTypeError(f"'{text}' is not a positive length (k, M suffixes)")
    return int(digits) * scale


def size_list(text):
    return [parse_size(t) for t in text.split(",")]


def positive_int_list(text):
    try:
        values = [int(t) for t in text.split(",")]
    except ValueError:
        values = []
    if not values or any(v <= 0 for v in values):
        raise argparse.ArgumentTypeError(f"'{text}' is not a list of positive integers")
    return values


def positive_int(text):
    values = positive_int_list(text)
    if len(values) != 1:
        raise argparse.ArgumentTypeError(f"'{text}' is not one positive integer")
    return values[0]


def positive_float(text):
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"'{text}' is not a positive number")
    return value


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seqlen", type=size_list, help="total sequence lengths S "
                        "(comma list; k and M suffixes); default: the cost model file's")
    parser.add_argument("--heads", type=positive_int, help="query heads H")
    parser.add_argument("--kv-heads", type=positive_int, help="K/V heads Hk")
    parser.add_argument("--hdim", type=positive_int, help="head dim d")
    parser.add_argument("--dtype-bytes", type=positive_int, help="bytes per Q/K/V element")
    parser.add_argument("--gpus", type=positive_int_list, help="ring sizes N (comma list)")
    parser.add_argument("--link", default="all",
                        help="a link of the interconnect file, or 'all' (default)")
    parser.add_argument("--forward-tflops", type=positive_float, help="forward rate, TFLOP/s")
    parser.add_argument("--backward-tflops", type=positive_float, help="backward rate, TFLOP/s")
    parser.add_argument("--no-causal", action="store_true", help="full attention, no mask")
    parser.add_argument("--interconnects", type=pathlib.Path, default=INTERCONNECTS)
    parser.add_argument("--cost-model", type=pathlib.Path, default=COST_MODEL)
    parser.add_argument("--json", type=pathlib.Path, help="also write the rows here")
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    links = load_links(args.interconnects)
    if args.link != "all":
        if args.link not in links:
            print(f"error: unknown link '{args.link}'; the file names {', '.join(links)}",
                  file=sys.stderr)
            return 2
        links = {args.link: links[args.link]}
    defaults = load_defaults(args.cost_model)
    try:
        model = Model.from_defaults(defaults, heads=args.heads, kv_heads=args.kv_heads,
                                    hdim=args.hdim, dtype_bytes=args.dtype_bytes,
                                    forward_tflops=args.forward_tflops,
                                    backward_tflops=args.backward_tflops,
                                    causal=not args.no_causal)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    seqlens = args.seqlen or defaults["default_seqlens"]
    gpus_list = args.gpus or defaults["default_gpus"]
    for seqlen in seqlens:
        for gpus in gpus_list:
            if seqlen % (2 * gpus):
                print(f"error: S = {seqlen} is not a multiple of 2N = {2 * gpus} (zigzag cuts "
                      "the sequence into 2N chunks)", file=sys.stderr)
                return 2
    rows, left_out, thresholds = predict(model, links, seqlens, gpus_list)
    print(report(model, links, rows, left_out, thresholds))
    if args.json:
        args.json.write_text(json.dumps({
            "model": {"heads": model.heads, "kv_heads": model.kv_heads, "hdim": model.hdim,
                      "dtype_bytes": model.dtype_bytes, "causal": model.causal,
                      "forward_tflops": model.rates["forward"] / 1e12,
                      "backward_tflops": model.rates["backward"] / 1e12,
                      "backward_flops_per_forward_flop": model.backward_ratio},
            "links": links, "rows": rows, "left_out": left_out, "thresholds": thresholds,
        }, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
