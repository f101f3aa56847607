"""bench/serving_bench.py without a GPU: the sweep file's keys, the shape lists with the K+V cap,
and the summary's target lines over made-up rows."""

import importlib.util
import json
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("serving_bench", ROOT / "bench" / "serving_bench.py")
serving = importlib.util.module_from_spec(spec)
spec.loader.exec_module(serving)  # importing must not need torch


def test_the_shipped_sweep_lists_decode_and_prefill_shapes():
    sweep = serving.load_sweep(serving.DEFAULT_SWEEP)
    decode = serving.decode_shapes(sweep)
    assert {s["page_size"] for s in decode} == {1, 16, 1024}
    assert all(s["kv_bytes"] <= sweep["decode"]["max_kv_bytes"] for s in decode)
    appends = serving.append_shapes(sweep)
    assert {s["page_size"] for s in appends} == {0, 16}
    assert all(s["bytes"] == 4 * s["batch"] * s["seqlen_knew"] * s["nhead_k"] * s["hdim"] * 2
               for s in appends)
    prefill = serving.prefill_shapes(sweep)
    assert all(s["batch"] * s["tokens_per_seq"] == sweep["prefill"]["total_tokens"]
               for s in prefill)


def test_the_page_size_sweep_lists_the_pages_between_the_targets():
    sweep = serving.load_sweep(ROOT / "bench" / "serving_page_sizes.json")
    assert {s["page_size"] for s in serving.decode_shapes(sweep)} == {16, 32}
    prefill = serving.prefill_shapes(sweep)
    assert {s["page_size"] for s in prefill} == {8, 16, 32, 64}
    assert len(prefill) == 4 * 2  # page sizes x prompt lengths


def test_the_kv_cap_drops_larger_shapes(tmp_path):
    sweep = json.loads(serving.DEFAULT_SWEEP.read_text())
    sweep["decode"]["max_kv_bytes"] = 2 * 1 * 1024 * 8 * 128 * 2  # b1 sk1024 only
    path = tmp_path / "s.json"
    path.write_text(json.dumps(sweep))
    shapes = serving.decode_shapes(serving.load_sweep(path))
    assert {(s["batch"], s["seqlen_k"]) for s in shapes} == {(1, 1024)}


def test_a_misspelt_key_is_refused(tmp_path):
    sweep = json.loads(serving.DEFAULT_SWEEP.read_text())
    sweep["decode"]["page_sizes"] = sweep["decode"].pop("page_size")
    path = tmp_path / "s.json"
    path.write_text(json.dumps(sweep))
    with pytest.raises(ValueError, match="decode needs keys"):
        serving.load_sweep(path)


def test_the_summary_counts_rows_below_each_target():
    rows = [
        {"kind": "decode", "shape": "a", "page_size": 16, "seqlen_k": 8192, "paged_us": 10,
         "vs_contiguous": 0.9, "vs_cudnn": 1.1, "paged_pct_copy": 95, "agrees": True},
        {"kind": "decode", "shape": "b", "page_size": 16, "seqlen_k": 1024, "paged_us": 5,
         "vs_contiguous": 1.0, "vs_cudnn": 0.8, "paged_pct_copy": 50, "agrees": True},
        {"kind": "prefill", "shape": "c", "tokens_per_seq": 8192, "vs_varlen": 0.97,
         "paged_tflops": 400, "agrees": False},
    ]
    rows.append({"kind": "append", "shape": "d", "bytes": 2**25, "append_pct_copy": 80,
                 "agrees": True})
    text = "\n".join(serving.summary_lines(rows))
    assert "decode page 16:" in text and "1 of 2 below" in text and "(1 below 1.0)" in text
    assert "0 of 1 below 90% of copy bandwidth" in text
    assert "8192 tok 0.97x (400 TFLOP/s)" in text
    assert "append (>= 16 MiB moved): 1 of 1 below 85% of copy bandwidth" in text
    assert "mismatches: 1 of 4" in text


def test_page_size_picks_decode_and_prefill_shapes_and_keeps_appends(capsys):
    assert serving.main(["--list-shapes", "--page-size", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines and all(line.endswith("page1") or line.startswith("append") for line in lines)
    assert any(line.startswith("decode") for line in lines)
    assert any(line.startswith("append") for line in lines)
    assert not any(line.startswith("prefill") for line in lines)  # the sweep has no page-1 prefill


def test_a_page_size_the_sweep_lacks_is_named(capsys):
    with pytest.raises(SystemExit):
        serving.main(["--list-shapes", "--only", "decode", "--page-size", "3"])
    assert "page sizes [1, 16, 1024]" in capsys.readouterr().err
