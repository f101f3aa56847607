#!/usr/bin/env python3
"""Per-kernel GPU time of one attention backward: tilefmha against SDPA's cuDNN backend.

The sweep benches (compare_backward.py) time whole calls. Where a call loses, this says which
kernel loses: each implementation's backward runs `--repeat` times under torch.profiler and
every CUDA kernel's total time is divided by the repeat count, so a row is microseconds per
call. Shapes are the FA3 protocol's (bench/fa3_sweep.json), as in compare_backward.py.

    PYTHONPATH=build/python python3 bench/kernel_breakdown.py --hdim 64 --seqlen 512,1024
    python3 bench/kernel_breakdown.py --list-shapes --hdim 64     # no torch or GPU needed

Needs PyTorch with CUDA and a GPU for the profiled run; without them it says so and exits 2.
"""

import argparse
import collections
import pathlib
import sys

# bench/ holds scripts, not a package: its siblings import from its directory (neither needs
# torch to import).
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import compare_backward as backward  # noqa: E402

compare = backward.compare
# Kernel names run to hundreds of characters of template arguments; the head names the kernel.
NAME_WIDTH = 72


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweep", type=pathlib.Path, default=compare.DEFAULT_SWEEP)
    parser.add_argument("--hdim", type=compare.parse_int_list, help="head dims, e.g. 64,128")
    parser.add_argument("--seqlen", type=compare.parse_int_list, help="lengths, e.g. 512,8192")
    parser.add_argument("--causal", type=compare.parse_causal, help="true, false or both")
    parser.add_argument("--dtype", choices=("bf16", "fp16"))
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--list-shapes", action="store_true", help="print the shapes and exit")
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error(f"--repeat must be >= 1 (got {args.repeat})")
    return args


def per_call_kernels(events, repeat):
    """[(kernel name, microseconds per call)] from profiler events, longest first."""
    totals = collections.defaultdict(float)
    for event in events:
        if event.device_type.name == "CUDA":
            # PyTorch 2.4 renamed cuda_time_total to device_time_total.
            totals[event.key] += getattr(event, "device_time_total", None) or getattr(
                event, "cuda_time_total", 0.0)
    return sorted(((name, us / repeat) for name, us in totals.items()), key=lambda kv: -kv[1])


def format_table(label, name, kernels):
    lines = [f"{label} {name}: {sum(us for _, us in kernels):.1f} us of kernels a call"]
    lines += [f"    {us:9.1f} us  {kernel[:NAME_WIDTH]}" for kernel, us in kernels]
    return "\n".join(lines)


def profile(torch, call, repeat):
    for _ in range(3):
        call()  # compile, load and warm up outside the profiled window
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(repeat):
            call()
        torch.cuda.synchronize()
    return per_call_kernels(prof.key_averages(), repeat)


def run_shape(torch, tilefmha, shape, repeat):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[shape["dtype"]]
    generator = torch.Generator(device="cuda").manual_seed(0)
    q, k, v, do = (torch.randn(shape["batch"], shape["seqlen"], shape["nhead"], shape["hdim"],
                               device="cuda", dtype=dtype, generator=generator)
                   for _ in range(4))
    causal = shape["causal"]
    o, lse = tilefmha.attention(q, k, v, causal=causal, return_lse=True)
    label = backward.shape_label(shape)
    ours = profile(torch, lambda: tilefmha.attention_backward(q, k, v, o, lse, do,
                                                              causal=causal), repeat)
    print(format_table(label, "ours", ours), flush=True)

    leaves = [x.detach().requires_grad_() for x in (q, k, v)]
    with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
        out = torch.nn.functional.scaled_dot_product_attention(
            *[x.transpose(1, 2) for x in leaves], is_causal=causal)
    grad_out = do.transpose(1, 2)
    cudnn = profile(torch, lambda: torch.autograd.grad(out, leaves, grad_out,
                                                       retain_graph=True), repeat)
    print(format_table(label, "cudnn", cudnn), flush=True)


def main(argv=None):
    args = parse_args(argv)
    import json

    shapes = compare.expand_shapes(json.loads(args.sweep.read_text()), args.hdim, args.seqlen,
                                   args.causal, args.dtype)
    if args.list_shapes:
        for shape in shapes:
            print(backward.shape_label(shape))
        return 0
    torch, reason = compare.torch_or_reason()
    if torch is None:
        print(f"kernel_breakdown: {reason}", file=sys.stderr)
        return 2
    import tilefmha

    for shape in shapes:
        run_shape(torch, tilefmha, shape, args.repeat)
    return 0


if __name__ == "__main__":
    sys.exit(main())
