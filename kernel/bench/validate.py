"""Correctness on the GPU: random and edge-case configurations against the float64 oracle
(outputs NaN-poisoned before every call), SGLang's extend_attention_fwd on the same inputs,
and CUDA-graph replay with new lengths, slots and trees against eager; on a bf16 pool and on
SGLang's fp8_e4m3 pool (the oracle reads the dequantized pool: kernel/FP8.md); and the
production algorithm's shapes on both pools (`validate_production`: DDTree's padded trees,
DFLASH's causal blocks), each case labelled with its family."""
from __future__ import annotations

import time

import torch

from ..fp8 import FP8, FP8_NAN_BYTES
from ..inputs import ddtree_case, dflash_case, make_case, random_case
from ..ops import FP8_TIERS, TIERS, get_workspace, pick_tier, verify_attention
from ..reference import verify_attention_reference
from .timing import capture_graph, log, rel_err

FP8_KV = "fp8_e4m3"
# fp8 random cases draw their configurations from other seeds than the bf16 ones (more shapes
# seen in all); far from the bf16 cases' 0..n, the graph check's 5000+ and the extremes' 9xx
FP8_SEED0 = 100_000
FP8_SGLANG_CASES = 40
# q's factor (and sm_scale's divisor: the same logits) in the case whose |q| pass 2^14, where the
# fp8 kernels' f16 q takes a scale 2^-qe (e4m3.cuh's q_f16_exponent); randn q stay far below it
LOUD_Q = 2.0 ** 14


def loud_q(case):
    """`case` with q times LOUD_Q and sm_scale over it (in place; the same logits), returned."""
    case.q.mul_(LOUD_Q)
    case.sm_scale /= LOUD_Q
    return case


# k_scale per fp8 case, cycled: None = make_case's default, max |row| / 448 (the whole e4m3
# range, as a calibrated checkpoint scale gives); 1.0 = SGLang's scale when the checkpoint has
# none (randn rows in e4m3's low range, the smallest ones subnormal or zero); 1/16 (mid range)
FP8_K_SCALES = (None, 1.0, 0.0625, None)
# v_scale / k_scale, cycled on a longer period so every k_scale meets every ratio: 1 is one
# checkpoint kv_scale (SGLang copies it to both); the others are separate k and v scales,
# legal although V was written with k_scale (kernel/FP8.md)
FP8_V_FACTORS = (1.0, 0.5, 3.0)
# fixed for a graph's life: the scales are launch arguments captured with it, as a layer's are
FP8_GRAPH_SCALES = {"k_scale": 0.0625, "v_scale": 0.03125}


def random_sizes(i: int) -> dict:
    """random_case's size limits for case i: every tenth case big (long prefixes, up to 128
    heads and 64 draft tokens), the rest small; the same for the bf16 and the fp8 cases."""
    big = i % 10 == 0
    return dict(max_prefix=8192 if big else 2048, max_draft=64 if big else 24, max_batch=8,
                max_heads=128 if big else 16)


