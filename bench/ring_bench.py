"""Context-parallel attention against one GPU: ring and head-parallel (Ulysses), forward and
forward + backward, with the ring's communication overlap.

Run one process per GPU under torchrun; every rank also times the one-GPU baseline on its own
GPU (same machine, same moment):

    torchrun --nproc_per_node 2 bench/ring_bench.py --seqlen 32768,131072 --json ring.json

Per sequence length (causal bf16, batch 1):
- one GPU: tilefmha attention over the whole sequence (forward; forward + backward);
- ring: tilefmha.distributed.ring_attention on zigzag shards (the slowest rank's time);
- ring without communication: the same schedule and kernels against the rank's own K/V shard,
  which is the ring's compute; K/V passes alone (N - 1 of them), its communication;
  overlap = the share of the communication hidden: (compute + communication - ring) /
  communication, clipped to [0, 1];
- Ulysses: tilefmha.distributed.ulysses_attention;
- the cost model's prediction (bench/ring_cost_model.py) beside the measured ring.
Times are per call over --calls calls issued back to back (throughput, as a training loop runs
them); the forward's latency from an idle GPU (one call, host work included) is reported too.
NVLink multicast stays off (NCCL_NVLS_ENABLE=0 and the others are set here before NCCL starts).
"""

import argparse
import json
import os
import statistics
import sys

for variable in ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS"):
    os.environ[variable] = "0" if variable == "NCCL_NVLS_ENABLE" else "1"

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import tilefmha.torch as tilefmha_torch  # noqa: E402
from tilefmha import _ring, distributed  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
try:
    import ring_cost_model  # noqa: E402
except ImportError:  # the model is optional beside the measurement
    ring_cost_model = None


class _Local:
    """A ring of one rank's own shard: the schedule's compute without communication. A "pass"
    copies the message into the receive buffer (a device copy of one K/V shard, tens of
    microseconds, where the real pass is NCCL's)."""

    def __init__(self, world, rank):
        self.world, self.rank = world, rank

    def pass_on(self, tensors, received):
        for tensor, arriving in zip(tensors, received):
            arriving.copy_(tensor)
        copied = torch.cuda.Event()
        copied.record()
        return [_Copied(copied)]


class _Copied:
    def __init__(self, event):
        self.event = event

    def wait(self):
        torch.cuda.current_stream().wait_event(self.event)


def timed(call, repeats, calls=1):
    """Median seconds per call of `call` over `repeats` rounds after one warm-up, all ranks in
    step. A round of calls > 1 times that many calls issued back to back: throughput, where each
    call's host work (the ring's NCCL calls and launches) runs under the previous call's GPU
    work, as in a training loop. A round of one call starts from an idle GPU: its latency, host
    work before the first kernel included."""
    call()
    times = []
    for _ in range(repeats):
        dist.barrier()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(calls):
            call()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3 / calls)
    seconds = torch.tensor([statistics.median(times)], device="cuda")
    dist.all_reduce(seconds, op=dist.ReduceOp.MAX)  # the slowest rank sets the pace
    return float(seconds)


def causal_flops(seqlen, heads, hdim, backward):
    forward = 4.0 * seqlen * seqlen * hdim * heads / 2
    return forward * (3.5 if backward else 1.0)  # backward = 2.5x forward


