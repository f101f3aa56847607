#!/usr/bin/env python3
"""Host cost of one tilefmha.attention call on CUDA tensors, and where it goes.

Times back-to-back asynchronous calls (host microseconds per call) for a small forward, then
prints the cProfile entries that take the most time, so Python-side overhead can be found and
cut. Needs PyTorch with CUDA and the tilefmha package (PYTHONPATH=BUILD/python).

    PYTHONPATH=build/python python3 bench/python_overhead.py --calls 2000
"""

import argparse
import cProfile
import pstats
import sys
import time


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--top", type=int, default=25, help="profile entries to print")
    args = parser.parse_args(argv)
    try:
        import torch
        import tilefmha
    except ImportError as error:
        print(f"python_overhead: {error}", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("python_overhead: needs a CUDA GPU", file=sys.stderr)
        return 2
    q, k, v = (torch.randn(1, 128, 8, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3))

    def call():
        return tilefmha.attention(q, k, v, causal=True)

    for _ in range(20):
        call()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(args.calls):
        call()
    host = (time.perf_counter() - start) / args.calls * 1e6
    torch.cuda.synchronize()
    print(f"tilefmha.attention: {host:.1f} us host per call over {args.calls} calls")
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(args.calls):
        call()
    profile.disable()
    torch.cuda.synchronize()
    pstats.Stats(profile).sort_stats("tottime").print_stats(args.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
