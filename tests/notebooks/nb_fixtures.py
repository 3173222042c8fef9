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


def bench_row(rng, sweep, impl, S, T=8, H=8, layout="scattered", page_size=1, batch=1) -> dict:
    """One bench row; bytes = unique KV bytes, flops = QK^T (576) + PV (512) for H*T rows."""
    nbytes = S * 576 * 2
    flops = 2 * H * T * S * (576 + 512)
    roof = max(nbytes / READ_GBPS / 1e3, flops / MMA_TFLOPS / 1e6)
    if impl == "flash":
        t = roof / OURS_FRAC[layout] + 4.0
    else:
        t = nbytes / TOY_GBPS[impl] / 1e3 * (H / 8) ** (impl == "sglang_extend")
    t *= float(rng.lognormal(0.0, 0.03))
    lens = [S // batch] * (batch - 1) + [S - (S // batch) * (batch - 1)]
    return {"sweep": sweep, "S": S, "prefix_lens": lens, "T": T, "H": H, "layout": layout,
            "page_size": page_size, "batch": batch, "impl": impl, "time_us": t,
            "bytes": nbytes, "flops": flops, "GBps": nbytes / t / 1e3,
            "TFLOPs": flops / t / 1e6, "roofline_us": roof, "frac_roofline": roof / t}


def bench_doc(date: str, seed: int = 0) -> dict:
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
    # what kernel.build reports per arch; 240 registers so no test can mistake it for real data
    resources = [{"kernel": k, "arch": a, "registers": 240 if k == "mla_verify_kernel" else 64,
                  "spill_stores": 0, "spill_loads": 0, "stack": 0, "smem_static": 0}
                 for a in ("sm_90", "sm_120") for k in ("mla_verify_kernel", "mla_verify_combine")]
    return {**header("bench", date), "resources": resources,
            "ceilings": {"read_GBps": READ_GBPS, "mma_TFLOPs": MMA_TFLOPS}, "rows": rows}


def validation_doc(date: str, seed: int = 0, n: int = 24) -> dict:
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
    return {**header("validation", date), "n_cases": n, "tolerance": 2e-2, "all_pass": True,
            "cases": cases, "worst": worst, "sglang": {"cases": sgl}, "graph": {"cases": graph}}


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


def write_fixture_data(data_dir: str | Path, *, kinds=("bench", "validation", "sglang-integration"),
                       date: str = "2026-11-30T12:00:00+00:00", seed: int = 0) -> Path:
    """Write one fixture file per kind into data_dir; returns data_dir."""
    data_dir = Path(data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    makers = {"bench": bench_doc, "validation": validation_doc,
              "sglang-integration": integration_doc}
    stamp = date[:19].replace(":", "")
    for kind in kinds:
        (data_dir / f"{kind}-{stamp}.json").write_text(json.dumps(makers[kind](date, seed)))
    return data_dir
