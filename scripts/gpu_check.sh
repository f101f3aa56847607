#!/usr/bin/env bash
# One call on a GPU host: build (or reuse a carried build), run the GPU tests and the short
# benchmark, and write logs and a summary under ${OUT:-out}.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=${TILEFMHA_BUILD_DIR:-$root/build}
out=${OUT:-$root/out}
mkdir -p "$out"

{
  echo "# gpu_check $(date -u +%FT%TZ)"
  nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader
} | tee "$out/summary.txt"

if [[ ! -x "$build_dir/tools/tilefmha" ]]; then
  cmake -S "$root" -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null &&
    cmake --build "$build_dir" --parallel "$(nproc)" >"$out/build.log" 2>&1 ||
    { echo "build failed (see build.log)" | tee -a "$out/summary.txt"; exit 1; }
fi

(cd "$build_dir" && ctest -L gpu --output-on-failure) >"$out/gpu_tests.log" 2>&1
echo "gpu tests: exit $? ($(grep -E 'tests passed|tests failed' "$out/gpu_tests.log"))" |
  tee -a "$out/summary.txt"

if [[ -x "$root/bench/run_short.sh" ]]; then
  "$root/bench/run_short.sh" "$build_dir" "$out" 2>&1 | tee "$out/bench.log"
fi
