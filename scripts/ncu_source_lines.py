#!/usr/bin/env python3
"""Nsight Compute's per-instruction warp-state samples, summed by kernel source line.

`ncu --section SourceCounters` samples where warps stall, per SASS instruction; its source page
exported as CSV (`ncu -i R.ncu-rep --page source --csv --print-source sass`) lists them by
address. A cubin built with -lineinfo (TILEFMHA_LINEINFO=1, docs/jit.md) carries a line table
from address to file and line; `readelf --debug-dump=decodedline` prints it. This joins the two:
samples per innermost source line, and per line of a context file (the kernel's own header,
e.g. bwd_sm90.h), which says which call site an inlined helper's samples belong to.

    python3 scripts/ncu_source_lines.py out/d128_sass.csv out/kernel.cubin --context bwd_sm90.h
    python3 scripts/ncu_source_lines.py CSV CUBIN --context bwd_sm90.h --range 0x0-0x8700

`--range` keeps one role's code (warp-specialized kernels lay the roles out one after another;
the context lines of the output show where each begins). The cubin may be a kernel-cache entry
(its 64-byte TFMHAJIT header is skipped) or a plain ELF. Needs readelf (binutils).
"""

import argparse
import bisect
import collections
import csv
import pathlib
import re
import subprocess
import sys
import tempfile

CACHE_MAGIC = b"TFMHAJIT"
CACHE_HEADER_BYTES = 64
SAMPLES = "Warp Stall Sampling (All Samples)"


def elf_bytes(data):
    """The ELF image of a cubin file's bytes: a cache entry's payload, or the file itself."""
    return data[CACHE_HEADER_BYTES:] if data.startswith(CACHE_MAGIC) else data


def parse_line_table(text):
    """(address, file name, line) rows of readelf's decoded line table, sorted by address."""
    rows, current = [], None
    for line in text.splitlines():
        header = re.match(r"^(/\S+|\S+\.\w+):$", line)
        if header:
            current = header.group(1).split("/")[-1]
            continue
        entry = re.match(r"^(\S+)\s+(\d+)\s+(0x[0-9a-f]+|\d+)(\s|$)", line)
        if entry and current:
            address = int(entry.group(3), 0)
            rows.append((address, current, int(entry.group(2))))
    return sorted(rows)


def read_line_table(cubin_path):
    with tempfile.NamedTemporaryFile(suffix=".elf") as elf:
        elf.write(elf_bytes(pathlib.Path(cubin_path).read_bytes()))
        elf.flush()
        done = subprocess.run(["readelf", "--debug-dump=decodedline", elf.name],
                              capture_output=True, text=True, check=False)
    table = parse_line_table(done.stdout)
    if not table:
        raise ValueError(f"{cubin_path}: no line table (was it built with -lineinfo?)")
    return table


def parse_sass_csv(text):
    """(offset from the first instruction, SASS text, samples, {stall reason: samples}) rows."""
    rows = list(csv.reader(text.splitlines()))
    start = next(i for i, row in enumerate(rows) if row and row[0] == "Address")
    header, body = rows[start], [row for row in rows[start + 1:] if row]
    column = {name: i for i, name in enumerate(header)}
    reasons = [(name[len("stall_"):], i) for name, i in column.items()
               if name.startswith("stall_") and "Not Issued" not in name]
    base = int(body[0][column["Address"]], 16)
    out = []
    for row in body:
        stalls = {reason: int(row[i] or 0) for reason, i in reasons if row[i] not in ("", "0")}
        out.append((int(row[column["Address"]], 16) - base, row[column["Source"]].strip(),
                    int(row[column[SAMPLES]] or 0), stalls))
    return out


class LineTable:
    def __init__(self, rows):
        self.rows = rows
        self.addresses = [address for address, _, _ in rows]

    def innermost(self, offset):
        i = bisect.bisect_right(self.addresses, offset) - 1
        return self.rows[i][1:] if i >= 0 else ("?", 0)

    def context(self, offset, file_name):
        """The last line of `file_name` at or before the address: the call site being run."""
        i = bisect.bisect_right(self.addresses, offset) - 1
        while i >= 0 and self.rows[i][1] != file_name:
            i -= 1
        return self.rows[i][2] if i >= 0 else 0


def attribute(instructions, table, context_file=None, low=0, high=None):
    """Samples per innermost (file, line) and per context line, within [low, high)."""
    by_line, by_context = collections.Counter(), collections.Counter()
    reasons = collections.defaultdict(collections.Counter)
    total = 0
    for offset, _, samples, stalls in instructions:
        if offset < low or (high is not None and offset >= high):
            continue
        total += samples
        by_line[table.innermost(offset)] += samples
        if context_file:
            line = table.context(offset, context_file)
            by_context[line] += samples
            reasons[line].update(stalls)
    return total, by_line, by_context, reasons


def parse_range(text):
    low, _, high = text.partition("-")
    return int(low, 16), int(high, 16)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("csv", type=pathlib.Path, help="ncu source page, SASS view, as CSV")
    parser.add_argument("cubin", type=pathlib.Path, help="the profiled kernel's cubin")
    parser.add_argument("--context", help="file whose lines name the call sites, e.g. bwd_sm90.h")
    parser.add_argument("--range", type=parse_range, help="address range LOW-HIGH (hex) to keep")
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args(argv)
    try:
        table = LineTable(read_line_table(args.cubin))
    except (OSError, ValueError) as error:
        print(f"ncu_source_lines: {error}", file=sys.stderr)
        return 2
    instructions = parse_sass_csv(args.csv.read_text())
    low, high = args.range or (0, None)
    total, by_line, by_context, reasons = attribute(instructions, table, args.context, low, high)
    print(f"{total} samples")
    if args.context:
        print(f"by {args.context} line (call site):")
        for line, samples in by_context.most_common(args.top):
            top = ", ".join(f"{name} {100 * n // max(samples, 1)}%"
                            for name, n in reasons[line].most_common(3))
            print(f"  {line:5d} {samples:9d} {100 * samples / max(total, 1):5.1f}%  {top}")
    print("by innermost line:")
    for (file_name, line), samples in by_line.most_common(args.top):
        print(f"  {file_name}:{line} {samples} {100 * samples / max(total, 1):.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
