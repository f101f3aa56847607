"""bench/fp8_bench.py without a GPU: flags, the shape lists, the FLOP counts, the power-of-two
descales, rows, the accuracy table and the summary over made-up results (no torch needed)."""

import importlib.util
import json
import math
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "fp8_bench.py"
spec = importlib.util.spec_from_file_location("fp8_bench", SCRIPT)
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)  # importing must not need torch


def test_importing_needs_neither_torch_nor_the_package():
    code = ("import importlib.util, sys\n"
            f"spec = importlib.util.spec_from_file_location('fp8_bench', {str(SCRIPT)!r})\n"
            "spec.loader.exec_module(importlib.util.module_from_spec(spec))\n"
            "assert 'torch' not in sys.modules and 'tilefmha' not in sys.modules\n")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_flags_are_parsed():
    args = bench.parse_args(["--only", "fwd", "--hdim", "128", "--seqlen", "8192", "--causal",
                             "true", "--descale", "per_block", "--warmup", "0", "--repeat", "5",
                             "--timing", "graph", "--json", "f.json"])
    assert args.only == "fwd" and args.hdim == [128] and args.seqlen == [8192]
    assert args.causal == [True] and args.descale == "per_block" and args.timing == "graph"
    assert args.warmup == 0 and args.repeat == 5 and args.json == pathlib.Path("f.json")
    defaults = bench.parse_args([])
    assert defaults.only is None and defaults.descale == "per_tensor"
    assert defaults.timing == "events" and not defaults.list_shapes


@pytest.mark.parametrize("flags", [["--only", "bwd"], ["--hdim", "96"], ["--seqlen", "0"],
                                   ["--descale", "per_page"], ["--repeat", "0"],
                                   ["--warmup", "-1"], ["--timing", "wall"]])
def test_bad_flags_exit_2(flags, capsys):
    with pytest.raises(SystemExit) as stop:
        bench.parse_args(flags)
    assert stop.value.code == 2
    assert capsys.readouterr().err  # argparse names the flag


