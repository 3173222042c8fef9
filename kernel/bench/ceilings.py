"""The two ceilings of the roofline, measured in the same run as the kernel:
device read bandwidth (GB/s) and the mma.sync bf16 rate (TFLOP/s)."""
from __future__ import annotations

import torch

from .timing import time_calls


def read_ceiling() -> float:
    x = torch.randn(1 << 30, device="cuda", dtype=torch.bfloat16)   # 2 GiB, far beyond L2
    t = time_calls([lambda: x.sum()], reps=15)
    del x
    return (1 << 31) / (t * 1e-3) / 1e9


def mma_ceiling(lib, sms: int, configs=((2, 256), (4, 256), (8, 128), (4, 512))) -> float:
    """The best rate over `configs` of (CTAs per SM, threads per CTA), TFLOP/s."""
    words = 4 + 2 * 8
    best = 0.0
    for blocks_per_sm, threads in configs:
        blocks, iters = sms * blocks_per_sm, 2048
        ops = torch.randint(0x3c00, 0x4000, (blocks * threads * words * 2,), dtype=torch.int32, device="cuda")
        ops = (ops[0::2] | (ops[1::2] << 16)).contiguous()            # pairs of bf16 in [2^-7, 2)
        out = torch.empty(blocks * threads, device="cuda")
        t = time_calls([lambda: lib.mma_ceiling_launch(ops.data_ptr(), out.data_ptr(), iters, blocks, threads,
                                                      torch.cuda.current_stream().cuda_stream)])
        flops = blocks * threads / 32 * iters * 8 * (2 * 16 * 8 * 16)
        best = max(best, flops / (t * 1e-3) / 1e12)
    return best

