"""`pip install --no-build-isolation .`: the `tilefmha` package, its `_core` extension built by
the project's CMake (target tilefmha_python) for the interpreter running pip.

Build directory: $TILEFMHA_BUILD_DIR when it holds a configured build (the one scripts/build.sh
makes: only the extension's out-of-date objects are rebuilt), else build-pip/<python tag> in the
source tree, configured on first use (Release, no tests) and reused by later installs.
Needs CMake, Ninja (or make), a C++20 compiler, pybind11 and the Python headers, i.e. the Debian
packages of scripts/deps.sh; the CUDA toolkit is optional at build time (NVRTC and the driver
are loaded at run time). No network.
"""

import os
import pathlib
import shutil
import subprocess
import sys
import sysconfig

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = pathlib.Path(__file__).resolve().parent
TARGET = "tilefmha_python"


def _run(command):
    print("tilefmha:", " ".join(str(part) for part in command), flush=True)
    subprocess.run([str(part) for part in command], check=True)


def _build_dir():
    """An already configured build to reuse, or this interpreter's own build under build-pip/."""
    chosen = os.environ.get("TILEFMHA_BUILD_DIR")
    if chosen and (pathlib.Path(chosen) / "CMakeCache.txt").is_file():
        return pathlib.Path(chosen).resolve(), False
    return ROOT / "build-pip" / sys.implementation.cache_tag, True


def _configure(build_dir):
    generator = ["-G", "Ninja"] if shutil.which("ninja") else []
    cuda = os.environ.get("CUDA_HOME", "/usr/local/cuda")
    _run(["cmake", "-S", ROOT, "-B", build_dir, *generator, "-DCMAKE_BUILD_TYPE=Release",
          "-DTILEFMHA_BUILD_TESTS=OFF", "-DTILEFMHA_BUILD_PYTHON=ON",
          f"-DPython_EXECUTABLE={sys.executable}", f"-DCUDAToolkit_ROOT={cuda}"])


class CMakeBuild(build_ext):
    """Builds the extension with CMake and copies it where setuptools packs it."""

    def build_extension(self, ext):
        build_dir, own = _build_dir()
        if own and not (build_dir / "CMakeCache.txt").is_file():
            _configure(build_dir)
        _run(["cmake", "--build", build_dir, "--target", TARGET, "--parallel",
              os.cpu_count() or 1])
        name = "_core" + sysconfig.get_config_var("EXT_SUFFIX")
        built = build_dir / "python" / "tilefmha" / name
        if not built.is_file():
            found = sorted(p.name for p in (build_dir / "python" / "tilefmha").glob("_core*"))
            raise RuntimeError(
                f"{build_dir} did not build {name} for {sys.executable} (it holds {found}): it "
                "was configured for another Python; unset TILEFMHA_BUILD_DIR, or configure it "
                f"with -DPython_EXECUTABLE={sys.executable}")
        destination = pathlib.Path(self.get_ext_fullpath(ext.name))
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(built, destination)


setup(
    ext_modules=[Extension("tilefmha._core", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    # setuptools' own scratch space, away from the CMake build in build/.
    options={"build": {"build_base": str(ROOT / "build-pip" / "setuptools")},
             "egg_info": {"egg_base": str(ROOT / "build-pip")}},
)
