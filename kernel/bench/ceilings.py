"""The two ceilings of the roofline, measured in the same run as the kernel:
device read bandwidth (GB/s) and the mma.sync bf16 rate (TFLOP/s); and the e4m3 mma.sync rate,
what an fp8 pool read by fp8 MMAs could reach (kernel/bench/mma_kinds.py)."""
from __future__ import annotations

import torch

from .timing import time_calls


def read_ceiling() -> float:
    x = torch.randn(1 << 30, device="cuda", dtype=torch.bfloat16)   # 2 GiB, far beyond L2
    t = time_calls([lambda: x.sum()], reps=15)
    del x
    return (1 << 31) / (t * 1e-3) / 1e9


def mma_ceiling(lib, sms: int, configs=((2, 256), (4, 256), (8, 128), (4, 512)), kind: str = "bf16") -> float:
    """The best rate over `configs` of (CTAs per SM, threads per CTA), TFLOP/s. kind: "bf16"
    (m16n8k16, the verify kernels' instruction) or "e4m3" (m16n8k32, sm_89 and newer; NaN where
    the device has none)."""
    if kind not in MMA_KINDS:
        raise ValueError(f"kind: {kind!r} is not one of {sorted(MMA_KINDS)}")
    launch_name, k, lo, hi, per_word = MMA_KINDS[kind]
    launch = getattr(lib, launch_name)
    words = 4 + 2 * 8
    best = 0.0
    for blocks_per_sm, threads in configs:
        blocks, iters = sms * blocks_per_sm, 2048
        n = blocks * threads * words
        v = torch.randint(lo, hi, (n * per_word,), dtype=torch.int32, device="cuda").view(n, per_word)
        shift = 32 // per_word
        ops = sum(v[:, i] << (shift * i) for i in range(per_word)).contiguous()   # values in [0.5, 2)
        out = torch.empty(blocks * threads, device="cuda")
        t = time_calls([lambda: launch(ops.data_ptr(), out.data_ptr(), iters, blocks, threads,
                                       torch.cuda.current_stream().cuda_stream)])
        if torch.isnan(out).any():
            return float("nan")
        flops = blocks * threads / 32 * iters * 8 * (2 * 16 * 8 * k)
        best = max(best, flops / (t * 1e-3) / 1e12)
    return best


# kind -> (launch function, k of one MMA, operand value range [lo, hi) per element, elements a word):
# bf16 0x3c00..0x3fff and e4m3 0x30..0x3f are [0.5, 2)
MMA_KINDS = {"bf16": ("mma_ceiling_launch", 16, 0x3c00, 0x4000, 2),
             "e4m3": ("mma_ceiling_e4m3_launch", 32, 0x30, 0x40, 4)}
