#!/usr/bin/env bash
# The short forward benchmark of the GPU-host check (scripts/gpu_check.sh): FA3-protocol shapes,
# head dims 64/128/256 x lengths 512/2k/8k x causal both, bf16, each verified against the CPU
# reference on a slice. Writes OUT_DIR/bench_fwd.{txt,csv,json}; a few minutes on an H100
# (most of it JIT on a cold cache).
#   usage: bench/run_short.sh BUILD_DIR OUT_DIR
set -euo pipefail
if [[ $# -ne 2 ]]; then
  echo "usage: $0 BUILD_DIR OUT_DIR" >&2
  exit 2
fi
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
tilefmha="$1/tools/tilefmha"
out=$2
mkdir -p "$out"
if [[ ! -x "$tilefmha" ]]; then
  echo "run_short: no tilefmha binary at $tilefmha" >&2
  exit 2
fi

"$tilefmha" bench --sweep "$root/bench/fa3_sweep.json" \
  --hdim 64,128,256 --seqlen 512,2048,8192 --causal both --dtype bf16 \
  --warmup 3 --repeat 15 --verify \
  --csv "$out/bench_fwd.csv" --json "$out/bench_fwd.json" | tee "$out/bench_fwd.txt"
