"""fp8 (e4m3) attention on the GPU against the CPU backend on the same fp8 codes and descales:
per-tensor and per-block descales, head dims 128 and 256, causal or not, batch and varlen.
Skipped (and reported as skipped) without PyTorch, a CUDA GPU or a usable driver.

Tolerance. Both backends read the same codes and dequantize them exactly, so the difference is
the GPU kernel's arithmetic. Q·K^T multiplies fp8 values exactly and sums in fp32 (errors near
1e-6). P·V is an fp8 GEMM too: each probability p (at most 1 after the running maximum is
subtracted) is rounded to e4m3, 3 mantissa bits, a relative error of at most 2^-4, while the
row sum l divides in fp32. So |ΔO| <= 2^-4 · Σ_j p_j |v_j| / l <= 2^-4 · max|v|: with V near 1
(O of magnitude ~1) a relative error of up to a few 1e-2. Rows over few keys come near that
bound; long rows average the roundings out (about 2^-4 / sqrt(3 · keys)), which the mean error
checks. O is bf16 on both sides: half a unit in the last place each, 2^-8 relative.
"""

import numpy as np
import pytest

import tilefmha
from tilefmha._features import scalar_features

from gpu_support import gpu_skip_reason, torch

pytestmark = pytest.mark.skipif(bool(gpu_skip_reason()), reason=gpu_skip_reason() or "GPU")

P_ROUNDING = 2.0**-4  # e4m3's relative rounding of one probability (3 mantissa bits)
BF16_ROUNDING = 2.0**-7  # both outputs rounded to bf16, 2^-8 relative each
MEAN_ERROR = 1e-2  # a few times the averaged rounding of rows over a hundred keys or more
BLOCK = 128

HDIMS = [128, 256]
CAUSAL = [False, True]


def heads_of(hdim):
    """Query and KV heads: GQA 2:1, fewer heads at hdim 256 (a bigger CPU reference)."""
    return (4, 2) if hdim == 128 else (2, 1)


# Per-tensor descales: values up to 1.5 become codes up to 192, inside e4m3's range (448).
PER_TENSOR = {"q_descale": 2.0**-6, "k_descale": 2.0**-7, "v_descale": 2.0**-7}
DESCALE_NAMES = tuple(PER_TENSOR)


def originals(generator, batch, seqlen, hdim):
    """float32 q, k, v [batch, seqlen, heads, hdim] on the GPU: q and k uniform in [-1, 1), v in
    [0.5, 1.5) so that O has magnitude ~1 (see the module's tolerance)."""
    hq, hk = heads_of(hdim)
    draw = lambda heads, low, high: torch.rand(  # noqa: E731
        (batch, seqlen, heads, hdim), generator=generator, device="cuda") * (high - low) + low
    return [draw(hq, -1, 1), draw(hk, -1, 1), draw(hk, 0.5, 1.5)]


