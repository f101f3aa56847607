"""bench/decode_calls.py: importing needs neither torch nor the package, the shape flags, the
default shapes, the decode sweep's matrix, the summary, and exit code 2 where PyTorch with CUDA
is missing."""

import importlib.util
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "decode_calls.py"


def load_script():
    spec = importlib.util.spec_from_file_location("decode_calls", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


calls = load_script()


def test_importing_needs_neither_torch_nor_the_package():
    code = ("import importlib.util, sys\n"
            f"spec = importlib.util.spec_from_file_location('decode_calls', {str(SCRIPT)!r})\n"
            "spec.loader.exec_module(importlib.util.module_from_spec(spec))\n"
            "assert 'torch' not in sys.modules and 'tilefmha' not in sys.modules\n")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_a_shape_is_five_or_six_positive_fields_with_whole_groups():
    assert calls.parse_shape("1,32,8,128,1024") == (1, 32, 8, 128, 1024, 1)
    assert calls.parse_shape("1,32,8,128,1024,16") == (1, 32, 8, 128, 1024, 16)
    for bad, words in (("1,32,8,128", "expected"), ("1,32,8,128,1024,4,4", "expected"),
                       ("1,32,8,x,1024", "integer"), ("0,32,8,128,1024", "positive"),
                       ("1,32,8,128,1024,0", "positive"), ("1,30,8,128,1024", "multiple")):
        with pytest.raises(ValueError, match=words):
            calls.parse_shape(bad)


def test_shapes_split_on_spaces_and_semicolons():
    assert calls.parse_shapes("1,32,8,128,1024; 8,64,8,64,2048,4") == [
        (1, 32, 8, 128, 1024, 1), (8, 64, 8, 64, 2048, 4)]
    with pytest.raises(ValueError, match="no shape"):
        calls.parse_shapes(" ; ")
    assert calls.label((8, 64, 8, 64, 2048, 1)) == "b8 64/8 d64 sk2048"
    assert calls.label((8, 64, 8, 64, 2048, 4)) == "b8 64/8 d64 sk2048 sq4"


def test_the_sweep_is_the_decode_sweep_files_matrix():
    shapes, skipped = calls.sweep_shapes()
    sweep = calls.load_decode_sweep()
    expected, expected_skipped = sweep.expand_shapes(sweep.load_sweep(sweep.DEFAULT_SWEEP))
    assert len(shapes) == len(expected) and skipped == len(expected_skipped)
    assert {s[5] for s in shapes} == {1, 4, 16} and {s[3] for s in shapes} == {64, 128}
    # A cap on K+V bytes leaves out the largest shapes, never a small one.
    capped, capped_skipped = calls.sweep_shapes(max_kv_gb=1)
    assert capped_skipped > skipped and len(capped) + capped_skipped == len(shapes) + skipped
    for b, hq, hk, d, sk, sq in capped:
        assert 2 * b * sk * hk * d * 2 <= 1e9
    # Shapes that share K and V are adjacent, so the run allocates each K/V once.
    keys = [(b, sk, hk, d) for b, hq, hk, d, sk, sq in shapes]
    runs = [key for i, key in enumerate(keys) if i == 0 or keys[i - 1] != key]
    assert len(runs) < len(keys)


def test_the_summary_counts_the_shapes_below_cudnn():
    text = calls.summarize({"a": 1.2, "b": 0.8, "c": 1.0})
    assert text.startswith("3 shapes: geomean cuDNN/ours 0.986x, 1 below 1.0x")
    assert "worst: b 0.80x" in text
    assert calls.summarize({}) == "no shape timed"


def test_defaults_and_flags():
    args = calls.parse_args([])
    assert args.shapes == list(calls.DEFAULT_SHAPES) and args.calls == 20
    for shape in calls.DEFAULT_SHAPES:
        assert calls.parse_shape(",".join(map(str, shape))) == shape
    with pytest.raises(SystemExit):
        calls.parse_args(["--calls", "0"])
    with pytest.raises(SystemExit):
        calls.parse_args(["--shapes", "1,2,3"])
    # Our calls take the engine's split count unless one is forced.
    assert args.num_splits == 0
    assert calls.parse_args(["--num-splits", "16"]).num_splits == 16
    with pytest.raises(SystemExit):
        calls.parse_args(["--num-splits", "-1"])
    assert calls.parse_args(["--explain"]).explain and not args.explain
    # One profiled call of each side, or the timeline: one or the other.
    assert calls.parse_args(["--profile"]).profile and not args.profile
    with pytest.raises(SystemExit):
        calls.parse_args(["--profile", "--timeline"])
    # The sweep replaces the shapes; its cap needs it.
    assert calls.parse_args(["--sweep", "--max-kv-gb", "4"]).max_kv_gb == 4
    for bad in (["--sweep", "--shapes", "1,8,8,64,128"], ["--max-kv-gb", "4"],
                ["--sweep", "--max-kv-gb", "0"]):
        with pytest.raises(SystemExit):
            calls.parse_args(bad)


def test_without_torch_or_a_gpu_it_exits_2():
    torch_spec = importlib.util.find_spec("torch")
    if torch_spec is not None:
        import torch
        if torch.cuda.is_available():
            pytest.skip("a GPU is present: the timed run is not a unit test")
    result = subprocess.run([sys.executable, str(SCRIPT), "--shapes", "1,8,8,64,128"],
                            capture_output=True, text=True)
    assert result.returncode == 2, result.stderr
    assert "decode_calls: needs" in result.stderr
