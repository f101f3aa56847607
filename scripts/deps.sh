#!/usr/bin/env bash
# Installs the Debian packages tilefmha builds with, skipping those already present.
# The CUDA toolkit is expected at /usr/local/cuda (or $CUDA_HOME); it is not installed here.
set -euo pipefail

# python3-dev, pybind11-dev, python3-numpy and python3-pytest build and test the Python package
# (python/) against Debian's interpreter.
# python3-setuptools, python3-wheel, python3-pip and python3-venv let `pip install
# --no-build-isolation .` build the package offline (pyproject.toml, scripts/test_install.sh).
# python3-matplotlib draws scripts/plot_results.py's charts.
packages=(cmake ninja-build g++ libgtest-dev nlohmann-json3-dev libcli11-dev python3 python3-dev
  pybind11-dev python3-numpy python3-pytest python3-matplotlib python3-setuptools python3-wheel
  python3-pip python3-venv)
missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" ||
    missing+=("$package")
done

if ((${#missing[@]})); then
  echo "tilefmha: installing ${missing[*]}" >&2
  sudo_cmd=()
  [[ $(id -u) -ne 0 ]] && sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq "${missing[@]}"
fi
