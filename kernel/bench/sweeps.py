"""Benchmark sweeps around the centre point (S = 185k, T = 8, H = 8, page 1 scattered,
batch 1): our kernel at its default tier (and the 64-row tier beside it), SGLang's kernels and
naive torch, each row against the roofline of the ceilings measured in the same run; and our
kernel on SGLang's fp8_e4m3 pool (sweeps fp8_*, rows marked "kv_dtype": "fp8_e4m3"; SGLang's
extend_attention_fwd beside it at the centre), against the roofline of the fp8 bytes; and the
production algorithm's shapes on both pools (sweeps "dflash" and "ddtree", on the fp8 pool "fp8_dflash"
and "fp8_ddtree", rows with "algorithm":
DFLASH's causal block of 16 at batch 1 and 8, DDTree's trees padded to D = 17, 33, 65 at batch 1;
SGLang's extend_attention_fwd beside them on the bf16 pool)."""
from __future__ import annotations

import zlib

import torch

from ..checks import FP8_ROW_BYTES, HEAD_DIM, ROW_BYTES, V_DIM
from ..inputs import ddtree_case, dflash_case, make_case
from ..ops import pick_tier, verify_attention
from ..reference import draft_tree
from .timing import log, time_calls, time_flushed


def naive_torch(case, o):
    """Gather the prefix, dense bf16 attention with the mask, one request at a time."""
    kvp, qop = case.kv_indptr.tolist(), case.qo_indptr.tolist()
    for b in range(len(qop) - 1):
        q0, q1, k0, k1 = qop[b], qop[b + 1], kvp[b], kvp[b + 1]
        T, S = q1 - q0, k1 - k0
        keys = torch.cat([case.kv_cache[case.kv_indices[k0:k1], 0], case.k_extend[q0:q1, 0]])
        qq = case.q[q0:q1].reshape(-1, 576)
        logits = (qq @ keys.T).float().view(T, -1, S + T) * case.sm_scale
        tree = draft_tree(case.custom_mask, case.mask_indptr, b, T, S, qq.device)
        logits[:, :, S:].masked_fill_(~tree[:, None, :], float("-inf"))
        o[q0:q1] = (torch.softmax(logits, -1).to(torch.bfloat16).view(-1, S + T) @ keys[:, :512]).view(T, -1, 512)


FP8_KV = "fp8_e4m3"
# a row's "kv_dtype": the pool's torch dtype name (make_case's kv_dtype "auto" is the model's bf16)
KV_DTYPE_NAMES = {"auto": "bfloat16", FP8_KV: FP8_KV}
POOL_ROW_BYTES = {"auto": ROW_BYTES, FP8_KV: FP8_ROW_BYTES}
# the configuration SGLang's kernel is timed at on the fp8 pool (its prefix walk is serial:
# ~35 ms a layer at 185k, so not at every shape)
FP8_SGLANG_AT = dict(S=185000, T=8, H=8, layout="scattered", page=1, batch=1)


def bench_configs(quick: bool):
    """Every benchmark configuration, bf16 then fp8 (configs with "kv_dtype"), the slowest last."""
    c = dict(S=185000, T=8, H=8, layout="scattered", page=1, batch=1)
    out = [dict(c, sweep="S", S=s) for s in (4096, 16384, 65536, 131072, 185000, 262144)]
    out += [dict(c, sweep="T", T=t) for t in (1, 4, 8, 16, 32, 64, 256, 1024)]
    out += [dict(c, sweep="H", H=h) for h in (8, 16, 64)]
    out += [dict(c, sweep="layout", layout=l, page=p) for l, p in
            (("contiguous", 1), ("scattered", 1), ("scattered", 64), ("fragmented", 1))]
    out += [dict(c, sweep="batch", batch=8), dict(c, sweep="batch32", batch=32)]
    out += fp8_configs()
    out += production_configs()
    if quick:
        out = [x for x in out if x["T"] <= 64 and x["S"] in (16384, 185000)]
    return sorted(out, key=lambda x: x["T"] >= 256)   # the multi-second calls last


