"""The engine's GPU paths from Python: the PyTorch fast path, split-KV (automatic and forced),
merge_states, and varlen over device cu_seqlens, captured in a CUDA graph and replayed with new
lengths. Skipped (and reported as skipped) without PyTorch, a CUDA GPU or a usable driver."""

import pytest

import tilefmha
from tilefmha import _fast

from gpu_support import captured, gpu_skip_reason, torch


pytestmark = pytest.mark.skipif(bool(gpu_skip_reason()), reason=gpu_skip_reason() or "GPU")

BF16 = 1.6e-2


def draw(generator, *shape, dtype=None):
    return torch.rand(shape, generator=generator, device="cuda").sub(0.5).mul(2).to(
        dtype or torch.bfloat16)


def assert_close_to_cpu(o, lse, expected_o, expected_lse):
    torch.testing.assert_close(o.cpu().float(), expected_o.float(), rtol=BF16, atol=BF16)
    finite = torch.isfinite(expected_lse)
    assert torch.equal(torch.isfinite(lse.cpu()), finite)
    torch.testing.assert_close(lse.cpu()[finite], expected_lse[finite], rtol=1e-3, atol=1e-3)


def test_plain_pytorch_calls_take_the_fast_path(monkeypatch):
    generator = torch.Generator(device="cuda").manual_seed(1)
    q, k, v = (draw(generator, 2, 64, 4, 64) for _ in range(3))
    tilefmha.attention(q, k, v)  # the first GPU call registers PyTorch with the extension
    taken = []
    forward = _fast.forward
    monkeypatch.setattr(_fast, "forward", lambda *a, **kw: taken.append(forward(*a, **kw))
                        or taken[-1])
    o, lse = tilefmha.attention(q, k, v, causal=True, return_lse=True)
    assert len(taken) == 1 and taken[0] is not None
    assert_close_to_cpu(o, lse, *tilefmha.attention(q.cpu(), k.cpu(), v.cpu(), causal=True,
                                                    return_lse=True))


@pytest.mark.parametrize("num_splits", [0, 1, 3, 8])
def test_decode_with_any_split_count_matches_the_reference(num_splits):
    generator = torch.Generator(device="cuda").manual_seed(10 + num_splits)
    q = draw(generator, 2, 1, 16, 128)
    k, v = draw(generator, 2, 3000, 2, 128), draw(generator, 2, 3000, 2, 128)
    o, lse = tilefmha.attention(q, k, v, num_splits=num_splits, return_lse=True)
    plan = tilefmha.explain(q, k, v, num_splits=num_splits)
    if num_splits > 1:
        assert "combine" in plan, plan
    if num_splits == 1:
        assert "combine" not in plan, plan
    assert_close_to_cpu(o, lse, *tilefmha.attention(q.cpu(), k.cpu(), v.cpu(), return_lse=True))


def test_long_decode_is_split_automatically():
    generator = torch.Generator(device="cuda").manual_seed(3)
    q = draw(generator, 1, 1, 32, 128)
    k, v = draw(generator, 1, 32768, 8, 128), draw(generator, 1, 32768, 8, 128)
    assert "combine" in tilefmha.explain(q, k, v)
    o, lse = tilefmha.attention(q, k, v, causal="bottom_right", return_lse=True)
    assert_close_to_cpu(o, lse, *tilefmha.attention(q.cpu(), k.cpu(), v.cpu(),
                                                    causal="bottom_right", return_lse=True))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16] if torch else [])
def test_merge_states_on_the_gpu_matches_the_cpu(dtype):
    generator = torch.Generator(device="cuda").manual_seed(4)
    o_states = draw(generator, 3, 2, 33, 4, 64, dtype=dtype)
    lse_states = draw(generator, 3, 2, 4, 33, dtype=torch.float32).mul(3)
    lse_states[1, 0, 2] = float("-inf")
    o_states[1, 0, :, 2] = float("nan")  # never read: that state saw no key
    sinks = draw(generator, 4, dtype=torch.float32)
    o, lse = tilefmha.merge_states(o_states, lse_states, sink_logits=sinks)
    expected_o, expected_lse = tilefmha.merge_states(o_states.cpu(), lse_states.cpu(),
                                                     sink_logits=sinks.cpu())
    assert o.is_cuda and o.dtype == dtype
    torch.testing.assert_close(o.cpu().float(), expected_o.float(), rtol=BF16, atol=BF16)
    torch.testing.assert_close(lse.cpu(), expected_lse, rtol=1e-4, atol=1e-4)


