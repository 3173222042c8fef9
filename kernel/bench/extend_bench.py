"""EXTEND over a cached prefix, timed (issue 26; `gpu_run --stages extend-bench`): one request of
T = 1, 2, 16, 256 and 8,192 causal new tokens over a 185k prefix, H = 8, on a bf16 and an fp8_e4m3
pool, our kernel at its default tier (and one other large tier beside it) and SGLang's
extend_attention_fwd as forward_extend calls it for EXTEND; then every chunk of a 185,000-token
prompt prefilled in 8,192-token chunks (chunk k: 8,192 k cached tokens, the first with none, as
SGLang's prefill CUDA graph sends it to the absorbed path too), ours only, at the default tier and
at the other large tier: their sum is the kernel-level time of one layer's prefill.

Rows carry the fields of the bench sweeps (kernel/bench/sweeps.py), each against the roofline of
the ceilings measured in the same run; bytes as the sweeps count them (traffic: every prefix row
once, the new rows, q and o); FLOPs of the causal block only (new token t sees S + t + 1 keys),
which is what the kernel computes since the schedule stops a row tile at its last token's key.
"""
from __future__ import annotations

import copy

import torch

from ..ops import pick_tier, verify_attention
from .extend_validate import FP8_KV, causal_flops
from .sweeps import KV_DTYPE_NAMES, roofline_us, traffic
from .timing import log, time_calls

KIND = "extend-bench"
S_CENTRE, H = 185000, 8
NEW_TOKENS = (1, 2, 16, 256, 8192)
PROMPT, CHUNK = 185000, 8192
KV_DTYPES = ("auto", FP8_KV)
# the other large tier timed beside the default, per pool: rows32d next to rows64d on bf16, the
# small tier's fp8 32-row tiles next to rows64d's fp8 copy (the fp8 default since 2026-12-03;
# extend-bench-h200-20261203T1724.json still timed the copy twice, as flash and flash_t8)
ALT_TIER = {"auto": 6, FP8_KV: 4}


def prefill_chunks(prompt: int = PROMPT, chunk: int = CHUNK) -> list[tuple[int, int]]:
    """(cached S, new T) of each chunk of a `prompt`-token prefill in `chunk`-token chunks."""
    return [(s, min(chunk, prompt - s)) for s in range(0, prompt, chunk)]


def sub_case(case, S: int, T: int):
    """One request of `case`'s pool: its first S prefix slots and first T new tokens (views)."""
    c = copy.copy(case)
    dev = case.q.device
    c.q, c.k_extend = case.q[:T], case.k_extend[:T]
    c.kv_indices = case.kv_indices[:S]
    c.kv_indptr = torch.tensor([0, S], dtype=torch.int32, device=dev)
    c.qo_indptr = torch.tensor([0, T], dtype=torch.int32, device=dev)
    c.meta = dict(case.meta, prefix_lens=[S], draft_lens=[T])
    return c


def _row(sweep, S, T, kv, impl, tier, us, ceil_gbps, ceil_tflops):
    tr = traffic([S], T, H, kv)
    flops = causal_flops([S], [T], H)
    roof = roofline_us(tr["bytes"], flops, ceil_gbps, ceil_tflops)
    return {"sweep": sweep, "S": S, "prefix_lens": [S], "T": T, "H": H, "layout": "scattered", "page_size": 1,
            "batch": 1, "impl": impl, "tier": tier, "kv_dtype": KV_DTYPE_NAMES[kv], "mode": "extend",
            "time_us": us, "bytes": tr["bytes"], "flops": flops, "GBps": tr["bytes"] / (us * 1e-6) / 1e9,
            "TFLOPs": flops / (us * 1e-6) / 1e12, "roofline_us": roof, "frac_roofline": roof / us}


def _time(fn) -> float:
    return time_calls([fn]) * 1e3


