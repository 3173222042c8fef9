"""Generated measurement JSON for tests: the contract's schema, numbers from a toy speed model.

Every file says "fixture": true and names a fake GPU, so the notebooks refuse it outside smoke
mode and nobody can mistake it for a measurement. Written only into pytest tmp dirs.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

READ_GBPS, MMA_TFLOPS = 4000.0, 700.0
# Effective GB/s of the unique KV bytes per impl in the toy model (ours is a roofline fraction).
TOY_GBPS = {"sglang_extend": 6.0, "sglang_verify_mla": 180.0, "torch_naive": 25.0}
OURS_FRAC = {"contiguous": 0.62, "scattered": 0.58, "fragmented": 0.55}
TREES, LAYOUTS = ("chain", "star", "random", "ddtree"), ("contiguous", "scattered", "fragmented")


def header(kind: str, date: str) -> dict:
    return {"kind": kind, "gpu": "FIXTURE GPU (not measured)", "sms": 132, "driver": "0.0",
            "cuda": "0.0", "torch": "0.0", "commit": "f1x7u7e0000000", "date": date,
            "fixture": True}


def toy_tier(T: int, H: int) -> int:
    """The kernel's rule in the toy: the smallest small-tier tile that holds H*T query rows."""
    return next((t for t, rows in ((1, 8), (2, 16), (4, 32)) if H * T <= rows), 0)