def packed_varlen(generator, total_q, total_k, heads_q=4, heads_k=2, dim=64):
    return (draw(generator, total_q, heads_q, dim), draw(generator, total_k, heads_k, dim),
            draw(generator, total_k, heads_k, dim))


# num_splits 3: split-KV partials and the combine over device prefix sums, whose token count
# only the views tell the host.
@pytest.mark.parametrize("num_splits", [0, 1, 3])
@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64] if torch else [])
def test_varlen_over_device_cu_seqlens_matches_host_cu_seqlens(index_dtype, num_splits):
    generator = torch.Generator(device="cuda").manual_seed(5)
    cu_q, cu_k = [0, 17, 17, 140, 201], [0, 30, 95, 95, 300]
    q, k, v = packed_varlen(generator, cu_q[-1], cu_k[-1])
    device_q = torch.tensor(cu_q, dtype=index_dtype, device="cuda")
    device_k = torch.tensor(cu_k, dtype=index_dtype, device="cuda")
    o, lse = tilefmha.attention_varlen(q, k, v, device_q, device_k, max_seqlen_q=123,
                                       max_seqlen_k=205, causal="bottom_right", return_lse=True,
                                       num_splits=num_splits)
    assert_close_to_cpu(o, lse, *tilefmha.attention_varlen(
        q.cpu(), k.cpu(), v.cpu(), cu_q, cu_k, causal="bottom_right", return_lse=True))


def test_device_cu_seqlens_need_the_longest_lengths():
    generator = torch.Generator(device="cuda").manual_seed(6)
    q, k, v = packed_varlen(generator, 8, 8)
    cu = torch.tensor([0, 8], device="cuda")
    with pytest.raises(ValueError, match=r"max_seqlen_k is required"):
        tilefmha.attention_varlen(q, k, v, cu, cu, max_seqlen_q=8)


def test_a_captured_varlen_run_replays_with_new_lengths():
    generator = torch.Generator(device="cuda").manual_seed(7)
    max_q, max_k, batch = 96, 160, 3
    q, k, v = packed_varlen(generator, batch * max_q, batch * max_k)
    cu_q = torch.zeros(batch + 1, dtype=torch.int32, device="cuda")
    cu_k = torch.zeros(batch + 1, dtype=torch.int32, device="cuda")

    def set_lengths(lengths_q, lengths_k):
        for cu, lengths in ((cu_q, lengths_q), (cu_k, lengths_k)):
            cu.copy_(torch.tensor([0] + lengths, dtype=torch.int32).cumsum(0))

    def call():
        return tilefmha.attention_varlen(q, k, v, cu_q, cu_k, max_seqlen_q=max_q,
                                         max_seqlen_k=max_k, causal="bottom_right",
                                         return_lse=True)

    set_lengths([96, 10, 50], [160, 0, 77])
    graph, (o, lse) = captured(call)
    for lengths_q, lengths_k in (([96, 10, 50], [160, 0, 77]), ([1, 96, 33], [5, 160, 120])):
        set_lengths(lengths_q, lengths_k)
        o.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        total_q = sum(lengths_q)
        host_q = [0] + torch.tensor(lengths_q).cumsum(0).tolist()
        host_k = [0] + torch.tensor(lengths_k).cumsum(0).tolist()
        expected_o, expected_lse = tilefmha.attention_varlen(
            q[:total_q].cpu(), k[:host_k[-1]].cpu(), v[:host_k[-1]].cpu(), host_q, host_k,
            causal="bottom_right", return_lse=True)
        assert_close_to_cpu(o[:total_q], lse[:, :total_q], expected_o, expected_lse)


@pytest.mark.parametrize("features", [{}, {"causal": "bottom_right"}], ids=["plain", "causal"])
def test_no_keys_at_all_give_zero_and_minus_infinity(features):
    generator = torch.Generator(device="cuda").manual_seed(8)
    q = draw(generator, 2, 5, 4, 64)
    k = torch.empty(2, 0, 2, 64, dtype=torch.bfloat16, device="cuda")
    o, lse = tilefmha.attention(q, k, k.clone(), return_lse=True, **features)
    assert o.shape == q.shape and torch.all(o == 0)
    assert torch.all(lse == float("-inf"))
    packed_q = draw(generator, 7, 4, 64)
    packed_k = torch.empty(0, 2, 64, dtype=torch.bfloat16, device="cuda")
    o, lse = tilefmha.attention_varlen(packed_q, packed_k, packed_k.clone(), [0, 3, 7],
                                       [0, 0, 0], return_lse=True, **features)
    assert o.shape == packed_q.shape and torch.all(o == 0)
    assert torch.all(lse == float("-inf"))
