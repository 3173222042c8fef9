"""Benchmark sweeps around the centre point (S = 185k, T = 8, H = 8, page 1 scattered,
batch 1): our kernel, SGLang's kernels and naive torch, each row against the roofline of
the ceilings measured in the same run; and the stage-dropping diagnostics."""
from __future__ import annotations

import zlib

import torch

from ..inputs import make_case
from ..ops import get_workspace, verify_attention
from .timing import log, time_calls

ROW_BYTES = 576 * 2


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
    out += [dict(c, sweep="batch", batch=8)]
    if quick:
        out = [x for x in out if x["T"] <= 64 and x["S"] in (16384, 185000)]
    return sorted(out, key=lambda x: x["T"] >= 256)   # the multi-second calls last


RAGGED = [185000, 120000, 65000, 30000, 150000, 8000, 100000, 45000]


def bench(sgl, ceil_gbps: float, ceil_tflops: float, quick: bool, save=None) -> list[dict]:
    """Every config of `bench_configs`, the slowest last; `save(rows)` after each config so a
    run cut short still leaves its rows."""
    rows = []
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    for cfg in bench_configs(quick):
        pre = RAGGED[: cfg["batch"]] if cfg["batch"] > 1 else [cfg["S"]]
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
        impls = {"flash": [lambda c=c, o=o, l=l: verify_attention(*c.args(), out=o, lse_out=l)
                           for c, o, l in zip(copies, outs, lses)]}
        if sgl is not None and T <= 64:
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
                ms = time_calls(fns, graph=name != "torch_naive")
            except Exception as e:   # one impl failing must not lose the run
                log(f"bench {cfg['sweep']} S={cfg['S']} T={T} H={H} {name}: FAILED {e!r}")
                continue
            us = ms * 1e3
            rows.append({"sweep": cfg["sweep"], "S": sum(pre), "prefix_lens": pre, "T": T, "H": H,
                         "layout": cfg["layout"], "page_size": cfg["page"], "batch": len(pre), "impl": name,
                         "time_us": us, "bytes": nbytes, "flops": flops, "GBps": nbytes / (us * 1e-6) / 1e9,
                         "TFLOPs": flops / (us * 1e-6) / 1e12, "roofline_us": roof_us, "frac_roofline": roof_us / us})
            log(f"bench {cfg['sweep']:6s} S={sum(pre):>7} T={T:>4} H={H:>3} {cfg['layout']:10s} p{cfg['page']:<2} "
                f"{name:18s} {us:12.1f} us  {rows[-1]['GBps']:8.0f} GB/s  {roof_us / us:6.1%} of roofline")
        del copies, outs, lses, impls, case
        torch.cuda.empty_cache()
        if save:
            save(rows)
    return rows


def diagnostics(shapes=((185000, 8, 8), (185000, 1, 8), (185000, 32, 8), (16384, 8, 8))) -> list[dict]:
    """Where the time goes: the kernel with stages left out (1: no math, 2: no KV loads,
    4: no merge), timed like the benchmark. Differences place the cost without counters."""
    from ..ops import launch
    out = []
    for S, T, H in shapes:
        case = make_case([S], [T], H, tree="ddtree", layout="scattered", seed=77, device="cuda", slack=0.25)
        ws = get_workspace("cuda")
        o = torch.empty(case.q.shape[0], H, 512, dtype=torch.bfloat16, device="cuda")
        lse = torch.empty(case.q.shape[0], H, dtype=torch.float32, device="cuda")
        row = {"S": S, "T": T, "H": H}
        for mode in (0, 1, 2, 4, 5, 6):
            fn = lambda m=mode: launch(*case.args(), o, lse, ws.buffer, ws.target_ctas, ws.max_bs, mode=m)
            row[f"mode{mode}_us"] = time_calls([fn]) * 1e3
        log(f"diag S={S} T={T} H={H}: " + " ".join(f"{k}={v:.1f}" for k, v in row.items() if k.startswith("mode")))
        out.append(row)
        del case
        torch.cuda.empty_cache()
    return out


def _clone_case(case):
    import copy
    c = copy.copy(case)
    for f in ("q", "kv_cache", "kv_indptr", "kv_indices", "k_extend", "custom_mask", "mask_indptr", "qo_indptr"):
        v = getattr(case, f)
        setattr(c, f, v.clone() if v is not None else None)
    return c

