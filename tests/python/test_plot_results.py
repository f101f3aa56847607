"""scripts/plot_results.py renders a bench JSON to a PNG and refuses malformed files clearly."""

import importlib.util
import json
import pathlib
import struct
import zlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "tests" / "data" / "bench_sample.json"


def load_script():
    spec = importlib.util.spec_from_file_location("plot_results", ROOT / "scripts" / "plot_results.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


plot_results = load_script()


def png_size(path):
    """(width, height) from the IHDR chunk, after checking the signature and the chunk's CRC."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    length, kind = struct.unpack(">I4s", data[8:16])
    assert kind == b"IHDR" and length == 13
    body = data[16:29]
    (crc,) = struct.unpack(">I", data[29:33])
    assert zlib.crc32(kind + body) == crc
    assert data.endswith(b"IEND\xaeB`\x82")
    return struct.unpack(">II", body[:8])


def test_sample_series_follow_the_rows():
    document, rows = plot_results.load_rows(SAMPLE)
    panels = plot_results.series_by_hdim(rows)
    hdims = sorted({row["problem_hdim_q"] for row in rows})
    assert list(panels) == hdims
    for hdim, series in panels.items():
        for causal in (False, True):
            ours = series[("tilefmha", causal)]
            expected = sorted(
                (row["problem_seqlen_q"], row["tflops"])
                for row in rows
                if row["problem_hdim_q"] == hdim and row["problem_causal"] == causal
            )
            assert ours == expected
            assert len(series[("cuDNN", causal)]) == len(expected)
            assert len(series[("FA2", causal)]) == len(expected)


def test_renders_a_png(tmp_path):
    pytest.importorskip("matplotlib")
    output = tmp_path / "plot.png"
    assert plot_results.main([str(SAMPLE), "-o", str(output)]) == 0
    width, height = png_size(output)
    # Two panels of 5x4 inches at 100 dpi: a blank or one-pixel image would not match.
    assert width >= 800 and height >= 300
    assert output.stat().st_size > 10_000


def test_malformed_json_is_a_clear_error(tmp_path, capsys):
    broken = tmp_path / "broken.json"
    broken.write_text('{"rows": [ {"tflops": 1,, } ]}')
    assert plot_results.main([str(broken), "-o", str(tmp_path / "x.png")]) == 2
    message = capsys.readouterr().err
    assert "broken.json" in message and "not valid JSON" in message and "line 1" in message
    assert not (tmp_path / "x.png").exists()


def test_rows_missing_keys_are_named(tmp_path, capsys):
    rows_file = tmp_path / "rows.json"
    rows_file.write_text(json.dumps({"rows": [{"status": "ok", "tflops": 3.0}]}))
    assert plot_results.main([str(rows_file), "-o", str(tmp_path / "x.png")]) == 2
    message = capsys.readouterr().err
    assert "rows[0] lacks problem_hdim_q" in message


def test_a_file_without_rows_is_refused(tmp_path):
    other = tmp_path / "other.json"
    other.write_text("[1, 2, 3]")
    with pytest.raises(plot_results.ResultsError, match="'rows' list"):
        plot_results.load_rows(other)
