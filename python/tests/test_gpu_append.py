"""Append-KV on the GPU: tilefmha.append_kv and tilefmha.append_kv_and_attend on CUDA tensors
against the CPU reference on the same inputs. Contiguous caches and shuffled page pools (pages of
1, 16 and 1024 tokens, both pool layouts, both page-table forms), RoPE none / interleaved /
half-rotated over rotary_dim < hdim from tables or from a base with position offsets, Q rotated
in place, GQA, an empty cache; device key lengths (no host sync); the append -> attend plan
captured in a CUDA graph and replayed with new device lengths; fp8 caches code for code (sm_89+),
quantizing appends into fp8 pools with per-page scales (sm_89+) and an fp8 append -> attend
(sm_90). Skipped (and reported as skipped) without PyTorch, a CUDA
GPU or a usable driver."""

import numpy as np
import pytest

import tilefmha
from gpu_support import captured, gpu_skip_reason, torch
from paged_cache import PagedCache

pytestmark = pytest.mark.skipif(bool(gpu_skip_reason()), reason=gpu_skip_reason() or "GPU")

BF16 = 1.6e-2
LENGTHS = [37, 0, 70]


def bf16(rng, *shape):
    return torch.from_numpy(rng.uniform(-1, 1, shape).astype(np.float32)).to(torch.bfloat16)