def block_descales(generator, batch, heads, seqlen):
    """float32 [batch, heads, ceil(seqlen / 128)] descales, each 2^-7, 2^-6 or 2^-5: values up
    to 1.5 become codes up to 192."""
    powers = torch.tensor([2.0**-7, 2.0**-6, 2.0**-5], device="cuda")
    choice = torch.randint(0, 3, (batch, heads, -(-seqlen // BLOCK)), generator=generator,
                           device="cuda")
    return powers[choice]


def per_token(scales, seqlen):
    """[batch, seqlen, heads, 1] factors of per-block descales [batch, heads, blocks]."""
    return scales.repeat_interleave(BLOCK, dim=2)[:, :, :seqlen].transpose(1, 2)[..., None]


def packed_factors(scales, lengths):
    """[total, heads, 1] factors of group-mode per-block descales [sequences, heads, blocks]:
    token t of sequence b takes scales[b, :, t // 128]."""
    return torch.cat([per_token(scales[b:b + 1], n)[0] for b, n in enumerate(lengths) if n])


def quantized(values, factors):
    """e4m3 codes of each value tensor divided by its factors (broadcast), and the largest
    dequantized |v|, the scale of the P-rounding bound."""
    codes = [(x / f).to(torch.float8_e4m3fn) for x, f in zip(values, factors)]
    return codes, float((codes[2].float() * factors[2]).abs().max())


def on_host(descales):
    return {name: s.cpu() if torch.is_tensor(s) else s for name, s in descales.items()}


def assert_within_p_rounding(o, expected, v_max):
    """|o - expected| <= 2^-4 max|v| + bf16 rounding everywhere, and small on average."""
    assert o.dtype == torch.bfloat16 and expected.dtype == torch.bfloat16
    got, want = o.cpu().float(), expected.float()
    assert torch.isfinite(got).all()
    error = (got - want).abs()
    bound = P_ROUNDING * v_max + BF16_ROUNDING * want.abs()
    worst = int(torch.argmax(error - bound))
    assert bool((error <= bound).all()), (
        f"element {worst} (flattened): |{got.flatten()[worst]} - {want.flatten()[worst]}| "
        f"exceeds {bound.flatten()[worst]}")
    assert float(error.mean()) <= MEAN_ERROR, f"mean error {float(error.mean())}"


def batch_inputs(generator, batch, seqlen, hdim, kind):
    """(q, k, v codes, their descale keywords, max |v|) for a batch-mode call."""
    values = originals(generator, batch, seqlen, hdim)
    if kind == "per_tensor":
        codes, v_max = quantized(values, list(PER_TENSOR.values()))
        return codes, dict(PER_TENSOR), v_max
    scales = [block_descales(generator, batch, x.shape[2], seqlen) for x in values]
    codes, v_max = quantized(values, [per_token(s, seqlen) for s in scales])
    return codes, dict(zip(DESCALE_NAMES, scales)), v_max


@pytest.mark.parametrize("kind", ["per_tensor", "per_block"])
@pytest.mark.parametrize("causal", CAUSAL, ids=["full", "causal"])
@pytest.mark.parametrize("hdim", HDIMS)
def test_batch_matches_the_cpu_backend(hdim, causal, kind):
    generator = torch.Generator(device="cuda").manual_seed(hdim + causal)
    # 300 tokens: three blocks of 128, the last one partial.
    (q, k, v), descales, v_max = batch_inputs(generator, 2, 300, hdim, kind)
    o = tilefmha.attention(q, k, v, causal=causal, **descales)
    assert o.is_cuda and o.shape == q.shape[:3] + (hdim,)
    expected = tilefmha.attention(q.cpu(), k.cpu(), v.cpu(), causal=causal, **on_host(descales))
    assert_within_p_rounding(o, expected, v_max)


@pytest.mark.parametrize("kind", ["per_tensor", "per_block"])
@pytest.mark.parametrize("causal", CAUSAL, ids=["full", "causal"])
@pytest.mark.parametrize("hdim", HDIMS)
def test_varlen_matches_the_cpu_backend(hdim, causal, kind):
    generator = torch.Generator(device="cuda").manual_seed(7 * hdim + causal)
    lengths = [300, 0, 77, 129]
    cu = torch.tensor([0] + np.cumsum(lengths).tolist(), dtype=torch.int32, device="cuda")
    longest = max(lengths)
    values = [x[0] for x in originals(generator, 1, sum(lengths), hdim)]
    if kind == "per_tensor":
        descales = dict(PER_TENSOR)
        factors = list(PER_TENSOR.values())
    else:
        # Group mode: [sequences, heads, ceil(longest / 128)], tokens counted per sequence.
        scales = [block_descales(generator, len(lengths), x.shape[1], longest) for x in values]
        descales = dict(zip(DESCALE_NAMES, scales))
        factors = [packed_factors(s, lengths) for s in scales]
    (q, k, v), v_max = quantized(values, factors)
    o = tilefmha.attention_varlen(q, k, v, cu, cu, max_seqlen_q=longest, max_seqlen_k=longest,
                                  causal=causal, **descales)
    expected = tilefmha.attention_varlen(q.cpu(), k.cpu(), v.cpu(), cu.cpu(), cu.cpu(),
                                         causal=causal, **on_host(descales))
    assert_within_p_rounding(o, expected, v_max)


def test_a_scalar_descale_may_be_a_cuda_tensor_read_once():
    generator = torch.Generator(device="cuda").manual_seed(3)
    (q, k, v), descales, _ = batch_inputs(generator, 1, 130, 128, "per_tensor")
    as_tensors = {name: torch.tensor(value, device="cuda") for name, value in descales.items()}
    torch.testing.assert_close(tilefmha.attention(q, k, v, **as_tensors),
                               tilefmha.attention(q, k, v, **descales), rtol=0, atol=0)


def test_default_descales_and_the_fast_path_guard():
    generator = torch.Generator(device="cuda").manual_seed(6)
    (q, k, v), v_max = quantized(originals(generator, 1, 64, 128), [1.0, 1.0, 1.0])
    o = tilefmha.attention(q, k, v)  # descales 1.0, bf16 O
    expected = tilefmha.attention(q.cpu(), k.cpu(), v.cpu())
    assert o.dtype == torch.bfloat16 and o.is_cuda and o.shape == q.shape
    assert_within_p_rounding(o, expected, v_max)
    # The PyTorch fast path turns fp8 tensors down before allocating anything (they need
    # descales, which only the general path sets).
    assert tilefmha._fast.forward(q, k, v, scalar_features(), False) is None


def test_scale_tensors_on_the_wrong_device_are_refused():
    generator = torch.Generator(device="cuda").manual_seed(4)
    (q, k, v), descales, _ = batch_inputs(generator, 1, 130, 128, "per_block")
    with pytest.raises(ValueError, match=r"^k_descale is on the host but backend='gpu' needs "
                                         r"CUDA tensors"):
        tilefmha.attention(q, k, v, **dict(descales, k_descale=descales["k_descale"].cpu()))
    with pytest.raises(ValueError, match=r"^q_descale is on a CUDA device but the call runs on "
                                         r"the CPU backend"):
        tilefmha.attention(q.cpu(), k.cpu(), v.cpu(),
                           **dict(on_host(descales), q_descale=descales["q_descale"]))


def test_mixed_fp8_formats_and_float64_block_scales_are_refused():
    generator = torch.Generator(device="cuda").manual_seed(5)
    (q, k, v), descales, _ = batch_inputs(generator, 1, 130, 128, "per_block")
    with pytest.raises(ValueError, match=r"^v holds fp8_e5m2 data but q holds fp8_e4m3"):
        tilefmha.attention(q, k, v.float().to(torch.float8_e5m2), **descales)
    with pytest.raises(ValueError, match=r"^q_descale\.dtype = float64: per_block descales must "
                                         r"be float32"):
        tilefmha.attention(q, k, v, **dict(descales, q_descale=descales["q_descale"].double()))


@pytest.mark.parametrize("page_size", [16, 256])
def test_paged_decode_with_per_page_descales_matches_the_cpu_backend(page_size):
    """Per-page K/V descales (Q per tensor): pages of 16 keys give each 8-key chunk of a block its
    own descales (V's folded into P), pages of 256 one per block. Pages are dealt out shuffled."""
    generator = torch.Generator(device="cuda").manual_seed(page_size)
    lengths, hq, hk, dim = [37, 300, 129], 8, 2, 128
    per_seq = -(-max(lengths) // page_size)
    num_pages = len(lengths) * per_seq
    codes = lambda *shape: (torch.rand(shape, generator=generator, device="cuda") * 2 - 1).mul(  # noqa: E731
        64).to(torch.float8_e4m3fn)
    q, k_pool, v_pool = codes(3, 1, hq, dim), codes(num_pages, page_size, hk, dim), codes(
        num_pages, page_size, hk, dim)
    table = torch.randperm(num_pages, generator=generator, device="cuda").view(
        len(lengths), per_seq).int()
    powers = torch.tensor([2.0**-8, 2.0**-7, 2.0**-6], device="cuda")
    k_scales, v_scales = (powers[torch.randint(0, 3, (num_pages, hk), generator=generator,
                                               device="cuda")] for _ in range(2))
    seqlens = torch.tensor(lengths, dtype=torch.int32, device="cuda")
    o = tilefmha.paged_attention(q, k_pool, v_pool, table, seqlens, max_seqlen_k=max(lengths),
                                 q_descale=2.0**-6, k_page_descale=k_scales,
                                 v_page_descale=v_scales)
    expected = tilefmha.paged_attention(q.cpu(), k_pool.cpu(), v_pool.cpu(), table.cpu(), lengths,
                                        q_descale=2.0**-6, k_page_descale=k_scales.cpu(),
                                        v_page_descale=v_scales.cpu())
    v_max = float(v_pool.float().abs().max()) * float(v_scales.max())
    assert_within_p_rounding(o, expected, v_max)
