"""Correctness on the GPU: random and edge-case configurations against the float64 oracle
(outputs NaN-poisoned before every call), SGLang's extend_attention_fwd on the same inputs,
and CUDA-graph replay with new lengths, slots and trees against eager."""
from __future__ import annotations

import time

import torch

from ..inputs import make_case, random_case
from ..ops import TIERS, get_workspace, pick_tier, verify_attention
from ..reference import verify_attention_reference
from .timing import capture_graph, log, rel_err


def run_checked(case, ref, tol: float, tier=None) -> dict:
    """One kernel call on NaN-poisoned outputs against the oracle's (o, lse) `ref`."""
    N, H = case.q.shape[0], case.q.shape[1]
    o = torch.full((N, H, 512), float("nan"), dtype=torch.bfloat16, device="cuda")
    lse = torch.full((N, H), float("nan"), dtype=torch.float32, device="cuda")
    verify_attention(*case.args(), out=o, lse_out=lse, max_draft_len=max(case.meta["draft_lens"]), tier=tier)
    nan = int(torch.isnan(o).sum()) + int(torch.isnan(lse).sum())
    e, el = rel_err(o, ref[0]), rel_err(lse, ref[1])
    return {"tier": pick_tier(H, N, len(case.meta["draft_lens"]), max(case.meta["draft_lens"])) if tier is None
            else tier, "rel_err": e, "lse_rel_err": el, "nan": nan > 0, "unwritten": nan,
            "pass": nan == 0 and e <= tol and el <= tol}


def check_case(case, tol: float, other_tiers=()) -> dict:
    """The case at its default tier (the row), and at each of `other_tiers` (row["tiers"])."""
    ref = verify_attention_reference(*case.args())
    m = case.meta
    row = {"prefix_lens": m["prefix_lens"], "draft_lens": m["draft_lens"], "heads": m["heads"], "tree": m["tree"],
           "layout": m["layout"], "page_size": m["page_size"], "causal": m["causal"], "seed": m["seed"],
           **run_checked(case, ref, tol)}
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


def validate(n_random: int, tol: float, sgl) -> dict:
    cases, sglang_rows = [], []
    t0 = time.time()
    for i in range(n_random):
        big = i % 10 == 0
        case = random_case(i, max_prefix=8192 if big else 2048, max_draft=64 if big else 24,
                           max_batch=8, max_heads=128 if big else 16, device="cuda")
        tiers = list(TIERS)
        r = check_case(case, tol, other_tiers=(tiers[i % len(tiers)],))   # every other tier sees a sixth of them
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
    worst = max(cases, key=lambda c: (not c["pass_all_tiers"], c["rel_err"]))
    checks = [(c["tier"], c["rel_err"], c["pass"]) for c in cases] + \
             [(t["tier"], t["rel_err"], t["pass"]) for c in cases for t in c["tiers"]]
    by_tier = {str(t): {"rows_per_tile": TIERS[t], "checks": sum(1 for x in checks if x[0] == t),
                        "failing": sum(1 for x in checks if x[0] == t and not x[2]),
                        "worst_rel_err": max((x[1] for x in checks if x[0] == t), default=None)} for t in TIERS}
    return {"kind": "validation", "n_cases": len(cases), "n_checks": len(checks), "tolerance": tol,
            "all_pass": all(c["pass_all_tiers"] for c in cases), "by_tier": by_tier,
            "worst": worst, "cases": cases, "sglang": {"cases": sglang_rows}}


def compare_sglang(sgl, case) -> dict:
    from ..sglang.baseline import run_extend
    N, H = case.q.shape[0], case.q.shape[1]
    ours = torch.full((N, H, 512), float("nan"), dtype=torch.bfloat16, device="cuda")
    theirs = torch.full_like(ours, float("nan"))
    verify_attention(*case.args(), out=ours, max_draft_len=max(case.meta["draft_lens"]))
    run_extend(sgl, case, theirs, page_size=case.meta["page_size"])
    ro, _ = verify_attention_reference(*case.args())
    return {"rel_err_vs_sglang": rel_err(ours, theirs.double()), "sglang_rel_err": rel_err(theirs, ro),
            "heads": H, "draft_lens": case.meta["draft_lens"], "prefix_lens": case.meta["prefix_lens"]}


# (heads, max_draft_len passed, tier forced): 64 rows per request with no length hint (rows64d);
# 8, 16 and 32 rows as SGLang's static draft length selects the small tiers and rows32d; and
# the tiers only a forced choice runs (rows64, the small tier's 32-row tiles)
GRAPH_CONFIGS = ((8, None, None), (1, 8, None), (2, 8, None), (4, 8, None), (8, None, 0), (4, 8, 4))


def graph_check(tol: float) -> dict:
    """Capture once per tier with static buffers, replay with new lengths, slots and trees."""
    rows = []
    for H, mdl, tier in GRAPH_CONFIGS:
        rows += _graph_check_one(tol, H, mdl, tier)
    return {"cases": rows, "all_pass": all(r["pass"] for r in rows)}


def _graph_check_one(tol: float, H: int, max_draft_len, tier) -> list[dict]:
    bs, T, smax = 4, 8, 4096
    pool_slots = 4 * (smax + 64) * 2 + 64 * 4
    dev = "cuda"
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
                      seed=5000 + seed, device=dev, slack=0.2)
        assert c.kv_cache.shape[0] <= pool_slots
        pool.fill_(float("nan"))
        pool[: c.kv_cache.shape[0]] = c.kv_cache
        q.copy_(c.q); kext.copy_(c.k_extend)
        kv_indptr.copy_(c.kv_indptr); kv_indices[: c.kv_indices.numel()] = c.kv_indices
        mask[: c.custom_mask.numel()] = c.custom_mask; mask_indptr.copy_(c.mask_indptr)
        return c

    def call():
        verify_attention(q, pool, kv_indptr, kv_indices, kext, mask, mask_indptr, qo_indptr, 192 ** -0.5,
                         out=o, lse_out=lse, workspace=ws, max_draft_len=max_draft_len, tier=tier)

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
                                           192 ** -0.5)
        e = rel_err(replay_o, ro)
        rows.append({"seed": seed, "heads": H, "tier": pick_tier(H, bs * T, bs, max_draft_len) if tier is None
                     else tier, "prefix_lens": c.meta["prefix_lens"], "tree": c.meta["tree"],
                     "page_size": c.meta["page_size"], "max_abs_diff_vs_eager": diff, "rel_err": e,
                     "nan": bool(torch.isnan(replay_o).any() or torch.isnan(replay_lse).any()),
                     "pass": diff == 0.0 and e <= tol})
    return rows

