"""fp8 (e4m3) attention on the CPU backend: per-tensor and per-block descales, bf16 output.

Q, K, V are stored as e4m3 codes of value / descale and the engine dequantizes them as
code * descale. The check runs NumPy on the dequantized values, which isolates the engine's
arithmetic (exact here, up to O's rounding to bf16) from the much larger quantization error,
printed apart.

Run from the repository root after building:  PYTHONPATH=build/python python3 examples/python/fp8.py
"""

import numpy as np

import tilefmha

rng = np.random.default_rng(0)
batch, seqlen, heads, dim = 2, 200, 4, 32
q, k, v = (rng.standard_normal((batch, seqlen, heads, dim), dtype=np.float32) for _ in range(3))


def numpy_attention(q, k, v):
    scores = np.einsum("bqhd,bkhd->bhqk", q, k, dtype=np.float64) / np.sqrt(dim)
    p = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return np.einsum("bhqk,bkhd->bqhd", p / p.sum(axis=-1, keepdims=True), v)


# Per-tensor descales: one power of two per tensor that maps its largest magnitude into e4m3's
# range (448), so that code * descale is exact.
descales = [2.0 ** np.ceil(np.log2(np.abs(x).max() / 448)) for x in (q, k, v)]
codes = [tilefmha.fp8_from_float32(x / d) for x, d in zip((q, k, v), descales)]
o = tilefmha.attention(*codes, dtype="fp8_e4m3", q_descale=descales[0], k_descale=descales[1],
                       v_descale=descales[2])
dequantized = [tilefmha.fp8_to_float32(c) * d for c, d in zip(codes, descales)]
expected = numpy_attention(*dequantized)
error = np.abs(tilefmha.bf16_to_float32(o) - expected).max()
quantization = np.abs(expected - numpy_attention(q, k, v)).max()
print(f"per-tensor: o {o.shape} {o.dtype} (bf16 bit patterns); max |o - numpy on dequantized| = "
      f"{error:.2e}; quantization moves O by up to {quantization:.2e}")
assert error <= 2.0**-8 * np.abs(expected).max()  # O's rounding to bf16

# Per-block descales: float32 [batch, heads, ceil(seqlen / 128)], one per block of 128 tokens,
# here the power of two that fits each block of each head; O in fp32 this time.
blocks = -(-seqlen // 128)


def per_block(x):
    padded = np.zeros((batch, blocks * 128, heads), np.float32)
    padded[:, :seqlen] = np.abs(x).max(axis=3)
    amax = padded.reshape(batch, blocks, 128, heads).max(axis=2).transpose(0, 2, 1)
    scales = (2.0 ** np.ceil(np.log2(np.maximum(amax, 1e-30) / 448))).astype(np.float32)
    factors = np.repeat(scales, 128, axis=2)[:, :, :seqlen].transpose(0, 2, 1)[..., None]
    return scales, tilefmha.fp8_from_float32(x / factors), factors


(qs, qc, qf), (ks, kc, kf), (vs, vc, vf) = (per_block(x) for x in (q, k, v))
o32 = tilefmha.attention(qc, kc, vc, dtype="fp8_e4m3", q_descale=qs, k_descale=ks,
                         v_descale=vs, out_dtype="fp32")
expected = numpy_attention(tilefmha.fp8_to_float32(qc) * qf, tilefmha.fp8_to_float32(kc) * kf,
                           tilefmha.fp8_to_float32(vc) * vf)
error = np.abs(o32 - expected).max()
print(f"per-block: descales {qs.shape}, o {o32.dtype}; max |o - numpy on dequantized| = "
      f"{error:.2e}")
assert error < 1e-5
