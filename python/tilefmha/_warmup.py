"""Ahead-of-time JIT: compile a profile's kernels into the disk cache before the first call.

The GPU backend compiles each kernel with NVRTC the first time a problem needs it (seconds per
kernel). warmup() compiles a chosen set in parallel beforehand, through the same library code
as ``tilefmha build --compile-only``, so first calls only load cubins from the cache.
"""

import dataclasses
import sys

from . import _core

# NumPy-style and PyTorch-style spellings of the engine's dtype names.
_DTYPE_ALIASES = {"float32": "fp32", "float16": "fp16", "half": "fp16", "bfloat16": "bf16",
                  "float8_e4m3fn": "fp8_e4m3", "float8_e5m2": "fp8_e5m2"}


@dataclasses.dataclass(frozen=True)
class WarmupReport:
    """What warmup() did. `kernels` = built + cache_hits + failures = the implemented kernels of
    the selection (enumerated - not_implemented) + launch_forms."""

    kernels: int  # kernels of the set that codegen implements (compiled or found)
    built: int  # compiled by NVRTC now
    cache_hits: int  # already in the cache
    failures: int
    enumerated: int  # kernels the profile and filters select
    not_implemented: int  # of those, kernels codegen does not implement yet (skipped)
    launch_forms: int  # sm90_ws launch forms added to the implemented ones
    seconds: float
    arch: str  # the kernel arch, e.g. 'sm90'
    nvrtc_target: str  # e.g. 'sm_90a'
    cache_dir: str


def _names(values, field, normalize=str):
    if isinstance(values, (str, int)):
        values = [values]
    names = [normalize(v) for v in values]
    if not names:
        raise ValueError(f"{field} is empty: it would select no kernel (None selects all)")
    return names


def _int_name(value):
    if isinstance(value, bool) or int(value) != value or value <= 0:
        raise ValueError(f"hdims: {value!r} is not a positive int")
    return str(int(value))


def _dtype_name(value):
    if isinstance(value, type):  # numpy.float16 and the like
        name = value.__name__
    elif isinstance(value, str):
        name = value
    else:  # a numpy.dtype has a name; a torch.dtype prints as 'torch.float16'
        name = getattr(value, "name", None) or str(value)
    name = name.removeprefix("torch.")
    return _DTYPE_ALIASES.get(name, name)


def _quoted(names):
    return "[" + ", ".join(f"'{name}'" for name in names) + "]"


def _default_arch():
    """The first GPU's kernel arch; sm90 (the first-class target) without a usable GPU."""
    if _core.gpu_unavailable_reason():
        return "sm90"
    devices = _core.gpu_devices()
    return devices[0]["arch"] or "sm90"


def warmup_filters(hdims=None, dtypes=None, families=None, filters=()):
    """The filter expressions (tilefmha list/build --filter syntax) warmup() compiles under."""
    expressions = []
    families = _core.gpu_families() if families is None else _names(families, "families")
    expressions.append(f"c.family in {_quoted(families)}")
    if hdims is not None:
        dims = ", ".join(_names(hdims, "hdims", _int_name))
        expressions.append(f"c.hdim_q in [{dims}] and c.hdim_v in [{dims}]")
    if dtypes is not None:
        expressions.append(f"c.dtype in {_quoted(_names(dtypes, 'dtypes', _dtype_name))}")
    if isinstance(filters, str):
        filters = [filters]
    return expressions + list(filters)


def warmup(profile, hdims=None, dtypes=None, *, families=None, arch=None, config="all",
           filters=(), cache_dir=None, workers=0, progress=True, launch_forms=True):
    """JIT-compiles the kernels of `profile` ahead of time into the kernel cache.

    profile: a named profile ('full', 'pytorch', 'flash', 'serving', 'training', 'fp8', 'fp32',
        'ci'; see ``tilefmha list``). The GPU backend plans from 'full', so any profile's
        kernels are ones it may pick.
    hdims: head dims to keep (both hdim_q and hdim_v must be among them), e.g. [64, 128];
        None keeps all.
    dtypes: 'fp16', 'bf16', 'fp32', 'fp8_e4m3' (also 'float16', 'bfloat16', torch or NumPy
        dtypes); None keeps all.
    families: the kernel families, default those the GPU backend runs (fwd, split-KV, combine).
    arch: 'sm80', 'sm86', 'sm89' or 'sm90'; default the first GPU's, or sm90 without a GPU.
    config: the sweep config enumerated (``data/configs``; 'all' is what the engine plans from).
    filters: further filter expressions, e.g. "c.mask == 'causal'"; all must hold.
    cache_dir: where cubins go; default the engine's ($TILEFMHA_CACHE_DIR, else
        $XDG_CACHE_HOME/tilefmha, else ~/.cache/tilefmha). A different directory only helps
        if the engine later reads it (set TILEFMHA_CACHE_DIR).
    workers: compile threads (0: every hardware thread).
    progress: a progress bar on stderr (one line redrawn in place), shown only when stderr is
        a terminal.
    launch_forms: also compile the forms the engine may launch an sm90_ws kernel in, depending
        on the problem (persistent grid, GQA groups packed): separate cubins.

    Needs NVRTC (the CUDA toolkit), not a GPU. Returns a WarmupReport; raises ValueError for an
    unknown profile, config, arch, dtype or field, and RuntimeError naming the kernels that
    failed to compile (after compiling the others).
    """
    arch = _default_arch() if arch is None else str(arch)
    if isinstance(workers, bool) or int(workers) != workers or workers < 0:
        raise ValueError(f"workers = {workers!r} must be a non-negative int (0: every core)")
    expressions = warmup_filters(hdims, dtypes, families, filters)
    show = bool(progress) and sys.stderr is not None and sys.stderr.isatty()
    if show:
        sys.stderr.flush()  # the bar is drawn by the engine on file descriptor 2
    counts = _core.warmup(config, arch, profile, expressions, "" if cache_dir is None
                          else str(cache_dir), int(workers), show, bool(launch_forms))
    if counts["failures"]:
        name, error = counts["errors"][0]
        raise RuntimeError(f"warmup: {counts['failures']} of {counts['kernels']} kernels failed "
                           f"to compile ({', '.join(n for n, _ in counts['errors'])}); the "
                           f"first, {name}:\n{error}")
    return WarmupReport(
        kernels=counts["kernels"], built=counts["built"], cache_hits=counts["cache_hits"],
        failures=counts["failures"], enumerated=counts["enumerated"],
        not_implemented=counts["not_implemented"], launch_forms=counts["launch_forms"],
        seconds=counts["seconds"], arch=arch,
        nvrtc_target=counts["nvrtc_target"], cache_dir=counts["cache_dir"])
