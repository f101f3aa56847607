#!/usr/bin/env bash
# Nsight Compute profile of the forward kernel the dispatcher picks for FA3-protocol shapes, one
# launch per shape, on a GPU host: throughput (SOL), memory, warp stalls, scheduler and occupancy
# sections as text under ${OUT:-out}/ncu_*.txt. TILEFMHA_NCU_SOURCE=1 also samples warp stalls per
# SASS instruction (ncu_*_sass.csv: the source page of the report, one row per instruction).
#   usage: TILEFMHA_BUILD_DIR=gpu_bundle scripts/ncu_profile.sh HDIM SEQLEN CAUSAL(yes|no) [...]
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=${TILEFMHA_BUILD_DIR:-$root/build}
out=${OUT:-$root/out}
mkdir -p "$out"
export TILEFMHA_DATA_DIR=${TILEFMHA_DATA_DIR:-$root/data}
export TILEFMHA_CACHE_DIR=${TILEFMHA_CACHE_DIR:-/tmp/tilefmha-cache}
if (($# == 0 || $# % 3 != 0)); then
  echo "usage: $0 HDIM SEQLEN CAUSAL(yes|no) [HDIM SEQLEN CAUSAL ...]" >&2
  exit 2
fi
while (($#)); do
  hdim=$1 seqlen=$2 causal=$3
  shift 3
  name=ncu_d${hdim}_s${seqlen}_causal-${causal}.txt
  # The bench's first launches time the host cost; skip them and profile one timed run.
  report=()
  [[ ${TILEFMHA_NCU_SOURCE:-0} == 1 ]] && report=(--section SourceCounters -o "/tmp/${name%.txt}" -f)
  ncu --kernel-name regex:tilefmha_fwd --launch-skip 30 --launch-count 1 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats \
    --section SchedulerStats --section Occupancy --section LaunchStats "${report[@]}" \
    "$build_dir/tools/tilefmha" bench --sweep "$root/bench/fa3_sweep.json" --hdim "$hdim" \
    --seqlen "$seqlen" --causal "$causal" --warmup 3 --repeat 15 --no-progress >"$out/$name" 2>&1
  echo "$name: exit $?"
  if ((${#report[@]})); then
    ncu -i "/tmp/${name%.txt}.ncu-rep" --page details >>"$out/$name" 2>&1
    ncu -i "/tmp/${name%.txt}.ncu-rep" --page source --csv --print-source sass \
      >"$out/${name%.txt}_sass.csv" 2>&1
  fi
done
