#!/usr/bin/env bash
# Builds tilefmha and runs the whole test suite. GPU tests skip (and are reported as skipped)
# on machines without a GPU.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=${TILEFMHA_BUILD_DIR:-$root/build}

"$root/scripts/build.sh"
cd "$build_dir"
ctest --output-on-failure --parallel "$(nproc)" "$@"
