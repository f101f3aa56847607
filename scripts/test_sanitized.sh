#!/usr/bin/env bash
# Builds the CPU tests with AddressSanitizer + UndefinedBehaviorSanitizer (CMakePresets.json
# preset "asan", into build-asan/) and runs them; a finding stops its process with exit code 86,
# which fails the test. Extra arguments go to ctest (e.g. -R cli_). docs/testing.md says what
# runs, what is left out and why, and how long it takes.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cuda_root=${CUDA_HOME:-/usr/local/cuda}

"$root/scripts/deps.sh"
cd "$root"
start=$SECONDS
cmake --preset asan -DCUDAToolkit_ROOT="$cuda_root" >/dev/null
cmake --build --preset asan --parallel "$(nproc)"
built=$SECONDS
# Scratch files of the tests (gtest's TempDir) under build-asan/, not /tmp, where a normal run of
# the same tests (another checkout on the same machine) would clear them mid-test.
export TEST_TMPDIR="$root/build-asan/test-tmp"
rm -rf "$TEST_TMPDIR" && mkdir -p "$TEST_TMPDIR"
# A failed test runs once more: LeakSanitizer's thread-stopping tracer crashed (SIGSEGV) at the exit
# of a passing NVRTC test once under this parallel load (docs/testing.md); a sanitizer finding
# fails its rerun too.
ctest --preset asan --parallel "$(nproc)" --repeat until-pass:2 "$@"
echo "tilefmha: sanitizer build $((built - start)) s, tests $((SECONDS - built)) s"
