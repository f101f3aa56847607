"""attention(..., out=, lse_out=, accumulate=True) on Hopper: the sm90_ws epilogue folds the
attention over k and v into the state out and lse_out hold; the result matches the attention over
all keys (computed in one call) and the CPU reference's fold. Covered: head dims 64/128/256,
ragged lengths, GQA packed decode rows, the persistent grid, a causal second chunk whose first
rows see no key, and a NaN-poisoned state of no key. Skipped (and reported as skipped) without
PyTorch, a CUDA GPU or a usable driver, and off Hopper."""

import pytest

import tilefmha
from gpu_support import gpu_skip_reason, torch

pytestmark = pytest.mark.skipif(bool(gpu_skip_reason()), reason=gpu_skip_reason() or "GPU")


@pytest.fixture(autouse=True)
def hopper_only():
    if torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("accumulate runs on Hopper's sm90_ws kernels")


def draw(seed, *shape, dtype="bf16"):
    generator = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(shape, generator=generator, device="cuda").to(torch_dtype(dtype))


def torch_dtype(name):
    return torch.bfloat16 if name == "bf16" else torch.float16


def assert_close(o, lse, expected_o, expected_lse, dtype):
    # Folding rounds O to the dtype once more than one pass does.
    atol = 2e-2 if dtype == "bf16" else 4e-3
    torch.testing.assert_close(o.float(), expected_o.float(), atol=atol, rtol=0)
    torch.testing.assert_close(lse, expected_lse, atol=2e-3, rtol=0)


# (batch, seqlen_q, keys of the first chunk, keys of the second, nhead_q, nhead_k)
SHAPES = {
    "ragged": (2, 300, 200, 333, 8, 2),
    "decode_packed_gqa": (4, 1, 1000, 520, 32, 8),
    "long_persistent": (1, 2048, 2048, 2048, 16, 16),
}


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("hdim", [64, 128, 256])
@pytest.mark.parametrize("shape", SHAPES.values(), ids=SHAPES.keys())
def test_folded_chunks_match_one_call_over_all_keys(shape, hdim, dtype):
    b, sq, sk1, sk2, hq, hk = shape
    q = draw(1, b, sq, hq, hdim, dtype=dtype)
    k = draw(2, b, sk1 + sk2, hk, hdim, dtype=dtype)
    v = draw(3, b, sk1 + sk2, hk, hdim, dtype=dtype)
    o, lse = tilefmha.attention(q, k[:, :sk1], v[:, :sk1], return_lse=True)
    result = tilefmha.attention(q, k[:, sk1:], v[:, sk1:], out=o, lse_out=lse, accumulate=True,
                                return_lse=True)
    assert result[0] is o and result[1] is lse
    expected_o, expected_lse = tilefmha.attention(q, k, v, return_lse=True)
    assert_close(o, lse, expected_o, expected_lse, dtype)


def test_causal_second_chunk_with_rows_of_no_key():
    q, k, v = draw(4, 2, 640, 8, 128), draw(5, 2, 640, 8, 128), draw(6, 2, 640, 8, 128)
    split = 192
    o, lse = tilefmha.attention(q, k[:, :split], v[:, :split], causal=True, return_lse=True)
    tilefmha.attention(q, k[:, split:], v[:, split:], causal="bottom_right", out=o, lse_out=lse,
                       accumulate=True)
    expected_o, expected_lse = tilefmha.attention(q, k, v, causal=True, return_lse=True)
    assert_close(o, lse, expected_o, expected_lse, "bf16")


def test_a_poisoned_state_of_no_key_is_not_read():
    q, k, v = draw(7, 1, 256, 4, 128), draw(8, 1, 384, 4, 128), draw(9, 1, 384, 4, 128)
    o = torch.full((1, 256, 4, 128), float("nan"), device="cuda", dtype=torch.bfloat16)
    lse = torch.full((1, 4, 256), float("-inf"), device="cuda")
    tilefmha.attention(q, k, v, out=o, lse_out=lse, accumulate=True)
    # One pass, as the accumulating call runs: split-KV would round differently.
    expected_o, expected_lse = tilefmha.attention(q, k, v, return_lse=True, num_splits=1)
    torch.testing.assert_close(o, expected_o, atol=0, rtol=0)
    torch.testing.assert_close(lse, expected_lse, atol=1e-6, rtol=0)


def test_matches_the_cpu_reference_fold():
    q, k, v = draw(10, 1, 130, 4, 64), draw(11, 1, 300, 2, 64), draw(12, 1, 300, 2, 64)
    o, lse = tilefmha.attention(q, k[:, :100], v[:, :100], return_lse=True)
    o_cpu, lse_cpu = o.cpu().float().numpy(), lse.cpu().numpy()
    tilefmha.attention(q, k[:, 100:], v[:, 100:], out=o, lse_out=lse, accumulate=True)
    host = [x.cpu().float().numpy() for x in (q, k[:, 100:], v[:, 100:])]
    tilefmha.attention(*host, out=o_cpu, lse_out=lse_cpu, accumulate=True)
    assert_close(o, lse, torch.from_numpy(o_cpu).cuda(), torch.from_numpy(lse_cpu).cuda(),
                 "bf16")
