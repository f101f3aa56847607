"""The Python bad-input corpus (bad_inputs.json beside this file), one table-driven test: every
case calls one function of the package (or steps of the engine's Problem handle, for the
families with no function of their own) with a bad argument and must raise the expected
exception, with a message naming the field, leaving every array it was given untouched (caches
written in place, outputs passed to the engine). The corpus is data; this file only runs it.
docs/testing.md describes the format."""

import json
import math
import pathlib
import re

import numpy as np
import pytest

import tilefmha
from tilefmha import _core
from tilefmha._features import scalar_features

CORPUS = json.loads((pathlib.Path(__file__).parent / "bad_inputs.json").read_text())
FAMILIES = ("fwd", "fwd_splitkv", "fwd_splitkv_combine", "fwd_pagedkv", "batch_prefill",
            "fwd_appendkv", "bwd_dot_do_o", "bwd_dq_dk_dv", "bwd_convert_dq")
EXCEPTIONS = {"ValueError": ValueError, "TypeError": TypeError,
              "NotImplementedError": NotImplementedError, "RuntimeError": RuntimeError}
CASE_KEYS = {"family", "call", "args", "kwargs", "steps", "arrays", "raises", "field", "match",
             "note"}


def make_array(spec, arrays):
    """An array from its spec: shape, dtype (float32), fill (a number, "nan", "inf" or random in
    [-1, 1)) or values, then as views: transpose (axes), step (a stride on the last dimension),
    offset (a misaligned view one byte in), readonly; or view_of (another array, the same
    object)."""
    if "view_of" in spec:
        return arrays[spec["view_of"]]
    dtype = np.dtype(spec.get("dtype", "float32"))
    shape = tuple(spec["shape"])
    if "values" in spec:
        array = np.array(spec["values"], dtype=dtype).reshape(shape)
    elif "fill" in spec:
        array = np.full(shape, float(spec["fill"]) if isinstance(spec["fill"], str)
                        else spec["fill"], dtype=dtype)
    else:
        rng = np.random.default_rng(len(arrays))
        array = rng.uniform(-1, 1, shape).astype(dtype)
    if "step" in spec:
        array = np.repeat(array, spec["step"], axis=-1)[..., ::spec["step"]]
    if "transpose" in spec:
        array = array.transpose(spec["transpose"])
    if spec.get("offset"):
        raw = np.zeros(array.nbytes + 1, np.uint8)
        moved = raw[1:].view(array.dtype).reshape(array.shape)
        moved[...] = array
        array = moved
    if spec.get("readonly"):
        array.flags.writeable = False
    return array


def build_arrays(case):
    arrays = {}
    for name, spec in {**CORPUS["arrays"], **case.get("arrays", {})}.items():
        arrays[name] = make_array(spec, arrays)
    return arrays


def resolve(value, arrays):
    """"$name" is an array of the case; {"float": "nan"} a float JSON cannot spell; {"tuple":
    [...]} a tuple; lists and dicts are resolved element by element."""
    if isinstance(value, str) and value.startswith("$"):
        return arrays[value[1:]]
    if isinstance(value, dict) and set(value) == {"float"}:
        return float(value["float"])
    if isinstance(value, dict) and set(value) == {"tuple"}:
        return tuple(resolve(v, arrays) for v in value["tuple"])
    if isinstance(value, list):
        return [resolve(v, arrays) for v in value]
    if isinstance(value, dict):
        return {k: resolve(v, arrays) for k, v in value.items()}
    return value


def run_steps(steps, arrays):
    """Steps on the engine's Problem handle: ["new", family] first, then [method, args...];
    set_features takes the keywords of scalar_features as a dict."""
    problem = None
    for step in steps:
        method, args = step[0], [resolve(a, arrays) for a in step[1:]]
        if method == "new":
            problem = _core.Problem(*args)
        elif method == "set_features":
            problem.set_features(scalar_features(**args[0]))
        else:
            getattr(problem, method)(*args)


def call(case, arrays):
    if case["call"] == "core":
        return run_steps(case["steps"], arrays)
    function = getattr(tilefmha, case["call"])
    return function(*resolve(case.get("args", []), arrays), **resolve(case.get("kwargs", {}),
                                                                     arrays))


def snapshot(arrays):
    # Bytes in logical order, so that a strided or transposed view compares what it shows.
    return {name: (a.shape, a.dtype, np.ascontiguousarray(a).tobytes())
            for name, a in arrays.items() if isinstance(a, np.ndarray)}


def case_id(index_case):
    index, case = index_case
    return f"{index:03d}-{case['family']}-{case['call']}"


@pytest.mark.parametrize("case", CORPUS["cases"],
                         ids=[case_id(c) for c in enumerate(CORPUS["cases"])])
def test_bad_input_is_refused_naming_the_field_and_touches_nothing(case):
    arrays = build_arrays(case)
    before = snapshot(arrays)
    with pytest.raises(EXCEPTIONS[case["raises"]]) as raised:
        call(case, arrays)
    message = str(raised.value)
    assert case["field"] in message, f"the message does not name {case['field']}: {message}"
    assert re.search(case["match"], message), f"no match for /{case['match']}/ in: {message}"
    assert snapshot(arrays) == before, "an array given to the call changed"


def test_corpus_holds_at_least_60_cases_over_the_nine_families():
    cases = CORPUS["cases"]
    assert len(cases) >= 60
    per_family = {family: 0 for family in FAMILIES}
    for case in cases:
        assert set(case) <= CASE_KEYS, f"unknown keys {set(case) - CASE_KEYS} in {case}"
        assert case["raises"] in EXCEPTIONS
        per_family[case["family"]] += 1
    assert min(per_family.values()) >= 3, per_family
    # Cases are distinct: the same call with the same arguments tests the same thing.
    keys = [json.dumps({k: c.get(k) for k in ("call", "args", "kwargs", "steps", "arrays")},
                       sort_keys=True) for c in cases]
    assert len(set(keys)) == len(keys)


def test_make_array_builds_the_views_it_promises():
    # The corpus relies on these views to reach the stride, alignment and read-only checks.
    arrays = {}
    strided = make_array({"shape": [2, 3], "step": 2}, arrays)
    assert strided.strides[-1] == 2 * strided.itemsize
    moved = make_array({"shape": [2, 3], "offset": True}, arrays)
    assert moved.ctypes.data % moved.itemsize != 0
    assert not make_array({"shape": [1], "readonly": True}, arrays).flags.writeable
    assert math.isnan(make_array({"shape": [1], "fill": "nan"}, arrays)[0])