def measure(args, seqlen, world, rank):
    generator = torch.Generator(device="cuda").manual_seed(seqlen)

    def draw(heads):
        return torch.randn(1, seqlen, heads, args.hdim, device="cuda", dtype=torch.bfloat16,
                           generator=generator)

    q, k, v, do = draw(args.heads), draw(args.kv_heads), draw(args.kv_heads), draw(args.heads)
    local = [distributed.shard(x, world, rank) for x in (q, k, v, do)]
    backward = seqlen <= args.backward_max_seqlen
    row = {"seqlen": seqlen, "gpus": world, "heads": args.heads, "kv_heads": args.kv_heads,
           "hdim": args.hdim}

    def forward_backward(attend, tensors, grad):
        leaves = [x.detach().requires_grad_() for x in tensors]
        attend(*leaves).backward(grad)

    def one_gpu():
        return tilefmha_torch.attention(q, k, v, causal=True)

    def ring(q_, k_, v_):
        return distributed.ring_attention(q_, k_, v_, causal=True)

    def ring_compute(q_, k_, v_):
        plan = distributed._RingPlan(_Local(world, rank), q_, k_, v_, True, None,
                                     distributed._features(None, 0.0), False)
        return distributed._apply(plan, q_, k_, v_, False)

    def ulysses(q_, k_, v_):
        return distributed.ulysses_attention(q_, k_, v_, causal=True)

    repeats = args.repeats

    def throughput(call):
        return timed(call, repeats, args.calls)

    row["one_gpu_fwd_s"] = throughput(one_gpu)
    row["ring_fwd_s"] = throughput(lambda: ring(*local[:3]))
    row["ring_compute_fwd_s"] = throughput(lambda: ring_compute(*local[:3]))
    row["one_gpu_fwd_latency_s"] = timed(one_gpu, repeats)
    row["ring_fwd_latency_s"] = timed(lambda: ring(*local[:3]), repeats)
    row["ring_fwd_latency_speedup"] = row["one_gpu_fwd_latency_s"] / row["ring_fwd_latency_s"]
    real = _ring.Ring(None)

    def passes():
        kv = (local[1], local[2])
        for _ in range(world - 1):
            received = tuple(torch.empty_like(x) for x in kv)
            for request in real.pass_on(kv, received):
                request.wait()
            kv = received

    row["ring_comm_fwd_s"] = throughput(passes) if world > 1 else 0.0
    if args.heads % world == 0 and args.kv_heads % world == 0:
        row["ulysses_fwd_s"] = throughput(lambda: ulysses(*local[:3]))
    if backward:
        row["one_gpu_fwd_bwd_s"] = throughput(
            lambda: forward_backward(lambda a, b, c: tilefmha_torch.attention(a, b, c,
                                                                              causal=True),
                                     (q, k, v), do))
        row["ring_fwd_bwd_s"] = throughput(lambda: forward_backward(ring, local[:3], local[3]))
        row["ring_compute_fwd_bwd_s"] = throughput(
            lambda: forward_backward(ring_compute, local[:3], local[3]))
        if "ulysses_fwd_s" in row:
            row["ulysses_fwd_bwd_s"] = throughput(lambda: forward_backward(ulysses, local[:3],
                                                                           local[3]))
    for pass_name, with_backward in (("fwd", False), ("fwd_bwd", True)):
        if f"ring_{pass_name}_s" not in row:
            continue
        flops = causal_flops(seqlen, args.heads, args.hdim, with_backward)
        row[f"one_gpu_{pass_name}_tflops"] = flops / row[f"one_gpu_{pass_name}_s"] / 1e12
        row[f"ring_{pass_name}_speedup"] = (row[f"one_gpu_{pass_name}_s"] /
                                            row[f"ring_{pass_name}_s"])
        if f"ulysses_{pass_name}_s" in row:
            row[f"ulysses_{pass_name}_speedup"] = (row[f"one_gpu_{pass_name}_s"] /
                                                   row[f"ulysses_{pass_name}_s"])
    communication = row["ring_comm_fwd_s"]
    if communication > 0:
        hidden = (row["ring_compute_fwd_s"] + communication - row["ring_fwd_s"]) / communication
        row["ring_fwd_overlap"] = min(1.0, max(0.0, hidden))
    if ring_cost_model is not None and world > 1:
        row.update(predicted(args, row, seqlen, world))
    del q, k, v, do, local
    torch.cuda.empty_cache()
    return row


def predicted(args, row, seqlen, world):
    """The cost model's ring time and speedup beside the measurement, with the compute rates
    this one-GPU run measured (so the model predicts what communication costs)."""
    forward_s = row["one_gpu_fwd_s"]
    rates = {"forward_tflops": causal_flops(seqlen, args.heads, args.hdim, False) / forward_s
             / 1e12}
    if "one_gpu_fwd_bwd_s" in row:
        backward_s = row["one_gpu_fwd_bwd_s"] - forward_s
        rates["backward_tflops"] = (causal_flops(seqlen, args.heads, args.hdim, True) -
                                    causal_flops(seqlen, args.heads, args.hdim, False)) \
            / backward_s / 1e12
    model = ring_cost_model.Model.from_defaults(
        ring_cost_model.load_defaults(), heads=args.heads, kv_heads=args.kv_heads,
        hdim=args.hdim, **rates)
    link = ring_cost_model.load_links()[args.link]
    forward = model.step(seqlen, world, link, "forward")
    result = {"model_ring_fwd_s": forward["time_s"], "model_ring_fwd_speedup":
              forward["speedup"], "model_comm_step_s": forward["comm_s"],
              "model_compute_step_s": forward["compute_s"]}
    if "backward_tflops" in rates:
        backward = model.step(seqlen, world, link, "backward")
        result["model_ring_fwd_bwd_s"] = forward["time_s"] + backward["time_s"]
        result["model_ring_fwd_bwd_speedup"] = row["one_gpu_fwd_bwd_s"] / \
            result["model_ring_fwd_bwd_s"]
    return result


