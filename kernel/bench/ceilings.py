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
        ops = (ops[0::2] | (ops[1::2] << 16)).contiguous()            # pairs of bf16 in [0.5, 2)
        out = torch.empty(blocks * threads, device="cuda")
        t = time_calls([lambda: lib.mma_ceiling_launch(ops.data_ptr(), out.data_ptr(), iters, blocks, threads,
                                                      torch.cuda.current_stream().cuda_stream)])
        flops = blocks * threads / 32 * iters * 8 * (2 * 16 * 8 * 16)
        best = max(best, flops / (t * 1e-3) / 1e12)
    return best



# (CTAs per SM, threads per CTA): the design D tiers' 8 warps per SM, and twice that
PROBE_CONFIGS = ((1, 256), (2, 256))


def mma_ldsm_probe(lib, sms: int, mhz: float) -> list[dict]:
    """mma.sync with one ldmatrix.x4 every `per` MMAs (0: none), first used `dist` MMAs later
    (csrc/mma_ldsm_probe.cu), per occupancy: TFLOP/s and SM clocks per MMA at `mhz`, and the
    shared-memory wavefronts per MMA the loads add (an x4 moves 512 B, four 128-byte wavefronts)."""
    rows = []
    for blocks_per_sm, threads in PROBE_CONFIGS:
        blocks, iters = sms * blocks_per_sm, 1024
        out = torch.empty(blocks * threads, device="cuda")
        for per, dist in [(0, 4)] + [(p, d) for p in (8, 4, 2, 1) for d in (1, 4, 7)]:
            # the stream is read inside the call: under graph capture it is the capture stream
            t = time_calls([lambda: lib.mma_ldsm_probe_launch(out.data_ptr(), iters, per, dist, blocks, threads,
                                                              torch.cuda.current_stream().cuda_stream)])
            mmas = blocks * threads / 32 * iters * 8
            rows.append({"ctas_per_sm": blocks_per_sm, "threads": threads, "mmas_per_ldsm": per,
                         "first_use_after_mmas": dist if per else None,
                         "wavefronts_per_mma": 4 / per if per else 0.0,
                         "TFLOPs": mmas * 4096 / (t * 1e-3) / 1e12,
                         "clk_per_mma_per_sm": t * 1e-3 * mhz * 1e6 / (mmas / sms)})
    return rows
