"""Paged KV caches on the GPU: paged_attention and batch_prefill on CUDA tensors against the
CPU reference on the same inputs. sm90_ws serves pages of 8 keys or more (a TMA box per block,
or per page where pages are smaller than the block), sm80_mma smaller pages (rows gathered).
Shuffled page pools with pages of 1, 8, 16, 128 and 1024 tokens, both pool layouts, both
page-table forms, GQA, empty sequences, split-KV, device tables in CUDA graphs and checked mode.
Skipped (and reported as skipped) without PyTorch, a CUDA GPU or a usable driver."""

import numpy as np
import pytest

import tilefmha
from gpu_support import captured, gpu_skip_reason, torch
from paged_cache import PagedCache

pytestmark = pytest.mark.skipif(bool(gpu_skip_reason()), reason=gpu_skip_reason() or "GPU")

BF16 = 1.6e-2


def bf16(rng, *shape):
    return torch.from_numpy(rng.uniform(-1, 1, shape).astype(np.float32)).to(torch.bfloat16)


def cache_tensors(cache):
    """The pools as bf16 CUDA tensors (NaN marks slots no sequence wrote)."""
    def pool(x):
        return torch.from_numpy(x).to(torch.bfloat16).cuda()

    return pool(cache.k_pool), pool(cache.v_pool)


def assert_close(o, lse, expected_o, expected_lse):
    torch.testing.assert_close(o.cpu().float(), expected_o.float(), rtol=BF16, atol=BF16)
    finite = torch.isfinite(expected_lse)
    assert torch.equal(torch.isfinite(lse.cpu()), finite)
    torch.testing.assert_close(lse.cpu()[finite], expected_lse[finite], rtol=1e-3, atol=1e-3)


def tables(cache, form):
    if form == "block_table":
        return {"block_table": cache.block_table}
    return {"page_indptr": cache.page_indptr, "page_indices": cache.page_indices}


@pytest.mark.parametrize("form", ["block_table", "page_list"])
@pytest.mark.parametrize("layout", ["nhd", "hnd"])
@pytest.mark.parametrize("page_size", [1, 2, 8, 16, 128, 1024])
def test_paged_decode_matches_the_cpu_reference(page_size, layout, form):
    rng = np.random.default_rng(page_size)
    lengths = [300, 17, 0, 129]
    k = rng.uniform(-1, 1, (4, 300, 2, 64)).astype(np.float32)
    v = rng.uniform(-1, 1, (4, 300, 2, 64)).astype(np.float32)
    cache = PagedCache(rng, k, v, lengths, page_size, layout)
    k_pool, v_pool = cache_tensors(cache)
    q = bf16(rng, 4, 2, 8, 64)
    features = {"causal": "bottom_right", "softcap": 30.0}
    pages = tables(cache, form)
    block_table = pages.pop("block_table", None)
    o, lse = tilefmha.paged_attention(q.cuda(), k_pool, v_pool, block_table, lengths,
                                      layout=layout, return_lse=True, **pages, **features)
    assert o.is_cuda and o.shape == q.shape
    expected = tilefmha.paged_attention(q, k_pool.cpu(), v_pool.cpu(), block_table, lengths,
                                        layout=layout, return_lse=True, **pages, **features)
    assert_close(o, lse, *expected)


@pytest.mark.parametrize("form", ["block_table", "page_list"])
@pytest.mark.parametrize("page_size", [1, 4, 16, 128, 1024])
def test_batch_prefill_matches_the_cpu_reference(page_size, form):
    rng = np.random.default_rng(40 + page_size)
    lengths_q, lengths_k = [70, 0, 1, 33], [200, 5, 64, 33]
    cu_q = [0] + np.cumsum(lengths_q).tolist()
    k = rng.uniform(-1, 1, (4, 200, 2, 128)).astype(np.float32)
    v = rng.uniform(-1, 1, (4, 200, 2, 128)).astype(np.float32)
    cache = PagedCache(rng, k, v, lengths_k, page_size, "nhd")
    k_pool, v_pool = cache_tensors(cache)
    q = bf16(rng, cu_q[-1], 4, 128)
    features = {"causal": "bottom_right", "alibi_slopes": np.array([0.1, 0.2, 0.3, 0.4],
                                                                   dtype=np.float32)}
    o, lse = tilefmha.batch_prefill(q.cuda(), k_pool, v_pool, cu_q, lengths_k,
                                    **tables(cache, form), return_lse=True, **features)
    expected = tilefmha.batch_prefill(q, k_pool.cpu(), v_pool.cpu(), cu_q, lengths_k,
                                      **tables(cache, form), return_lse=True, **features)
    assert_close(o, lse, *expected)


