#!/usr/bin/env bash
# Nsight Compute profile of one decode call of ours and one of SDPA cuDNN's per shape, on a GPU
# host: every kernel each launches (split, combine, cuDNN's), with speed of light, memory, launch
# and occupancy sections and the DRAM bytes, as text under ${OUT:-out}/ncu_decode_<shape>.txt.
# Clocks are left as they run (not locked to base) and caches are flushed before each kernel,
# as a decode over a cache larger than L2 finds them.
#   usage: PYTHONPATH=<build>/python scripts/ncu_decode.sh B,HQ,HK,D,SK[,SQ] [...]
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=${OUT:-$root/out}
mkdir -p "$out"
export TILEFMHA_DATA_DIR=${TILEFMHA_DATA_DIR:-$root/data}
export TILEFMHA_CACHE_DIR=${TILEFMHA_CACHE_DIR:-/tmp/tilefmha-cache}
if (($# == 0)); then
  echo "usage: $0 B,HQ,HK,D,SK[,SQ] [...]" >&2
  exit 2
fi
for shape in "$@"; do
  name=ncu_decode_${shape//,/_}.txt
  ncu --profile-from-start off --clock-control none --cache-control all \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section LaunchStats \
    --section Occupancy \
    --metrics dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct \
    python3 "$root/bench/decode_calls.py" --profile --shapes "$shape" >"$out/$name" 2>&1
  echo "$name: exit $?"
done
