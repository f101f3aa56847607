"""bench/compare_backward.py without a GPU: flags, the shape list, the FLOP count, the reference
slice, the tolerance rule, rows and the summary over made-up rows (no torch needed)."""

import importlib.util
import json
import math
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "compare_backward.py"
spec = importlib.util.spec_from_file_location("compare_backward", SCRIPT)
backward = importlib.util.module_from_spec(spec)
spec.loader.exec_module(backward)  # importing must not need torch
SWEEP = json.loads((ROOT / "bench" / "fa3_sweep.json").read_text())


def test_importing_needs_neither_torch_nor_the_package():
    code = ("import importlib.util, sys\n"
            f"spec = importlib.util.spec_from_file_location('compare_backward', {str(SCRIPT)!r})\n"
            "spec.loader.exec_module(importlib.util.module_from_spec(spec))\n"
            "assert 'torch' not in sys.modules and 'tilefmha' not in sys.modules\n")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_flags_are_parsed():
    args = backward.parse_args(["--hdim", "64,128", "--seqlen", "512,8192", "--causal", "true",
                                "--dtype", "fp16", "--csv", "b.csv", "--json", "b.json",
                                "--repeat", "5", "--warmup", "0", "--timing", "events"])
    assert args.hdim == [64, 128] and args.seqlen == [512, 8192] and args.causal == [True]
    assert args.dtype == "fp16" and args.repeat == 5 and args.warmup == 0
    assert args.csv == pathlib.Path("b.csv") and args.json == pathlib.Path("b.json")
    assert args.timing == "events" and not args.list_shapes
    defaults = backward.parse_args([])
    assert defaults.sweep == ROOT / "bench" / "fa3_sweep.json" and defaults.timing == "graph"
    assert defaults.hdim is defaults.seqlen is defaults.causal is defaults.dtype is None


@pytest.mark.parametrize("flags", [["--hdim", "64,x"], ["--seqlen", "0"], ["--causal", "maybe"],
                                   ["--dtype", "fp32"], ["--repeat", "0"], ["--warmup", "-1"],
                                   ["--timing", "wall"]])
def test_bad_flags_exit_2(flags, capsys):
    with pytest.raises(SystemExit) as stop:
        backward.parse_args(flags)
    assert stop.value.code == 2
    assert capsys.readouterr().err  # argparse names the flag


