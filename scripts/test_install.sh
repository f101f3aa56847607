#!/usr/bin/env bash
# The package as a user installs it: `pip install --no-build-isolation .` into a throwaway
# virtual environment (with the system site packages, for Debian's numpy, setuptools and
# wheel; no network), then, from a directory outside the source tree and without PYTHONPATH,
# `import tilefmha`, a tiny CPU attention checked against NumPy, and `python -m tilefmha`.
# Reuses the configured build in ${TILEFMHA_BUILD_DIR:-build} (setup.py), so on a built tree
# only pip's own work remains. Prints the seconds the install took.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export TILEFMHA_BUILD_DIR=${TILEFMHA_BUILD_DIR:-$root/build}
python=${TILEFMHA_PYTHON:-/usr/bin/python3}

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
"$python" -m venv --system-site-packages "$scratch/venv"
venv_python=$scratch/venv/bin/python

start=$SECONDS
"$venv_python" -m pip install --no-build-isolation --no-deps --no-index --quiet \
  --disable-pip-version-check "$root"
echo "tilefmha: pip install took $((SECONDS - start)) s"

cd "$scratch"
env -u PYTHONPATH "$venv_python" - "$scratch/venv" <<'PYTHON'
import pathlib
import sys

import numpy as np

import tilefmha

venv = pathlib.Path(sys.argv[1]).resolve()
package = pathlib.Path(tilefmha.__file__).resolve()
assert venv in package.parents, f"imported {package}, not the installed package under {venv}"

rng = np.random.default_rng(0)
q, k, v = (rng.standard_normal((1, 5, 2, 16)).astype(np.float32) for _ in range(3))
o = tilefmha.attention(q, k, v, causal=True)
s = np.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(16)
s = np.where(np.tril(np.ones((5, 5), bool)), s, -np.inf)
p = np.exp(s - s.max(-1, keepdims=True))
expected = np.einsum("bhqk,bkhd->bqhd", p / p.sum(-1, keepdims=True), v)
np.testing.assert_allclose(o, expected, rtol=1e-5, atol=1e-6)
print(f"tilefmha: installed {package.parent}: CPU attention matches NumPy")
PYTHON
env -u PYTHONPATH "$venv_python" -m tilefmha
