"""`python3 -m tilefmha`: the environment report (GPU, driver, NVRTC, kernel cache), which must
work and say so on a machine without a GPU, a driver or NVRTC."""

import os
import re
import subprocess
import sys

import tilefmha
from tilefmha import _core
from tilefmha._environment import one_line


def report(**env):
    result = subprocess.run([sys.executable, "-m", "tilefmha"], capture_output=True, text=True,
                            timeout=60, env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1", **env))
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stderr == ""
    return result.stdout


def line(text, label):
    """The value of the report line `label:`."""
    match = re.search(rf"^{re.escape(label)}: +(.*)$", text, re.MULTILINE)
    assert match, f"no '{label}:' line in\n{text}"
    return match.group(1)


def test_counts_cache_entries_and_their_size(tmp_path):
    (tmp_path / "a.cubin").write_bytes(b"x" * 1000)
    (tmp_path / "b.cubin").write_bytes(b"x" * 2072)
    (tmp_path / "c.cubin.tmp-1234").write_bytes(b"x" * 50)  # an interrupted write
    (tmp_path / "d.cubin").mkdir()  # not a regular file
    text = report(TILEFMHA_CACHE_DIR=str(tmp_path))
    assert line(text, "cache directory") == f"{tmp_path} (TILEFMHA_CACHE_DIR)"
    assert line(text, "cached kernels") == "2 (3.0 KiB)"


def test_an_absent_cache_directory_holds_no_kernels(tmp_path):
    text = report(TILEFMHA_CACHE_DIR=str(tmp_path / "absent"))
    assert line(text, "cached kernels") == "0 (0 B)"
    assert not (tmp_path / "absent").exists(), "reporting must not create the cache"


def test_gpu_line_names_each_device_or_says_why_there_is_none(tmp_path):
    text = report(TILEFMHA_CACHE_DIR=str(tmp_path))
    reason = tilefmha.gpu_unavailable_reason()
    if reason:
        assert line(text, "gpu") == f"none: {one_line(reason)} (the CPU backend still runs)"
        return
    devices = _core.gpu_devices()
    assert devices
    first = devices[0]
    assert line(text, "gpu").startswith(f"0: {first['name']}, {first['sm_count']} SMs")
    assert f"arch {first['arch']}" in line(text, "gpu") or first["arch"] is None
    assert re.fullmatch(r"\d+\.\d+ \(.+\)", line(text, "driver"))


def test_nvrtc_version_or_why_it_is_missing(tmp_path):
    text = report(TILEFMHA_CACHE_DIR=str(tmp_path))
    try:
        nvrtc = _core.nvrtc_info()
    except RuntimeError as error:
        assert line(text, "nvrtc").startswith(f"none: {one_line(error)}")
    else:
        assert line(text, "nvrtc") == f"{nvrtc['version']} ({nvrtc['library']})"
        assert re.fullmatch(r"\d+\.\d+", nvrtc["version"])

    missing = report(TILEFMHA_CACHE_DIR=str(tmp_path),
                     TILEFMHA_NVRTC_LIBRARY="/nonexistent/libnvrtc.so.13")
    assert line(missing, "nvrtc").startswith("none: NVRTC not found")
    assert "/nonexistent/libnvrtc.so.13" in line(missing, "nvrtc")
    assert line(missing, "cached kernels") == "0 (0 B)"  # the rest of the report still comes


def test_version_line_names_the_imported_package(tmp_path):
    text = report(TILEFMHA_CACHE_DIR=str(tmp_path))
    package = os.path.dirname(os.path.abspath(tilefmha.__file__))
    assert line(text, "tilefmha") == f"{tilefmha.__version__} ({package})"
