"""Context parallelism (tilefmha.distributed) on the GPU: ring and head-parallel attention,
forward and backward, against attention over the whole sequence.

Rings of 1 to 4 ranks run as threads on one GPU (simulated_ranks), with the real schedule and
kernels; with two GPUs or more, the same checks also run over NCCL, one process per GPU.
Reference: float32 PyTorch attention of the whole sequence. A sharded result must be as close
to it as tilefmha's one-GPU result is (the merge adds one rounding of O). Skipped (and reported
as skipped) without PyTorch, a CUDA GPU or a usable driver."""

import os
import tempfile

import pytest

import tilefmha
from gpu_support import gpu_skip_reason, torch

pytestmark = pytest.mark.skipif(bool(gpu_skip_reason()), reason=gpu_skip_reason() or "GPU")

if not gpu_skip_reason():
    import tilefmha.torch as tilefmha_torch
    from tilefmha import distributed
    from simulated_ranks import SimulatedRanks

NHEAD_Q, NHEAD_K, HDIM = 4, 2, 128


def documents(world):
    """Global prefix sums of three documents, each a multiple of 2 * world tokens."""
    lengths = [2 * world * n for n in (48, 8, 100)]
    starts = [0]
    for length in lengths:
        starts.append(starts[-1] + length)
    return starts


def reference(q, k, v, causal, cu_seqlens=None):
    """float32 O, LSE and the function itself, over the whole sequence ([batch, seq, h, d] or
    packed with cu_seqlens)."""
    def attend(q, k, v):
        group = q.shape[2] // k.shape[2]
        k, v = (x.float().repeat_interleave(group, dim=2) for x in (k, v))
        scores = torch.einsum("bqhd,bkhd->bhqk", q.float(), k) / HDIM ** 0.5
        if causal:
            seq = scores.shape[-1]
            scores = scores.masked_fill(torch.ones(seq, seq, dtype=torch.bool,
                                                   device=q.device).triu(1), float("-inf"))
        lse = torch.logsumexp(scores, dim=-1)
        return torch.einsum("bhqk,bkhd->bqhd", torch.softmax(scores, dim=-1), v), lse

    if cu_seqlens is None:
        return attend(q, k, v)
    outputs = [attend(*(x[None, a:b] for x in (q, k, v))) for a, b in
               zip(cu_seqlens, cu_seqlens[1:])]
    return (torch.cat([o[0] for o, _ in outputs]),
            torch.cat([lse[0] for _, lse in outputs], dim=1))


def output_gradient(q, seed):
    generator = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(q.shape[:-1] + (HDIM,), device="cuda", dtype=q.dtype,
                       generator=generator)


def inputs(world, packed, seed):
    generator = torch.Generator(device="cuda").manual_seed(seed)

    def draw(*shape):
        return (torch.rand(shape, generator=generator, device="cuda") * 2 - 1).to(torch.bfloat16)

    if packed:
        cu = documents(world)
        total = cu[-1]
        return draw(total, NHEAD_Q, HDIM), draw(total, NHEAD_K, HDIM), draw(total, NHEAD_K,
                                                                              HDIM), cu
    seq = 2 * world * 96
    return draw(2, seq, NHEAD_Q, HDIM), draw(2, seq, NHEAD_K, HDIM), draw(2, seq, NHEAD_K,
                                                                          HDIM), None


def max_error(actual, expected):
    return float((actual.float() - expected.float()).abs().max())


def assert_as_close_as(name, sharded, one_gpu, truth, slack=2.0, floor=2e-3, roundings=1):
    """The sharded result is within `slack` times the one-GPU result's distance from the truth,
    plus `floor` (a bf16 rounding of values near 1) and `roundings` bf16 roundings (2^-9
    relative) of the largest true value: a ring's dK/dV sum one bf16 block gradient per step."""
    bound = (slack * max_error(one_gpu, truth) + floor +
             roundings * 2.0 ** -9 * float(truth.abs().max()))
    error = max_error(sharded, truth)
    assert error <= bound, f"{name}: sharded error {error:.3g} > {bound:.3g} (one GPU: " \
                           f"{max_error(one_gpu, truth):.3g})"


def one_gpu(q, k, v, causal, cu, do):
    """tilefmha on one GPU over the whole sequence: o, lse, dq, dk, dv."""
    leaves = [x.detach().requires_grad_() for x in (q, k, v)]
    if cu is None:
        o, lse = tilefmha_torch.attention(*leaves, causal=causal, return_lse=True)
    else:
        o, lse = tilefmha_torch.attention_varlen(*leaves, cu, cu, causal=causal,
                                                 return_lse=True)
    o.backward(do)
    return (o.detach(), lse) + tuple(x.grad for x in leaves)


def truth(q, k, v, causal, cu, do):
    leaves = [x.detach().float().requires_grad_() for x in (q, k, v)]
    o, lse = reference(*leaves, causal, cu)
    o.backward(do.float())
    return (o.detach(), lse.detach()) + tuple(x.grad for x in leaves)


