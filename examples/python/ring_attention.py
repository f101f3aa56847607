"""Context parallelism: attention over a sequence sharded across ranks.

Under torchrun on GPUs, every process runs tilefmha.distributed.ring_attention on its zigzag
shard (NCCL passes K/V around the ring) and checks its rows against attention over the whole
sequence:

    torchrun --nproc_per_node 2 examples/python/ring_attention.py

Without torchrun it walks the same ring schedule for 4 simulated ranks on the CPU, with NumPy:
each rank's blocks on its shard, the partial states merged with merge_states, the result equal
to attention over the whole sequence.

Run from the repository root after building:  PYTHONPATH=build/python python3 examples/python/ring_attention.py
"""

import os

import numpy as np

import tilefmha


def on_gpus():
    import torch
    import torch.distributed as dist

    from tilefmha import distributed

    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    generator = torch.Generator(device="cuda").manual_seed(0)  # the same tensors on every rank
    q, k, v = (torch.randn(1, 4096 * world, heads, 128, device="cuda", dtype=torch.bfloat16,
                           generator=generator) for heads in (16, 4, 4))
    local = [distributed.shard(x, world, rank) for x in (q, k, v)]
    o = distributed.ring_attention(*local, causal=True)
    expected = distributed.shard(tilefmha.attention(q, k, v, causal=True), world, rank)
    error = float((o.float() - expected.float()).abs().max())
    print(f"rank {rank} of {world}: o {tuple(o.shape)}, max difference from one GPU {error:.2e}")
    assert error < 3e-2
    dist.destroy_process_group()


def part(x, name, axis=1):
    half = x.shape[axis] // 2
    return {"all": x, "front": x.take(range(half), axis),
            "back": x.take(range(half, 2 * half), axis)}[name]


def simulated(world=4, seq=64 * 8, heads=4, dim=64):
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal((1, seq, heads, dim), dtype=np.float32) for _ in range(3))
    chunk = seq // (2 * world)

    def shard(x, rank):  # chunks rank and 2N-1-rank
        back = 2 * world - 1 - rank
        return np.concatenate([x[:, rank * chunk:(rank + 1) * chunk],
                               x[:, back * chunk:(back + 1) * chunk]], axis=1)

    expected = tilefmha.attention(q, k, v, causal=True)
    for rank in range(world):
        states = {"front": [], "back": []}
        for source, blocks in tilefmha.ring_schedule(world, rank, causal=True):
            k_held, v_held = shard(k, source), shard(v, source)  # what the ring delivers
            for queries, keys, causal in blocks:
                o, lse = tilefmha.attention(part(shard(q, rank), queries), part(k_held, keys),
                                            part(v_held, keys), causal=causal, return_lse=True)
                for half in (("front", "back") if queries == "all" else (queries,)):
                    states[half].append((part(o, half) if queries == "all" else o,
                                         part(lse, half, 2) if queries == "all" else lse))
        halves = [tilefmha.merge_states(np.stack([o for o, _ in states[h]]),
                                        np.stack([lse for _, lse in states[h]]))[0]
                  for h in ("front", "back")]
        o = np.concatenate(halves, axis=1)
        np.testing.assert_allclose(o, shard(expected, rank), rtol=1e-5, atol=1e-5)
        print(f"rank {rank}: {len(states['front'])} + {len(states['back'])} partial states "
              f"merged, equal to its rows of attention over all {seq} tokens")


if __name__ == "__main__":
    if "LOCAL_RANK" in os.environ:
        on_gpus()
    else:
        simulated()
