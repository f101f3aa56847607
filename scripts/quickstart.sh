#!/usr/bin/env bash
# The main job: install what is missing, build, and run a forward attention problem, on the GPU
# when a usable one is present and on the CPU reference otherwise (`--backend auto`), printing
# its one-line summary. Extra arguments go to `tilefmha run` (a --backend among them wins).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=${TILEFMHA_BUILD_DIR:-$root/build}

backend=(--backend auto)
for argument in "$@"; do
  if [[ $argument == --backend* ]]; then backend=(); fi
done

"$root/scripts/build.sh"
"$build_dir/tools/tilefmha" run "${backend[@]}" "$@"