def fp8_configs():
    """The fp8_e4m3 pool around the same centre, each shape one the bf16 sweeps also measure
    (for the speed-up of fp8 over bf16): S 16k-262k, T 1-32, batch 8, page 1 and 64."""
    c = dict(S=185000, T=8, H=8, layout="scattered", page=1, batch=1, kv_dtype=FP8_KV)
    out = [dict(c, sweep="fp8_S", S=s) for s in (16384, 65536, 131072, 185000, 262144)]
    out += [dict(c, sweep="fp8_T", T=t) for t in (1, 4, 8, 16, 32)]
    out += [dict(c, sweep="fp8_layout", page=p) for p in (1, 64)]
    return out + [dict(c, sweep="fp8_batch", batch=8)]


# The production algorithm's shapes (issue 24): DFLASH verifies a causal block of
# --speculative-dflash-block-size tokens, no mask; DDTree (SGLang pull request #29907) D = budget + 1
# nodes per request, trees padded with all-False rows (here 3/4 of D real nodes: the kernel computes
# every row either way, so the time does not depend on the split).
DFLASH_BLOCK = 16
DDTREE_WIDTHS = (17, 33, 65)


def production_configs():
    """DFLASH at batch 1 and 8, DDTree at batch 1, S = 185k, 8 heads, page 1 scattered, both pools
    (sweeps "dflash", "ddtree"; on the fp8 pool "fp8_dflash", "fp8_ddtree", as every fp8 sweep)."""
    c = dict(S=185000, H=8, layout="scattered", page=1)
    out = []
    for kv in ("auto", FP8_KV):
        extra, pre = ({}, "") if kv == "auto" else ({"kv_dtype": kv}, "fp8_")
        out += [dict(c, sweep=pre + "dflash", T=DFLASH_BLOCK, batch=b, algorithm="DFLASH", **extra) for b in (1, 8)]
        out += [dict(c, sweep=pre + "ddtree", T=D, batch=1, algorithm="DDTREE", budget=D - 1, **extra)
                for D in DDTREE_WIDTHS]
    return out