def bench_extend(sgl, ceil_gbps: float, ceil_tflops: float, save=None) -> dict:
    """The rows, and per pool the prefill's chunk count and summed time. `save(doc)` after each
    group of rows, so a run cut short keeps what it measured."""
    from ..inputs import make_case
    rows, prefill = [], {}
    doc = {"rows": rows, "prefill_185k": prefill}
    for kv in KV_DTYPES:
        fp8 = kv == FP8_KV
        pre = "fp8_" if fp8 else ""
        case = make_case([S_CENTRE], [CHUNK], H, layout="scattered", seed=2600 + fp8, device="cuda", causal=True,
                         slack=0.1, kv_dtype=kv)
        o = torch.empty(CHUNK, H, 512, dtype=torch.bfloat16, device="cuda")
        lse = torch.empty(CHUNK, H, dtype=torch.float32, device="cuda")
        for T in NEW_TOKENS:
            c = sub_case(case, S_CENTRE, T)
            tier = pick_tier(H, T, 1, T, kv_fp8=fp8)
            impls = {"flash": (tier, lambda c=c, t=tier: verify_attention(*c.args(), **c.kwargs(), out=o[:T],
                                                                          lse_out=lse[:T], max_draft_len=T, tier=t))}
            if T >= 16 and ALT_TIER[kv] != tier:
                a = ALT_TIER[kv]
                impls[f"flash_t{a}"] = (a, lambda c=c, t=a: verify_attention(*c.args(), **c.kwargs(), out=o[:T],
                                                                             lse_out=lse[:T], max_draft_len=T, tier=t))
            if sgl is not None:
                from .validate import sglang_extend
                impls["sglang_extend"] = (None, lambda c=c: sglang_extend(sgl, c, o[:T]))
            for impl, (t, fn) in impls.items():
                try:
                    us = _time(fn)
                except Exception as e:   # one impl failing must not lose the run
                    log(f"extend-bench {kv} T={T} {impl}: FAILED {e!r}")
                    continue
                rows.append(_row(f"{pre}extend_T", S_CENTRE, T, kv, impl, t, us, ceil_gbps, ceil_tflops))
                r = rows[-1]
                log(f"extend-bench {kv:8s} S={S_CENTRE} T={T:>5} {impl:14s} {us:12.1f} us {r['TFLOPs']:6.1f} TF/s "
                    f"{r['frac_roofline']:6.1%} of roofline")
            if save:
                save(doc)
        for impl in ("flash", f"flash_t{ALT_TIER[kv]}"):   # the default tier, then the other large one
            total, flops = 0.0, 0.0
            for S, T in prefill_chunks():
                c = sub_case(case, S, T)
                tier = pick_tier(H, T, 1, T, kv_fp8=fp8) if impl == "flash" else ALT_TIER[kv]
                us = _time(lambda c=c, t=tier, T=T: verify_attention(*c.args(), **c.kwargs(), out=o[:T],
                                                                     lse_out=lse[:T], max_draft_len=T, tier=t))
                rows.append(_row(f"{pre}extend_prefill185k", S, T, kv, impl, tier, us, ceil_gbps, ceil_tflops))
                total += us
                flops += rows[-1]["flops"]
            p = prefill[f"{KV_DTYPE_NAMES[kv]} {impl}"] = {
                "kv_dtype": KV_DTYPE_NAMES[kv], "impl": impl, "chunks": len(prefill_chunks()), "chunk_tokens": CHUNK,
                "prompt_tokens": PROMPT, "time_ms_per_layer": total / 1e3, "flops": flops,
                "TFLOPs": flops / (total * 1e-6) / 1e12}
            log(f"extend-bench {kv:8s} {impl}: prefill of {PROMPT} tokens in {CHUNK}-token chunks: "
                f"{total / 1e3:.1f} ms a layer, {p['TFLOPs']:.0f} TF/s")
        if save:
            save(doc)
        del case, o, lse
        torch.cuda.empty_cache()
    return doc


def summary_lines(doc: dict) -> list[str]:
    out = [f"{r['sweep']:22s} S={r['S']:>7} T={r['T']:>5} {r['kv_dtype']:9s} t{r['tier']} {r['impl']:14s} "
           f"{r['time_us']:12.1f} us {r['TFLOPs']:6.1f} TF/s {r['frac_roofline']:6.1%}"
           for r in doc["rows"] if r["sweep"].endswith("extend_T")]
    out += [f"extend prefill {p['prompt_tokens']} tokens ({p['kv_dtype']} {p['impl']}, {p['chunks']} chunks of "
            f"{p['chunk_tokens']}): {p['time_ms_per_layer']:.1f} ms a layer, {p['TFLOPs']:.0f} TF/s"
            for p in doc["prefill_185k"].values()]
    return out
