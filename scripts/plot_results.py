#!/usr/bin/python3
"""Plots a `tilefmha bench --json` result: TFLOP/s against sequence length.

One panel per head dim; for each mask (causal, non-causal) one line for our kernel and one per
anchor (cuDNN, FlashAttention-2) present in the rows. Usage:

    /usr/bin/python3 scripts/plot_results.py RESULTS.json -o OUT.png

Needs matplotlib (Debian's python3-matplotlib, installed by scripts/deps.sh); it draws with the
Agg backend, so no display is needed.
"""

import argparse
import json
import sys

# The anchor columns of a bench row (docs/bench.md) and how the legend names them.
ANCHOR_COLUMNS = (("anchor_cudnn_tflops", "cuDNN"), ("anchor_fa2_tflops", "FA2"))
REQUIRED_ROW_KEYS = ("problem_hdim_q", "problem_seqlen_q", "problem_causal", "status", "tflops")


class ResultsError(Exception):
    """A results file that is not a bench JSON; the message names the file and what is wrong."""


def load_rows(path):
    """The rows of a bench JSON file that ran (status ok), checked for the keys the plot reads."""
    try:
        with open(path, encoding="utf-8") as handle:
            document = json.load(handle)
    except OSError as error:
        raise ResultsError(f"{path}: cannot read: {error.strerror}") from error
    except json.JSONDecodeError as error:
        raise ResultsError(
            f"{path}: not valid JSON (line {error.lineno}, column {error.colno}: {error.msg})"
        ) from error
    if not isinstance(document, dict) or not isinstance(document.get("rows"), list):
        raise ResultsError(f"{path}: expected an object with a 'rows' list (tilefmha bench --json)")
    rows = []
    for index, row in enumerate(document["rows"]):
        if not isinstance(row, dict):
            raise ResultsError(f"{path}: rows[{index}] is not an object")
        missing = [key for key in REQUIRED_ROW_KEYS if key not in row]
        if missing:
            raise ResultsError(f"{path}: rows[{index}] lacks {', '.join(missing)}")
        if row["status"] == "ok":
            rows.append(row)
    if not rows:
        raise ResultsError(f"{path}: no row with status 'ok' to plot")
    return document, rows


def series_by_hdim(rows):
    """{hdim: {(label, causal): [(seqlen, tflops), ...] sorted by seqlen}}."""
    panels = {}
    for row in rows:
        hdim, causal = row["problem_hdim_q"], bool(row["problem_causal"])
        columns = [("tilefmha", "tflops")] + [(label, key) for key, label in ANCHOR_COLUMNS]
        for label, key in columns:
            value = row.get(key)
            if value is None:  # a shape without an anchor
                continue
            panel = panels.setdefault(hdim, {})
            panel.setdefault((label, causal), []).append((row["problem_seqlen_q"], float(value)))
    for panel in panels.values():
        for points in panel.values():
            points.sort()
    return dict(sorted(panels.items()))


def plot(document, rows, output):
    import matplotlib

    matplotlib.use("Agg")  # files only: the build and GPU hosts have no display
    import matplotlib.pyplot as plt

    panels = series_by_hdim(rows)
    figure, axes = plt.subplots(
        1, len(panels), figsize=(5 * len(panels) + 2, 4), squeeze=False, sharey=True
    )
    colors = {"tilefmha": "tab:red", "cuDNN": "tab:blue", "FA2": "tab:green"}
    for axis, (hdim, series) in zip(axes[0], panels.items()):
        for (label, causal), points in sorted(series.items()):
            seqlens = [seqlen for seqlen, _ in points]
            axis.plot(
                seqlens,
                [tflops for _, tflops in points],
                marker="o",
                linestyle="-" if causal else "--",
                color=colors.get(label),
                label=f"{label} ({'causal' if causal else 'non-causal'})",
            )
        axis.set_xscale("log", base=2)
        lengths = sorted({seqlen for points in series.values() for seqlen, _ in points})
        axis.set_xticks(lengths, [f"{seqlen // 1024}k" if seqlen >= 1024 else str(seqlen)
                                  for seqlen in lengths])
        axis.minorticks_off()
        axis.set_title(f"hdim {hdim}")
        axis.set_xlabel("sequence length")
        axis.grid(True, alpha=0.3)
    axes[0][0].set_ylabel("TFLOP/s")
    # One legend beside the panels, where it cannot hide a line.
    handles, labels = axes[0][-1].get_legend_handles_labels()
    figure.legend(handles, labels, loc="center right", fontsize="small")
    card = document.get("device", {}).get("card", "")
    figure.suptitle(f"tilefmha forward {card}".strip())
    figure.tight_layout(rect=(0, 0, 0.88, 1))
    figure.savefig(output, dpi=100)
    plt.close(figure)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", help="a tilefmha bench --json file")
    parser.add_argument("-o", "--output", required=True, help="the PNG to write")
    args = parser.parse_args(argv)
    try:
        document, rows = load_rows(args.results)
    except ResultsError as error:
        print(f"plot_results: {error}", file=sys.stderr)
        return 2
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print(
            "plot_results: matplotlib is missing (install python3-matplotlib, or run "
            "scripts/deps.sh) and run with /usr/bin/python3",
            file=sys.stderr,
        )
        return 2
    plot(document, rows, args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