def test_shapes_are_the_long_fa3_shapes_and_one_accuracy_shape_per_hdim(capsys):
    assert bench.main(["--list-shapes"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines == [
        "fwd d128 s8192 b2 h16 full", "fwd d128 s8192 b2 h16 causal",
        "fwd d128 s16384 b1 h16 full", "fwd d128 s16384 b1 h16 causal",
        "fwd d256 s8192 b2 h8 full", "fwd d256 s8192 b2 h8 causal",
        "fwd d256 s16384 b1 h8 full", "fwd d256 s16384 b1 h8 causal",
        "accuracy d128 s4096 b1 h16 full", "accuracy d256 s4096 b1 h8 full"]
    assert bench.main(["--list-shapes", "--only", "accuracy", "--hdim", "256"]) == 0
    assert capsys.readouterr().out.splitlines() == ["accuracy d256 s4096 b1 h8 full"]
    assert bench.main(["--list-shapes", "--only", "fwd", "--seqlen", "16384", "--causal",
                       "false"]) == 0
    assert capsys.readouterr().out.splitlines() == ["fwd d128 s16384 b1 h16 full",
                                                    "fwd d256 s16384 b1 h8 full"]
    # Every timed shape holds 16k tokens.
    assert all(s["batch"] * s["seqlen"] == 16384 for s in bench.fwd_shapes())


def test_flops_halve_when_causal():
    full, causal = bench.fwd_shapes([128], [8192], [False, True])
    assert bench.forward_flops(full) == 4 * 2 * 16 * 8192 * 8192 * 128
    assert bench.forward_flops(causal) * 2 == bench.forward_flops(full)
    assert bench.matmul_flops() == 2 * 8192**3
    assert bench.tflops(1e12, 2.0) == pytest.approx(500.0)  # 1e12 FLOPs in 2 ms


def test_power_of_two_descales_fit_e4m3_and_are_tight():
    for amax in (1e-3, 0.7, 1.0, 4.2, 448.0, 449.0, 1e6):
        descale = bench.power_of_two_descale(amax)
        assert math.log2(descale) == int(math.log2(descale))
        assert amax / descale <= 448.0 < amax / (descale / 2)
    assert bench.power_of_two_descale(0.0) == 1.0


def test_without_torch_or_gpu_the_message_is_clear(capsys):
    torch, reason = bench.compare.torch_or_reason()
    if torch is not None:
        pytest.skip("PyTorch with CUDA is present: the main run is for a GPU host")
    assert bench.main(["--only", "accuracy"]) == 2
    err = capsys.readouterr().err
    assert "needs PyTorch with CUDA and a GPU" in err and reason in err


def made_up_rows():
    shapes = bench.fwd_shapes([128], None, None)
    rows = []
    for shape, fp8, bf16 in zip(shapes, (900.0, 700.0, 1250.0, 1000.0), (600.0, 500.0, 650.0,
                                                                          550.0)):
        rows.append(dict(shape, shape=bench.label(shape), flops=bench.forward_flops(shape),
                         fp8_tflops=fp8, bf16_tflops=bf16, fp8_finite=True,
                         fp8_pct_ceiling=100 * fp8 / 1500.0))
    refused = bench.fwd_shapes([256], [8192], [False])[0]
    rows.append(dict(refused, shape=bench.label(refused), bf16_tflops=500.0,
                     fp8_error="RuntimeError: no kernel for fwd fp8_e4m3 hdim 256"))
    return rows


def made_up_report(within=True):
    return {"shape": "d128 s4096 b1 h16 full", "descales": [2.0**-6, 2.0**-6, 2.0**-7],
            "o_rms": 0.02, "o_max": 0.1,
            "quantization": {"rmse": 1e-3, "max_abs": 8e-3},
            "fp8_kernel": {"rmse": 4e-4, "max_abs": 3e-3},
            "fp8_total": {"rmse": 1.1e-3, "max_abs": 9e-3},
            "bf16_kernel": {"rmse": 1e-4, "max_abs": 8e-4},
            "bf16_total": {"rmse": 1e-3, "max_abs": 8e-3},
            "p_rounding": {"max_abs_bound": 5e-3, "rmse_estimate": 6e-4},
            "fp8_within_bound": within, "fp8_worst_excess": -1e-3 if within else 2e-3}


def test_summary_rows_and_accuracy_table_over_made_up_results():
    rows = made_up_rows()
    summary = bench.summarize(rows, {"tflops": 1500.0})
    assert summary["timed"] == 4 and summary["best_fp8_tflops"] == 1250.0
    assert summary["best_fp8_shape"] == "d128 s16384 b1 h16 full"
    assert summary["geomean_fp8_over_bf16"] == pytest.approx(
        (1.5 * 1.4 * (1250 / 650) * (1000 / 550)) ** 0.25)
    assert summary["long_below_target"] == ["d128 s16384 b1 h16 causal"]
    text = "\n".join(bench.format_summary(summary, [made_up_report(), made_up_report(False)]))
    assert "ceiling (_scaled_mm 8192^3 e4m3 -> bf16): 1500 TFLOP/s" in text
    assert "best 1250 TFLOP/s (d128 s16384 b1 h16 full)" in text
    assert "seqlen 16384: 1 shapes below the 1200 TFLOP/s target" in text
    assert "fp8 refused: 1 shapes" in text and "d256 s8192 b2 h8 full: RuntimeError" in text
    assert "error within the P-rounding bound" in text and "BEYOND" in text
    line = bench.format_row(rows[0])
    assert "fp8   900.0" in line and "bf16   600.0" in line and "fp8/bf16 1.50x" in line
    assert "60% of fp8 matmul" in line
    assert "fp8 refused: RuntimeError: no kernel" in bench.format_row(rows[-1])
    table = "\n".join(bench.format_accuracy(made_up_report()))
    assert "quantization (f64 on dequantized vs originals)" in table
    assert "RMSE 4.000e-04  max abs 3.000e-03" in table
    assert "max abs <= 5.000e-03" in table and "RMSE ~ 6.000e-04" in table
    assert "within that bound + bf16 rounding everywhere: yes" in table
    json.dumps({"rows": rows, "summary": summary})  # the --json report holds them


def test_summary_without_timed_rows():
    summary = bench.summarize(made_up_rows()[-1:], {})
    text = "\n".join(bench.format_summary(summary, []))
    assert "ceiling (_scaled_mm 8192^3 e4m3 -> bf16): not measured" in text
    assert "fp8 forward: no shape timed" in text
    refused = dict(made_up_report(), fp8_error="RuntimeError: no kernel")
    for key in ("fp8_kernel", "fp8_total", "fp8_within_bound", "fp8_worst_excess"):
        del refused[key]
    assert "fp8 kernel: RuntimeError: no kernel" in "\n".join(bench.format_accuracy(refused))
    assert "fp8 not run (RuntimeError" in "\n".join(bench.format_summary(summary, [refused]))


def test_gpu_rows_time_and_report():
    torch, reason = bench.compare.torch_or_reason()
    if torch is None:
        pytest.skip(reason)
    tilefmha = pytest.importorskip("tilefmha")
    args = bench.parse_args(["--warmup", "1", "--repeat", "2"])
    shape = {"batch": 1, "nhead": 2, "seqlen": 384, "hdim": 128, "causal": True}
    row = bench.run_fwd_shape(torch, tilefmha, shape, args, {"tflops": 1000.0})
    assert row["bf16_tflops"] > 0
    assert ("fp8_tflops" in row and row["fp8_finite"]) or "fp8_error" in row
    report = bench.accuracy_report(torch, tilefmha, dict(shape, causal=False))
    assert report["bf16_kernel"]["max_abs"] < 2e-2
    assert report["quantization"]["rmse"] > 0 and report["p_rounding"]["max_abs_bound"] > 0
    assert report.get("fp8_within_bound", True), report
    json.dumps(report)