def pools(rng, page_size, layout, new_tokens, dim=128):
    """A shuffled page pool holding LENGTHS cached tokens (NaN elsewhere) with room for the new
    ones, as bf16 CPU tensors, and its PagedCache (tables)."""
    capacity = max(LENGTHS) + new_tokens
    k = rng.uniform(-1, 1, (3, capacity, 2, dim)).astype(np.float32)
    v = rng.uniform(-1, 1, (3, capacity, 2, dim)).astype(np.float32)
    cache = PagedCache(rng, k, v, LENGTHS, page_size, layout,
                       spare_pages=-(-new_tokens // page_size) + 1)
    return (torch.from_numpy(cache.k_pool).to(torch.bfloat16),
            torch.from_numpy(cache.v_pool).to(torch.bfloat16), cache)


def tables(cache, form):
    if form == "block_table":
        return {"block_table": cache.block_table}
    return {"page_indptr": cache.page_indptr, "page_indices": cache.page_indices}


def assert_same_cache(gpu, cpu):
    # NaN slots (never written) must stay NaN; written ones must agree.
    gpu, cpu = gpu.cpu().float(), cpu.float()
    assert torch.equal(torch.isnan(gpu), torch.isnan(cpu))
    torch.testing.assert_close(gpu.nan_to_num(), cpu.nan_to_num(), rtol=BF16, atol=BF16)


@pytest.mark.parametrize("form", ["block_table", "page_list"])
@pytest.mark.parametrize("layout", ["nhd", "hnd"])
@pytest.mark.parametrize("page_size", [1, 16, 1024])
def test_paged_append_matches_the_cpu_reference(page_size, layout, form):
    rng = np.random.default_rng(page_size + (layout == "hnd"))
    new = 19 if page_size == 16 else 2
    k_pool, v_pool, cache = pools(rng, page_size, layout, new)
    k_new, v_new, q = bf16(rng, 3, new, 2, 128), bf16(rng, 3, new, 2, 128), bf16(rng, 3, new, 8, 128)
    rope = {"rope": "neox" if page_size != 1 else "interleaved", "rotary_dim": 64,
            "rotate_q": form == "block_table"}
    if layout == "hnd":
        rope.update(rope_theta=10000.0, rope_position_offsets=[3, 1000, 0])
    gpu = [x.cuda() for x in (k_pool, v_pool, q)]
    gpu_rope = dict(rope)
    if layout == "hnd" and form == "page_list":  # the offsets stay on the device
        gpu_rope["rope_position_offsets"] = torch.tensor([3, 1000, 0], device="cuda")
    after = tilefmha.append_kv(gpu[0], gpu[1], k_new.cuda(), v_new.cuda(), LENGTHS,
                               layout=layout, q=gpu[2], **tables(cache, form), **gpu_rope)
    expected = tilefmha.append_kv(k_pool, v_pool, k_new, v_new, LENGTHS, layout=layout, q=q,
                                  **tables(cache, form), **rope)
    np.testing.assert_array_equal(after, expected)
    assert_same_cache(gpu[0], k_pool)
    assert_same_cache(gpu[1], v_pool)
    torch.testing.assert_close(gpu[2].cpu().float(), q.float(), rtol=BF16, atol=BF16)


@pytest.mark.parametrize("rope", [None, "interleaved", "half_rotated"])
@pytest.mark.parametrize("dtype_name", ["float16", "float32"])
def test_contiguous_append_with_device_lengths(rope, dtype_name):
    dtype = getattr(torch, dtype_name)
    rng = np.random.default_rng(5)
    k_cache = torch.from_numpy(rng.uniform(-1, 1, (3, 96, 2, 64)).astype(np.float32)).to(dtype)
    v_cache = k_cache.clone()
    k_new = torch.from_numpy(rng.uniform(-1, 1, (3, 4, 2, 64)).astype(np.float32)).to(dtype)
    v_new = torch.from_numpy(rng.uniform(-1, 1, (3, 4, 2, 64)).astype(np.float32)).to(dtype)
    q = torch.from_numpy(rng.uniform(-1, 1, (3, 4, 8, 64)).astype(np.float32)).to(dtype)
    extra = {} if rope is None else {"rope": rope, "rotary_dim": 48, "rotate_q": True, "q": q}
    gpu = {name: x.cuda() for name, x in (("k", k_cache), ("v", v_cache), ("q", q))}
    extra_gpu = dict(extra, q=gpu["q"]) if rope is not None else extra
    lengths = torch.tensor(LENGTHS, device="cuda")
    after = tilefmha.append_kv(gpu["k"], gpu["v"], k_new.cuda(), v_new.cuda(), lengths,
                               max_seqlen_k=max(LENGTHS), **extra_gpu)
    assert after.is_cuda and after.tolist() == [n + 4 for n in LENGTHS]
    # On the GPU with device lengths and no tables, the angles come from base 10000; the CPU
    # tables of rope_tables() use the same base.
    tilefmha.append_kv(k_cache, v_cache, k_new, v_new, LENGTHS, **extra)
    tolerance = 1e-5 if dtype == torch.float32 else 2e-3
    torch.testing.assert_close(gpu["k"].cpu(), k_cache, rtol=tolerance, atol=tolerance)
    torch.testing.assert_close(gpu["v"].cpu(), v_cache, rtol=tolerance, atol=tolerance)
    torch.testing.assert_close(gpu["q"].cpu(), q, rtol=tolerance, atol=tolerance)


@pytest.mark.parametrize("form", ["block_table", "page_list"])
def test_append_then_attend_matches_the_cpu_reference(form):
    rng = np.random.default_rng(11)
    k_pool, v_pool, cache = pools(rng, 16, "nhd", 1)
    k_new, v_new, q = bf16(rng, 3, 1, 2, 128), bf16(rng, 3, 1, 2, 128), bf16(rng, 3, 1, 8, 128)
    call = {"rope": "neox", "rope_theta": 10000.0, "rotate_q": True, "causal": "bottom_right",
            "return_lse": True, **tables(cache, form)}
    gpu = [x.cuda() for x in (q, k_pool, v_pool)]
    o, lse = tilefmha.append_kv_and_attend(gpu[0], gpu[1], gpu[2], k_new.cuda(), v_new.cuda(),
                                           torch.tensor(LENGTHS, device="cuda"),
                                           max_seqlen_k=max(LENGTHS), **call)
    expected_o, expected_lse = tilefmha.append_kv_and_attend(q, k_pool, v_pool, k_new, v_new,
                                                             LENGTHS, **call)
    torch.testing.assert_close(o.cpu().float(), expected_o.float(), rtol=BF16, atol=BF16)
    torch.testing.assert_close(lse.cpu(), expected_lse, rtol=1e-3, atol=1e-3)
    assert_same_cache(gpu[1], k_pool)


def test_contiguous_append_then_attend():
    rng = np.random.default_rng(12)
    k_cache, v_cache = bf16(rng, 3, 96, 2, 64), bf16(rng, 3, 96, 2, 64)
    k_new, v_new, q = bf16(rng, 3, 5, 2, 64), bf16(rng, 3, 5, 2, 64), bf16(rng, 3, 5, 8, 64)
    call = {"rope": "interleaved", "rotary_dim": 32, "causal": "bottom_right"}
    gpu = [x.cuda() for x in (q, k_cache, v_cache)]
    o = tilefmha.append_kv_and_attend(gpu[0], gpu[1], gpu[2], k_new.cuda(), v_new.cuda(),
                                      LENGTHS, **call)
    expected = tilefmha.append_kv_and_attend(q, k_cache, v_cache, k_new, v_new, LENGTHS, **call)
    torch.testing.assert_close(o.cpu().float(), expected.float(), rtol=BF16, atol=BF16)


def test_append_then_attend_replays_in_a_cuda_graph_with_new_lengths():
    """One decode step captured (device lengths and block table), replayed twice: the captured
    lengths, then one token later with new tokens written into the captured inputs."""
    rng = np.random.default_rng(13)
    k_pool, v_pool, cache = pools(rng, 16, "nhd", 2)
    q = bf16(rng, 3, 1, 8, 128).cuda()
    k_new, v_new = bf16(rng, 3, 1, 2, 128).cuda(), bf16(rng, 3, 1, 2, 128).cuda()
    lengths = torch.tensor(LENGTHS, device="cuda")
    block_table = torch.from_numpy(cache.block_table).cuda()
    gpu_k, gpu_v = k_pool.cuda(), v_pool.cuda()
    host_k, host_v = k_pool.clone(), v_pool.clone()

    def step():
        return tilefmha.append_kv_and_attend(q, gpu_k, gpu_v, k_new, v_new, lengths,
                                             block_table=block_table,
                                             max_seqlen_k=max(LENGTHS) + 1, rope="neox",
                                             rope_theta=10000.0, causal="bottom_right")

    graph, o = captured(step)
    # The warm-up call in captured() appended too: restart from the host caches.
    gpu_k.copy_(host_k)
    gpu_v.copy_(host_v)
    for shift in (0, 1):
        if shift:
            k_new.copy_(bf16(rng, 3, 1, 2, 128))
            v_new.copy_(bf16(rng, 3, 1, 2, 128))
            lengths.add_(1)
        o.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        step_lengths = [n + shift for n in LENGTHS]
        expected = tilefmha.append_kv_and_attend(q.cpu(), host_k, host_v, k_new.cpu(),
                                                 v_new.cpu(), step_lengths,
                                                 block_table=cache.block_table, rope="neox",
                                                 rope_theta=10000.0, causal="bottom_right")
        torch.testing.assert_close(o.cpu().float(), expected.float(), rtol=BF16, atol=BF16)
        assert_same_cache(gpu_k, host_k)


# --- fp8 caches ---------------------------------------------------------------------------------


def fp8_codes(rng, fmt, *shape):
    """CPU torch fp8 tensor of random codes (values in [-8, 8])."""
    kind = {"fp8_e4m3": torch.float8_e4m3fn, "fp8_e5m2": torch.float8_e5m2}[fmt]
    return torch.from_numpy(tilefmha.fp8_from_float32(rng.uniform(-8, 8, shape), fmt)).view(kind)


def code_ordinal(codes):
    """uint8 fp8 codes as integers ordered like their values (adjacent values differ by 1)."""
    magnitude = (codes & 0x7F).astype(np.int64)
    return np.where(codes & 0x80, -magnitude, magnitude)


def require_capability(major_minor, why):
    if torch.cuda.get_device_capability() < major_minor:
        pytest.skip(why)


@pytest.mark.parametrize("fmt", ["fp8_e4m3", "fp8_e5m2"])
def test_fp8_append_matches_the_cpu_reference_code_for_code(fmt):
    """Copies (V, dims past rotary_dim) byte for byte; rotated codes within one rounding step,
    and rarely off (the kernel rotates in fp32 with hardware sine and cosine, the reference in
    double)."""
    require_capability((8, 9), "fp8 append-KV needs an sm_89 or newer GPU")
    rng = np.random.default_rng(12 + (fmt == "fp8_e5m2"))
    k_cache, v_cache = fp8_codes(rng, fmt, 3, 96, 2, 128), fp8_codes(rng, fmt, 3, 96, 2, 128)
    k_new, v_new = fp8_codes(rng, fmt, 3, 5, 2, 128), fp8_codes(rng, fmt, 3, 5, 2, 128)
    q = fp8_codes(rng, fmt, 3, 5, 8, 128)
    gpu = [x.cuda() for x in (k_cache, v_cache, q)]
    rope = {"rope": "neox", "rotary_dim": 96, "rope_theta": 10000.0, "rotate_q": True}
    tilefmha.append_kv(gpu[0], gpu[1], k_new.cuda(), v_new.cuda(), LENGTHS, q=gpu[2], **rope)
    tilefmha.append_kv(k_cache, v_cache, k_new, v_new, LENGTHS, q=q, **rope)
    for got, want, rotated in ((gpu[0], k_cache, 96), (gpu[1], v_cache, 0), (gpu[2], q, 96)):
        got = got.cpu().view(torch.uint8).numpy()
        want = want.view(torch.uint8).numpy()
        np.testing.assert_array_equal(got[..., rotated:], want[..., rotated:])
        steps = np.abs(code_ordinal(got[..., :rotated]) - code_ordinal(want[..., :rotated]))
        assert steps.size == 0 or steps.max() <= 1
        assert np.count_nonzero(steps) * 1000 <= steps.size


def test_fp8_append_then_attend_matches_the_cpu_reference():
    require_capability((9, 0), "the fp8 attention after an append needs an sm_90 GPU")
    rng = np.random.default_rng(14)
    fmt = "fp8_e4m3"
    k_cache, v_cache = fp8_codes(rng, fmt, 3, 96, 2, 128), fp8_codes(rng, fmt, 3, 96, 2, 128)
    k_new, v_new = fp8_codes(rng, fmt, 3, 4, 2, 128), fp8_codes(rng, fmt, 3, 4, 2, 128)
    q = fp8_codes(rng, fmt, 3, 4, 8, 128)
    gpu = [x.cuda() for x in (q, k_cache, v_cache, k_new, v_new)]
    # Logits of standard deviation ~3 (codes in [-8, 8]): each row's softmax picks a few keys,
    # so a lost descale moves O past the bound below.
    call = {"rope": "neox", "rotate_q": True, "causal": "bottom_right", "q_descale": 1 / 16,
            "k_descale": 1 / 32, "v_descale": 1 / 4, "scale": 6.0}
    o = tilefmha.append_kv_and_attend(*gpu, LENGTHS, **call)
    expected = tilefmha.append_kv_and_attend(q, k_cache, v_cache, k_new, v_new, LENGTHS, **call)
    assert o.dtype == torch.bfloat16
    # The kernel rounds P to e4m3 before P V (relative 2^-4): O within 2^-4 max |V| (8 / 4).
    torch.testing.assert_close(o.cpu().float(), expected.float(), rtol=1e-2, atol=2 / 16 + 1e-2)



NEW_BF16, NEW_FP16 = (torch.bfloat16, torch.float16) if torch else (None, None)


@pytest.mark.parametrize("page_size, new_dtype, dim",
                         [(16, NEW_BF16, 128), (1, NEW_FP16, 128), (16, NEW_BF16, 256),
                          (64, NEW_BF16, 128)])
def test_quantizing_append_matches_the_cpu_reference(page_size, new_dtype, dim):
    """bf16 / fp16 new tokens into an e4m3 page pool with per-page scales: codes within one
    rounding step (the kernel multiplies by the scale's fp32 reciprocal, the reference divides
    in double), the page scales equal to the reference's within its double RoPE, in place.
    hdim 256: a whole warp per page segment. Pages of 64: segments of 19 new rows, read twice
    rather than staged, their RoPE angles stepped from row to row."""
    require_capability((8, 9), "fp8 append-KV needs an sm_89 or newer GPU")
    rng = np.random.default_rng(40 + page_size + dim)
    k_pool, v_pool, cache = pools(rng, page_size, "nhd", 19, dim)
    k_codes = tilefmha.fp8_from_float32(k_pool.float().nan_to_num().numpy(), "fp8_e4m3")
    v_codes = tilefmha.fp8_from_float32(v_pool.float().nan_to_num().numpy(), "fp8_e4m3")
    k_cache, v_cache = (torch.from_numpy(c).view(torch.float8_e4m3fn) for c in (k_codes, v_codes))
    k_new, v_new = (torch.from_numpy(rng.uniform(-3, 3, (3, 19, 2, dim)).astype(np.float32))
                    .to(new_dtype) for _ in range(2))
    pages = k_cache.shape[0]
    k_scales, v_scales = (torch.from_numpy(rng.uniform(0.002, 0.01, (pages, 2)).astype(np.float32))
                          for _ in range(2))
    rope = {"rope": "neox", "rotary_dim": 64, "rope_theta": 10000.0}
    initial = k_scales.clone()
    gpu = [x.cuda() for x in (k_cache, v_cache, k_new, v_new, k_scales, v_scales)]
    tilefmha.append_kv(gpu[0], gpu[1], gpu[2], gpu[3], LENGTHS, block_table=cache.block_table,
                       k_page_scales=gpu[4], v_page_scales=gpu[5], **rope)
    tilefmha.append_kv(k_cache, v_cache, k_new, v_new, LENGTHS, block_table=cache.block_table,
                       k_page_scales=k_scales, v_page_scales=v_scales, **rope)
    for got, want in ((gpu[0], k_cache), (gpu[1], v_cache)):
        steps = np.abs(code_ordinal(got.cpu().view(torch.uint8).numpy())
                       - code_ordinal(want.view(torch.uint8).numpy()))
        assert steps.max() <= 1
        assert np.count_nonzero(steps) * 1000 <= steps.size
    for got, want in ((gpu[4], k_scales), (gpu[5], v_scales)):
        torch.testing.assert_close(got.cpu(), want, rtol=1e-5, atol=0)
    assert not torch.equal(gpu[4].cpu(), initial)  # the scales were updated in place