def sharded(method, ranks, q, k, v, causal, cu, do, deterministic=False):
    """Each simulated rank's forward and backward on its shard; results unsharded."""
    world = ranks.world
    shard_args = {"cu_seqlens": cu}
    lse_dim = 1 if cu is not None else 2

    def task(rank):
        # The plans' own forward and backward: autograd would run every rank's backward on its
        # one CUDA worker thread, where a rank waiting for its neighbour blocks the neighbour.
        local = [distributed.shard(x, world, rank, **shard_args) for x in (q, k, v)]
        if method == "ring":
            plan = distributed._RingPlan(ranks.ring(rank), *local, causal, cu,
                                         distributed._features(None, 0.0), deterministic)
        else:
            plan = distributed._UlyssesPlan(ranks.collective(rank), *local, causal, cu,
                                            distributed._features(None, 0.0), deterministic)
        o, lse, saved = plan.forward(*local)
        gradients = plan.backward(saved, distributed.shard(do, world, rank, **shard_args))
        torch.cuda.synchronize()
        return (o, lse) + tuple(gradients)

    per_rank = ranks.run(task)
    results = []
    for index in range(5):
        dim = lse_dim if index == 1 else None
        results.append(distributed.unshard([r[index] for r in per_rank], cu_seqlens=cu,
                                           seq_dim=dim))
    return results


NAMES = ("o", "lse", "dq", "dk", "dv")


@pytest.mark.parametrize("world", [1, 2, 3, 4])
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
@pytest.mark.parametrize("packed", [False, True], ids=["batch", "packed"])
def test_ring_matches_attention_over_the_whole_sequence(world, causal, packed):
    q, k, v, cu = inputs(world, packed, seed=world * 10 + causal)
    do = output_gradient(q, seed=1)
    expected = truth(q, k, v, causal, cu, do)
    alone = one_gpu(q, k, v, causal, cu, do)
    got = sharded("ring", SimulatedRanks(world), q, k, v, causal, cu, do)
    for name, s, a, t in zip(NAMES, got, alone, expected):
        assert s.shape == a.shape, name
        assert_as_close_as(name, s, a, t, roundings=world if name in ("dk", "dv") else 1)


@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("packed", [False, True], ids=["batch", "packed"])
def test_head_parallel_matches_attention_over_the_whole_sequence(world, packed):
    q, k, v, cu = inputs(world, packed, seed=7)
    k, v = (x.repeat_interleave(2, dim=-2) for x in (k, v))  # kv heads divisible by 4 ranks
    do = output_gradient(q, seed=1)
    expected = truth(q, k, v, True, cu, do)
    alone = one_gpu(q, k, v, True, cu, do)
    got = sharded("ulysses", SimulatedRanks(world), q, k, v, True, cu, do)
    for name, s, a, t in zip(NAMES, got, alone, expected):
        assert_as_close_as(name, s, a, t)


def test_the_deterministic_ring_backward_repeats_bit_for_bit():
    q, k, v, cu = inputs(3, False, seed=3)
    do = output_gradient(q, seed=1)
    first = sharded("ring", SimulatedRanks(3), q, k, v, True, cu, do, deterministic=True)
    second = sharded("ring", SimulatedRanks(3), q, k, v, True, cu, do, deterministic=True)
    for name, a, b in zip(NAMES, first, second):
        assert torch.equal(a, b), name


def test_shard_and_unshard_are_inverse_and_zigzag():
    x = torch.arange(2 * 16, device="cuda").reshape(2, 16)
    shards = [distributed.shard(x, 4, rank) for rank in range(4)]
    assert shards[1][0].tolist() == [2, 3, 12, 13]  # chunks 1 and 6 of 8
    assert torch.equal(distributed.unshard(shards), x)
    cu = [0, 8, 24]
    tokens = torch.arange(24, device="cuda")
    packed = [distributed.shard(tokens, 2, rank, cu_seqlens=cu) for rank in range(2)]
    assert packed[0].tolist() == [0, 1, 6, 7, 8, 9, 10, 11, 20, 21, 22, 23]
    assert torch.equal(distributed.unshard(packed, cu_seqlens=cu), tokens)


def test_bad_shards_are_refused_naming_the_problem():
    ranks = SimulatedRanks(2)
    q = torch.zeros(1, 6, NHEAD_Q, HDIM, device="cuda", dtype=torch.bfloat16)
    k = torch.zeros(1, 6, NHEAD_K, HDIM, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="not a multiple of 2 \\* world = 4"):
        distributed.shard(q, 2, 0)
    odd = q[:, :5]
    with pytest.raises(ValueError, match="odd count"):
        distributed._RingPlan(ranks.ring(0), odd, k[:, :5], k[:, :5], True, None, {}, False)
    with pytest.raises(ValueError, match="document 1 has 6 tokens"):
        distributed.shard(q[0], 2, 0, cu_seqlens=[0, 8, 14])
    with pytest.raises(ValueError, match="q holds 6 tokens but cu_seqlens gives this rank 8"):
        distributed._RingPlan(ranks.ring(0), q[0], k[0], k[0], True, [0, 16], {}, False)
    with pytest.raises(ValueError, match="3 heads, not a multiple"):
        three = torch.zeros(1, 4, 3, HDIM, device="cuda", dtype=torch.bfloat16)
        distributed._UlyssesPlan(ranks.collective(0), three, three, three, True, None, {},
                                 False)
    with pytest.raises(ValueError, match="method = 'both'"):
        distributed.attention(q, k, k, method="both")


