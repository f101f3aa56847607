"""The environment report of ``python3 -m tilefmha``: the GPUs, driver, NVRTC and kernel cache.

Every part is looked up on its own, so a machine without a GPU (or without NVRTC) still gets
the rest of the report, with a line saying what is missing and why.
"""

import os
import sys

from . import _core

CUBIN_SUFFIX = ".cubin"  # cache entries are <key>.cubin (src/jit/kernel_cache.hpp)


def one_line(message):
    """An engine message (some span lines, e.g. dlopen's) as one report line."""
    return " ".join(str(message).split())


def _driver_version_text(version):
    """13000 -> '13.0' (the driver encodes major * 1000 + minor * 10)."""
    return f"{version // 1000}.{version % 1000 // 10}"


def _size_text(size):
    for unit in ("B", "KiB", "MiB"):
        if size < 1024:
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GiB"


def cached_kernels(directory):
    """(count, total bytes) of the cache entries in `directory` (0, 0 when it does not exist).
    Temporary files of an interrupted write are not entries and are not counted."""
    count = size = 0
    try:
        entries = list(os.scandir(directory))
    except FileNotFoundError:
        return 0, 0
    for entry in entries:
        if entry.name.endswith(CUBIN_SUFFIX) and entry.is_file():
            count += 1
            size += entry.stat().st_size
    return count, size


def _gpu_lines():
    reason = _core.gpu_unavailable_reason()
    if reason:
        return [f"none: {one_line(reason)} (the CPU backend still runs)"]
    lines = []
    for gpu in _core.gpu_devices():
        capability = gpu["compute_capability"]
        arch = (f"arch {gpu['arch']} (NVRTC target {gpu['nvrtc_target']})" if gpu["arch"]
                else "no kernel arch (the engine needs compute capability 8.0 or newer)")
        lines.append(f"{gpu['ordinal']}: {gpu['name']}, {gpu['sm_count']} SMs, compute "
                     f"capability {capability // 10}.{capability % 10}, {arch}")
    return lines


def _driver_line():
    try:
        driver = _core.driver_info()
    except RuntimeError as error:
        return f"none: {one_line(error)}"
    return f"{_driver_version_text(driver['version'])} ({driver['library']})"


def _nvrtc_line():
    try:
        nvrtc = _core.nvrtc_info()
    except RuntimeError as error:
        return f"none: {one_line(error)} (no JIT: GPU kernels cannot be compiled)"
    return f"{nvrtc['version']} ({nvrtc['library']})"


def _cache_lines():
    try:
        directory = _core.default_cache_directory()
    except RuntimeError as error:
        return [("cache directory", f"none: {one_line(error)}")]
    source = ("TILEFMHA_CACHE_DIR" if os.environ.get("TILEFMHA_CACHE_DIR") else "default")
    count, size = cached_kernels(directory)
    return [("cache directory", f"{directory} ({source})"),
            ("cached kernels", f"{count} ({_size_text(size)})")]


def report():
    """The environment report as text, one 'label: value' line per item."""
    from . import __version__

    rows = [("tilefmha", f"{__version__} ({os.path.dirname(os.path.abspath(__file__))})"),
            ("python", f"{sys.version.split()[0]} ({sys.executable})")]
    gpus = _gpu_lines()
    rows.append(("gpu", gpus[0]))
    rows.extend(("", line) for line in gpus[1:])
    rows.append(("driver", _driver_line()))
    rows.append(("nvrtc", _nvrtc_line()))
    rows.extend(_cache_lines())
    width = max(len(label) for label, _ in rows) + 1
    return "\n".join(f"{label + ':' if label else '':<{width}} {value}" for label, value in rows)
