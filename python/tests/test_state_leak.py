"""GPU regression: differently shaped calls in one process must not leak state into each other.

A sequence of bf16 forward calls through tilefmha.attention (GQA and MHA, prefill and decode,
head dims 64 to 256, causal and not) runs in one process, and then an MHA call
[2, 8192, 8192, 16, 16, 128, non-causal] that used to fail with "NotImplementedError: nhead_q /
nhead_k = 1: packed GQA needs a group of 2..64 dividing 64": a packed-GQA choice made for an
earlier call was applied to it. Each output is compared with PyTorch SDPA's math backend in
fp32 (max abs error 2e-2): every row and head for small problems, sampled rows and heads of the
first and last batch otherwise, so the whole sequence stays fast and its memory modest.

Skipped (and reported as skipped) without PyTorch, a CUDA GPU or a usable driver.
"""

import pytest

import tilefmha

from gpu_support import gpu_skip_reason, torch


if gpu_skip_reason():
    pytest.skip(gpu_skip_reason(), allow_module_level=True)

# [batch, seqlen_q, seqlen_k, nhead_q, nhead_k, hdim, causal], run in this order.
CALLS = [
    [1, 8192, 8192, 32, 8, 128, True],
    [2, 4096, 4096, 64, 8, 128, True],
    [8, 1024, 1024, 32, 32, 128, True],
    [4, 4096, 4096, 32, 32, 64, False],
    [4, 2048, 2048, 16, 8, 256, True],
    [2, 4096, 4096, 32, 32, 96, True],
    [1, 32768, 32768, 28, 4, 128, True],
    [64, 256, 256, 16, 16, 64, True],
    [32, 1, 16384, 32, 8, 128, False],
    [128, 1, 4096, 64, 8, 128, False],
    [8, 1, 8192, 32, 32, 64, False],
]
# The call that failed after the ones above (state leaked between calls).
FINAL = [2, 8192, 8192, 16, 16, 128, False]

TOLERANCE = 2e-2  # bf16: both sides round P and O to bf16, a few units in its last place
# Problems with at most this many scores (batch * nhead_q * seqlen_q * seqlen_k) are compared
# in full; larger ones on sampled rows and heads.
FULL_SCORES = 1 << 28
# fp32 bytes the reference may hold for one slice's scores (the math backend keeps a few
# copies: scores, softmax, mask), so large slices are split by rows.
SLICE_BYTES = 256 << 20


def sampled_indices(count, edge, middle, generator):
    """The first and last `edge` indices plus `middle` random ones between, sorted."""
    if count <= 2 * edge + middle:
        return list(range(count))
    chosen = set(range(edge)) | set(range(count - edge, count))
    between = torch.randperm(count - 2 * edge, generator=generator)[:middle]
    chosen |= {edge + int(i) for i in between}
    return sorted(chosen)


def max_error_against_sdpa(o, q, k, v, causal, seed):
    """Max abs difference between o and SDPA (math backend, fp32 inputs) on the compared slice;
    causal here is top-left, as tilefmha's causal=True (the same as bottom-right when sq = sk)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention

    batch, seqlen_q, nhead_q, _ = q.shape
    seqlen_k, nhead_k = k.shape[1], k.shape[2]
    group = nhead_q // nhead_k
    if batch * nhead_q * seqlen_q * seqlen_k <= FULL_SCORES:
        batches, heads, rows = range(batch), list(range(nhead_q)), list(range(seqlen_q))
    else:
        generator = torch.Generator().manual_seed(seed)  # CPU: the same samples every run
        batches = sorted({0, batch - 1})
        heads = sorted({0, min(nhead_q - 1, nhead_q // 2 + 1), nhead_q - 1})
        rows = sampled_indices(seqlen_q, 8, 16, generator)
    head_index = torch.tensor(heads, device="cuda")
    kv_head_index = head_index // group  # the K/V head each query head reads
    rows_per_slice = max(1, SLICE_BYTES // (len(heads) * seqlen_k * 4))
    worst = 0.0
    for b in batches:
        k_heads = k[b].index_select(1, kv_head_index).float().transpose(0, 1)  # [H, sk, d]
        v_heads = v[b].index_select(1, kv_head_index).float().transpose(0, 1)
        for start in range(0, len(rows), rows_per_slice):
            row_index = torch.tensor(rows[start:start + rows_per_slice], device="cuda")
            q_slice = q[b].index_select(0, row_index).index_select(1, head_index)  # [R, H, d]
            mask = None
            if causal:
                mask = torch.arange(seqlen_k, device="cuda")[None, :] <= row_index[:, None]
            with sdpa_kernel([SDPBackend.MATH]):
                expected = scaled_dot_product_attention(
                    q_slice.float().transpose(0, 1)[None], k_heads[None], v_heads[None],
                    attn_mask=mask)[0]  # [H, R, dv]
            got = o[b].index_select(0, row_index).index_select(1, head_index).float()
            worst = max(worst, (got.transpose(0, 1) - expected).abs().max().item())
        del k_heads, v_heads
    return worst


def run_call(index, shape):
    """One eager bf16 call of the sequence; returns the max abs error against SDPA."""
    batch, seqlen_q, seqlen_k, nhead_q, nhead_k, hdim, causal = shape
    generator = torch.Generator(device="cuda").manual_seed(index)

    def draw(*size):
        return torch.randn(size, device="cuda", dtype=torch.bfloat16, generator=generator)

    q = draw(batch, seqlen_q, nhead_q, hdim)
    k = draw(batch, seqlen_k, nhead_k, hdim)
    v = draw(batch, seqlen_k, nhead_k, hdim)
    try:
        o = tilefmha.attention(q, k, v, causal=causal)
        assert o.shape == q.shape and o.dtype == torch.bfloat16 and o.is_cuda, o.shape
        assert torch.isfinite(o).all().item(), "non-finite output"
        return max_error_against_sdpa(o, q, k, v, causal, seed=index)
    finally:
        del q, k, v
        torch.cuda.empty_cache()


def test_sequence_of_calls_does_not_leak_state():
    failures, errors = [], []
    for index, shape in enumerate(CALLS + [FINAL]):
        label = f"call {index} [b, sq, sk, hq, hk, d, causal] = {shape}"
        try:
            error = run_call(index, shape)
        except Exception as exc:  # noqa: BLE001 - every call runs; all failures are reported
            torch.cuda.synchronize()
            failures.append(f"{label}: {type(exc).__name__}: {exc}")
            continue
        errors.append(f"{label}: max abs error {error:.4g}")
        if not error <= TOLERANCE:  # NaN fails too
            failures.append(f"{label}: max abs error {error:.4g} > {TOLERANCE}")
    assert not failures, "\n".join(failures + ["", "all calls:"] + errors)