# Head dims of two panels or more in pages of 8 or 16 keys land in shared memory in 8-row groups
# of every panel, one TMA box a page (kernels/fmha/fwd_sm90_kv_layout.h); NHD pools put the head
# beside the panels, HND pools beside the pages. Sequences end inside a page and inside a group.
@pytest.mark.parametrize("layout", ["nhd", "hnd"])
@pytest.mark.parametrize("page_size", [8, 16])
@pytest.mark.parametrize("hdim", [128, 256])
def test_grouped_page_layouts_match_the_cpu_reference(hdim, page_size, layout):
    rng = np.random.default_rng(hdim + page_size + len(layout))
    lengths_k = [300, 17, 0, 133]
    k = rng.uniform(-1, 1, (4, 300, 2, hdim)).astype(np.float32)
    v = rng.uniform(-1, 1, (4, 300, 2, hdim)).astype(np.float32)
    cache = PagedCache(rng, k, v, lengths_k, page_size, layout)
    k_pool, v_pool = cache_tensors(cache)
    q = bf16(rng, 4, 2, 8, hdim)
    o, lse = tilefmha.paged_attention(q.cuda(), k_pool, v_pool, cache.block_table, lengths_k,
                                      layout=layout, return_lse=True)
    expected = tilefmha.paged_attention(q, k_pool.cpu(), v_pool.cpu(), cache.block_table,
                                        lengths_k, layout=layout, return_lse=True)
    assert_close(o, lse, *expected)

    lengths_q = [37, 0, 5, 64]
    cu_q = [0] + np.cumsum(lengths_q).tolist()
    q = bf16(rng, cu_q[-1], 8, hdim)
    o, lse = tilefmha.batch_prefill(q.cuda(), k_pool, v_pool, cu_q, lengths_k, layout=layout,
                                    **tables(cache, "page_list"), causal="bottom_right",
                                    return_lse=True)
    expected = tilefmha.batch_prefill(q, k_pool.cpu(), v_pool.cpu(), cu_q, lengths_k,
                                      layout=layout, **tables(cache, "page_list"),
                                      causal="bottom_right", return_lse=True)
    assert_close(o, lse, *expected)


def test_device_tables_and_lengths_replay_in_a_cuda_graph_with_new_lengths():
    rng = np.random.default_rng(77)
    capacity, page_size = 256, 16
    k = rng.uniform(-1, 1, (3, capacity, 2, 64)).astype(np.float32)
    v = rng.uniform(-1, 1, (3, capacity, 2, 64)).astype(np.float32)
    cache = PagedCache(rng, k, v, [capacity] * 3, page_size, "nhd", spare_pages=0)
    k_pool, v_pool = cache_tensors(cache)
    q = bf16(rng, 3, 1, 4, 64).cuda()
    table = torch.from_numpy(cache.block_table).cuda()
    lengths = torch.zeros(3, dtype=torch.int32, device="cuda")

    def call():
        return tilefmha.paged_attention(q, k_pool, v_pool, table, lengths, max_seqlen_k=capacity,
                                        causal="bottom_right", return_lse=True)

    lengths.copy_(torch.tensor([200, 3, 256]))
    graph, (o, lse) = captured(call)
    for new_lengths in ([200, 3, 256], [1, 130, 17]):
        lengths.copy_(torch.tensor(new_lengths))
        o.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        expected = tilefmha.paged_attention(q.cpu(), k_pool.cpu(), v_pool.cpu(), cache.block_table,
                                            new_lengths, causal="bottom_right", return_lse=True)
        assert_close(o, lse, *expected)


def test_batch_prefill_over_device_page_lists():
    rng = np.random.default_rng(78)
    lengths_q, lengths_k = [5, 40, 0], [70, 40, 9]
    cu_q = [0] + np.cumsum(lengths_q).tolist()
    k = rng.uniform(-1, 1, (3, 70, 1, 64)).astype(np.float32)
    v = rng.uniform(-1, 1, (3, 70, 1, 64)).astype(np.float32)
    cache = PagedCache(rng, k, v, lengths_k, 16, "hnd")
    k_pool, v_pool = cache_tensors(cache)
    q = bf16(rng, cu_q[-1], 2, 64)
    o, lse = tilefmha.batch_prefill(
        q.cuda(), k_pool, v_pool, torch.tensor(cu_q, device="cuda"),
        torch.tensor(lengths_k, device="cuda"), layout="hnd",
        page_indptr=torch.from_numpy(cache.page_indptr).cuda(),
        page_indices=torch.from_numpy(cache.page_indices).cuda(), max_seqlen_q=40,
        max_seqlen_k=70, causal="bottom_right", return_lse=True)
    expected = tilefmha.batch_prefill(q, k_pool.cpu(), v_pool.cpu(), cu_q, lengths_k, layout="hnd",
                                      page_indptr=cache.page_indptr,
                                      page_indices=cache.page_indices, causal="bottom_right",
                                      return_lse=True)
    assert_close(o, lse, *expected)


