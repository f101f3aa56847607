"""bench/kernel_breakdown.py without a GPU: flags, the shape list and the per-call aggregation of
profiler events (made-up events; no torch needed)."""

import importlib.util
import pathlib
import subprocess
import sys
from types import SimpleNamespace

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "kernel_breakdown.py"
spec = importlib.util.spec_from_file_location("kernel_breakdown", SCRIPT)
breakdown = importlib.util.module_from_spec(spec)
spec.loader.exec_module(breakdown)  # importing must not need torch


def event(key, device, microseconds, renamed=True):
    fields = {"key": key, "device_type": SimpleNamespace(name=device)}
    # PyTorch before 2.4 spelled the total cuda_time_total.
    fields["device_time_total" if renamed else "cuda_time_total"] = microseconds
    return SimpleNamespace(**fields)


def test_importing_needs_neither_torch_nor_the_package():
    code = ("import importlib.util, sys\n"
            f"spec = importlib.util.spec_from_file_location('kb', {str(SCRIPT)!r})\n"
            "spec.loader.exec_module(importlib.util.module_from_spec(spec))\n"
            "assert 'torch' not in sys.modules and 'tilefmha' not in sys.modules\n")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_flags_are_parsed_and_checked():
    args = breakdown.parse_args(["--hdim", "64", "--seqlen", "512,1024", "--causal", "true",
                                 "--dtype", "fp16", "--repeat", "4"])
    assert args.hdim == [64] and args.seqlen == [512, 1024] and args.causal == [True]
    assert args.dtype == "fp16" and args.repeat == 4 and not args.list_shapes
    with pytest.raises(SystemExit):
        breakdown.parse_args(["--repeat", "0"])


def test_list_shapes_runs_without_torch():
    result = subprocess.run([sys.executable, str(SCRIPT), "--list-shapes", "--hdim", "64",
                             "--seqlen", "512"], check=True, capture_output=True, text=True)
    assert result.stdout.split("\n")[:2] == ["d64 s512 b32 h32 full bf16",
                                            "d64 s512 b32 h32 causal bf16"]


def test_kernels_are_summed_per_call_longest_first_and_host_events_left_out():
    events = [event("dot", "CUDA", 300.0), event("main", "CUDA", 2000.0, renamed=False),
              event("launch", "CPU", 9999.0), event("convert", "CUDA", 150.0)]
    assert breakdown.per_call_kernels(events, 10) == [("main", 200.0), ("dot", 30.0),
                                                      ("convert", 15.0)]
    table = breakdown.format_table("d64", "ours", [("main", 200.0), ("dot", 30.0)])
    assert table.splitlines()[0] == "d64 ours: 230.0 us of kernels a call"
    assert "200.0 us  main" in table.splitlines()[1]