def production_case(cfg, pre: list[int], seed: int, kv: str, device: str = "cuda"):
    """The batch of a production config: DFLASH's causal block or DDTree's padded tree."""
    kw = dict(layout=cfg["layout"], page_size=cfg["page"], seed=seed, device=device, slack=0.25, kv_dtype=kv)
    if cfg["algorithm"] == "DFLASH":
        return dflash_case(pre, cfg["T"], cfg["H"], **kw)
    return ddtree_case(pre, cfg["budget"], cfg["H"], topk=2, tree_sizes=[3 * cfg["T"] // 4] * len(pre), **kw)


def traffic(prefix_lens: list[int], T: int, H: int, kv_dtype: str = "auto") -> dict:
    """What one call must move and compute at least, for its roofline (bytes, FLOPs).

    prefix_lens: S_b per request, each with T draft tokens and H heads; kv_dtype: make_case's
    ("auto" = bf16 pool, "fp8_e4m3"). kv_bytes: every prefix row once at the pool's row size
    (ROW_BYTES bf16, FP8_ROW_BYTES fp8) plus the draft rows of k_extend, bf16 whatever the pool;
    bytes: kv_bytes plus q read and o written (bf16, 576 + 512 per query row); flops: the QK
    (576) and PV (512) multiply-adds, 2 FLOPs each, over every query row and its S_b + T keys.
    """
    if kv_dtype not in POOL_ROW_BYTES:
        raise ValueError(f"kv_dtype: {kv_dtype!r} is not one of {sorted(POOL_ROW_BYTES)}")
    N = len(prefix_lens) * T
    kv_bytes = sum(prefix_lens) * POOL_ROW_BYTES[kv_dtype] + N * ROW_BYTES
    return {"kv_bytes": kv_bytes, "bytes": kv_bytes + N * H * (HEAD_DIM + V_DIM) * 2,
            "flops": sum(T * H * (s + T) * 2 * (HEAD_DIM + V_DIM) for s in prefix_lens)}


def roofline_us(nbytes: int, flops: int, ceil_gbps: float, ceil_tflops: float) -> float:
    """The roofline floor in microseconds: the bytes at the read ceiling (GB/s) or the FLOPs at
    the mma ceiling (TFLOP/s), whichever takes longer."""
    return max(nbytes / (ceil_gbps * 1e9), flops / (ceil_tflops * 1e12)) * 1e6


RAGGED = [185000, 120000, 65000, 30000, 150000, 8000, 100000, 45000]
# 32 requests evenly spread from 2k to 190k tokens (3.07 M in all), in a fixed shuffled order
MIXED32 = [2000 + (i * 13 % 32) * 188000 // 31 for i in range(32)]
# where the 64-row tier is timed too, next to the default tier
ROWS64_SWEEPS = {"S", "T", "H", "batch"}


def prefixes(cfg) -> list[int]:
    if cfg["batch"] == 32:
        return MIXED32
    return RAGGED[: cfg["batch"]] if cfg["batch"] > 1 else [cfg["S"]]


def bench(sgl, ceil_gbps: float, ceil_tflops: float, quick: bool, save=None) -> list[dict]:
    """Every config of `bench_configs`, the slowest last; `save(rows)` after each config so a
    run cut short still leaves its rows."""
    rows = []
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    for cfg in bench_configs(quick):
        pre = prefixes(cfg)
        T, H = cfg["T"], cfg["H"]
        kv = cfg.get("kv_dtype", "auto")
        fp8 = kv == FP8_KV
        prod = "algorithm" in cfg
        seed = zlib.crc32(repr(sorted(cfg.items())).encode()) % 10_000
        case = production_case(cfg, pre, seed, kv) if prod else \
            make_case(pre, [T] * len(pre), H, tree="ddtree", layout=cfg["layout"], page_size=cfg["page"], seed=seed,
                      device="cuda", slack=0.25, kv_dtype=kv)
        tr = traffic(pre, T, H, kv)
        kv_bytes, nbytes, flops = tr["kv_bytes"], tr["bytes"], tr["flops"]
        copies = [case]
        while len(copies) < 4 and len(copies) * kv_bytes < 3 * l2:
            copies.append(_clone_case(case))
        N = case.q.shape[0]
        rows_total = sum(T * H for _ in pre)
        roof_us = roofline_us(nbytes, flops, ceil_gbps, ceil_tflops)
        outs = [torch.empty(N, H, 512, dtype=torch.bfloat16, device="cuda") for _ in copies]
        lses = [torch.empty(N, H, dtype=torch.float32, device="cuda") for _ in copies]
        auto = pick_tier(H, N, len(pre), T, kv_fp8=fp8)
        impls = {"flash": [lambda c=c, o=o, l=l: verify_attention(*c.args(), **c.kwargs(), out=o, lse_out=l,
                                                                  max_draft_len=T)
                           for c, o, l in zip(copies, outs, lses)]}
        if not fp8 and cfg["sweep"] in ROWS64_SWEEPS and auto != 0 and T <= 64 and not prod:   # bf16 only
            impls["flash_rows64"] = [lambda c=c, o=o, l=l: verify_attention(*c.args(), out=o, lse_out=l, tier=0)
                                     for c, o, l in zip(copies, outs, lses)]
        if cfg["sweep"] == "S" and cfg["S"] <= 16384:   # fits in L2: also timed with L2 flushed before each call
            impls["flash_l2flushed"] = impls["flash"][:1]
        if sgl is not None and fp8 and all(cfg[k] == v for k, v in FP8_SGLANG_AT.items()):
            from .validate import sglang_extend   # with the pool's descales
            impls["sglang_extend"] = [lambda c=c, o=o: sglang_extend(sgl, c, o) for c, o in zip(copies, outs)]
        if sgl is not None and not fp8 and (T <= 64 or prod) and cfg["sweep"] != "batch32":
            from ..sglang.baseline import run_extend, run_verify_mla
            impls["sglang_extend"] = [lambda c=c, o=o: run_extend(sgl, c, o, page_size=cfg["page"])
                                      for c, o in zip(copies, outs)]
            try:      # SGLang's own gate decides; T = 64 asks for more shared memory than an H200 has
                ok = run_verify_mla(sgl, case, outs[0])
            except Exception as e:
                log(f"bench T={T}: sglang_verify_mla cannot run: {type(e).__name__}: {str(e)[:120]}")
                ok = False
            if ok:
                impls["sglang_verify_mla"] = [lambda c=c, o=o: run_verify_mla(sgl, c, o) for c, o in zip(copies, outs)]
        # fp32 logits + bf16 probabilities fit; its bf16 matmuls cannot read an fp8 pool (not at the
        # production shapes: SGLang's kernel is their baseline, and their time is kept short)
        if not fp8 and not prod and rows_total * (max(pre) + T) * 6 < 4e9:
            impls["torch_naive"] = [lambda c=c, o=o: naive_torch(c, o) for c, o in zip(copies, outs)]
        for name, fns in impls.items():
            try:
                ms = time_flushed(fns[0]) if name == "flash_l2flushed" else time_calls(fns, graph=name != "torch_naive")
            except Exception as e:   # one impl failing must not lose the run
                log(f"bench {cfg['sweep']} S={cfg['S']} T={T} H={H} {name}: FAILED {e!r}")
                continue
            us = ms * 1e3
            rows.append({"sweep": cfg["sweep"], "S": sum(pre), "prefix_lens": pre, "T": T, "H": H,
                         "layout": cfg["layout"], "page_size": cfg["page"], "batch": len(pre), "impl": name,
                         "tier": {"flash": auto, "flash_l2flushed": auto, "flash_rows64": 0}.get(name),
                         "kv_dtype": KV_DTYPE_NAMES[kv],
                         "time_us": us, "bytes": nbytes, "flops": flops, "GBps": nbytes / (us * 1e-6) / 1e9,
                         "TFLOPs": flops / (us * 1e-6) / 1e12, "roofline_us": roof_us, "frac_roofline": roof_us / us,
                         **(production_fields(case) if prod else {})})
            log(f"bench {cfg['sweep']:10s} S={sum(pre):>7} T={T:>4} H={H:>3} {cfg['layout']:10s} p{cfg['page']:<2} "
                f"{name:18s} {us:12.1f} us  {rows[-1]['GBps']:8.0f} GB/s  {roof_us / us:6.1%} of roofline")
        del copies, outs, lses, impls, case
        torch.cuda.empty_cache()
        if save:
            save(rows)
    return rows


def production_fields(case) -> dict:
    """What a production row says of its shape: the algorithm, DFLASH's block (causal, no mask),
    DDTree's budget, topk and the real nodes of each request's padded tree."""
    m = case.meta
    if m["algorithm"] == "DFLASH":
        return {"algorithm": "DFLASH", "block": m["block"], "causal": True}
    return {"algorithm": "DDTREE", "budget": m["budget"], "topk": m["topk"], "tree_sizes": m["tree_sizes"],
            "causal": False}


def _clone_case(case):
    import copy
    c = copy.copy(case)
    for f in ("q", "kv_cache", "kv_indptr", "kv_indices", "k_extend", "custom_mask", "mask_indptr", "qo_indptr"):
        v = getattr(case, f)
        setattr(c, f, v.clone() if v is not None else None)
    return c

