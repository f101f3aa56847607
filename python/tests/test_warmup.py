"""tilefmha.warmup: compile-only JIT into a chosen cache directory, on the CPU (NVRTC needs no
GPU). The set is two sm80 forward kernels (bf16, head dim 64, with and without a causal mask),
a few seconds of NVRTC on two cores, as in tests/cli_build_test.cpp."""

import os
import pty
import subprocess
import sys

import pytest

import tilefmha
from tilefmha import _core
from tilefmha._environment import cached_kernels
from tilefmha._warmup import warmup_filters

SMALL = dict(config="fwd_ci", arch="sm80", hdims=[64], dtypes=["bf16"], families=["fwd"])


def nvrtc_missing():
    try:
        _core.nvrtc_info()
    except RuntimeError as error:
        return str(error)
    return ""


needs_nvrtc = pytest.mark.skipif(bool(nvrtc_missing()), reason=nvrtc_missing() or "NVRTC")


@needs_nvrtc
def test_warmup_fills_the_cache_then_hits_it(tmp_path, capfd):
    cache = tmp_path / "cache"
    first = tilefmha.warmup("full", cache_dir=cache, **SMALL)
    assert first.kernels > 0 and first.failures == 0, first
    assert first.built == first.kernels and first.cache_hits == 0, first
    assert first.launch_forms == 0  # sm80_mma has one launch form
    assert first.kernels + first.not_implemented == first.enumerated
    assert first.nvrtc_target == "sm_80" and first.arch == "sm80"
    assert first.cache_dir == str(cache)
    count, size = cached_kernels(cache)
    assert count == first.kernels and size > 0

    second = tilefmha.warmup("full", cache_dir=cache, **SMALL)
    assert second.built == 0 and second.cache_hits == first.kernels, second
    assert cached_kernels(cache) == (count, size)
    # pytest's captured stderr is no terminal: no progress bar, not even the summary line.
    assert capfd.readouterr().err == ""


@needs_nvrtc
def test_warmup_reads_the_cache_directory_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEFMHA_CACHE_DIR", str(tmp_path))
    report = tilefmha.warmup("full", progress=False, **SMALL)
    assert report.cache_dir == str(tmp_path)
    assert report.kernels > 0 and cached_kernels(tmp_path)[0] == report.kernels


@needs_nvrtc
def test_progress_bar_redraws_one_line_on_a_terminal(tmp_path):
    # A child process whose stderr is a pseudo-terminal draws the bar; the cache is warmed first
    # so that the child only reads it.
    tilefmha.warmup("full", cache_dir=tmp_path, progress=False, **SMALL)
    code = (f"import tilefmha; tilefmha.warmup('full', cache_dir={str(tmp_path)!r}, "
            f"**{SMALL!r})")
    controller, terminal = pty.openpty()
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    child = subprocess.run([sys.executable, "-c", code], stdin=subprocess.DEVNULL,
                           stdout=subprocess.DEVNULL, stderr=terminal, env=env, timeout=120)
    os.close(terminal)
    output = b""
    while True:
        try:
            chunk = os.read(controller, 4096)
        except OSError:  # EIO: the terminal's other end is closed and drained
            break
        if not chunk:
            break
        output += chunk
    os.close(controller)
    text = output.decode()
    assert child.returncode == 0, text
    assert "\r[" in text and "#" in text, text  # redrawn in place
    assert "cache hits" in text, text  # the summary line


def test_filters_restrict_family_head_dims_and_dtypes():
    expressions = warmup_filters([64, 128], ["bfloat16", "fp16"], None, "c.mask == 'causal'")
    assert expressions[0] == ("c.family in " + str(_core.gpu_families()).replace('"', "'"))
    assert "c.hdim_q in [64, 128] and c.hdim_v in [64, 128]" in expressions
    assert "c.dtype in ['bf16', 'fp16']" in expressions
    assert expressions[-1] == "c.mask == 'causal'"
    assert set(_core.gpu_families()) >= {"fwd", "fwd_splitkv", "fwd_splitkv_combine"}


@pytest.mark.parametrize("arguments, message", [
    (dict(hdims=[]), "hdims is empty"),
    (dict(hdims=[64.5]), "hdims: 64.5"),
    (dict(workers=-1), "workers = -1"),
    (dict(dtypes=["float64"]), "float64"),
    (dict(filters=["c.hdim == 1"]), "unknown field 'hdim'"),
    (dict(arch="sm70"), "sm70"),
])
def test_bad_arguments_are_refused_before_compiling(tmp_path, arguments, message):
    with pytest.raises(ValueError, match=message):
        tilefmha.warmup("full", cache_dir=tmp_path, **{**SMALL, **arguments})
    assert cached_kernels(tmp_path) == (0, 0)


def test_an_unknown_profile_is_refused_naming_the_known_ones(tmp_path):
    with pytest.raises(ValueError, match=r"unknown profile 'nosuchprofile' \(known: .*pytorch"):
        tilefmha.warmup("nosuchprofile", cache_dir=tmp_path, config="fwd_ci", arch="sm80")
    assert cached_kernels(tmp_path) == (0, 0)
