"""bench/ring_cost_model.py: the scaling laws of the ring cost model (compute per step as
(S/N)^2, bytes per step as S/N), its compute-bound thresholds, and the script's command line.
Every expectation is derived from the model's formulas or the data files, not from a stored
output."""

import importlib.util
import json
import math
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "ring_cost_model.py"


def load_script():
    spec = importlib.util.spec_from_file_location("ring_cost_model", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ring = load_script()
LINKS = ring.load_links()
DEFAULTS = ring.load_defaults()
GPUS = [2, 4, 8, 16, 32, 64]


def model(**overrides):
    return ring.Model.from_defaults(DEFAULTS, **overrides)


def test_the_data_files_hold_both_links_and_the_default_rates():
    nvlink, ib = LINKS["nvlink4"], LINKS["ib_ndr400"]
    assert nvlink["bandwidth_gbs"] < nvlink["nominal_bandwidth_gbs"] == 450
    assert ib["bandwidth_gbs"] < ib["nominal_bandwidth_gbs"] == 50
    assert nvlink["max_gpus"] == 8 and ib["max_gpus"] is None
    assert all(link["note"] for link in LINKS.values())
    # The backward runs slower than the forward per flop (its measured rates).
    assert 0 < DEFAULTS["backward_causal_bf16_hdim128_tflops"] < \
        DEFAULTS["forward_causal_bf16_hdim128_tflops"]
    assert DEFAULTS["backward_flops_per_forward_flop"] == 2.5


def test_block_flops_and_step_bytes_follow_their_formulas():
    assert ring.block_forward_flops(3, 5, 128, 32) == 4 * 3 * 5 * 128 * 32
    # A causal step covers half the pairs of a full one; the backward does 2.5 forwards.
    full = ring.step_flops(1000, 128, 32, causal=False)
    assert full == ring.block_forward_flops(1000, 1000, 128, 32)
    assert ring.step_flops(1000, 128, 32, causal=True) == full / 2
    assert ring.step_flops(1000, 128, 32, pass_="backward") == 2.5 * full / 2
    kv = ring.step_bytes(1000, 8, 128, 2)
    assert kv == 2 * 1000 * 8 * 128 * 2
    assert ring.step_bytes(1000, 8, 128, 2, pass_="backward") == kv + 2 * 1000 * 8 * 128 * 4


@pytest.mark.parametrize("pass_", ring.PASSES)
def test_compute_per_step_falls_as_the_square_of_the_shard(pass_):
    m, link, seqlen = model(), LINKS["ib_ndr400"], 2**20
    steps = {n: m.step(seqlen, n, link, pass_) for n in GPUS}
    base = steps[GPUS[0]]
    for n, step in steps.items():
        assert step["shard_tokens"] == seqlen / n
        assert step["compute_s"] * n**2 == pytest.approx(base["compute_s"] * GPUS[0] ** 2)
    # And as the square of S at fixed N.
    assert m.step(2 * seqlen, 8, link, pass_)["compute_s"] == pytest.approx(
        4 * m.step(seqlen, 8, link, pass_)["compute_s"])


@pytest.mark.parametrize("pass_", ring.PASSES)
def test_bytes_per_step_fall_as_one_over_n(pass_):
    m, link, seqlen = model(), LINKS["ib_ndr400"], 2**20
    base = m.step(seqlen, GPUS[0], link, pass_)["bytes_per_step"]
    for n in GPUS:
        assert m.step(seqlen, n, link, pass_)["bytes_per_step"] * n == pytest.approx(
            base * GPUS[0])
    # Fewer K/V heads, fewer bytes: GQA's saving travels around the ring too.
    assert model(kv_heads=4).bytes(1024, pass_) < model(kv_heads=8).bytes(1024, pass_)


@pytest.mark.parametrize("pass_", ring.PASSES)
def test_one_gpu_time_is_the_whole_sequence_at_the_rate(pass_):
    m = model()
    step = m.step(2**17, 1, LINKS["nvlink4"], pass_)
    assert step["comm_s"] == 0 and step["bytes_per_step"] == 0
    assert step["time_s"] == pytest.approx(step["one_gpu_s"]) and step["speedup"] == 1
    # N ranks of N equal steps share the causal work: their compute adds up to one GPU's.
    ring_step = m.step(2**17, 8, LINKS["nvlink4"], pass_)
    assert 8 * 8 * ring_step["compute_s"] == pytest.approx(step["one_gpu_s"])


@pytest.mark.parametrize("link_name", ["nvlink4", "ib_ndr400"])
@pytest.mark.parametrize("pass_", ring.PASSES)
def test_the_threshold_is_the_least_compute_bound_length(link_name, pass_):
    m, link = model(), LINKS[link_name]
    for n in GPUS:
        seqlen = m.threshold_seqlen(n, link, pass_)
        assert seqlen % (2 * n) == 0
        at = m.step(seqlen, n, link, pass_)
        assert at["compute_bound"] and at["comm_s"] <= at["compute_s"]
        below = m.step(seqlen - 2 * n, n, link, pass_)
        assert not below["compute_bound"] and below["comm_s"] > below["compute_s"]
        # Far above the threshold communication hides entirely: the forward scales perfectly.
        far = m.step(16 * seqlen, n, link, pass_)
        assert far["compute_bound"]
        if pass_ == "forward":
            assert far["efficiency"] == pytest.approx(1.0)
        # Below it the ring runs slower than its compute alone.
        assert below["time_s"] > n * below["compute_s"]


@pytest.mark.parametrize("pass_", ring.PASSES)
def test_the_threshold_rises_with_n_and_infiniband_needs_longer_sequences(pass_):
    m = model()
    for name, link in LINKS.items():
        lengths = [m.threshold_seqlen(n, link, pass_) for n in GPUS]
        assert all(a < b for a, b in zip(lengths, lengths[1:])), name
        # S/N at the threshold hardly moves with N: the rule is one number per link.
        shards = [s / n for s, n in zip(lengths, GPUS)]
        assert max(shards) - min(shards) <= 2
    nvlink, ib = LINKS["nvlink4"], LINKS["ib_ndr400"]
    assert m.threshold_shard_tokens(ib, pass_) > m.threshold_shard_tokens(nvlink, pass_)
    for n in GPUS:
        assert m.threshold_seqlen(n, ib, pass_) > m.threshold_seqlen(n, nvlink, pass_)


def test_a_faster_kernel_needs_longer_sequences_to_hide_the_ring():
    link = LINKS["ib_ndr400"]
    slow, fast = model(forward_tflops=300), model(forward_tflops=900)
    assert fast.threshold_shard_tokens(link) > slow.threshold_shard_tokens(link)


def run_script(*flags):
    return subprocess.run([sys.executable, str(SCRIPT), *flags], capture_output=True, text=True)


def test_default_run_prints_both_links_and_keeps_nvlink_within_one_host():
    result = run_script()
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "nvlink4" in out and "ib_ndr400" in out
    assert "N = 16, 32, 64 left out" in out
    assert "Compute-bound when S/N >= threshold" in out


def test_flags_narrow_the_run_and_json_holds_the_rows(tmp_path):
    out = tmp_path / "ring.json"
    result = run_script("--seqlen", "256k,1M", "--heads", "16", "--kv-heads", "4", "--hdim", "64",
                        "--gpus", "8,16", "--link", "nvlink4", "--json", str(out))
    assert result.returncode == 0, result.stderr
    data = json.loads(out.read_text())
    assert data["model"]["heads"] == 16 and data["model"]["kv_heads"] == 4
    assert data["model"]["hdim"] == 64 and list(data["links"]) == ["nvlink4"]
    # N = 16 is beyond one NVLink host: left out, with no rows and no threshold.
    assert data["left_out"] == [{"link": "nvlink4", "gpus": 16}]
    assert {(r["seqlen"], r["gpus"], r["pass"]) for r in data["rows"]} == {
        (s, 8, p) for s in (2**18, 2**20) for p in ring.PASSES}
    for row in data["rows"]:
        shard = row["seqlen"] / row["gpus"]
        assert row["bytes_per_step"] == ring.step_bytes(shard, 4, 64, 2, pass_=row["pass"])
    assert [t["gpus"] for t in data["thresholds"]] == [8]


@pytest.mark.parametrize("flags", [["--link", "pcie"], ["--seqlen", "1000", "--gpus", "16"],
                                   ["--heads", "32", "--kv-heads", "5"]])
def test_bad_input_exits_2_with_a_message(flags):
    result = run_script(*flags)
    assert result.returncode == 2 and "error:" in result.stderr


@pytest.mark.parametrize("text, value", [("8192", 8192), ("32k", 32768), ("1M", 2**20)])
def test_sizes_parse(text, value):
    assert ring.parse_size(text) == value


def test_importing_needs_only_the_standard_library():
    code = ("import importlib.util, sys\n"
            f"spec = importlib.util.spec_from_file_location('m', {str(SCRIPT)!r})\n"
            "spec.loader.exec_module(importlib.util.module_from_spec(spec))\n"
            "assert not {'numpy', 'torch', 'tilefmha'} & set(sys.modules)\n")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_sqrt_root_solves_the_step_balance():
    # compute = a L^2, comm = latency + m L: at the threshold they are equal.
    m, link = model(), LINKS["nvlink4"]
    for pass_ in ring.PASSES:
        shard = m.threshold_shard_tokens(link, pass_)
        compute = m.compute_seconds(shard, pass_)
        comm = ring.comm_seconds(m.bytes(shard, pass_), link)
        assert math.isclose(compute, comm, rel_tol=1e-9)