@pytest.mark.parametrize("num_splits", [0, 5])
@pytest.mark.parametrize("page_size,form", [(16, "block_table"), (1, "page_list"),
                                            (128, "page_list")])
def test_long_paged_decode_splits_its_keys(page_size, form, num_splits):
    # 2 sequences x 8 query heads leave most SMs idle in one pass: the engine splits the keys
    # over paged fwd_splitkv kernels and combines (num_splits=0 chooses the count, 5 forces it).
    rng = np.random.default_rng(90 + page_size)
    lengths = [6000, 2500]
    k = rng.uniform(-1, 1, (2, 6000, 2, 128)).astype(np.float32)
    v = rng.uniform(-1, 1, (2, 6000, 2, 128)).astype(np.float32)
    cache = PagedCache(rng, k, v, lengths, page_size, "nhd")
    k_pool, v_pool = cache_tensors(cache)
    q = bf16(rng, 2, 1, 8, 128)
    pages = tables(cache, form)
    block_table = pages.pop("block_table", None)
    features = {"causal": "bottom_right", "sink_logits": np.linspace(-1, 1, 8,
                                                                     dtype=np.float32)}
    o, lse = tilefmha.paged_attention(q.cuda(), k_pool, v_pool, block_table, lengths,
                                      num_splits=num_splits, return_lse=True, **pages,
                                      **features)
    expected = tilefmha.paged_attention(q, k_pool.cpu(), v_pool.cpu(), block_table, lengths,
                                        return_lse=True, **pages, **features)
    assert_close(o, lse, *expected)


def test_a_paged_batch_without_any_key_gives_zero_rows():
    rng = np.random.default_rng(95)
    k = rng.uniform(-1, 1, (2, 1, 2, 64)).astype(np.float32)
    cache = PagedCache(rng, k, k, [0, 0], 16, "nhd")
    k_pool, v_pool = cache_tensors(cache)
    q = bf16(rng, 2, 3, 4, 64).cuda()
    o, lse = tilefmha.paged_attention(q, k_pool, v_pool, cache.block_table, [0, 0],
                                      return_lse=True)
    assert torch.equal(o.cpu().float(), torch.zeros(2, 3, 4, 64))
    assert torch.equal(lse.cpu(), torch.full((2, 4, 3), float("-inf")))


def device_decode(check_tables, table, lengths, max_seqlen_k=64):
    rng = np.random.default_rng(96)
    k_pool = bf16(rng, 8, 16, 2, 64).cuda()
    v_pool = bf16(rng, 8, 16, 2, 64).cuda()
    q = bf16(rng, 2, 1, 4, 64).cuda()
    return tilefmha.paged_attention(q, k_pool, v_pool, torch.tensor(table, device="cuda"),
                                    torch.tensor(lengths, device="cuda"),
                                    max_seqlen_k=max_seqlen_k, check_tables=check_tables)


def test_checked_device_tables_give_the_trusted_result():
    table, lengths = [[3, 1, 4, 0], [7, 6, 5, 2]], [64, 33]
    torch.testing.assert_close(device_decode(True, table, lengths),
                               device_decode(False, table, lengths), rtol=0, atol=0)


@pytest.mark.parametrize("table,lengths,message", [
    ([[3, 1, 4, 0], [7, 6, 99, 2]], [64, 33], r"block_table.*99"),
    ([[3, 1, 4, 0], [7, -1, 5, 2]], [64, 33], r"block_table.*-1"),
    ([[3, 1, 4, 0], [7, 6, 5, 2]], [64, 65], r"seqlen_k"),
    ([[3, 1, 4, 0], [7, 6, 5, 2]], [-4, 3], r"seqlen_k_per_batch\[0\] = -4"),
])
def test_checked_device_tables_name_the_bad_entry(table, lengths, message):
    with pytest.raises(ValueError, match=r"checked device index arrays: .*" + message):
        device_decode(True, table, lengths)


def test_checked_device_page_lists_name_a_backward_offset():
    rng = np.random.default_rng(97)
    k_pool = bf16(rng, 8, 16, 1, 64).cuda()
    q = bf16(rng, 2, 1, 1, 64).cuda()
    with pytest.raises(ValueError, match=r"page_indptr\[2\] = 1 after 3"):
        tilefmha.paged_attention(q, k_pool, k_pool, None, torch.tensor([20, 5], device="cuda"),
                                 page_indptr=torch.tensor([0, 3, 1], device="cuda"),
                                 page_indices=torch.tensor([0, 1, 2], device="cuda"),
                                 max_seqlen_k=20, check_tables=True)
