"""EXTEND over a cached prefix on the GPU (issue 26; `gpu_run --stages extend`): causal new tokens
(custom_mask None, as TritonAttnBackend.forward_extend passes an EXTEND), T = 1 to 16,384 per
request over prefixes up to 180k, ragged batches with empty prefixes, few and many heads, on a
bf16 pool and on SGLang's fp8_e4m3 pool (v_scale != k_scale in some); outputs NaN-poisoned
before every call.

References (extend_reference.py): a request whose float64 logits fit ORACLE_BYTES is checked
whole against the float64 oracle; a bigger one at SAMPLED of its new tokens (every head) against
float64, and at every row against fp32 matmuls (TF32 off), whose own error on the sampled rows
must stay below FP32_REF_TOL. Each case runs at its default tier (pick_tier from its longest new
length, as the plugin passes SGLang's max_extend_len) and at other tiers: all of the pool's
tiers where the case is cheap (CHEAP_FLOPS), one other large tier where not. Beside it, SGLang's
extend_attention_fwd on the same inputs (recorded, not gated; on the fp8 pool it rounds q and P
to e4m3), and the MASK_CASES with their causal mask spelled out, which must give the kernel's
outputs bit for bit (the schedule cuts a causal item at its last token's key, verify_common.cuh).
"""
from __future__ import annotations

import time

import torch

from ..checks import V_DIM
from ..inputs import make_case
from ..ops import FP8_TIERS, TIERS, pick_tier, verify_attention
from ..reference import verify_attention_reference
from .extend_reference import reference_fp32, reference_rows, request_span, sample_tokens
from .timing import log, rel_err

KIND = "extend-validation"
FP8_KV = "fp8_e4m3"
ORACLE_BYTES = 2 << 30     # a request's float64 logits the whole-request oracle may hold
SAMPLED = 48               # new tokens per big request checked against float64
FP32_REF_TOL = 1e-4        # the fp32 reference against float64, on the sampled rows
CHEAP_FLOPS = 1e12         # a case below this runs at every tier of its pool
SEED0 = 26_000
DEVICE = "cuda"            # the tests run the glue on the CPU with a stand-in kernel


def _ragged32() -> tuple[list[int], list[int]]:
    """32 requests: prefixes 0..20,000 (every fourth empty), 1..300 new tokens, seeded."""
    g = torch.Generator().manual_seed(SEED0)
    S = [0 if i % 4 == 0 else int(x) for i, x in enumerate(torch.randint(1, 20001, (32,), generator=g))]
    return S, [int(x) for x in torch.randint(1, 301, (32,), generator=g)]


# name, prefix lengths S, new lengths T; heads 8, scattered page-1 pool unless said
CASES = (
    dict(name="t1_s180k", S=[180000], T=[1]),
    dict(name="t2_s180k", S=[180000], T=[2]),
    dict(name="t16_s180k", S=[180000], T=[16]),
    dict(name="t256_s180k", S=[180000], T=[256]),
    dict(name="t2048_s100k", S=[100000], T=[2048], layout="fragmented"),
    dict(name="t8192_s180k", S=[180000], T=[8192], v_factor=0.5),
    # SGLang's prefill CUDA graph (breakable, the default on CUDA) pins MLA, so a first chunk comes too
    dict(name="t8192_s0", S=[0], T=[8192]),
    dict(name="chunk3_t8192_s16k_p64", S=[16384], T=[8192], layout="fragmented", page=64),
    dict(name="t16384_s64k", S=[65536], T=[16384]),          # --chunked-prefill-size 16384
    dict(name="ragged", S=[150000, 0, 3000, 0, 40000, 7, 180000, 1], T=[1, 300, 2048, 5, 16, 2, 512, 4096],
         v_factor=3.0),
    dict(name="ragged32", S=_ragged32()[0], T=_ragged32()[1], layout="fragmented", page=16),
    # one head: few row tiles, so splits lie wholly among the new tokens (rows with no key there)
    dict(name="new_splits_h1", S=[1000], T=[256], H=1),
    dict(name="new_splits_s0_h1", S=[0], T=[1024], H=1),
    dict(name="h16", S=[30000], T=[512], H=16),
    dict(name="h128", S=[8000], T=[300], H=128),
)
# each with its causal mask spelled out: one split per request (more row tiles than CTAs), and
# one head, where splits lie wholly among the new tokens (the schedule's one-key items)
MASK_CASES = (dict(name="causal_mask_spelled_out", S=[20000, 0, 5000], T=[2048, 700, 33]),
              dict(name="causal_mask_spelled_out_h1", S=[1000, 0], T=[256, 300], H=1))
