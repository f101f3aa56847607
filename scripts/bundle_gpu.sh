#!/usr/bin/env bash
# Copies what a GPU host needs from a build into gpu_bundle/ (the CLI and every *_gpu_test
# binary, a few MB), so the device call carries only that: carry ["gpu_bundle"], then run
# `TILEFMHA_BUILD_DIR=gpu_bundle scripts/gpu_check.sh`.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=${TILEFMHA_BUILD_DIR:-$root/build}
bundle=$root/gpu_bundle
rm -rf "$bundle"
mkdir -p "$bundle/tools" "$bundle/tests"
cp "$build_dir/tools/tilefmha" "$bundle/tools/"
cp "$build_dir"/tests/*_gpu_test "$bundle/tests/"
du -sh "$bundle"
