#!/usr/bin/env bash
# Configures and builds tilefmha into ${TILEFMHA_BUILD_DIR:-build} (Release, Ninja).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=${TILEFMHA_BUILD_DIR:-$root/build}
cuda_root=${CUDA_HOME:-/usr/local/cuda}

"$root/scripts/deps.sh"
cmake -S "$root" -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCUDAToolkit_ROOT="$cuda_root" >/dev/null
cmake --build "$build_dir" --parallel "$(nproc)"
