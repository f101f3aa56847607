"""Every example under examples/python runs to completion on the CPU backend (each one checks
its own results and exits non-zero on a mismatch)."""

import os
import pathlib
import subprocess
import sys

import pytest

EXAMPLES = sorted((pathlib.Path(__file__).resolve().parents[2] / "examples" / "python")
                  .glob("*.py"))


def test_examples_are_present():
    names = {path.stem for path in EXAMPLES}
    assert {"basic_forward", "varlen", "gqa", "layouts", "paged_decode", "backward"} <= names


@pytest.mark.parametrize("example", EXAMPLES, ids=[path.stem for path in EXAMPLES])
def test_example_runs(example):
    result = subprocess.run([sys.executable, str(example)], capture_output=True, text=True,
                            timeout=120, env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip(), "an example says what it did"
