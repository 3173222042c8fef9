"""Benchmark sweeps around the centre point (S = 185k, T = 8, H = 8, page 1 scattered,
batch 1): our kernel at its default tier (and the 64-row tier beside it), SGLang's kernels and
naive torch, each row against the roofline of the ceilings measured in the same run."""
from __future__ import annotations

import zlib

import torch

from ..checks import ROW_BYTES
from ..inputs import make_case
from ..ops import pick_tier, verify_attention
from .timing import log, time_calls, time_flushed


def naive_torch(case, o):
    """Gather the prefix, dense bf16 attention with the mask, one request at a time."""
    kvp, qop = case.kv_indptr.tolist(), case.qo_indptr.tolist()
    mp = case.custom_mask is not None
    for b in range(len(qop) - 1):
        q0, q1, k0, k1 = qop[b], qop[b + 1], kvp[b], kvp[b + 1]
        T, S = q1 - q0, k1 - k0
        keys = torch.cat([case.kv_cache[case.kv_indices[k0:k1], 0], case.k_extend[q0:q1, 0]])
        qq = case.q[q0:q1].reshape(-1, 576)
        logits = (qq @ keys.T).float().view(T, -1, S + T) * case.sm_scale
        m0 = int(case.mask_indptr[b]) if mp else 0
        tree = case.custom_mask[m0: m0 + T * (S + T)].view(T, S + T)[:, S:].bool() if mp else \
            torch.ones(T, T, dtype=torch.bool, device=qq.device).tril()
        logits[:, :, S:].masked_fill_(~tree[:, None, :], float("-inf"))
        o[q0:q1] = (torch.softmax(logits, -1).to(torch.bfloat16).view(-1, S + T) @ keys[:, :512]).view(T, -1, 512)


def bench_configs(quick: bool):
    c = dict(S=185000, T=8, H=8, layout="scattered", page=1, batch=1)
    out = [dict(c, sweep="S", S=s) for s in (4096, 16384, 65536, 131072, 185000, 262144)]
    out += [dict(c, sweep="T", T=t) for t in (1, 4, 8, 16, 32, 64, 256, 1024)]
    out += [dict(c, sweep="H", H=h) for h in (8, 16, 64)]
    out += [dict(c, sweep="layout", layout=l, page=p) for l, p in
            (("contiguous", 1), ("scattered", 1), ("scattered", 64), ("fragmented", 1))]
    out += [dict(c, sweep="batch", batch=8), dict(c, sweep="batch32", batch=32)]
    if quick:
        out = [x for x in out if x["T"] <= 64 and x["S"] in (16384, 185000)]
    return sorted(out, key=lambda x: x["T"] >= 256)   # the multi-second calls last


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
        case = make_case(pre, [T] * len(pre), H, tree="ddtree", layout=cfg["layout"], page_size=cfg["page"],
                         seed=zlib.crc32(repr(sorted(cfg.items())).encode()) % 10_000,
                         device="cuda", slack=0.25)
        kv_bytes = sum(s + T for s in pre) * ROW_BYTES
        copies = [case]
        while len(copies) < 4 and len(copies) * kv_bytes < 3 * l2:
            copies.append(_clone_case(case))
        N = case.q.shape[0]
        rows_total = sum(T * H for _ in pre)
        flops = sum(T * H * (s + T) * 2 * (576 + 512) for s in pre)
        nbytes = kv_bytes + N * H * (576 + 512) * 2
        roof_us = max(nbytes / (ceil_gbps * 1e9), flops / (ceil_tflops * 1e12)) * 1e6
        outs = [torch.empty(N, H, 512, dtype=torch.bfloat16, device="cuda") for _ in copies]
        lses = [torch.empty(N, H, dtype=torch.float32, device="cuda") for _ in copies]
        auto = pick_tier(H, N, len(pre), T)
        impls = {"flash": [lambda c=c, o=o, l=l: verify_attention(*c.args(), out=o, lse_out=l, max_draft_len=T)
                           for c, o, l in zip(copies, outs, lses)]}
        if cfg["sweep"] in ROWS64_SWEEPS and auto != 0 and T <= 64:
            impls["flash_rows64"] = [lambda c=c, o=o, l=l: verify_attention(*c.args(), out=o, lse_out=l, tier=0)
                                     for c, o, l in zip(copies, outs, lses)]
        if cfg["sweep"] == "S" and cfg["S"] <= 16384:   # fits in L2: also timed with L2 flushed before each call
            impls["flash_l2flushed"] = impls["flash"][:1]
        if sgl is not None and T <= 64 and cfg["sweep"] != "batch32":
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
        if rows_total * (max(pre) + T) * 6 < 4e9:    # fp32 logits + bf16 probabilities fit
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
                         "time_us": us, "bytes": nbytes, "flops": flops, "GBps": nbytes / (us * 1e-6) / 1e9,
                         "TFLOPs": flops / (us * 1e-6) / 1e12, "roofline_us": roof_us, "frac_roofline": roof_us / us})
            log(f"bench {cfg['sweep']:6s} S={sum(pre):>7} T={T:>4} H={H:>3} {cfg['layout']:10s} p{cfg['page']:<2} "
                f"{name:18s} {us:12.1f} us  {rows[-1]['GBps']:8.0f} GB/s  {roof_us / us:6.1%} of roofline")
        del copies, outs, lses, impls, case
        torch.cuda.empty_cache()
        if save:
            save(rows)
    return rows


def _clone_case(case):
    import copy
    c = copy.copy(case)
    for f in ("q", "kv_cache", "kv_indptr", "kv_indices", "k_extend", "custom_mask", "mask_indptr", "qo_indptr"):
        v = getattr(case, f)
        setattr(c, f, v.clone() if v is not None else None)
    return c

