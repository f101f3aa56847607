"""NaN propagation through the GPU kernels, the same as the CPU reference: a NaN that a row reads
(in q, k or v) reaches that row's O and LSE; rows that never read it come out exactly as without
it. Covered: the Hopper forward (bf16), split-KV + combine and paged decode. Skipped (and reported as skipped) without PyTorch, a CUDA GPU or a usable driver."""

import numpy as np
import pytest

import tilefmha
from gpu_support import gpu_skip_reason, torch

pytestmark = pytest.mark.skipif(bool(gpu_skip_reason()), reason=gpu_skip_reason() or "GPU")


def draw(seed, *shape):
    generator = torch.Generator(device="cuda").manual_seed(seed)
    return torch.rand(shape, generator=generator, device="cuda").sub(0.5).to(torch.bfloat16)


def nan_rows(o, lse):
    """Per (batch, head, query) row: whether every O element and the LSE are NaN."""
    o_nan = torch.isnan(o.float()).all(dim=-1).transpose(1, 2)  # [b, h, sq]
    return o_nan, torch.isnan(lse)


def check(clean, poisoned, expect_nan):
    """expect_nan: bool tensor [b, h, sq] of the rows that read the NaN."""
    (o0, lse0), (o1, lse1) = clean, poisoned
    o_nan, lse_nan = nan_rows(o1, lse1)
    assert torch.equal(o_nan.cpu(), expect_nan), "O rows that read a NaN must be NaN, others not"
    assert torch.equal(lse_nan.cpu(), expect_nan), "LSE rows that read a NaN must be NaN"
    keep = ~expect_nan.cuda()
    assert torch.equal(lse1[keep], lse0[keep]), "rows that never read the NaN must not change"
    assert torch.equal(o1.transpose(1, 2)[keep], o0.transpose(1, 2)[keep])


@pytest.mark.parametrize("num_splits", [1, 4])
@pytest.mark.parametrize("seqlen_q", [1, 70])
def test_nan_in_q_reaches_only_its_row(seqlen_q, num_splits):
    q, k, v = draw(1, 2, seqlen_q, 4, 128), draw(2, 2, 600, 2, 128), draw(3, 2, 600, 2, 128)
    clean = tilefmha.attention(q, k, v, return_lse=True, num_splits=num_splits)
    q[1, seqlen_q - 1, 3, 5] = float("nan")
    poisoned = tilefmha.attention(q, k, v, return_lse=True, num_splits=num_splits)
    expect = torch.zeros(2, 4, seqlen_q, dtype=torch.bool)
    expect[1, 3, seqlen_q - 1] = True
    check(clean, poisoned, expect)


@pytest.mark.parametrize("num_splits", [1, 4])
def test_nan_in_a_key_reaches_the_rows_that_see_it(num_splits):
    # Causal top-left: query row i sees keys 0..i, so a NaN at key 40 reaches rows 40 and later
    # of its KV head's query heads (GQA: heads 2 and 3 share KV head 1).
    q, k, v = draw(4, 1, 96, 4, 64), draw(5, 1, 96, 2, 64), draw(6, 1, 96, 2, 64)
    clean = tilefmha.attention(q, k, v, causal=True, return_lse=True, num_splits=num_splits)
    k[0, 40, 1, 0] = float("nan")
    poisoned = tilefmha.attention(q, k, v, causal=True, return_lse=True, num_splits=num_splits)
    expect = torch.zeros(1, 4, 96, dtype=torch.bool)
    expect[0, 2:4, 40:] = True
    check(clean, poisoned, expect)


def test_nan_in_a_value_reaches_o_of_the_rows_that_see_it():
    # P·V mixes rows of V, not columns: V's NaN reaches only output column 7, and LSE never.
    # Causal: rows from 300 on see key 300. Rows of earlier query tiles never load the key
    # tile that holds it and stay exact. (Rows of the same tile that do not see the key may
    # read NaN: their probability for it is 0, and 0 x NaN is NaN in the tile's P·V, as in
    # every tiled kernel; docs/reference.md says so.)
    q, k, v = draw(7, 1, 384, 2, 128), draw(8, 1, 384, 2, 128), draw(9, 1, 384, 2, 128)
    clean_o, clean_lse = tilefmha.attention(q, k, v, causal=True, return_lse=True)
    v[0, 300, 0, 7] = float("nan")
    o, lse = tilefmha.attention(q, k, v, causal=True, return_lse=True)
    assert torch.isnan(o[0, 300:, 0, 7].float()).all()
    assert not torch.isnan(o[0, 300:, 0, :7].float()).any()
    assert torch.equal(o[0, :256], clean_o[0, :256]), "rows of earlier tiles must not change"
    assert torch.equal(o[0, :, 1], clean_o[0, :, 1]), "the other head must not change"
    assert torch.equal(lse, clean_lse)


def test_nan_in_the_paged_cache_reaches_the_sequence_that_reads_it():
    rng = np.random.default_rng(10)
    page_size, pages = 16, 8
    k_pool = draw(11, pages, page_size, 2, 64)
    v_pool = draw(12, pages, page_size, 2, 64)
    block_table = torch.tensor(rng.permutation(pages).reshape(2, 4).astype(np.int32),
                               device="cuda")
    lengths = [50, 64]
    q = draw(13, 2, 1, 2, 64)
    clean = tilefmha.paged_attention(q, k_pool, v_pool, block_table, lengths, return_lse=True)
    page = int(block_table[1, 2])
    k_pool[page, 3, 0, 1] = float("nan")  # key 35 of sequence 1, KV head 0
    poisoned = tilefmha.paged_attention(q, k_pool, v_pool, block_table, lengths,
                                        return_lse=True)
    expect = torch.zeros(2, 2, 1, dtype=torch.bool)
    expect[1, 0, 0] = True
    check(clean, poisoned, expect)
