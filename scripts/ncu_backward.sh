#!/usr/bin/env bash
# Nsight Compute source counters of the backward main kernel (bwd_dq_dk_dv) for FA3-protocol
# shapes, on a GPU host with PyTorch: per shape, the details page and the SASS page with warp
# stall samples per instruction, plus the profiled kernel's cubin (built with -lineinfo), all in
# one tarball ${OUT:-out}/ncu_backward.tgz (the device tool returns a handful of files). Then,
# anywhere with readelf:
#   python3 scripts/ncu_source_lines.py d128_s1024_causal-true_sass.csv d128_s1024_causal-true.cubin \
#     --context bwd_sm90.h
#   usage: PYTHONPATH=gpu_bundle/python scripts/ncu_backward.sh HDIM SEQLEN CAUSAL(true|false) [...]
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=${OUT:-$root/out}
work=$(mktemp -d)
mkdir -p "$out"
export TILEFMHA_DATA_DIR=${TILEFMHA_DATA_DIR:-$root/data}
export TILEFMHA_CACHE_DIR=$work/cache TILEFMHA_LINEINFO=1 PYTHONUNBUFFERED=1
if (($# == 0 || $# % 3 != 0)); then
  echo "usage: $0 HDIM SEQLEN CAUSAL(true|false) [HDIM SEQLEN CAUSAL ...]" >&2
  exit 2
fi
while (($#)); do
  hdim=$1 seqlen=$2 causal=$3
  shift 3
  name=d${hdim}_s${seqlen}_causal-${causal}
  # kernel_breakdown's first calls compile and warm up; profile one launch after them.
  ncu --kernel-name regex:bwd_dq_dk_dv --launch-skip 2 --launch-count 1 \
    --section SpeedOfLight --section WarpStateStats --section SourceCounters \
    -o "$work/$name" -f python3 "$root/bench/kernel_breakdown.py" --hdim "$hdim" \
    --seqlen "$seqlen" --causal "$causal" --repeat 1 >"$work/$name.log" 2>&1
  echo "$name: ncu exit $?"
  ncu -i "$work/$name.ncu-rep" --page details >"$work/$name.txt" 2>&1
  ncu -i "$work/$name.ncu-rep" --page source --csv --print-source sass >"$work/${name}_sass.csv" 2>&1
  kernel=$(sed -n '1s/^"Kernel Name","\([^"]*\)".*/\1/p' "$work/${name}_sass.csv")
  # The cubin whose string table holds the name whole (names of other forms extend it).
  python3 - "$kernel" "$work/cache" "$work/$name.cubin" <<'PY'
import pathlib, shutil, sys
kernel, cache, target = sys.argv[1].encode() + b"\0", pathlib.Path(sys.argv[2]), sys.argv[3]
for entry in cache.glob("*.cubin"):
    if sys.argv[1] and kernel in entry.read_bytes():
        shutil.copy(entry, target)
PY
  [[ -f $work/$name.cubin ]] || echo "$name: the profiled kernel's cubin was not found" >&2
done
tar czf "$out/ncu_backward.tgz" -C "$work" --exclude cache --exclude '*.ncu-rep' .
echo "wrote $out/ncu_backward.tgz"
rm -rf "$work"
