"""bench/decode_sweep.py: flags, the sweep file, the shape matrix with its K+V cap, the byte
counts and the summary (no torch needed); one GPU case where PyTorch with CUDA is present."""

import importlib.util
import itertools
import json
import math
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "decode_sweep.py"


def load_script():
    spec = importlib.util.spec_from_file_location("decode_sweep", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # importing must not need torch
    return module


decode = load_script()
SWEEP = json.loads((ROOT / "bench" / "decode_sweep.json").read_text())


def test_importing_needs_neither_torch_nor_the_package():
    code = ("import importlib.util, sys\n"
            f"spec = importlib.util.spec_from_file_location('decode_sweep', {str(SCRIPT)!r})\n"
            "spec.loader.exec_module(importlib.util.module_from_spec(spec))\n"
            "assert 'torch' not in sys.modules and 'tilefmha' not in sys.modules\n")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_sweep_file_holds_the_decode_matrix():
    decode.validate_sweep(SWEEP)
    assert SWEEP["batch"] == [1, 8, 32, 128]
    assert SWEEP["heads"] == [[32, 32], [32, 8], [64, 8]]
    assert SWEEP["hdim"] == [64, 128]
    assert SWEEP["seqlen_k"] == [1024, 8192, 32768, 131072]
    assert SWEEP["seqlen_q"] == [1, 4, 16]
    assert SWEEP["dtype"] == "bf16" and SWEEP["max_kv_bytes"] == 32 * 10**9


def test_default_expansion_keeps_shapes_within_the_kv_cap():
    shapes, skipped = decode.expand_shapes(SWEEP)
    # Counted independently: every combination, K+V = 2 tensors * b * sk * hk * d * 2 bytes.
    product = list(itertools.product(SWEEP["batch"], SWEEP["heads"], SWEEP["hdim"],
                                     SWEEP["seqlen_k"], SWEEP["seqlen_q"]))
    within = [p for p in product if 2 * p[0] * p[3] * p[1][1] * p[2] * 2 <= 32e9]
    assert len(shapes) == len(within) and len(shapes) + len(skipped) == len(product)
    assert all(s["kv_bytes"] <= 32e9 for s in shapes)
    assert all(s["kv_bytes"] > 32e9 for s in skipped)
    labels = {decode.shape_label(s) for s in shapes}
    assert "b1 h64/8 d128 sq1 sk128k" in labels  # 0.5 GB
    assert "b128 h32/32 d128 sq1 sk128k" not in {decode.shape_label(s) for s in shapes}
    assert "b128 h32/32 d128 sq1 sk128k" in {decode.shape_label(s) for s in skipped}
    assert all(s["dtype"] == "bf16" and not s["causal"] for s in shapes)


def test_seqlen_q_varies_fastest_so_consecutive_shapes_share_kv():
    shapes, _ = decode.expand_shapes(SWEEP)
    for first, second in zip(shapes[::3], shapes[1::3]):
        kv = ("batch", "seqlen_k", "nhead_k", "hdim")
        assert [first[key] for key in kv] == [second[key] for key in kv]
    assert [s["seqlen_q"] for s in shapes[:3]] == [1, 4, 16]


def test_byte_counts():
    shape = {"dtype": "bf16", "batch": 8, "nhead_q": 32, "nhead_k": 8, "hdim": 128,
             "seqlen_q": 4, "seqlen_k": 8192}
    assert decode.kv_bytes(8, 8192, 8, 128, "bf16") == 2 * 8 * 8192 * 8 * 128 * 2
    # Q read and O written once on top of K and V.
    assert decode.traffic_bytes(shape) == (2 * 8 * 8192 * 8 * 128 + 2 * 8 * 4 * 32 * 128) * 2
    assert decode.gbps(2e9, 1000.0) == pytest.approx(2000.0)


def test_flags_are_parsed():
    args = decode.parse_args(["--batch", "1,8", "--heads", "32/8,64", "--hdim", "128",
                              "--seqlen-k", "8k,128K,1000", "--seqlen-q", "1", "--dtype", "fp16",
                              "--causal", "--limit", "5", "--max-kv-gb", "16", "--csv", "o.csv",
                              "--json", "o.json", "--timing", "events", "--repeat", "7"])
    assert args.batch == [1, 8] and args.heads == [(32, 8), (64, 64)] and args.hdim == [128]
    assert args.seqlen_k == [8192, 131072, 1000] and args.seqlen_q == [1]
    assert args.dtype == "fp16" and args.causal and args.limit == 5 and args.max_kv_gb == 16
    assert args.csv == pathlib.Path("o.csv") and args.json == pathlib.Path("o.json")
    assert args.timing == "events" and args.repeat == 7


def test_defaults():
    args = decode.parse_args([])
    assert args.sweep == ROOT / "bench" / "decode_sweep.json"
    assert args.batch is args.heads is args.hdim is args.seqlen_k is args.seqlen_q is None
    assert not args.causal and args.limit is None and args.timing == "graph"
    assert args.copy_gib * 2**30 >= 2e9  # the copy that measures bandwidth is at least 2 GB


@pytest.mark.parametrize("flags", [["--heads", "32/5"], ["--heads", "32/8/2"], ["--heads", "a"],
                                   ["--seqlen-k", "8x"], ["--seqlen-k", "0"], ["--batch", "-1"],
                                   ["--limit", "0"], ["--dtype", "fp32"], ["--repeat", "0"],
                                   ["--max-kv-gb", "0"], ["--copy-gib", "1"],
                                   ["--timing", "wall"]])
def test_bad_flags_exit_2(flags, capsys):
    with pytest.raises(SystemExit) as stop:
        decode.parse_args(flags)
    assert stop.value.code == 2
    assert capsys.readouterr().err  # argparse names the flag


def test_flags_narrow_the_expansion():
    shapes, skipped = decode.expand_shapes(SWEEP, batch=[8], heads=[(32, 8)], hdim=[128],
                                           seqlen_k=[8192, 131072], seqlen_q=[1, 16],
                                           dtype="fp16", causal=True)
    assert [decode.shape_label(s) for s in shapes] == [
        "b8 h32/8 d128 sq1 sk8k causal", "b8 h32/8 d128 sq16 sk8k causal",
        "b8 h32/8 d128 sq1 sk128k causal", "b8 h32/8 d128 sq16 sk128k causal"]
    assert not skipped and all(s["dtype"] == "fp16" and s["causal"] for s in shapes)
    limited, _ = decode.expand_shapes(SWEEP, batch=[8], limit=3)
    assert len(limited) == 3
    # A lower cap moves shapes to the skipped list; query rows longer than the keys are dropped.
    capped, over = decode.expand_shapes(SWEEP, batch=[32], seqlen_k=[32768], hdim=[128],
                                        heads=[(32, 32)], max_kv_bytes=1e9)
    assert not capped and len(over) == 3
    short, _ = decode.expand_shapes(SWEEP, batch=[1], seqlen_k=[8], seqlen_q=[4, 16],
                                    heads=[(32, 8)], hdim=[64])
    assert [s["seqlen_q"] for s in short] == [4]


@pytest.mark.parametrize("edit, message", [
    ({"heads": [[32, 5]]}, "nhead_k does not divide"),
    ({"heads": [32]}, "is not [nhead_q, nhead_k]"),
    ({"batch": []}, "'batch' must be a non-empty list"),
    ({"hdim": [64, "128"]}, "'hdim' holds '128'"),
    ({"seqlen_k": [0]}, "'seqlen_k' holds 0"),
    ({"dtype": "fp8"}, "'dtype' 'fp8'"),
    ({"max_kv_bytes": -1}, "'max_kv_bytes' must be a positive number"),
    ({"seqlen": [1]}, "unknown key 'seqlen'"),
])
def test_bad_sweep_files_are_refused_naming_the_key(edit, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        decode.validate_sweep(dict(SWEEP, **edit))
    missing = dict(SWEEP)
    del missing["hdim"]
    with pytest.raises(ValueError, match="missing key 'hdim'"):
        decode.validate_sweep(missing)


def test_a_bad_sweep_file_exits_2(tmp_path, capsys):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(dict(SWEEP, heads=[[32, 3]])))
    assert decode.main(["--sweep", str(path)]) == 2
    assert "nhead_k does not divide" in capsys.readouterr().err
    assert decode.main(["--sweep", str(tmp_path / "absent.json")]) == 2


def test_list_shapes_needs_no_gpu(capsys):
    assert decode.main(["--list-shapes", "--batch", "1", "--hdim", "64", "--heads", "32/8"]) == 0
    out = capsys.readouterr().out
    assert "b1 h32/8 d64 sq1 sk1k" in out and "12 shapes, 0 skipped" in out


def test_bottom_right_mask_limits():
    # Row i of sq rows sees keys 0 .. i + sk - sq: the last row sees every key.
    assert decode.bottom_right_last_keys(4, 10) == [6, 7, 8, 9]
    assert decode.bottom_right_last_keys(1, 10) == [9]


def make_row(index, ratio, pct, sk=8192, agrees=True):
    shape = {"dtype": "bf16", "batch": 1, "nhead_q": 32, "nhead_k": 8, "hdim": 128,
             "seqlen_q": 1, "seqlen_k": sk, "causal": False}
    shape["kv_bytes"] = decode.kv_bytes(1, sk, 8, 128, "bf16")
    shape["bytes"] = decode.traffic_bytes(shape)
    row = dict(shape, shape=decode.shape_label(shape) + f" #{index}", status="ok", index=index,
               ours_us=10.0, ours_timing="graph", cudnn_us=10.0 * ratio, cudnn_timing="graph",
               cudnn_mode="gqa", ratio=ratio, max_abs_error=0.001, agrees=agrees)
    decode.add_bandwidth(row, "ours", 3000.0)
    decode.add_bandwidth(row, "cudnn", 3000.0)
    row["ours_pct_copy"] = pct
    return row


def test_summary_counts_and_geomean():
    rows = [make_row(1, 2.0, 95.0), make_row(2, 0.5, 80.0), make_row(3, 0.8, 50.0, sk=1024),
            make_row(4, 1.25, 89.0, agrees=False),
            {"shape": "b1 h32/8 d64 sq1 sk1k", "status": "error", "seqlen_k": 1024,
             "message": "RuntimeError: x"},
            dict(make_row(6, 1.0, 99.0), cudnn_note="refused")]
    del rows[5]["ratio"], rows[5]["cudnn_us"]
    summary = decode.summarize(rows)
    assert summary["geomean_ratio"] == pytest.approx(math.exp(
        (math.log(2.0) + math.log(0.5) + math.log(0.8) + math.log(1.25)) / 4))
    assert summary["min_ratio"] == 0.5 and summary["min_ratio_shape"].endswith("#2")
    assert summary["below_1x"] == 2 and summary["compared"] == 4
    # sk >= 8k shapes below 90% of copy bandwidth: rows 2 and 4 (row 3 is 1k, row 6 at 99%).
    assert summary["long_shapes"] == 4 and summary["long_below_target"] == 2
    assert summary["failed"] == 1 and summary["mismatches"] == 1
    assert summary["cudnn_unavailable"] == 1 and summary["timed"] == 5
    line = decode.format_summary(summary)
    assert line.startswith("summary: geomean cuDNN/ours") and "min 0.500x" in line
    assert "2 of 4 below 1.0x" in line and "2 of 4 shapes with sk >= 8k below 90%" in line
    empty = decode.summarize([])
    assert empty["geomean_ratio"] is None and "no shape compared" in decode.format_summary(empty)


def test_rows_format_and_write(tmp_path):
    ok = make_row(1, 1.5, 91.0)
    refused = dict(make_row(2, 1.0, 91.0), cudnn_note="cuDNN refused")
    for key in ("ratio", "cudnn_us", "cudnn_gbps", "cudnn_pct_copy", "cudnn_mode", "agrees",
                "max_abs_error"):
        refused.pop(key, None)
    failed = {"index": 3, "shape": "b1 h32/8 d64 sq1 sk1k", "status": "error",
              "message": "NotImplementedError: no"}
    assert "1.50x" in decode.format_row(ok, 3) and "gqa ok" in decode.format_row(ok, 3)
    assert "cuDNN n/a: cuDNN refused" in decode.format_row(refused, 3)
    assert "error: NotImplementedError: no" in decode.format_row(failed, 3)
    assert "timing" not in decode.format_row(ok, 3)
    fallback = dict(ok, ours_timing="events")  # graph capture failed for ours
    assert "(timing ours events, cuDNN graph)" in decode.format_row(fallback, 3)
    assert "(timing" not in decode.format_row(dict(fallback, cudnn_timing="events"), 3, "events")
    mismatch = dict(ok, agrees=False, max_abs_error=0.5)
    assert "MISMATCH 0.5" in decode.format_row(mismatch)
    rows = [ok, refused, failed]
    decode.write_csv(tmp_path / "rows.csv", rows)
    header = (tmp_path / "rows.csv").read_text().splitlines()[0].split(",")
    assert header[:len(decode.CSV_FIELDS)] == decode.CSV_FIELDS
    assert len((tmp_path / "rows.csv").read_text().splitlines()) == 4
    decode.write_json(tmp_path / "rows.json", {"rows": rows, "summary": decode.summarize(rows)})
    loaded = json.loads((tmp_path / "rows.json").read_text())
    assert loaded["rows"][0]["ratio"] == 1.5 and loaded["summary"]["failed"] == 1
    assert not list(tmp_path.glob("*.partial"))


def test_without_torch_or_gpu_the_message_is_clear(capsys):
    torch, reason = decode.compare.torch_or_reason()
    if torch is not None:
        pytest.skip("PyTorch with CUDA is present: the main run is for a GPU host")
    assert decode.main(["--batch", "1", "--limit", "1"]) == 2
    message = capsys.readouterr().err
    assert "needs PyTorch with CUDA" in message and reason in message


def test_gpu_decode_shape_agrees_with_cudnn():
    torch, reason = decode.compare.torch_or_reason()
    if torch is None:
        pytest.skip(reason)
    tilefmha = pytest.importorskip("tilefmha")
    shapes, _ = decode.expand_shapes(SWEEP, batch=[2], heads=[(32, 8)], hdim=[128],
                                     seqlen_k=[1024], seqlen_q=[1, 4])
    kv = decode.KvInputs(torch)
    try:
        for shape in shapes:
            row = decode.run_shape(torch, tilefmha, shape, kv, warmup=1, repeat=3,
                                   timing="graph", copy_gbps=3000.0)
            assert row["status"] == "ok", row
            assert row["ours_us"] > 0 and row["ours_timing"] in ("graph", "events")
            if "agrees" in row:
                assert row["agrees"], row
    finally:
        kv.release()


@pytest.mark.parametrize("refusals", [1, 2])
def test_gpu_cudnn_refusal_falls_back_to_repeated_heads(monkeypatch, refusals):
    torch, reason = decode.compare.torch_or_reason()
    if torch is None:
        pytest.skip(reason)
    tilefmha = pytest.importorskip("tilefmha")
    real_first_call, seen = decode.first_call, []

    def refusing(call):  # cuDNN refuses the first `refusals` attempts of the row
        seen.append(call)
        return (None, f"refusal {len(seen)}") if len(seen) <= refusals else real_first_call(call)

    monkeypatch.setattr(decode, "first_call", refusing)
    shape = decode.expand_shapes(SWEEP, batch=[2], heads=[(32, 8)], hdim=[64], seqlen_k=[1024],
                                 seqlen_q=[4])[0][0]
    kv = decode.KvInputs(torch)
    try:
        row = decode.run_shape(torch, tilefmha, shape, kv, warmup=1, repeat=3, timing="graph")
    finally:
        kv.release()
    assert row["status"] == "ok" and row["cudnn_note"].startswith("refusal 1")
    if refusals == 1:  # the retry with K/V heads repeated ran and agrees
        assert row["cudnn_mode"] == "repeat_kv" and row["agrees"] and row["ratio"] > 0
    else:  # both refused: ours alone, both reasons kept
        assert "with repeated K/V heads: refusal 2" in row["cudnn_note"]
        assert "cudnn_mode" not in row and "ratio" not in row
        assert "cuDNN n/a: refusal 1" in decode.format_row(row)