KV_DTYPES = ("auto", FP8_KV)


def _sync() -> None:
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def build(spec: dict, kv_dtype: str, seed: int):
    """The case of `spec` on pool kv_dtype (fp8: v_scale = k_scale * spec's v_factor, default 1)."""
    case = make_case(spec["S"], spec["T"], spec.get("H", 8), layout=spec.get("layout", "scattered"),
                     page_size=spec.get("page", 1), seed=seed, device=DEVICE, causal=True, slack=0.25,
                     kv_dtype=kv_dtype)
    if kv_dtype == FP8_KV:
        case.v_scale = case.k_scale * spec.get("v_factor", 1.0)
    return case


def causal_flops(S: list[int], T: list[int], H: int) -> float:
    """QK (576) and PV (512) multiply-adds over the keys each new token sees (S_b + t + 1)."""
    return float(sum(H * (t * s + t * (t + 1) // 2) * 2 * (576 + 512) for s, t in zip(S, T)))


def tiers_for(case, kv_dtype: str, default: int) -> list[int]:
    """The default tier first, then every tier of the pool (cheap case) or one other large one."""
    pool = FP8_TIERS if kv_dtype == FP8_KV else tuple(TIERS)
    m = case.meta
    if causal_flops(m["prefix_lens"], m["draft_lens"], m["heads"]) < CHEAP_FLOPS:
        return [default] + [t for t in pool if t != default]
    return [default] + [next(t for t in (8, 6, 4) if t in pool and t != default)]


def references(case, seed: int) -> dict:
    """o_all [N, H, 512] / lse_all [N, H] float32 (float64 oracle where a request fits, else fp32),
    and the float64 rows: idx (flat token ids), o64, lse64; plus the fp32 reference's own error
    on the sampled rows (None when no request was sampled)."""
    N, H = case.q.shape[0], case.q.shape[1]
    o_all = torch.empty(N, H, V_DIM, dtype=torch.float32, device=DEVICE)
    lse_all = torch.empty(N, H, dtype=torch.float32, device=DEVICE)
    idx, o64, l64, ref_errs = [], [], [], []
    oracle_reqs = sampled_reqs = 0
    for b in range(case.qo_indptr.shape[0] - 1):
        q0, T, k0, S = request_span(case, b)
        if T == 0:
            continue
        if T * H * (S + T) * 8 <= ORACLE_BYTES:
            ro, rl = verify_attention_reference(
                case.q[q0:q0 + T], case.kv_cache, torch.tensor([0, S], device=DEVICE), case.kv_indices[k0:k0 + S],
                case.k_extend[q0:q0 + T], None, None, torch.tensor([0, T], device=DEVICE), case.sm_scale,
                **case.kwargs())
            toks = torch.arange(T, device=DEVICE)
            o_all[q0:q0 + T], lse_all[q0:q0 + T] = ro.float(), rl.float()
            oracle_reqs += 1
        else:
            toks = torch.tensor(sample_tokens(T, SAMPLED, seed + b), device=DEVICE)
            ro, rl = reference_rows(case, b, toks)
            o_all[q0:q0 + T], lse_all[q0:q0 + T] = reference_fp32(case, b)
            ref_errs.append(max(rel_err(o_all[q0 + toks], ro), rel_err(lse_all[q0 + toks], rl)))
            sampled_reqs += 1
        idx.append(toks + q0); o64.append(ro); l64.append(rl)
    ref_err = max(ref_errs) if ref_errs else None
    return {"o_all": o_all, "lse_all": lse_all, "idx": torch.cat(idx), "o64": torch.cat(o64),
            "lse64": torch.cat(l64), "fp32_ref_rel_err": ref_err, "requests_oracle": oracle_reqs,
            "requests_sampled": sampled_reqs}


def run_tier(case, ref: dict, tier: int, tol: float) -> tuple[dict, torch.Tensor, torch.Tensor]:
    """One kernel call at `tier` on NaN-poisoned outputs, against both references: (row, o, lse)."""
    N, H = case.q.shape[0], case.q.shape[1]
    o = torch.full((N, H, V_DIM), float("nan"), dtype=torch.bfloat16, device=DEVICE)
    lse = torch.full((N, H), float("nan"), dtype=torch.float32, device=DEVICE)
    _sync()
    t0 = time.perf_counter()
    verify_attention(*case.args(), **case.kwargs(), out=o, lse_out=lse, max_draft_len=max(case.meta["draft_lens"]),
                     tier=tier)
    _sync()
    ms = (time.perf_counter() - t0) * 1e3
    unwritten = int(torch.isnan(o).sum()) + int(torch.isnan(lse).sum())
    i = ref["idx"]
    row = {"tier": tier, "ms": round(ms, 3), "unwritten": unwritten,
           "rel_err": rel_err(o[i], ref["o64"]), "lse_rel_err": rel_err(lse[i], ref["lse64"]),
           "rel_err_all": rel_err(o, ref["o_all"]), "lse_rel_err_all": rel_err(lse, ref["lse_all"])}
    row["pass"] = unwritten == 0 and max(row["rel_err"], row["lse_rel_err"], row["rel_err_all"],
                                         row["lse_rel_err_all"]) <= tol
    return row, o, lse


def check(spec: dict, kv_dtype: str, seed: int, tol: float, sgl) -> dict:
    """One case: its tiers against the references, SGLang's kernel beside it."""
    t0 = time.time()
    case = build(spec, kv_dtype, seed)
    m = case.meta
    default = pick_tier(m["heads"], case.q.shape[0], len(m["draft_lens"]), max(m["draft_lens"]),
                        kv_fp8=kv_dtype == FP8_KV)
    ref = references(case, seed)
    row = {"name": spec["name"], "kv_dtype": kv_dtype, "prefix_lens": m["prefix_lens"], "new_lens": m["draft_lens"],
           "heads": m["heads"], "layout": m["layout"], "page_size": m["page_size"], "seed": seed,
           "flops": causal_flops(m["prefix_lens"], m["draft_lens"], m["heads"]),
           "checked_rows_float64": int(ref["idx"].numel()) * m["heads"],
           "requests_oracle": ref["requests_oracle"], "requests_sampled": ref["requests_sampled"],
           "fp32_ref_rel_err": ref["fp32_ref_rel_err"], **case.kwargs()}
    row["tiers"] = []
    ours = None
    for t in tiers_for(case, kv_dtype, default):
        r, o, _ = run_tier(case, ref, t, tol)
        row["tiers"].append(r)
        ours = o if ours is None else ours
    ref_ok = ref["fp32_ref_rel_err"] is None or ref["fp32_ref_rel_err"] <= FP32_REF_TOL
    row["pass"] = ref_ok and all(r["pass"] for r in row["tiers"])
    if sgl is not None:
        from .validate import sglang_extend   # forward_extend's call, with the pool's descales
        theirs = torch.full_like(ours, float("nan"))
        try:   # SGLang's kernel failing is recorded, not ours to fail
            sglang_extend(sgl, case, theirs)
            _sync()
            row["sglang"] = {"rel_err_all": rel_err(theirs, ref["o_all"]),
                             "rel_err_vs_ours": rel_err(ours, theirs.double()),
                             "unwritten": int(torch.isnan(theirs).sum())}
        except Exception as e:
            row["sglang"] = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
    row["seconds"] = round(time.time() - t0, 1)
    worst = max(row["tiers"], key=lambda r: r["rel_err_all"])
    log(f"extend {kv_dtype:8s} {spec['name']:24s} tiers {[r['tier'] for r in row['tiers']]} pass={row['pass']} "
        f"worst {worst['rel_err_all']:.2e} (float64 rows {max(r['rel_err'] for r in row['tiers']):.2e}) "
        f"t{default} {row['tiers'][0]['ms']:.1f} ms" + (f", SGLang {row['sglang'].get('rel_err_all', 'error')}"
                                                        if "sglang" in row else "") + f", {row['seconds']} s")
    del case, ref, ours
    if DEVICE == "cuda":
        torch.cuda.empty_cache()
    return row


def spelled_out_mask(case) -> tuple[torch.Tensor, torch.Tensor]:
    """The causal FULL_MASK of a causal case (custom_mask, mask_indptr): each request's [T, S + T]
    block, every prefix key and new tokens 0..t visible to new token t."""
    blocks, sizes = [], [0]
    for S, T in zip(case.meta["prefix_lens"], case.meta["draft_lens"]):
        block = torch.ones(T, S + T, dtype=torch.uint8, device=DEVICE)
        block[:, S:] = torch.ones(T, T, dtype=torch.uint8, device=DEVICE).tril()
        blocks.append(block.flatten())
        sizes.append(T * (S + T))
    return torch.cat(blocks), torch.tensor(sizes, dtype=torch.int64).cumsum(0).to(DEVICE)


def check_mask_identity(spec: dict, kv_dtype: str, seed: int) -> dict:
    """A MASK_CASES entry through the kernel with custom_mask None and with the same causal mask
    spelled out, at its default tier and one other: outputs and LSE equal (torch.equal)."""
    case = build(spec, kv_dtype, seed)
    m = case.meta
    mask, mask_indptr = spelled_out_mask(case)
    T = max(m["draft_lens"])
    default = pick_tier(m["heads"], case.q.shape[0], len(m["draft_lens"]), T, kv_fp8=kv_dtype == FP8_KV)
    rows = []
    for tier in (default, next(t for t in (6, 8) if t != default)):
        outs = []
        for cm, mi in ((None, None), (mask, mask_indptr)):
            args = list(case.args())
            args[5], args[6] = cm, mi
            o = torch.full((case.q.shape[0], m["heads"], V_DIM), float("nan"), dtype=torch.bfloat16, device=DEVICE)
            lse = torch.full((case.q.shape[0], m["heads"]), float("nan"), dtype=torch.float32, device=DEVICE)
            verify_attention(*args, **case.kwargs(), out=o, lse_out=lse, max_draft_len=T, tier=tier)
            outs.append((o, lse))
        _sync()
        (o1, l1), (o2, l2) = outs
        rows.append({"tier": tier, "equal": bool(torch.equal(o1, o2) and torch.equal(l1, l2)),
                     "max_abs_diff": float((o1.float() - o2.float()).abs().max()),
                     "nan": bool(torch.isnan(o1).any() or torch.isnan(l1).any())})
    log(f"extend {kv_dtype:8s} {spec['name']}: {rows}")
    return {"name": spec["name"], "kv_dtype": kv_dtype, "prefix_lens": m["prefix_lens"],
            "new_lens": m["draft_lens"], "heads": m["heads"], "tiers": rows,
            "pass": all(r["equal"] and not r["nan"] for r in rows)}


def validate_extend(tol: float, sgl) -> dict:
    """Every CASES entry on both pools, then the MASK_CASES on both: the body of extend-validation-*.json."""
    t0 = time.time()
    cases, identity = [], []
    for kv_dtype in KV_DTYPES:
        for i, spec in enumerate(CASES):
            cases.append(check(spec, kv_dtype, SEED0 + 100 * i + (50 if kv_dtype == FP8_KV else 0), tol, sgl))
        identity += [check_mask_identity(spec, kv_dtype, SEED0 + 9000 + j) for j, spec in enumerate(MASK_CASES)]
    checks = [(c["kv_dtype"], r) for c in cases for r in c["tiers"]]
    worst = max(cases, key=lambda c: (not c["pass"], max(r["rel_err_all"] for r in c["tiers"])))
    return {"kind": KIND, "tolerance": tol, "fp32_ref_tolerance": FP32_REF_TOL, "sampled_new_tokens": SAMPLED,
            "n_cases": len(cases), "n_checks": len(checks), "n_failing_checks": sum(not r["pass"] for _, r in checks),
            "worst": {"name": worst["name"], "kv_dtype": worst["kv_dtype"],
                      "rel_err_all": max(r["rel_err_all"] for r in worst["tiers"]),
                      "rel_err_float64_rows": max(r["rel_err"] for r in worst["tiers"])},
            "mask_identity": identity,
            "all_pass": all(c["pass"] for c in cases) and all(x["pass"] for x in identity),
            "cases": cases, "seconds": round(time.time() - t0, 1)}


def summary_lines(v: dict) -> list[str]:
    """The table gpu_run prints last: one line per case, then the verdict."""
    out = []
    for c in v["cases"]:
        d = c["tiers"][0]
        sg = c.get("sglang")
        out.append(f"extend {c['kv_dtype']:8s} {c['name']:24s} t{d['tier']} {d['ms']:9.2f} ms  err "
                   f"{max(r['rel_err_all'] for r in c['tiers']):.2e} (f64 rows "
                   f"{max(r['rel_err'] for r in c['tiers']):.2e}) tiers {len(c['tiers'])} pass={c['pass']}"
                   + (f"  SGLang {sg.get('rel_err_all', float('nan')):.2e}" if sg else ""))
    out.append(f"extend validation: {v['n_cases']} cases, {v['n_checks']} checks, all_pass={v['all_pass']}, "
               f"worst {v['worst']['rel_err_all']:.2e} ({v['worst']['kv_dtype']} {v['worst']['name']}), mask "
               f"identity {[x['pass'] for x in v['mask_identity']]}, {v['seconds']:.0f} s")
    return out
