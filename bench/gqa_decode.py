#!/usr/bin/env python3
"""Short-query GQA attention (decode and small chunks): tilefmha against PyTorch SDPA.

Each shape runs q [batch, seqlen_q, nhead_q, hdim] against k/v [batch, seqlen_k, nhead_k, hdim]
(bf16, bottom-right causal when seqlen_q > 1) through tilefmha.attention and through
scaled_dot_product_attention(enable_gqa=True) with each backend that accepts it; outputs must
agree, and each is timed as the median of CUDA-graph replays (bench/compare_sdpa.py's timing).
Prints microseconds and the effective K/V read bandwidth (the bytes a decode step must read).

    PYTHONPATH=build/python python3 bench/gqa_decode.py
"""

import argparse
import importlib.util
import warnings
import pathlib
import sys

SHAPES = [  # batch, nhead_q, nhead_k, seqlen_q, seqlen_k, hdim
    (16, 32, 4, 1, 8192, 128),
    (16, 32, 8, 1, 4096, 128),
    (64, 32, 4, 1, 2048, 128),
    (8, 64, 8, 16, 8192, 128),
    (16, 32, 4, 1, 8192, 64),
]


def load_compare():
    path = pathlib.Path(__file__).resolve().parent / "compare_sdpa.py"
    spec = importlib.util.spec_from_file_location("compare_sdpa", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore", message=".*kernel not used because.*")
    warnings.filterwarnings("ignore", message=".*both fused kernels require.*")
    warnings.filterwarnings("ignore", message=".*has been runtime disabled.*")
    compare = load_compare()
    torch, reason = compare.torch_or_reason()
    if torch is None:
        print(f"gqa_decode: {reason}", file=sys.stderr)
        return 2
    import tilefmha
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention

    backends = {"cudnn": SDPBackend.CUDNN_ATTENTION, "fa2": SDPBackend.FLASH_ATTENTION,
                "efficient": SDPBackend.EFFICIENT_ATTENTION}
    status = 0
    for b, hq, hk, sq, sk, d in SHAPES:
        gen = torch.Generator(device="cuda").manual_seed(0)
        q = torch.randn(b, sq, hq, d, device="cuda", dtype=torch.bfloat16, generator=gen)
        k = torch.randn(b, sk, hk, d, device="cuda", dtype=torch.bfloat16, generator=gen)
        v = torch.randn(b, sk, hk, d, device="cuda", dtype=torch.bfloat16, generator=gen)
        causal = sq > 1
        kv_bytes = 2 * b * sk * hk * d * 2

        def ours():
            return tilefmha.attention(q, k, v, causal="bottom_right" if causal else False)

        reference = ours()
        ms, how = compare.time_ms(torch, ours, 3, args.repeat, "graph")
        cells = [f"b{b} hq{hq} hk{hk} sq{sq} sk{sk} d{d}: ours {ms * 1e3:7.1f} us "
                 f"{kv_bytes / (ms * 1e-3) / 1e9:6.0f} GB/s of K/V ({how})"]
        q_t, k_t, v_t = (x.transpose(1, 2) for x in (q, k, v))
        for name, backend in backends.items():
            def theirs(backend=backend):
                with sdpa_kernel([backend]):
                    # SDPA's is_causal is top-left; bottom-right for sq > 1 needs a mask, so
                    # compare only the decode (sq = 1) outputs there.
                    return scaled_dot_product_attention(q_t, k_t, v_t, enable_gqa=True,
                                                        is_causal=False)
            try:
                expected = theirs().transpose(1, 2)
            except RuntimeError as error:
                cells.append(f"{name} n/a ({str(error).splitlines()[0][:40]})")
                continue
            if not causal:
                error = (reference.float() - expected.float()).abs().max().item()
                if error > compare.TOLERANCE["bf16"]:
                    cells.append(f"{name} MISMATCH {error:.3g}")
                    status = 1
                    continue
            their_ms, _ = compare.time_ms(torch, theirs, 3, args.repeat, "graph")
            cells.append(f"{name} {their_ms * 1e3:7.1f} us x{their_ms / ms:.2f}")
        print("  ".join(cells), flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