@pytest.fixture(scope="module")
def group_of_one():
    """A one-rank NCCL process group (the default group), for the public functions."""
    if torch.distributed.is_initialized():
        yield None
        return
    with tempfile.TemporaryDirectory() as directory:
        torch.distributed.init_process_group("nccl", init_method=f"file://{directory}/init",
                                             rank=0, world_size=1)
        try:
            yield None
        finally:
            torch.distributed.destroy_process_group()


@pytest.mark.parametrize("method", ["ring", "ulysses", "auto"])
@pytest.mark.parametrize("packed", [False, True], ids=["batch", "packed"])
def test_public_functions_with_autograd_on_a_group_of_one(group_of_one, method, packed):
    q, k, v, cu = inputs(1, packed, seed=9)
    do = output_gradient(q, seed=1)
    expected = truth(q, k, v, True, cu, do)
    alone = one_gpu(q, k, v, True, cu, do)
    leaves = [x.detach().requires_grad_() for x in (q, k, v)]
    o, lse = distributed.attention(*leaves, method=method, causal=True, cu_seqlens=cu,
                                   return_lse=True)
    o.backward(do)
    assert not lse.requires_grad
    for name, s, a, t in zip(NAMES, [o.detach(), lse] + [x.grad for x in leaves], alone,
                             expected):
        assert_as_close_as(name, s, a, t)


def _nccl_worker(rank, world, init_file, results_file):
    os.environ.update({"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
                       "NVSHMEM_DISABLE_NVLS": "1"})
    torch.cuda.set_device(rank)
    torch.distributed.init_process_group("nccl", init_method=f"file://{init_file}", rank=rank,
                                         world_size=world)
    try:
        errors = {}
        for method in ("ring", "ulysses"):
            for packed in (False, True):
                q, k, v, cu = inputs(world, packed, seed=5)
                do = torch.randn(q.shape[:-1] + (HDIM,), device="cuda", dtype=q.dtype,
                                 generator=torch.Generator(device="cuda").manual_seed(6))
                local = [distributed.shard(x, world, rank, cu_seqlens=cu).requires_grad_()
                         for x in (q, k, v)]
                o, lse = distributed.attention(*local, method=method, causal=True,
                                               cu_seqlens=cu, return_lse=True)
                o.backward(distributed.shard(do, world, rank, cu_seqlens=cu))
                alone = one_gpu(q, k, v, True, cu, do)
                mine = [distributed.shard(x, world, rank, cu_seqlens=cu,
                                          seq_dim=(1 if cu is not None else 2) if i == 1
                                          else None)
                        for i, x in enumerate(alone)]
                errors[f"{method}-{'packed' if packed else 'batch'}"] = [
                    max_error(a, b) / (float(b.abs().max()) if i != 1 else 1.0)
                    for i, (a, b) in enumerate(zip([o, lse] + [x.grad for x in local], mine))]
        torch.save(errors, f"{results_file}.{rank}")
    finally:
        torch.distributed.destroy_process_group()


@pytest.mark.skipif(not gpu_skip_reason() and torch.cuda.device_count() < 2,
                    reason="needs two GPUs for NCCL")
def test_nccl_ring_and_head_parallel_agree_with_one_gpu():
    world = 2
    with tempfile.TemporaryDirectory() as directory:
        init_file, results = os.path.join(directory, "init"), os.path.join(directory, "errors")
        torch.multiprocessing.spawn(_nccl_worker, args=(world, init_file, results), nprocs=world)
        for rank in range(world):
            for case, errors in torch.load(f"{results}.{rank}").items():
                # bf16 results differ from the one-GPU ones by a rounding or two, relative to
                # their largest value; LSE is fp32 (absolute).
                for name, error in zip(NAMES, errors):
                    assert error <= (1e-3 if name == "lse" else 3e-2), (rank, case, name, error)


def test_choose_method_follows_its_documented_rule():
    # Within one NVLink host: the ring (measured faster than Ulysses on two H100s).
    assert distributed.choose_method(32, 8, 2, 16384) == "ring"
    assert distributed.choose_method(32, 8, 8, 512) == "ring"
    # Heads that do not divide the ranks leave only the ring.
    assert distributed.choose_method(32, 6, 4, 1024, within_host=False) == "ring"
    # Across hosts: Ulysses below the ring's compute-bound threshold, the ring above it.
    assert distributed.choose_method(32, 8, 4, 1024, within_host=False) == "ulysses"
    assert distributed.choose_method(32, 8, 4, 65536, within_host=False) == "ring"
    assert distributed.choose_method(32, 16, 16, 1024) == "ulysses"  # beyond one NVLink host