def report(rows):
    print(f"{'seqlen':>8} {'gpus':>4} {'1gpu fwd':>9} {'ring fwd':>9} {'x':>5} {'overlap':>7} "
          f"{'uly fwd':>8} {'x':>5} {'1gpu f+b':>9} {'ring f+b':>9} {'x':>5} {'uly f+b':>8} "
          f"{'x':>5}")
    for row in rows:
        def cell(key, width, scale=1e3, digits=1):
            return f"{row[key] * scale:{width}.{digits}f}" if key in row else " " * (width - 1) \
                + "-"
        print(f"{row['seqlen']:>8} {row['gpus']:>4} {cell('one_gpu_fwd_s', 9)} "
              f"{cell('ring_fwd_s', 9)} {cell('ring_fwd_speedup', 5, 1, 2)} "
              f"{cell('ring_fwd_overlap', 7, 1, 2)} {cell('ulysses_fwd_s', 8)} "
              f"{cell('ulysses_fwd_speedup', 5, 1, 2)} {cell('one_gpu_fwd_bwd_s', 9)} "
              f"{cell('ring_fwd_bwd_s', 9)} {cell('ring_fwd_bwd_speedup', 5, 1, 2)} "
              f"{cell('ulysses_fwd_bwd_s', 8)} {cell('ulysses_fwd_bwd_speedup', 5, 1, 2)}")
    print("times in ms per call, back to back (throughput); x = one GPU / sharded; overlap = "
          "share of the ring's K/V passes hidden")
    for row in rows:
        print(f"latency from an idle GPU, {row['seqlen']} tokens: one GPU "
              f"{row['one_gpu_fwd_latency_s'] * 1e3:.2f} ms, ring "
              f"{row['ring_fwd_latency_s'] * 1e3:.2f} ms ({row['ring_fwd_latency_speedup']:.2f}x)")
    for row in rows:
        if "model_ring_fwd_speedup" in row:
            print(f"model, {row['seqlen']} tokens on {row['gpus']} GPUs: ring fwd "
                  f"{row['model_ring_fwd_speedup']:.2f}x (measured {row['ring_fwd_speedup']:.2f}x)"
                  + (f", fwd+bwd {row['model_ring_fwd_bwd_speedup']:.2f}x (measured "
                     f"{row['ring_fwd_bwd_speedup']:.2f}x)"
                     if "model_ring_fwd_bwd_speedup" in row else ""))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seqlen", default="32768,65536,131072",
                        help="comma-separated total tokens (multiples of 2 * GPUs)")
    parser.add_argument("--heads", type=int, default=32)
    parser.add_argument("--kv-heads", type=int, default=8)
    parser.add_argument("--hdim", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3,
                        help="timed rounds per measurement (the median is reported)")
    parser.add_argument("--calls", type=int, default=4,
                        help="back-to-back calls per round for throughput (latency rounds time "
                             "one call from an idle GPU)")
    parser.add_argument("--backward-max-seqlen", type=int, default=131072,
                        help="longest sequence whose backward is timed (the one-GPU backward "
                             "of a million tokens takes minutes)")
    parser.add_argument("--link", default="nvlink4",
                        help="cost-model link (data/context_parallel/interconnects.json)")
    parser.add_argument("--json", help="write the rows here (rank 0)")
    args = parser.parse_args()

    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    rows = []
    for seqlen in (int(s) for s in args.seqlen.split(",")):
        row = measure(args, seqlen, world, rank)
        rows.append(row)
        if rank == 0:
            print(json.dumps(row), flush=True)
    if rank == 0:
        report(rows)
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"device": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
