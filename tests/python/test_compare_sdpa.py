"""bench/compare_sdpa.py: argument parsing, the FLOP count and the shape expansion (no torch needed)."""

import importlib.util
import json
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def load_script():
    spec = importlib.util.spec_from_file_location("compare_sdpa", ROOT / "bench" / "compare_sdpa.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # importing must not need torch
    return module


compare = load_script()
SWEEP = json.loads((ROOT / "bench" / "fa3_sweep.json").read_text())


def test_defaults_come_from_the_sweep_file():
    args = compare.parse_args([])
    assert args.sweep == ROOT / "bench" / "fa3_sweep.json"
    assert args.hdim is None and args.seqlen is None and args.causal is None and args.csv is None


def test_flags_are_parsed():
    args = compare.parse_args(["--hdim", "64,128", "--seqlen", "512", "--causal", "both",
                               "--dtype", "fp16", "--csv", "out.csv", "--repeat", "5"])
    assert args.hdim == [64, 128] and args.seqlen == [512]
    assert args.causal == [False, True] and args.dtype == "fp16"
    assert args.csv == pathlib.Path("out.csv") and args.repeat == 5


@pytest.mark.parametrize("flags", [["--hdim", "64,x"], ["--seqlen", "0"], ["--causal", "maybe"],
                                   ["--dtype", "fp64"], ["--repeat", "0"]])
def test_bad_flags_exit_2(flags, capsys):
    with pytest.raises(SystemExit) as stop:
        compare.parse_args(flags)
    assert stop.value.code == 2
    assert capsys.readouterr().err  # argparse names the flag


def test_flops_follow_design_section_9():
    # 4 * b * h * sq * sk * d: two GEMMs (QK^T and PV) of 2 * sq * sk * d each per head.
    assert compare.attention_flops(2, 3, 5, 7, 11, False) == 4 * 2 * 3 * 5 * 7 * 11
    assert compare.attention_flops(2, 3, 5, 7, 11, True) == 2 * 2 * 3 * 5 * 7 * 11
    # The FA3 protocol keeps b * sq = 16384 tokens: hdim 128, length 2048 is 8 x 16 heads.
    assert compare.attention_flops(8, 16, 2048, 2048, 128, False) == 4 * 8 * 16 * 2048**2 * 128


def test_default_expansion_covers_the_sweep():
    shapes = compare.expand_shapes(SWEEP)
    assert len(shapes) == len(SWEEP["hdim"]) * len(SWEEP["seqlen"]) * len(SWEEP["causal"])
    tokens, hidden = SWEEP["protocol"]["total_tokens"], SWEEP["protocol"]["hidden"]
    for shape in shapes:
        assert shape["nhead"] * shape["hdim"] == hidden
        assert shape["batch"] * shape["seqlen"] == max(tokens, shape["seqlen"])
        assert shape["dtype"] == SWEEP["dtype"]


def test_expansion_is_narrowed_by_the_flags():
    shapes = compare.expand_shapes(SWEEP, [64], [1024, 32768], [True], "fp16")
    assert [(s["hdim"], s["seqlen"], s["causal"], s["dtype"]) for s in shapes] == [
        (64, 1024, True, "fp16"), (64, 32768, True, "fp16")]
    assert shapes[1]["batch"] == 1  # a length above the token budget runs one sequence
    with pytest.raises(ValueError, match="hdim 96 does not divide hidden 2048"):
        compare.expand_shapes(SWEEP, [96])


def test_without_torch_or_gpu_the_message_is_clear(capsys):
    torch, reason = compare.torch_or_reason()
    if torch is not None:
        pytest.skip("PyTorch with CUDA is present: the main run is for a GPU host")
    assert compare.main(["--hdim", "64", "--seqlen", "512"]) == 2
    message = capsys.readouterr().err
    assert "needs PyTorch with CUDA" in message and reason in message


def test_gpu_comparison_agrees():
    torch, reason = compare.torch_or_reason()
    if torch is None:
        pytest.skip(reason)
    tilefmha = pytest.importorskip("tilefmha")
    shape = compare.expand_shapes(SWEEP, [64], [512], [True])[0]
    row = compare.run_shape(torch, tilefmha, shape, warmup=1, repeat=3)
    assert row["ours_tflops"] > 0
    for name in compare.BACKENDS:
        if f"{name}_agrees" in row:
            assert row[f"{name}_agrees"], row


def test_timing_defaults_to_graph_replays():
    assert compare.parse_args([]).timing == "graph"
    assert compare.parse_args(["--timing", "events"]).timing == "events"
    with pytest.raises(SystemExit):
        compare.parse_args(["--timing", "wall"])


def test_gpu_rows_say_how_they_were_timed():
    torch, reason = compare.torch_or_reason()
    if torch is None:
        pytest.skip(reason)
    tilefmha = pytest.importorskip("tilefmha")
    shape = compare.expand_shapes(SWEEP, [128], [512], [False])[0]
    row = compare.run_shape(torch, tilefmha, shape, warmup=1, repeat=3, timing="graph")
    assert row["ours_timing"] in ("graph", "events") and row["ours_host_us"] > 0
