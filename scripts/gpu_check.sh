#!/usr/bin/env bash
# One call on a GPU host: run every GPU test binary and the short benchmark from a build made
# elsewhere (scripts/bundle_gpu.sh) or here, and write logs and a summary under ${OUT:-out}.
#   usage: TILEFMHA_BUILD_DIR=gpu_bundle scripts/gpu_check.sh
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=${TILEFMHA_BUILD_DIR:-$root/build}
out=${OUT:-$root/out}
mkdir -p "$out"
# Binaries carried from another machine find their data and CLI through the environment.
export TILEFMHA_DATA_DIR=${TILEFMHA_DATA_DIR:-$root/data}
export TILEFMHA_CLI=${TILEFMHA_CLI:-$build_dir/tools/tilefmha}
export TILEFMHA_CACHE_DIR=${TILEFMHA_CACHE_DIR:-/tmp/tilefmha-cache}

{
  echo "# gpu_check $(date -u +%FT%TZ)"
  nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader
} | tee "$out/summary.txt"

if [[ ! -x "$build_dir/tools/tilefmha" ]]; then
  echo "no build at $build_dir: build elsewhere and carry scripts/bundle_gpu.sh's gpu_bundle" |
    tee -a "$out/summary.txt"
  exit 1
fi

status=0
for test_binary in "$build_dir"/tests/*_gpu_test; do
  name=$(basename "$test_binary")
  "$test_binary" --gtest_brief=1 >"$out/$name.log" 2>&1
  code=$?
  ((code == 0)) || status=1
  echo "$name: exit $code, $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$out/$name.log" | tr '\n' ' ')" |
    tee -a "$out/summary.txt"
done

"$root/bench/run_short.sh" "$build_dir" "$out" >"$out/bench.log" 2>&1 || status=1
grep -E "summary|geometric" "$out/bench_fwd.txt" | tee -a "$out/summary.txt"
exit $status