def fp8_plan(i: int, default_tier: int, tiers=FP8_TIERS) -> dict:
    """fp8 case i's settings, a pure function of i and its default tier: k_scale (None: make_case's
    default), v_factor (v_scale = k_scale * v_factor), nan_byte (the e4m3fn NaN byte in every
    pool slot no prefix token owns) and tier, the second tier it runs at: i rotates over the
    tiers other than the default, so each case runs at two different tiers and every other
    tier gets its share of each default's cases."""
    if default_tier not in tiers:
        raise ValueError(f"default_tier: {default_tier!r} is not one of the fp8 tiers {list(tiers)}")
    others = [t for t in tiers if t != default_tier]
    nk = len(FP8_K_SCALES)
    return {"k_scale": FP8_K_SCALES[i % nk], "v_factor": FP8_V_FACTORS[(i // nk) % len(FP8_V_FACTORS)],
            "nan_byte": FP8_NAN_BYTES[(i // (nk * len(FP8_V_FACTORS))) % len(FP8_NAN_BYTES)],
            # i // nk: the second tier must not move in step with k_scale (the same period)
            "tier": others[(i // nk) % len(others)]}


def default_tier(case) -> int:
    """The tier verify_attention picks for the case (max_draft_len given, as SGLang gives it)."""
    T = case.meta["draft_lens"]
    tier = pick_tier(case.q.shape[1], case.q.shape[0], len(T), max(T), kv_fp8=bool(case.kwargs()))
    if case.kwargs() and tier not in FP8_TIERS:   # verify_attention's fp8 stand-in for rows64
        return 8                                  # (MLA_VERIFY_LARGE_TIER=0)
    return tier


def poison_pool(case, byte: int) -> None:
    """Every slot of the case's fp8 pool that no prefix token owns holds NaN byte `byte`
    (make_case writes FP8_NAN_BYTES[0]; 0xff is e4m3fn's other NaN, the negative one)."""
    raw = case.kv_cache.view(torch.uint8)
    free = torch.ones(raw.shape[0], dtype=torch.bool, device=raw.device)
    free[case.kv_indices] = False
    raw[free] = byte


def with_fp8_plan(case, plan: dict):
    """The fp8 case re-drawn with plan's k_scale (the pool's bytes depend on it), its v_scale set
    to k_scale * v_factor (read-time only: V is written with k_scale) and its NaN byte."""
    m = case.meta
    if plan["k_scale"] is not None:
        case = make_case(m["prefix_lens"], m["draft_lens"], m["heads"], tree=m["tree"], layout=m["layout"],
                         page_size=m["page_size"], seed=m["seed"], device=case.q.device, causal=m["causal"],
                         kv_dtype=FP8_KV, k_scale=plan["k_scale"])
    case.v_scale = case.k_scale * plan["v_factor"]
    if plan["nan_byte"] != FP8_NAN_BYTES[0]:
        poison_pool(case, plan["nan_byte"])
    return case


def run_checked(case, ref, tol: float, tier=None) -> dict:
    """One kernel call on NaN-poisoned outputs against the oracle's (o, lse) `ref`."""
    N, H = case.q.shape[0], case.q.shape[1]
    o = torch.full((N, H, 512), float("nan"), dtype=torch.bfloat16, device=case.q.device)
    lse = torch.full((N, H), float("nan"), dtype=torch.float32, device=case.q.device)
    verify_attention(*case.args(), **case.kwargs(), out=o, lse_out=lse, max_draft_len=max(case.meta["draft_lens"]),
                     tier=tier)
    nan = int(torch.isnan(o).sum()) + int(torch.isnan(lse).sum())
    e, el = rel_err(o, ref[0]), rel_err(lse, ref[1])
    # rows that see no key (a padding node over an empty prefix): lse -inf exactly where the
    # oracle's is (rel_err compares the finite ones only)
    inf_ok = bool(torch.equal(torch.isneginf(lse).cpu(), torch.isneginf(ref[1]).cpu()))
    return {"tier": default_tier(case) if tier is None else tier, "rel_err": e, "lse_rel_err": el, "nan": nan > 0,
            "unwritten": nan, "lse_inf_match": inf_ok, "pass": nan == 0 and inf_ok and e <= tol and el <= tol}


def check_case(case, tol: float, other_tiers=()) -> dict:
    """The case at its default tier (the row), and at each of `other_tiers` (row["tiers"]).
    An fp8 case's row also says kv_dtype, k_scale and v_scale."""
    ref = verify_attention_reference(*case.args(), **case.kwargs())
    m = case.meta
    row = {"prefix_lens": m["prefix_lens"], "draft_lens": m["draft_lens"], "heads": m["heads"], "tree": m["tree"],
           "layout": m["layout"], "page_size": m["page_size"], "causal": m["causal"], "seed": m["seed"],
           **run_checked(case, ref, tol)}
    if case.kwargs():
        row.update(kv_dtype=m["kv_dtype"], k_scale=case.k_scale, v_scale=case.v_scale)
    row["tiers"] = [run_checked(case, ref, tol, t) for t in other_tiers if t != row["tier"]]
    row["pass_all_tiers"] = row["pass"] and all(t["pass"] for t in row["tiers"])
    return row


def extreme_cases():
    """The edges of the kernel's range, one case each."""
    g = torch.Generator().manual_seed(7)
    big_bs = [int(x) for x in torch.randint(0, 200, (256,), generator=g)]
    yield make_case([3000], [1024], 8, tree="ddtree", layout="scattered", seed=901, device="cuda")
    yield make_case([5000], [256], 16, tree="random", layout="scattered", page_size=16, seed=902, device="cuda")
    yield make_case([8000], [8], 128, tree="chain", layout="fragmented", seed=903, device="cuda", causal=True)
    yield make_case([2000, 100], [64, 3], 128, tree="ddtree", layout="fragmented", page_size=64, seed=904, device="cuda")
    yield make_case(big_bs, [int(x) for x in torch.randint(1, 9, (256,), generator=g)], 8, tree="random",
                    layout="scattered", seed=905, device="cuda")
    yield make_case([65536], [8], 8, tree="ddtree", layout="scattered", page_size=64, seed=906, device="cuda")
    yield make_case([0, 0, 0], [4, 1, 7], 8, tree="star", layout="contiguous", seed=907, device="cuda")
    yield make_case([1], [1], 1, tree="chain", layout="scattered", seed=908, device="cuda")
    yield make_case([185000], [8], 8, tree="ddtree", layout="scattered", seed=909, device="cuda")


def fp8_extreme_cases():
    """The edges of the fp8 path, one case each: the deployment's 185k prefix, page 64 at 64k,
    128 heads, a batch of 256, a 1024-token tree; default and separate k/v scales; q past 2^14 (the
    kernels' f16 q then takes a scale 2^-qe: rowsd loads Q again for it), its logits the usual ones."""
    g = torch.Generator().manual_seed(17)
    big_bs = [int(x) for x in torch.randint(0, 200, (256,), generator=g)]
    fp8 = dict(device="cuda", kv_dtype=FP8_KV)

    def split(case, v_factor):   # a separate v_scale (read-time only: V was written with k_scale)
        case.v_scale = case.k_scale * v_factor
        return case
    yield make_case([185000], [8], 8, tree="ddtree", layout="scattered", seed=951, **fp8)
    yield make_case([65536], [8], 8, tree="ddtree", layout="scattered", page_size=64, seed=952, k_scale=1.0,
                    v_scale=0.5, **fp8)
    yield split(make_case([8000], [8], 128, tree="chain", layout="fragmented", seed=953, causal=True, **fp8), 3.0)
    yield make_case([2000, 100], [64, 3], 128, tree="ddtree", layout="fragmented", page_size=64, seed=954, **fp8)
    yield split(make_case(big_bs, [int(x) for x in torch.randint(1, 9, (256,), generator=g)], 8, tree="random",
                          layout="scattered", seed=955, **fp8), 0.5)
    yield make_case([3000], [1024], 8, tree="ddtree", layout="scattered", seed=956, k_scale=0.0625, **fp8)
    yield loud_q(make_case([3000, 40], [8, 17], 8, tree="random", layout="scattered", seed=957, **fp8))


def summarise(cases: list[dict], tiers: dict, tol: float) -> dict:
    """The headline of checked case rows (check_case's): worst case, checks per tier in `tiers`
    ({tier: rows per tile}), all_pass over every tier each case ran at."""
    worst = max(cases, key=lambda c: (not c["pass_all_tiers"], c["rel_err"]))
    checks = [(c["tier"], c["rel_err"], c["pass"]) for c in cases] + \
             [(t["tier"], t["rel_err"], t["pass"]) for c in cases for t in c["tiers"]]
    by_tier = {str(t): {"rows_per_tile": rows, "checks": sum(1 for x in checks if x[0] == t),
                        "failing": sum(1 for x in checks if x[0] == t and not x[2]),
                        "worst_rel_err": max((x[1] for x in checks if x[0] == t), default=None)}
               for t, rows in tiers.items()}
    return {"n_cases": len(cases), "n_checks": len(checks), "tolerance": tol,
            "all_pass": all(c["pass_all_tiers"] for c in cases), "by_tier": by_tier, "worst": worst}


def validate(n_random: int, tol: float, sgl) -> dict:
    """The bf16 pool: n_random random cases (each at its default tier and one other, rotating),
    the extremes at every tier, SGLang's extend_attention_fwd on the first 80. The JSON body
    of validation-*.json (the fp8 part goes under "fp8": validate_fp8)."""
    cases, sglang_rows = [], []
    t0 = time.time()
    for i in range(n_random):
        case = random_case(i, **random_sizes(i), device="cuda")
        tiers = list(TIERS)
        r = check_case(case, tol, other_tiers=(tiers[i % len(tiers)],))   # each tier: 1 / len(TIERS) of them
        r["id"] = i
        cases.append(r)
        if sgl is not None and i < 80:
            sglang_rows.append(dict(id=i, **compare_sglang(sgl, case)))
        if (i + 1) % 100 == 0:
            log(f"validate: {i + 1}/{n_random} cases, {sum(not c['pass'] for c in cases)} failing, "
                f"{time.time() - t0:.0f}s")
    for j, case in enumerate(extreme_cases()):
        r = check_case(case, tol, other_tiers=tuple(TIERS))
        r["id"] = n_random + j
        r["extreme"] = True
        cases.append(r)
        log(f"validate extreme {j}: rel_err {r['rel_err']:.2e} nan {r['nan']}")
    return {"kind": "validation", **summarise(cases, TIERS, tol), "cases": cases, "sglang": {"cases": sglang_rows},
            "seconds": round(time.time() - t0, 1)}


def validate_fp8(n_random: int, tol: float, sgl, n_sglang: int = FP8_SGLANG_CASES) -> dict:
    """SGLang's fp8_e4m3 pool: n_random random cases of random_sizes, each with fp8_plan's scales,
    NaN byte and second tier; the fp8 extremes at every fp8 tier; SGLang's extend_attention_fwd
    on the first n_sglang (its errors recorded, not gated: it rounds q and P to e4m3).
    The "fp8" section of validation-*.json."""
    cases, sglang_rows = [], []
    t0 = time.time()
    for i in range(n_random):
        case = random_case(FP8_SEED0 + i, **random_sizes(i), device="cuda", kv_dtype=FP8_KV)
        plan = fp8_plan(i, default_tier(case))
        case = with_fp8_plan(case, plan)
        r = check_case(case, tol, other_tiers=(plan["tier"],))
        r.update(id=i, nan_byte=plan["nan_byte"])
        cases.append(r)
        if sgl is not None and i < n_sglang:
            sglang_rows.append(dict(id=i, **compare_sglang(sgl, case)))
        if (i + 1) % 100 == 0:
            log(f"validate fp8: {i + 1}/{n_random} cases, {sum(not c['pass'] for c in cases)} failing, "
                f"{time.time() - t0:.0f}s")
    for j, case in enumerate(fp8_extreme_cases()):
        r = check_case(case, tol, other_tiers=FP8_TIERS)
        r.update(id=n_random + j, extreme=True, nan_byte=FP8_NAN_BYTES[0], q_abs_max=float(case.q.abs().max()))
        cases.append(r)
        log(f"validate fp8 extreme {j}: rel_err {r['rel_err']:.2e} nan {r['nan']}")
    return {"kv_dtype": FP8_KV, **summarise(cases, {t: TIERS[t] for t in FP8_TIERS}, tol), "cases": cases,
            "sglang": {"cases": sglang_rows}, "seconds": round(time.time() - t0, 1)}


# The production algorithm's shapes (issue 24). DDTree (SGLang pull request #29907): D = budget + 1
# nodes per request, each tree 1..D nodes and padded to D (topk 1: a chain, 2: a tree); DFLASH: a
# causal block of --speculative-dflash-block-size tokens, no mask. Batches 1..48, prefixes up to
# PRODUCTION_MAX_PREFIX (an empty one in every batch of more than one), 8 heads (one TP-8 rank of
# Kimi-K2); every case at every tier of its pool.
DDTREE_BUDGETS = (7, 16, 32, 64)
DFLASH_BLOCKS = (8, 16, 32)
PRODUCTION_BATCHES = (1, 8, 48)
PRODUCTION_MAX_PREFIX = 3000
PRODUCTION_SEED0 = 200_000
PRODUCTION_HEADS = 8


def production_plan() -> list[dict]:
    """Every production case's parameters, in order, a pure function (tests hold it): DDTree budgets
    x topk 1 and 2 (batch cycling through PRODUCTION_BATCHES; in a batch of several, sizes 1 and D
    forced in the first two requests, the rest drawn), then DFLASH blocks x every batch; ids from 0."""
    plan = []
    for i, (budget, topk) in enumerate((b, k) for b in DDTREE_BUDGETS for k in (1, 2)):
        plan.append(dict(family="ddtree", budget=budget, topk=topk, batch=PRODUCTION_BATCHES[i % 3]))
    for block in DFLASH_BLOCKS:
        for batch in PRODUCTION_BATCHES:
            plan.append(dict(family="dflash", block=block, batch=batch))
    for i, p in enumerate(plan):
        p["id"], p["seed"] = i, PRODUCTION_SEED0 + i
    return plan


def production_case(p: dict, kv_dtype: str = "auto", device: str = "cuda", max_prefix: int = PRODUCTION_MAX_PREFIX):
    """The case of one production_plan entry on a pool (`kv_dtype` as make_case's), on `device`;
    prefixes drawn in 0..max_prefix (the CPU tests draw the same structure with short ones)."""
    g = torch.Generator().manual_seed(p["seed"])
    prefix = [int(x) for x in torch.randint(0, max_prefix + 1, (p["batch"],), generator=g)]
    if p["batch"] > 1:
        prefix[-1] = 0                                   # a request with no prefix at all
    kw = dict(layout="scattered", seed=p["seed"], device=device, kv_dtype=kv_dtype)
    if p["family"] == "dflash":
        return dflash_case(prefix, p["block"], PRODUCTION_HEADS, **kw)
    D = p["budget"] + 1
    sizes = [int(x) for x in torch.randint(1, D + 1, (p["batch"],), generator=g)]
    if p["batch"] > 1:
        sizes[0] = 1                                     # the root alone: D - 1 padding nodes
        sizes[1] = D                                     # no padding
    if p["batch"] > 2:
        sizes[-1] = max(1, D // 2)                       # padding rows over an empty prefix
    return ddtree_case(prefix, p["budget"], PRODUCTION_HEADS, topk=p["topk"], tree_sizes=sizes, **kw)


def validate_production(tol: float, sgl, kv_dtypes=("auto", FP8_KV), plan=None, device: str = "cuda",
                        max_prefix: int = PRODUCTION_MAX_PREFIX) -> dict:
    """production_plan's cases (or `plan`'s) on each pool, at the default tier and every other tier
    of the pool, outputs NaN-poisoned; SGLang's extend_attention_fwd on the same inputs (recorded).
    Each row says its family ("ddtree" or "dflash"), pool and shape. The "production" section of
    validation-*.json."""
    rows, sglang_rows, by = [], [], {}
    t0 = time.time()
    for kv in kv_dtypes:
        tiers = FP8_TIERS if kv == FP8_KV else tuple(TIERS)
        for p in plan or production_plan():
            case = production_case(p, kv, device, max_prefix)
            r = check_case(case, tol, other_tiers=tiers)
            m = case.meta
            r.update(family=p["family"], id=p["id"], kv_dtype=KV_NAMES[kv],
                     **({"budget": m["budget"], "topk": m["topk"], "tree_sizes": m["tree_sizes"]}
                        if p["family"] == "ddtree" else {"block": m["block"]}))
            rows.append(r)
            if sgl is not None:
                sglang_rows.append(dict(id=p["id"], family=p["family"], kv_dtype=KV_NAMES[kv],
                                        **compare_sglang(sgl, case)))
            log(f"validate production {kv} {p['family']} id {p['id']}: rel_err {r['rel_err']:.2e}, "
                f"pass all tiers {r['pass_all_tiers']}")
    for r in rows:
        checks = [r] + r["tiers"]
        k = f"{r['family']}/{r['kv_dtype']}"
        s = by.setdefault(k, {"family": r["family"], "kv_dtype": r["kv_dtype"], "n_cases": 0, "n_checks": 0,
                              "failing": 0, "worst_rel_err": 0.0})
        s["n_cases"] += 1
        s["n_checks"] += len(checks)
        s["failing"] += sum(not c["pass"] for c in checks)
        s["worst_rel_err"] = max(s["worst_rel_err"], max(c["rel_err"] for c in checks))
    return {"all_pass": all(r["pass_all_tiers"] for r in rows), "tolerance": tol, "n_cases": len(rows),
            "n_checks": sum(s["n_checks"] for s in by.values()), "families": by, "cases": rows,
            "sglang": {"cases": sglang_rows}, "seconds": round(time.time() - t0, 1)}


KV_NAMES = {"auto": "bfloat16", FP8_KV: FP8_KV}


def sglang_extend(sgl, case, o: torch.Tensor) -> None:
    """SGLang's extend_attention_fwd as TritonAttnBackend.forward_extend calls it in TARGET_VERIFY,
    with the case's descales: kernel.sglang.baseline.run_extend passes 1.0 for both (a bf16 pool),
    an fp8 pool needs the layer's k_scale_float / v_scale_float (FP8.md, triton_backend.py:1835)."""
    from ..sglang.baseline import run_extend
    if not case.kwargs():
        return run_extend(sgl, case, o, page_size=case.meta["page_size"])
    sgl.extend_attention_fwd(case.q, case.k_extend, case.k_extend[..., :512], o, case.kv_cache,
                             case.kv_cache[..., :512], case.qo_indptr, case.kv_indptr, case.kv_indices,
                             case.custom_mask, True, case.mask_indptr, int(max(case.meta["draft_lens"])),
                             case.k_scale, case.v_scale, sm_scale=case.sm_scale, logit_cap=0.0,
                             page_size=case.meta["page_size"])


def compare_sglang(sgl, case) -> dict:
    """Ours (default tier) and SGLang's extend_attention_fwd on the same inputs: SGLang's error
    against the float64 oracle and ours against SGLang's; an fp8 case adds ours against the
    oracle (rel_err) and its scales, side by side."""
    N, H = case.q.shape[0], case.q.shape[1]
    ours = torch.full((N, H, 512), float("nan"), dtype=torch.bfloat16, device="cuda")
    theirs = torch.full_like(ours, float("nan"))
    verify_attention(*case.args(), **case.kwargs(), out=ours, max_draft_len=max(case.meta["draft_lens"]))
    sglang_extend(sgl, case, theirs)
    ro, _ = verify_attention_reference(*case.args(), **case.kwargs())
    row = {"rel_err_vs_sglang": rel_err(ours, theirs.double()), "sglang_rel_err": rel_err(theirs, ro),
           "heads": H, "draft_lens": case.meta["draft_lens"], "prefix_lens": case.meta["prefix_lens"]}
    if case.kwargs():
        row.update(rel_err=rel_err(ours, ro), k_scale=case.k_scale, v_scale=case.v_scale,
                   page_size=case.meta["page_size"])
    return row


# (heads, max_draft_len passed, tier forced): 64 rows per request with no length hint (rows64d);
# 8, 16 and 32 rows as SGLang's static draft length selects the small tiers and rows32d; and
# the tiers only a forced choice runs (rows64, the small tier's 32-row tiles)
GRAPH_CONFIGS = ((8, None, None), (1, 8, None), (2, 8, None), (4, 8, None), (8, None, 0), (4, 8, 4), (8, 8, 9))
# the same for an fp8 pool, less the forced tiers that read bf16 only (rows64, rows64d_pair)
FP8_GRAPH_CONFIGS = tuple(c for c in GRAPH_CONFIGS if c[2] is None or c[2] in FP8_TIERS)


def graph_check(tol: float, kv_dtype: str = "auto") -> dict:
    """Capture once per tier with static buffers, replay with new lengths, slots and trees;
    kv_dtype "auto" (bf16 pool) or "fp8_e4m3" (FP8_GRAPH_CONFIGS, FP8_GRAPH_SCALES)."""
    rows = []
    for H, mdl, tier in GRAPH_CONFIGS if kv_dtype == "auto" else FP8_GRAPH_CONFIGS:
        rows += _graph_check_one(tol, H, mdl, tier, kv_dtype)
    return {"cases": rows, "all_pass": all(r["pass"] for r in rows)}


def _graph_check_one(tol: float, H: int, max_draft_len, tier, kv_dtype: str = "auto") -> list[dict]:
    bs, T, smax = 4, 8, 4096
    pool_slots = 4 * (smax + 64) * 2 + 64 * 4
    dev = "cuda"
    fp8 = kv_dtype == FP8_KV
    scales = FP8_GRAPH_SCALES if fp8 else {}
    if fp8:   # SGLang's storage: uint8 bytes viewed as e4m3fn; unowned slots hold the NaN byte
        raw = torch.full((pool_slots, 1, 576), FP8_NAN_BYTES[0], dtype=torch.uint8, device=dev)
        pool = raw.view(FP8)
    else:
        pool = torch.randn(pool_slots, 1, 576, device=dev).to(torch.bfloat16)
    q = torch.empty(bs * T, H, 576, dtype=torch.bfloat16, device=dev)
    kext = torch.empty(bs * T, 1, 576, dtype=torch.bfloat16, device=dev)
    kv_indptr = torch.zeros(bs + 1, dtype=torch.int32, device=dev)
    kv_indices = torch.zeros(bs * smax, dtype=torch.int64, device=dev)
    qo_indptr = torch.arange(0, (bs + 1) * T, T, dtype=torch.int64, device=dev)   # graph form: int64
    mask = torch.zeros(bs * T * (smax + T), dtype=torch.uint8, device=dev)
    mask_indptr = torch.zeros(bs + 1, dtype=torch.int64, device=dev)
    o = torch.empty(bs * T, H, 512, dtype=torch.bfloat16, device=dev)
    lse = torch.empty(bs * T, H, dtype=torch.float32, device=dev)
    ws = get_workspace(dev)

    def load(seed):
        g = torch.Generator().manual_seed(seed)
        pre = [int(x) for x in torch.randint(1, smax + 1, (bs,), generator=g)]
        c = make_case(pre, [T] * bs, H, tree=["ddtree", "random", "star", "chain"][seed % 4],
                      layout=["scattered", "fragmented"][seed % 2], page_size=[1, 16, 64][seed % 3],
                      seed=5000 + seed, device=dev, slack=0.2, **(dict(kv_dtype=kv_dtype, **scales) if fp8 else {}))
        assert c.kv_cache.shape[0] <= pool_slots
        if fp8:
            raw.fill_(FP8_NAN_BYTES[0])
            raw[: c.kv_cache.shape[0]] = c.kv_cache.view(torch.uint8)
        else:
            pool.fill_(float("nan"))
            pool[: c.kv_cache.shape[0]] = c.kv_cache
        q.copy_(c.q); kext.copy_(c.k_extend)
        kv_indptr.copy_(c.kv_indptr); kv_indices[: c.kv_indices.numel()] = c.kv_indices
        mask[: c.custom_mask.numel()] = c.custom_mask; mask_indptr.copy_(c.mask_indptr)
        return c

    def call():
        verify_attention(q, pool, kv_indptr, kv_indices, kext, mask, mask_indptr, qo_indptr, 192 ** -0.5,
                         **scales, out=o, lse_out=lse, workspace=ws, max_draft_len=max_draft_len, tier=tier)

    load(0)
    g = capture_graph(call)
    rows = []
    for seed in range(1, 7):
        c = load(seed)
        o.fill_(float("nan")); lse.fill_(float("nan"))
        g.replay()
        torch.cuda.synchronize()
        replay_o, replay_lse = o.clone(), lse.clone()
        o.fill_(float("nan"))
        call()
        diff = float((replay_o.float() - o.float()).abs().max())
        ro, _ = verify_attention_reference(q, pool, kv_indptr, kv_indices, kext, mask, mask_indptr, qo_indptr,
                                           192 ** -0.5, **scales)
        e = rel_err(replay_o, ro)
        rows.append({"seed": seed, "heads": H, "tier": pick_tier(H, bs * T, bs, max_draft_len, kv_fp8=fp8) if tier is None
                     else tier, "prefix_lens": c.meta["prefix_lens"], "tree": c.meta["tree"],
                     "page_size": c.meta["page_size"], "max_abs_diff_vs_eager": diff, "rel_err": e,
                     "nan": bool(torch.isnan(replay_o).any() or torch.isnan(replay_lse).any()),
                     "pass": diff == 0.0 and e <= tol, **(dict(kv_dtype=kv_dtype, **scales) if fp8 else {})})
    return rows
