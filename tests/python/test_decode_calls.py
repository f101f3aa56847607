"""bench/decode_calls.py: importing needs neither torch nor the package, the shape flags, the
default shapes, and exit code 2 where PyTorch with CUDA is missing."""

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


def test_a_shape_is_five_positive_fields_with_whole_groups():
    assert calls.parse_shape("1,32,8,128,1024") == (1, 32, 8, 128, 1024)
    for bad, words in (("1,32,8,128", "expected"), ("1,32,8,x,1024", "integer"),
                       ("0,32,8,128,1024", "positive"), ("1,30,8,128,1024", "multiple")):
        with pytest.raises(ValueError, match=words):
            calls.parse_shape(bad)


def test_shapes_split_on_spaces_and_semicolons():
    assert calls.parse_shapes("1,32,8,128,1024; 8,64,8,64,2048") == [
        (1, 32, 8, 128, 1024), (8, 64, 8, 64, 2048)]
    with pytest.raises(ValueError, match="no shape"):
        calls.parse_shapes(" ; ")
    assert calls.label((8, 64, 8, 64, 2048)) == "b8 64/8 d64 sk2048"


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
