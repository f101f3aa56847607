#!/usr/bin/env bash
# The main job: install what is missing, build, and run a forward attention problem
# (CPU backend when no GPU is present), printing its one-line summary.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=${TILEFMHA_BUILD_DIR:-$root/build}

"$root/scripts/build.sh"
"$build_dir/tools/tilefmha" run --backend cpu "$@"
