"""bench/fp8_serving_bench.py without a GPU: importing needs no torch, the shapes come from the
serving sweep (pages of 16 keys or more), and rows and the summary format made-up results."""

import importlib.util
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "fp8_serving_bench.py"
spec = importlib.util.spec_from_file_location("fp8_serving_bench", SCRIPT)
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)  # importing must not need torch


def test_list_shapes_runs_without_torch():
    out = subprocess.run([sys.executable, str(SCRIPT), "--list-shapes"], check=True,
                         capture_output=True, text=True).stdout.splitlines()
    assert out and all(line.startswith(("decode ", "prefill ", "append ")) for line in out)
    assert not any(line.endswith(" page1") for line in out)
    # Quantizing appends write page pools only.
    assert any(line.startswith("append ") for line in out)
    assert not any(line.startswith("append ") and "contiguous" in line for line in out)


def test_only_selects_a_part():
    decode = bench.shapes(bench.parse_args(["--only", "decode"]))
    prefill = bench.shapes(bench.parse_args(["--only", "prefill"]))
    append = bench.shapes(bench.parse_args(["--only", "append"]))
    assert decode and all(s["kind"] == "decode" and s["page_size"] >= 16 for s in decode)
    assert prefill and all(s["kind"] == "prefill" for s in prefill)
    assert append and all(s["kind"] == "append" and s["page_size"] == 16 for s in append)
    # Bytes moved: bf16 K and V read (2 bytes each), e4m3 codes written (1 byte each).
    first = append[0]
    assert first["bytes"] == (first["batch"] * first["seqlen_knew"] * first["nhead_k"]
                              * first["hdim"] * 2 * 3)


def test_rows_and_summary():
    rows = [
        {"kind": "decode", "shape": "decode a", "page_size": 16, "fp8_us": 10.0, "bf16_us": 19.0,
         "speedup": 1.9, "agrees": True},
        {"kind": "decode", "shape": "decode b", "page_size": 16, "fp8_us": 10.0, "bf16_us": 12.0,
         "speedup": 1.2, "agrees": False},
        {"kind": "prefill", "shape": "prefill c", "page_size": 16, "fp8_us": 5.0, "bf16_us": 8.0,
         "speedup": 1.6, "fp8_tflops": 800.0, "bf16_tflops": 500.0, "agrees": True},
        {"kind": "prefill", "shape": "prefill d", "page_size": 16, "error": "refused"},
        {"kind": "append", "shape": "append e", "page_size": 16, "fp8_us": 50.0,
         "bf16_us": 60.0, "speedup": 1.2, "fp8_pct_copy": 70.0, "agrees": True},
    ]
    assert "70% of copy" in bench.format_row(rows[4])
    assert "DISAGREES" in bench.format_row(rows[1])
    assert "800.0" in bench.format_row(rows[2])
    assert "error: refused" in bench.format_row(rows[3])
    summary = "\n".join(bench.summary_lines(rows))
    assert "over 2 shapes" in summary and "1 below" in summary
    assert "prefill page 16: fp8 best 800 TFLOP/s" in summary
    assert "disagreeing rows: 1" in summary
    assert "quantizing append: 70-70% of copy bandwidth over 1 shapes" in summary