def test_list_shapes_covers_the_fa3_sweep_without_torch(capsys):
    assert backward.main(["--list-shapes"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1] == "36 shapes" and len(lines) == 37
    assert "d128 s8192 b2 h16 full bf16" in lines and "d256 s16384 b1 h8 causal bf16" in lines
    assert "d64 s512 b32 h32 causal bf16" in lines
    assert backward.main(["--list-shapes", "--hdim", "128", "--seqlen", "8192", "--causal",
                          "both", "--dtype", "fp16"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "d128 s8192 b2 h16 full fp16", "d128 s8192 b2 h16 causal fp16", "2 shapes"]


def test_a_bad_sweep_exits_2(tmp_path, capsys):
    assert backward.main(["--list-shapes", "--hdim", "96"]) == 2
    assert "hdim 96 does not divide hidden 2048" in capsys.readouterr().err
    assert backward.main(["--sweep", str(tmp_path / "absent.json")]) == 2


def test_without_torch_or_gpu_the_message_is_clear(capsys):
    torch, reason = backward.compare.torch_or_reason()
    if torch is not None:
        pytest.skip("PyTorch with CUDA is present: the main run is for a GPU host")
    assert backward.main(["--hdim", "64", "--seqlen", "512"]) == 2
    err = capsys.readouterr().err
    assert "needs PyTorch with CUDA and a GPU" in err and reason in err


def shape(hdim=128, seqlen=8192, causal=False, dtype="bf16"):
    return {"batch": max(1, 16384 // seqlen), "nhead": 2048 // hdim, "seqlen": seqlen,
            "hdim": hdim, "causal": causal, "dtype": dtype}


def test_backward_flops_are_two_and_a_half_forwards():
    full = shape()
    # Forward: 4 b h s^2 d (compare_sdpa.attention_flops), halved when causal.
    assert backward.forward_flops(full) == 4 * 2 * 16 * 8192**2 * 128
    assert backward.backward_flops(full) == 10 * 2 * 16 * 8192**2 * 128
    causal = shape(causal=True)
    assert backward.backward_flops(causal) * 2 == backward.backward_flops(full)
    assert backward.backward_flops(shape(hdim=64, seqlen=512)) == 2.5 * 4 * 32 * 32 * 512**2 * 64
    assert backward.tflops(1e12, 2.0) == pytest.approx(500.0)  # 1e12 FLOPs in 2 ms


def test_reference_slice_bounds_the_score_matrix():
    for hdim in SWEEP["hdim"]:
        for seqlen in SWEEP["seqlen"]:
            s = shape(hdim, seqlen)
            batch, heads, dtype = backward.reference_slice(s)
            assert 1 <= batch <= s["batch"] and 1 <= heads <= s["nhead"]
            # At most the cap, except the floor of one head of one sequence.
            assert batch * heads * seqlen**2 <= max(backward.REF_SCORE_ELEMENTS, seqlen**2)
            assert dtype == ("float64" if seqlen <= 2048 else "float32")
    assert backward.reference_slice(shape(64, 512)) == (16, 32, "float64")
    assert backward.reference_slice(shape(128, 16384)) == (1, 1, "float32")
    assert backward.reference_slice(shape(128, 8192)) == (1, 2, "float32")


def test_tolerance_scales_with_the_largest_reference_gradient():
    # bf16: 3e-2 of each gradient's largest reference element, plus 1e-3.
    assert backward.within_tolerance([0.03, 0.0, 0.001], [1.0, 1.0, 0.0], "bf16")
    assert not backward.within_tolerance([0.0, 0.032, 0.0], [1.0, 1.0, 1.0], "bf16")
    assert backward.within_tolerance([0.3], [10.0], "bf16")
    assert not backward.within_tolerance([0.02], [1.0], "fp16")


def make_row(hdim, seqlen, causal, ours_bwd, cudnn_bwd, agrees=True, dtype="bf16"):
    s = shape(hdim, seqlen, causal, dtype)
    row = dict(s, shape=backward.shape_label(s), status="ok", fwd_flops=backward.forward_flops(s))
    for name, bwd in (("ours", ours_bwd), ("cudnn", cudnn_bwd), ("fa2", cudnn_bwd / 2)):
        row.update({f"{name}_bwd_tflops": bwd, f"{name}_fwdbwd_tflops": bwd * 1.1,
                    f"{name}_bwd_timing": "graph", f"{name}_fwdbwd_timing": "graph",
                    f"{name}_err_dq": 0.01, f"{name}_err_dk": 0.02, f"{name}_err_dv": 0.005,
                    f"{name}_agrees": True})
    row["ours_agrees"] = agrees
    row["ratio_bwd_cudnn"] = ours_bwd / cudnn_bwd
    row["ratio_fwdbwd_cudnn"] = ours_bwd / cudnn_bwd
    return row


def refused_row(seqlen, causal):
    s = shape(256, seqlen, causal)
    row = dict(s, shape=backward.shape_label(s), status="refused",
               message="RuntimeError: bwd_dq_dk_dv: hdim_q 256 is not supported")
    row.update(cudnn_bwd_tflops=400.0, cudnn_fwdbwd_tflops=420.0, cudnn_agrees=True,
               fa2_error="RuntimeError: no kernel")
    return row


def test_summary_over_made_up_rows():
    rows = [make_row(128, 8192, False, 600.0, 500.0), make_row(128, 8192, True, 450.0, 500.0),
            make_row(64, 512, True, 100.0, 400.0, agrees=False),
            refused_row(512, False), refused_row(512, True)]
    summary = backward.summarize(rows)
    assert summary["compared"] == 3
    assert summary["geomean_bwd_cudnn"] == pytest.approx(math.exp(
        (math.log(1.2) + math.log(0.9) + math.log(0.25)) / 3))
    assert summary["worst_shape"] == "d64 s512 b32 h32 causal bf16"
    assert summary["worst_ratio"] == 0.25
    assert summary["target"] == {"full": 600.0, "causal": 450.0}
    assert [r["shape"] for r in summary["refused"]] == ["d256 s512 b32 h8 full bf16",
                                                        "d256 s512 b32 h8 causal bf16"]
    assert summary["mismatches"] == ["d64 s512 b32 h32 causal bf16"]
    text = "\n".join(backward.format_summary(summary))
    assert "backward ours/cuDNN: geomean 0.646x over 3 shapes" in text
    assert "worst d64 s512 b32 h32 causal bf16 0.250x" in text
    assert "hdim 128 seqlen 8192 bf16 backward: full 600, causal 450 TFLOP/s (target 560" in text
    assert "refused: 2 shapes" in text
    # Refusals with one message share a line naming every shape.
    assert ("d256 s512 b32 h8 full bf16, d256 s512 b32 h8 causal bf16: RuntimeError: "
            "bwd_dq_dk_dv: hdim_q 256") in text
    assert "out of tolerance (ours): 1 (d64 s512 b32 h32 causal bf16)" in text
    json.dumps(summary)  # the --json report holds it


def test_summary_sets_eagerly_timed_rows_apart():
    rows = [make_row(128, 8192, False, 600.0, 500.0), make_row(64, 512, False, 300.0, 150.0)]
    rows[1]["cudnn_bwd_timing"] = "events"  # capture failed: the eager time flatters ours
    summary = backward.summarize(rows)
    assert summary["geomean_bwd_cudnn"] == pytest.approx(math.sqrt(1.2 * 2.0))
    assert summary["compared_graph_timed"] == 1
    assert summary["geomean_bwd_cudnn_graph_timed"] == pytest.approx(1.2)
    text = "\n".join(backward.format_summary(summary))
    assert "graph-timed on both sides: geomean 1.200x over 1 shapes" in text
    # With every row graph-timed there is nothing to set apart.
    all_graphed = "\n".join(backward.format_summary(backward.summarize(rows[:1])))
    assert "graph-timed on both sides" not in all_graphed


def with_deterministic(row, det_bwd, agrees=True):
    return dict(row, ours_det_bwd_tflops=det_bwd, ours_det_bwd_timing="graph",
                ours_det_agrees=agrees, ratio_det_default=det_bwd / row["ours_bwd_tflops"])


def test_deterministic_rounds_alternate_and_take_each_modes_median(monkeypatch):
    # The default was timed once before (row["ours_bwd_ms"]); then deterministic and default
    # alternate, deterministic last: det 2.0, default 1.2, det 1.0, default 0.9, det 3.0.
    order, times = [], {True: iter([2.0, 1.0, 3.0]), False: iter([1.2, 0.9])}

    def time_ms(torch, call, warmup, repeat, method):
        deterministic = call()
        order.append(deterministic)
        return next(times[deterministic]), method

    class Package:
        @staticmethod
        def attention_backward(*tensors, causal, deterministic):
            return deterministic

    monkeypatch.setattr(backward.compare, "time_ms", time_ms)
    monkeypatch.setattr(backward, "check_gradients", lambda *args: None)
    row = make_row(128, 4096, False, 500.0, 500.0)
    row.update(ours_bwd_ms=1.1, ref_batch=1, ref_heads=1)
    args = backward.parse_args(["--deterministic-too"])
    backward.run_ours_deterministic(None, Package, row, shape(128, 4096), *[None] * 7, args)
    assert order == [True, False, True, False, True]
    assert row["ours_det_bwd_ms"] == 2.0  # median of 2.0, 1.0, 3.0
    assert row["ratio_det_default"] == pytest.approx(1.1 / 2.0)  # default median of 1.1, 1.2, 0.9
    assert row["ours_det_rounds_ms"] == "2.0000 1.0000 3.0000"
    assert row["ours_default_rounds_ms"] == "1.1000 1.2000 0.9000"
    assert row["ours_det_bwd_tflops"] == pytest.approx(
        backward.tflops(backward.backward_flops(shape(128, 4096)), 2.0))


def test_deterministic_too_reports_the_ratio_to_the_default():
    assert backward.parse_args(["--deterministic-too"]).deterministic_too
    rows = [with_deterministic(make_row(128, 8192, False, 500.0, 500.0), 450.0),
            with_deterministic(make_row(64, 1024, False, 400.0, 400.0), 320.0, agrees=False),
            dict(make_row(64, 512, True, 200.0, 200.0), ours_det_error="RuntimeError: boom")]
    summary = backward.summarize(rows)
    det = summary["deterministic"]
    assert det["compared"] == 2 and det["geomean"] == pytest.approx(math.sqrt(0.9 * 0.8))
    assert det["lowest_shape"] == "d64 s1024 b16 h32 full bf16" and det["lowest"] == 0.8
    assert det["below_target"] == ["d64 s1024 b16 h32 full bf16"]
    assert summary["mismatches"] == ["d64 s1024 b16 h32 full bf16"]
    text = "\n".join(backward.format_summary(summary))
    assert ("deterministic / default backward: geomean 0.849x over 2 shapes, lowest "
            "d64 s1024 b16 h32 full bf16 0.800x; 1 below 0.85x (at most 15% slower) "
            "(d64 s1024 b16 h32 full bf16)") in text
    assert "det bwd  450.0 x0.90 default" in backward.format_row(rows[0])
    assert "x0.80 default MISMATCH" in backward.format_row(rows[1])
    assert "det n/a (RuntimeError: boom)" in backward.format_row(rows[2])
    # Without the flag the summary says nothing of it.
    plain = backward.summarize([make_row(128, 8192, False, 500.0, 500.0)])
    assert "deterministic" not in plain
    assert "deterministic /" not in "\n".join(backward.format_summary(plain))


def test_deterministic_and_deterministic_too_exclude_each_other(capsys):
    with pytest.raises(SystemExit) as stop:
        backward.parse_args(["--deterministic", "--deterministic-too"])
    assert stop.value.code == 2 and "--deterministic-too" in capsys.readouterr().err


def test_summary_without_comparisons():
    summary = backward.summarize([refused_row(1024, False)])
    text = "\n".join(backward.format_summary(summary))
    assert summary["geomean_bwd_cudnn"] is None and "no shape ran on both" in text
    assert "not in this run" in text and "refused: 1 shapes" in text
    fp16 = backward.summarize([make_row(128, 8192, False, 600.0, 500.0, dtype="fp16")])
    assert fp16["target"] == {}  # the target is a bf16 figure


def test_rows_format_and_write(tmp_path):
    ok = make_row(128, 8192, False, 600.0, 500.0)
    line = backward.format_row(ok)
    assert "ours bwd  600.0 f+b  660.0" in line and "x1.20 vs cuDNN" in line
    assert "MISMATCH" not in line and "eager" not in line
    bad = make_row(64, 512, True, 100.0, 400.0, agrees=False)
    assert "MISMATCH dq 0.01 dk 0.02 dv 0.005" in backward.format_row(bad)
    refused = refused_row(512, False)
    line = backward.format_row(refused)
    assert "ours refused: RuntimeError: bwd_dq_dk_dv" in line
    assert "cudnn bwd  400.0" in line and "fa2 n/a (RuntimeError: no kernel)" in line
    eager = dict(ok, ours_bwd_timing="events")
    assert "eager: ours bwd" in backward.format_row(eager)
    assert "eager" not in backward.format_row(eager, timing="events")
    path = tmp_path / "rows.csv"
    backward.write_csv(path, [ok, refused])
    lines = path.read_text().splitlines()
    assert lines[0].split(",")[:len(backward.CSV_FIELDS)] == backward.CSV_FIELDS
    assert len(lines) == 3 and "refused" in lines[2]


def test_gpu_rows_time_check_and_refuse():
    torch, reason = backward.compare.torch_or_reason()
    if torch is None:
        pytest.skip(reason)
    tilefmha = pytest.importorskip("tilefmha")
    args = backward.parse_args(["--warmup", "1", "--repeat", "2"])
    small = dict(shape(64, 512), batch=2)  # a few heads of a short sequence: seconds, not minutes
    row = backward.run_shape(torch, tilefmha, small, args)
    assert row["status"] == "ok" and row["ours_agrees"], row
    assert "ratio_det_default" not in row
    both = backward.run_shape(torch, tilefmha, small,
                              backward.parse_args(["--warmup", "1", "--repeat", "2",
                                                   "--deterministic-too"]))
    assert both["ours_det_agrees"] and both["ratio_det_default"] > 0, both
    assert row["ours_bwd_tflops"] > 0 and row["ours_fwdbwd_tflops"] > 0
    assert row["ref_dtype"] == "float64" and (row["ref_batch"], row["ref_heads"]) == (2, 32)
    assert "ratio_bwd_cudnn" in row or "cudnn_error" in row
    class Refusing:  # a package whose GPU backward has no kernel for the shape
        @staticmethod
        def attention(*_, **__):
            raise NotImplementedError("bwd_dq_dk_dv: no sm90_ws kernel for this shape")

    refused = backward.run_shape(torch, Refusing, dict(shape(64, 512), batch=1), args)
    assert refused["status"] == "refused" and "ours_bwd_tflops" not in refused
    assert "refused: " in backward.format_row(refused)