def bench_row(rng, sweep, impl, S, T=8, H=8, layout="scattered", page_size=1, batch=1,
              kv_dtype=None) -> dict:
    """One bench row; bytes = unique KV bytes, flops = QK^T (576) + PV (512) for H*T rows.
    Ours carries its tier: the toy's small tier takes 0.6 of the rows64 time (flash_rows64 is
    ours with rows64 forced, flash_l2flushed ours 5 % slower). kv_dtype None: a row of a file
    before fp8 (no field, bf16); "fp8_e4m3": 576-byte rows, ours at half its fp8 roofline."""
    fp8 = kv_dtype == "fp8_e4m3"
    nbytes = S * 576 * (1 if fp8 else 2)
    flops = 2 * H * T * S * (576 + 512)
    roof = max(nbytes / READ_GBPS / 1e3, flops / MMA_TFLOPS / 1e6)
    tier = None
    if impl.startswith("flash"):
        tier = 0 if impl == "flash_rows64" else toy_tier(T, H)
        t = (roof / (0.5 if fp8 else OURS_FRAC[layout]) + 4.0) * (0.6 if tier else 1.0)
        t *= 1.05 if impl == "flash_l2flushed" else 1.0
    else:
        t = nbytes / TOY_GBPS[impl] / 1e3 * (H / 8) ** (impl == "sglang_extend")
    t *= float(rng.lognormal(0.0, 0.03))
    lens = [S // batch] * (batch - 1) + [S - (S // batch) * (batch - 1)]
    row = {"sweep": sweep, "S": S, "prefix_lens": lens, "T": T, "H": H, "layout": layout,
           "page_size": page_size, "batch": batch, "impl": impl, "tier": tier, "time_us": t,
           "bytes": nbytes, "flops": flops, "GBps": nbytes / t / 1e3,
           "TFLOPs": flops / t / 1e6, "roofline_us": roof, "frac_roofline": roof / t}
    return row if kv_dtype is None else {**row, "kv_dtype": kv_dtype}


def fp8_bench_rows(rng) -> list[dict]:
    """The fp8 pool's rows as kernel/bench/sweeps.py writes them: sweeps fp8_S, fp8_T,
    fp8_layout, fp8_batch around the centre (repeated), SGLang's extend path at the centre."""
    f = dict(kv_dtype="fp8_e4m3")
    rows = [bench_row(rng, "fp8_S", "flash", S, **f) for S in (16384, 65536, 185000)]
    rows += [bench_row(rng, "fp8_T", "flash", 185000, T=T, **f) for T in (1, 4, 8)]
    rows += [bench_row(rng, "fp8_layout", "flash", 185000, page_size=p, **f) for p in (1, 64)]
    rows += [bench_row(rng, "fp8_batch", "flash", 185000, batch=4, **f)]
    return rows + [bench_row(rng, "fp8_S", "sglang_extend", 185000, **f)]


def production_bench_rows(rng) -> list[dict]:
    """The production algorithm's rows as kernel/bench/sweeps.py writes them: DFLASH's causal block
    of 16 at batch 1 and 8, DDTree's padded trees at D = 17, 33, 65, both pools; SGLang's extend
    path beside them on bf16; each row naming its algorithm and shape."""
    rows = []
    for kv, pre in ((None, ""), ("fp8_e4m3", "fp8_")):
        impls = ("flash",) if kv else ("flash", "sglang_extend")
        for b in (1, 8):
            rows += [{**bench_row(rng, pre + "dflash", i, 185000 * b, T=16, batch=b, kv_dtype=kv),
                      "algorithm": "DFLASH", "block": 16, "causal": True} for i in impls]
        for D in (17, 33, 65):
            rows += [{**bench_row(rng, pre + "ddtree", i, 185000, T=D, kv_dtype=kv), "algorithm": "DDTREE",
                      "budget": D - 1, "topk": 2, "tree_sizes": [3 * D // 4], "causal": False} for i in impls]
    return rows


def bench_doc(date: str, seed: int = 0, fp8: bool = True) -> dict:
    rng = np.random.default_rng(seed)
    impls = ("flash", "sglang_extend", "sglang_verify_mla", "torch_naive")
    rows = []
    for S in (4096, 16384, 65536, 185000):
        rows += [bench_row(rng, "S", i, S) for i in impls]
    for T in (1, 4, 8, 16, 32):
        rows += [bench_row(rng, "T", i, 185000, T=T) for i in impls[:3]]
    for H in (8, 16, 32):
        rows += [bench_row(rng, "H", i, 185000, H=H) for i in impls[:3]]
    for layout in LAYOUTS:
        for page in (1, 16, 64):
            for S in (16384, 185000):
                rows += [bench_row(rng, "layout", i, S, layout=layout, page_size=page)
                         for i in impls]
    for b in (1, 2, 4):
        rows += [bench_row(rng, "batch", i, 185000, batch=b) for i in impls[:3]]
    # the variants of ours: rows64 forced where the default picked the small tier, L2 flushed
    # at the short prefixes; a mixed batch of 32 that only ours and naive PyTorch run
    rows += [bench_row(rng, "T", "flash_rows64", 185000, T=T) for T in (1, 4)]
    rows += [bench_row(rng, "S", "flash_l2flushed", S) for S in (4096, 16384)]
    rows += [bench_row(rng, "batch32", i, 3_000_000, batch=32) for i in ("flash", "torch_naive")]
    # drawn last, so the bf16 rows' numbers are the same with or without them
    rows += fp8_bench_rows(rng) if fp8 else []
    rows += production_bench_rows(rng) if fp8 else []   # drawn last too; files since issue 24 have them
    # what kernel.build reports per arch and tier; 240 registers at most so no test can mistake
    # it for real data
    variants = {"mla_verify_kernel": {"small_nt1": 100, "small_nt2": 130, "small_nt4": 200,
                                      "rows64": 240},
                "mla_verify_combine": {f"combine_r{r}": 64 for r in (8, 16, 32, 64)}}
    resources = [{"kernel": k, "arch": a, "variant": v, "registers": regs - (a == "sm_90"),
                  "spill_stores": 0, "spill_loads": 0, "stack": 0,
                  "smem_static": 6272 if k == "mla_verify_combine" else 0}
                 for a in ("sm_90", "sm_120") for k, vs in variants.items()
                 for v, regs in vs.items()]
    return {**header("bench", date), "l2_bytes": 50_000_000, "resources": resources,
            "ceilings": {"read_GBps": READ_GBPS, "mma_TFLOPs": MMA_TFLOPS}, "rows": rows}


def micro_doc(date: str, seed: int = 0, commit: str = "f1x7u7e0000000") -> dict:
    """Microbenchmark rows (stream per L2 option, mma, full) per shape and candidate tier (the
    sm_120 model has a file of its own: sm120_model_doc)."""
    rng = np.random.default_rng(seed)
    rows = []
    for S, T, H, tiers in ((185000, 1, 8, (1, 0)), (185000, 4, 8, (4, 1, 0)),
                           (185000, 8, 8, (4, 0)), (16384, 8, 8, (4, 0))):
        kv = (S + T) * 576 * 2
        for tier in tiers:
            rows_per_tile = {0: 64, 1: 8, 2: 16, 4: 32}[tier]
            base = {"S": S, "T": T, "H": H, "tier": tier, "rows_per_tile": rows_per_tile,
                    "tiles_per_cta": max(1, S // 16 // 132 * max(1, T * H // rows_per_tile))}
            frac = (0.9 if tier else 0.7) / max(1, T * H // rows_per_tile)
            for opt in (("plain",) if tier == 0 else ("evict_first", "plain")):
                f = frac * (1.0 if opt == "evict_first" else 0.97)
                rows.append({**base, "stage": "stream", "option": opt,
                             "time_us": kv / (f * READ_GBPS) / 1e3, "GBps": f * READ_GBPS,
                             "frac_read_ceiling": f})
            mma_us = float(rng.uniform(20, 40)) * T ** 0.5 * (1 if tier else 2)
            rows.append({**base, "stage": "mma", "time_us": mma_us,
                         "clk_per_tile": mma_us * 1980 / base["tiles_per_cta"]})
            full = max(kv / (frac * READ_GBPS) / 1e3, mma_us) + 5.0
            rows.append({**base, "stage": "full", "time_us": full, "no_merge_us": full - 5.0,
                         "merge_us": 5.0,
                         "clk_per_tile": (full - 5.0) * 1980 / base["tiles_per_cta"]})
    return {**header("microbench", date), "commit": commit, "clock_mhz": {"sm_now": 1980.0},
            "clock_assumed_mhz": 1980.0, "rows": rows,
            "ceilings": {"read_GBps": READ_GBPS, "mma_TFLOPs": MMA_TFLOPS}}


def backend_doc(date: str, seed: int = 0, fp8: bool = True) -> dict:
    """SGLang's real backend: two graph cases (one against the control arm), the adaptive
    sequence and a memcheck replay, every one passing; with fp8, then two fp8_e4m3 cases
    (separate k/v scales, one against SGLang's fp8 arm, 0.06 off as its e4m3 rounding makes
    it) and an fp8 memcheck replay, passing too."""
    rng = np.random.default_rng(seed)

    def graph(name, heads, draft, page, capture, replay, control, **fp8_fields):
        err = float(rng.uniform(1e-3, 3e-3))
        ctl = (0.06 if fp8_fields else err * 0.9) if control else None
        return {"name": name, "kind": "graph", **fp8_fields, "heads": heads, "draft": draft,
                "page": page,
                "graph_bs": len(capture), "capture": capture, "replay": replay,
                "control": control, "tree": "ddtree", "replay_tree": "random", "layers": 61,
                "capture_bs": len(capture), "replay_bs": len(replay),
                "rel_err_oracle_capture": err, "rel_err_oracle_replay": err * 1.01,
                "rel_err_graph_vs_eager": 0.0, "graph_equals_eager": True,
                "rel_err_vs_control": ctl, "refused": None, "fallbacks": {},
                "flash_replay_ms": 10.0 * len(capture), "control_replay_ms":
                    200.0 * len(capture) if control else None,
                "finite": True, "problems": [], "pass": True}
    small = graph("sanitize", 16, 8, 64, [2000, 130], [1500, 64], False)
    cases = [graph("centre", 8, 8, 1, [185000], [180001], False),
             graph("bs4-page64", 16, 4, 64, [3000, 517, 64, 9], [2900, 33], True),
             {"name": "adaptive-scratch", "kind": "adaptive", "sentinel_intact": True,
              "rel_err_oracle": 0.002, "pass": True},
             {"name": "memcheck", "kind": "sanitizer", "tool": "compute-sanitizer",
              "returncode": 0, "summary": "========= ERROR SUMMARY: 0 errors",
              "case": {**small, "layers": 2, "flash_replay_ms": None}, "pass": True}]
    if fp8:
        f = dict(kv_dtype="fp8_e4m3", control_tol=0.2)
        small8 = graph("sanitize-fp8", 16, 8, 64, [2000, 130], [1500, 64], False, k_scale=0.05,
                       v_scale=0.1, **f)
        cases += [graph("fp8-centre", 8, 8, 1, [185000], [180001], False, k_scale=1.0,
                        v_scale=1.0, **f),
                  graph("fp8-bs4-page64", 8, 4, 64, [3000, 517, 64, 9], [2900, 33], True,
                        k_scale=0.05, v_scale=0.02, **f),
                  {"name": "memcheck-fp8", "kind": "sanitizer", "kv_dtype": "fp8_e4m3",
                   "tool": "compute-sanitizer", "returncode": 0,
                   "summary": "========= ERROR SUMMARY: 0 errors",
                   "case": {**small8, "layers": 2, "flash_replay_ms": None}, "pass": True}]
        # the production algorithm's shapes (backend_check.PRODUCTION_CASES), drawn last; run()
        # writes them with the other graph cases, before the adaptive sequence and the memchecks
        cases[2:2] = [{**graph("dflash-b16-bs8", 8, 16, 1, [3000, 517, 64, 9], [2900, 33], True),
                       "algorithm": "DFLASH"},
                      {**graph("ddtree-b32-bs4", 8, 16, 1, [2500, 0, 900, 40], [2000, 0], True),
                       "algorithm": "DDTREE", "budget": 32, "topk": 2}]
    return {**header("sglang-backend", date), "sglang_version": "0.0.fixture",
            "triton_version": "0.0", "layers": 61, "tol": 0.01, "fp8_control_tol": 0.2,
            "cases": cases, "all_pass": True}


FP8_TIERS = {1: 8, 2: 16, 4: 32, 6: 32, 8: 64}


def fp8_validation(rng, n: int) -> dict:
    """The validation file's "fp8" section as kernel/bench/validate.py writes it: cases with
    scales (v != k in a third), both e4m3fn NaN bytes, a second tier each; SGLang's fp8 errors
    (0.04-0.07: it rounds q and P to e4m3); graph replays."""
    cases = []
    for i in range(n):
        rel = float(rng.uniform(1e-3, 5e-3))
        k = (0.01, 1.0, 0.0625)[i % 3]
        tier, other = (1, 2, 6, 8)[i % 4], (2, 4, 8, 1)[i % 4]
        cases.append({"id": i, "prefix_lens": [int(rng.integers(1, 5000))], "draft_lens": [8],
                      "heads": 8, "tree": TREES[i % 4], "layout": LAYOUTS[i % 3],
                      "page_size": (1, 16, 64)[i % 3], "causal": False, "seed": 100_000 + i,
                      "tier": tier, "rel_err": rel, "lse_rel_err": rel / 10, "nan": False,
                      "unwritten": 0, "pass": True, "kv_dtype": "fp8_e4m3", "k_scale": k,
                      "v_scale": k * (1.0, 0.5, 3.0)[(i // 3) % 3], "nan_byte": (0x7F, 0xFF)[i % 2],
                      "tiers": [{"tier": other, "rel_err": rel * 1.1, "lse_rel_err": rel / 10,
                                 "nan": False, "unwritten": 0, "pass": True}],
                      "pass_all_tiers": True})
    checks = [(c["tier"], c["rel_err"]) for c in cases] + \
        [(t["tier"], t["rel_err"]) for c in cases for t in c["tiers"]]
    by_tier = {str(t): {"rows_per_tile": r, "checks": sum(x[0] == t for x in checks), "failing": 0,
                        "worst_rel_err": max((x[1] for x in checks if x[0] == t), default=None)}
               for t, r in FP8_TIERS.items()}
    sgl = [{"id": c["id"], "rel_err": c["rel_err"], "sglang_rel_err": float(rng.uniform(0.04, 0.07)),
            "rel_err_vs_sglang": float(rng.uniform(0.04, 0.07)), "heads": 8, "draft_lens": [8],
            "prefix_lens": c["prefix_lens"], "k_scale": c["k_scale"], "v_scale": c["v_scale"]}
           for c in cases[:5]]
    graph = [{"seed": s, "heads": 8, "tier": 8, "prefix_lens": [100 * s], "tree": "ddtree",
              "page_size": 1, "max_abs_diff_vs_eager": 0.0, "rel_err": 2e-3, "nan": False,
              "pass": True, "kv_dtype": "fp8_e4m3", "k_scale": 0.0625, "v_scale": 0.03125}
             for s in range(1, 4)]
    return {"kv_dtype": "fp8_e4m3", "n_cases": n, "n_checks": len(checks), "tolerance": 1e-2,
            "all_pass": True, "by_tier": by_tier, "worst": max(cases, key=lambda c: c["rel_err"]),
            "cases": cases, "sglang": {"cases": sgl}, "graph": {"cases": graph, "all_pass": True},
            "seconds": 42.0}


def production_validation(rng) -> dict:
    """The validation file's "production" section as validate_production writes it: DDTree's
    padded trees (budgets 7 and 32, topk 1 and 2) and DFLASH's blocks of 16, both pools, every
    case at every tier of its pool, SGLang's extend beside each."""
    cases, sgl = [], []
    plan = [dict(family="ddtree", budget=7, topk=1, batch=8), dict(family="ddtree", budget=32, topk=2, batch=1),
            dict(family="dflash", block=16, batch=8)]
    for kv, tiers in (("bfloat16", (0, 1, 2, 4, 6, 8)), ("fp8_e4m3", (1, 2, 4, 6, 8))):
        for i, p in enumerate(plan):
            rel = float(rng.uniform(1e-3, 4e-3))
            T = p["budget"] + 1 if p["family"] == "ddtree" else p["block"]
            extra = ({"budget": p["budget"], "topk": p["topk"],
                      "tree_sizes": [int(x) for x in rng.integers(1, T + 1, p["batch"])]}
                     if p["family"] == "ddtree" else {"block": p["block"]})
            cases.append({"id": i, "family": p["family"], "kv_dtype": kv, "prefix_lens": [1000] * p["batch"],
                          "draft_lens": [T] * p["batch"], "heads": 8, "tier": tiers[-1], "rel_err": rel,
                          "lse_rel_err": rel / 10, "nan": False, "unwritten": 0, "lse_inf_match": True,
                          "pass": True, "tiers": [{"tier": t, "rel_err": rel * 1.1, "nan": False, "pass": True}
                                                  for t in tiers[:-1]], "pass_all_tiers": True, **extra})
            sgl.append({"id": i, "family": p["family"], "kv_dtype": kv,
                        "rel_err_vs_sglang": rel * (1.5 if kv == "bfloat16" else 20)})
    fams = {}
    for c in cases:
        f = fams.setdefault(f"{c['family']}/{c['kv_dtype']}", {"family": c["family"], "kv_dtype": c["kv_dtype"],
                                                               "n_cases": 0, "n_checks": 0, "failing": 0,
                                                               "worst_rel_err": 0.0})
        f["n_cases"] += 1
        f["n_checks"] += 1 + len(c["tiers"])
        f["worst_rel_err"] = max(f["worst_rel_err"], c["rel_err"] * 1.1)
    return {"all_pass": True, "tolerance": 1e-2, "n_cases": len(cases),
            "n_checks": sum(f["n_checks"] for f in fams.values()), "families": fams, "cases": cases,
            "sglang": {"cases": sgl}, "seconds": 50.0}


def validation_doc(date: str, seed: int = 0, n: int = 24, fp8: bool = True) -> dict:
    """bf16 cases as kernel/bench/validate.py writes them; with fp8, its "fp8" section too
    (drawn after, so the bf16 numbers do not depend on it)."""
    rng = np.random.default_rng(seed)
    cases = []
    for i in range(n):
        rel = float(rng.uniform(1e-3, 4e-3))
        cases.append({"id": f"case{i:03d}", "prefix_lens": [int(rng.integers(1, 5000))],
                      "draft_lens": [8], "heads": 8, "tree": TREES[i % 4],
                      "layout": LAYOUTS[i % 3], "page_size": (1, 16, 64)[i % 3],
                      "causal": TREES[i % 4] == "chain", "rel_err": rel,
                      "lse_rel_err": rel / 10, "nan": False, "unwritten": 0, "pass": True})
    worst = max(cases, key=lambda c: c["rel_err"])
    sgl = [{**c, "rel_err_vs_sglang": c["rel_err"] * 1.5, "sglang_rel_err": c["rel_err"] * 1.2}
           for c in cases[:4]]
    graph = [{**c, "max_abs_diff_vs_eager": 0.0, "pass": True} for c in cases[:3]]
    by_tier = {str(t): {"rows_per_tile": r, "checks": n // 2 if t == 0 else n // 4, "failing": 0,
                        "worst_rel_err": worst["rel_err"]}
               for t, r in ((0, 64), (1, 8), (4, 32))}
    doc = {**header("validation", date), "n_cases": n, "tolerance": 2e-2, "all_pass": True,
           "cases": cases, "worst": worst, "sglang": {"cases": sgl}, "graph": {"cases": graph},
           "n_checks": sum(v["checks"] for v in by_tier.values()), "by_tier": by_tier}
    if not fp8:
        return doc
    f8 = fp8_validation(rng, 12)
    return {**doc, "fp8": f8, "production": production_validation(rng)}   # drawn after: the rest unchanged


def integration_doc(date: str, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    cases = []
    for S in (16384, 65536, 185000):
        for tree in ("chain", "ddtree"):
            p = bench_row(rng, "S", "flash", S)["time_us"] * 1.1
            t = bench_row(rng, "S", "sglang_extend", S)["time_us"]
            cases.append({"S": S, "H": 8, "T": 8, "tree": tree, "plugin_us": p, "triton_us": t,
                          "plugin_ms_per_step": p * 61 / 1e3, "triton_ms_per_step": t * 61 / 1e3,
                          "rel_err_plugin_vs_triton": float(rng.uniform(1e-3, 3e-3)),
                          "graph_replay_matches_eager": True})
    return {**header("sglang-integration", date), "layers": 61, "cases": cases}


def sm120_model_doc(date: str, seed: int = 0) -> dict:
    """The sm_120 model's file (kernel/bench/sm120_estimate.py's schema) by a toy rule, at two
    clocks: the memory part fixed, the math part inversely proportional to the clock."""
    rng = np.random.default_rng(seed)
    clocks = {"boost": 2.617, "max_q": 2.288}
    rows = []
    for S, T, H, tiers in ((185000, 1, 8, (1, 0)), (185000, 4, 8, (4, 1, 0)),
                           (185000, 8, 8, (4, 0)), (16384, 8, 8, (4, 0))):
        kv = (S + T) * 576 * 2
        for tier in tiers:
            memory = kv / (1792.0 * 1e3 * 0.88)
            math_boost = float(rng.uniform(0.3, 1.5)) * memory
            h200 = float(rng.uniform(60, 200))
            for name, ghz in clocks.items():
                math = math_boost * clocks["boost"] / ghz
                rows.append({"S": S, "T": T, "H": H, "kv_dtype": "bfloat16", "tier": tier,
                             "rows_per_tile": {0: 64, 1: 8, 2: 16, 4: 32}[tier], "clock": name,
                             "clock_ghz": ghz, "h200_us": h200, "h200_overlap": 0.4,
                             "sm120_memory_us": memory, "sm120_math_us": math, "sm120_merge_us": 5.0,
                             "sm120_estimate_us": memory + math + 5.0,
                             "sm120_serial_us": memory + math + 5.0,
                             "sm120_overlapped_us": max(memory, math) + 5.0,
                             "sm120_floor_us": kv / 1792.0 / 1e3,
                             "bound": "memory" if memory >= math else "math"})
    return {**header("sm120_model", date), "model": "a model, not a measurement: fixture toy model",
            "inputs": {"micro": "microbench-fixture.json", "bench": "bench-fixture.json", "read_GBps": READ_GBPS},
            "sm120": {"sms": 188, "dram_GBps": 1792.0, "l2_MB": 128, "mma_per_clk_sm": 0.25, "ctas_per_sm": 1},
            "clocks": clocks, "default_clock": "boost",
            "assumptions": {"h200_spec_GBps": 4800.0, "dram_latency_ns": 1000.0, "dram_fraction": 0.88},
            "rows": rows}


def sm120_sim_doc(date: str, seed: int = 0) -> dict:
    """The second sm_120 model's file (kernel/bench/sm120_sim.py's schema) by a toy rule: per pool and
    T, a simulated sm_120 tile between the MMAs' floor and the first model's clocks."""
    rng = np.random.default_rng(seed)
    rows = []
    for kv in ("bfloat16", "fp8_e4m3"):
        for T, tiles in ((8, 62), (16, 125), (32, 252)):
            floor, first = 2176.0, float(rng.uniform(3000, 3500))
            scaled, shifted = float(rng.uniform(2400, 2900)), float(rng.uniform(2400, 2900))
            lo, hi = min(scaled, shifted), max(scaled, shifted)
            rows.append({"kv_dtype": kv, "T": T, "S": 185000, "H": 8, "tier": 8, "clock": "boost",
                         "sm120_clk_per_tile_scaled": scaled, "sm120_clk_per_tile_shifted": shifted,
                         "first_model_clk_per_tile": first, "sm120_mma_floor_clk_per_tile": floor,
                         "sm120_tiles_per_cta": tiles, "sm120_math_us_low": tiles * lo / 2617.0,
                         "sm120_math_us_high": tiles * hi / 2617.0, "first_model_math_us": tiles * first / 2617.0,
                         "mma_share_low": floor / hi, "mma_share_high": floor / lo,
                         "first_model_mma_share": floor / first})
    spacing = {"bf16": {"spacing": {"16": 90, "1": 30}}}
    return {**header("sm120_sim", date), "model": "a model, not a measurement: fixture toy model",
            "inputs": {"micro": "microbench-fixture.json", "model": "sm120_model-fixture.json"},
            "params": {"pipe_cycles": {"90": 6.85, "120": 16.0}},
            "sim": {"90": {"bf16": {"spacing": {"6": 99, "1": 27}}}, "120": spacing}, "rows": rows}


KINDS = ("bench", "validation", "sglang-integration", "microbench", "sglang-backend", "sm120_model", "sm120_sim")


def write_fixture_data(data_dir: str | Path, *, kinds=KINDS,
                       date: str = "2026-11-30T12:00:00+00:00", seed: int = 0,
                       fp8: bool = True) -> Path:
    """Write one fixture file per kind into data_dir; returns data_dir. fp8=False: the files
    as written before fp8 (no "fp8" validation section, no fp8 bench rows or backend cases)."""
    data_dir = Path(data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    with_fp8 = {"bench": bench_doc, "validation": validation_doc, "sglang-backend": backend_doc}
    makers = {**with_fp8, "sglang-integration": integration_doc, "microbench": micro_doc,
              "sm120_model": sm120_model_doc, "sm120_sim": sm120_sim_doc}
    stamp = date[:19].replace(":", "")
    for kind in kinds:
        doc = makers[kind](date, seed, fp8=fp8) if kind in with_fp8 else makers[kind](date, seed)
        (data_dir / f"{kind}-{stamp}.json").write_text(json.dumps(doc))
    return data_dir
