"""EXTEND over a cached prefix (issue 26): the three measurement kinds kernel.gpu_run writes for it,
as the tables phase 2's EXTEND section shows.

- extend-bench (kernel/bench/extend_bench.py): one request of T new causal tokens over S = 185k,
  H = 8, per pool, ours at its default tier and one other large tier, SGLang's extend_attention_fwd;
  and a 185k-token prefill in 8,192-token chunks (ours, ms per layer).
- extend-validation (kernel/bench/extend_validate.py): cases against float64 / fp32 references,
  every tier checked, SGLang beside them; the causal mask spelled out must give the same bits.
- sglang-extend (kernel/sglang/extend_check.py): cases through SGLang's real backend with the
  plugin, flash and triton arms; EAGLE's draft extend in SGLang's draft-extend CUDA graph.

Times: us (`*_us`) or ms (`*_ms*`); throughputs TFLOP/s; fractions 0..1 unless named pct_ (0..100).
Loading, provenance and errors are notebooks.data's (newest_or_none, MeasurementError).
"""
from __future__ import annotations

import subprocess
from pathlib import Path

import pandas as pd

from . import data

BENCH, VALIDATION, SGLANG = "extend-bench", "extend-validation", "sglang-extend"
for _k, _what in ((BENCH, "EXTEND over a 185k prefix and the 185k prefill, timed (phase 2)"),
                  (VALIDATION, "EXTEND cases against float64 / fp32 references, both pools (phase 2)"),
                  (SGLANG, "EXTEND and EAGLE's draft extend through SGLang's real backend (phase 2)")):
    data.KINDS.setdefault(_k, _what)

# A failing case whose cause lies in the measuring harness, not in the kernel: the file does not
# say why (only which check failed), so the cause and the commit that fixed it are recorded here,
# and the page says whether the file was measured with the fix (fix_measured).
HARNESS_FIXES = {
    (SGLANG, "fp8-ragged"): {
        "commit": "6e194ee",
        "cause": "the test harness filled the KV rows of layers past 0 with random draws; on an fp8 "
                 "pool SGLang's cast to e4m3fn does not saturate on the GPU, so a draw beyond the "
                 "case's own largest row was stored as NaN in layer 1 of both arms; the fix clamps "
                 "that filler to e4m3fn's largest value times the layer's k_scale"},
}
ROOT = Path(__file__).resolve().parents[1]


def _path(doc: dict) -> str:
    return Path(doc.get("_path", "?")).name


def _need(doc: dict, obj: dict, key: str, where: str):
    """obj[key], or a MeasurementError naming the file, where in it, and the field."""
    if not isinstance(obj, dict) or key not in obj:
        raise data.MeasurementError(f"{_path(doc)}: {where} lacks field {key!r}")
    return obj[key]


def load(data_dir, *, allow_fixture: bool = False) -> dict:
    """The newest file of each EXTEND kind, or None for a kind the directory lacks:
    {"bench": ..., "validation": ..., "sglang": ...} (each with data's '_path' and provenance)."""
    return {name: data.newest_or_none(data_dir, kind, allow_fixture=allow_fixture)
            for name, kind in (("bench", BENCH), ("validation", VALIDATION), ("sglang", SGLANG))}


def _ceilings(doc: dict) -> tuple[float, float]:
    c = _need(doc, doc, "ceilings", "the file")
    return float(_need(doc, c, "read_GBps", "'ceilings'")), float(_need(doc, c, "mma_TFLOPs", "'ceilings'"))


def _rows(doc: dict, sweep_end: str, kv_dtype: str) -> list[dict]:
    rows = _need(doc, doc, "rows", "the file")
    out = []
    for i, r in enumerate(rows):
        for k in ("sweep", "S", "T", "H", "impl", "time_us", "bytes", "flops", "TFLOPs", "frac_roofline"):
            _need(doc, r, k, f"rows[{i}]")
        if r["sweep"].endswith(sweep_end) and data.row_kv(r) == kv_dtype:
            out.append(r)
    return out


def bench_table(doc: dict, kv_dtype: str = data.BF16_KV) -> pd.DataFrame:
    """One row per T of the extend_T sweep on one pool: ours at its default tier (tier, us,
    TFLOP/s, pct of the file's mma ceiling, pct of its roofline and which term bounds it), the
    other large tier timed beside it (n/a where none), SGLang's extend_attention_fwd and its
    time over ours. The roofline is recomputed from the file's ceilings and must agree with each
    row's own (a MeasurementError otherwise). Empty when the file has no rows of that pool."""
    read, mma = _ceilings(doc)
    rows = _rows(doc, "extend_T", kv_dtype)
    out = []
    for T in sorted({int(r["T"]) for r in rows}):
        at = [r for r in rows if int(r["T"]) == T]
        ours = [r for r in at if r["impl"] == data.OURS]
        if len(ours) != 1:
            raise data.MeasurementError(f"{_path(doc)}: {len(ours)} rows of impl {data.OURS!r} at T={T} "
                                        f"on {kv_dtype} (one expected)")
        o = ours[0]
        mem_us, math_us = o["bytes"] / (read * 1e3), o["flops"] / (mma * 1e6)
        roof = max(mem_us, math_us)
        if abs(roof / o["time_us"] - o["frac_roofline"]) > 1e-6 * max(1.0, o["frac_roofline"]) + 1e-9:
            raise data.MeasurementError(f"{_path(doc)}: row {data.OURS} T={T} {kv_dtype}: frac_roofline "
                                        f"{o['frac_roofline']} disagrees with the file's ceilings ({roof / o['time_us']})")
        alt = [r for r in at if str(r["impl"]).startswith(data.OURS + "_t")]
        sgl = [r for r in at if r["impl"] == data.BASELINE]
        out.append({
            "T": T, "S": int(o["S"]), "H": int(o["H"]), "tile": data.tier_name(o["tier"]),
            "ours_us": float(o["time_us"]), "ours_tflops": float(o["TFLOPs"]),
            "pct_mma": 100 * float(o["TFLOPs"]) / mma, "pct_roofline": 100 * roof / float(o["time_us"]),
            "bound": "memory" if mem_us >= math_us else "math",
            "alt_tile": data.tier_name(alt[0]["tier"]) if alt else None,
            "alt_us": float(alt[0]["time_us"]) if alt else float("nan"),
            "alt_tflops": float(alt[0]["TFLOPs"]) if alt else float("nan"),
            "sglang_us": float(sgl[0]["time_us"]) if sgl else float("nan"),
            "sglang_tflops": float(sgl[0]["TFLOPs"]) if sgl else float("nan"),
        })
    df = pd.DataFrame(out)
    if not df.empty:
        df["speedup"] = df["sglang_us"] / df["ours_us"]
    return df


def prefill_table(doc: dict) -> pd.DataFrame:
    """The 185k prefill per pool and impl (the file's prefill_185k): chunks, ms per layer, the
    tiers its chunks ran, TFLOP/s, pct of the mma ceiling, and the attention of all data.LAYERS
    layers in s. The file's time must be the sum of its chunk rows (a MeasurementError otherwise)."""
    _, mma = _ceilings(doc)
    pre = _need(doc, doc, "prefill_185k", "the file")
    out = []
    for key, p in pre.items():
        where = f"prefill_185k[{key!r}]"
        kv, impl = _need(doc, p, "kv_dtype", where), _need(doc, p, "impl", where)
        ms, chunks = float(_need(doc, p, "time_ms_per_layer", where)), int(_need(doc, p, "chunks", where))
        rows = [r for r in _rows(doc, "extend_prefill185k", kv) if r["impl"] == impl]
        summed = sum(r["time_us"] for r in rows) / 1e3
        if len(rows) != chunks or abs(summed - ms) > 1e-6 * ms:
            raise data.MeasurementError(f"{_path(doc)}: {where}: {chunks} chunks, {ms} ms a layer, but its "
                                        f"rows are {len(rows)} summing to {summed} ms")
        out.append({"pool": kv, "impl": impl, "tiles": ", ".join(data.tier_name(t) for t in sorted(
                        {int(r["tier"]) for r in rows})),
                    "prompt_tokens": int(_need(doc, p, "prompt_tokens", where)),
                    "chunks": chunks, "chunk_tokens": int(_need(doc, p, "chunk_tokens", where)),
                    "ms_per_layer": ms, "tflops": float(_need(doc, p, "TFLOPs", where)),
                    "pct_mma": 100 * float(p["TFLOPs"]) / mma, "all_layers_s": ms * data.LAYERS / 1e3})
    return pd.DataFrame(out)


def validation_cases(doc: dict) -> pd.DataFrame:
    """One row per case and pool: shape, tiers checked, worst error over the tiers (every row,
    and the float64 rows alone), the fp32 reference's own error (None: whole float64 oracle),
    failing checks, pass, and SGLang's error beside it (recorded, not gated)."""
    cases = _need(doc, doc, "cases", "the file")
    out = []
    for i, c in enumerate(cases):
        where = f"cases[{i}]"
        tiers = _need(doc, c, "tiers", where)
        for j, t in enumerate(tiers):
            for k in ("tier", "rel_err", "rel_err_all", "pass"):
                _need(doc, t, k, f"{where}.tiers[{j}]")
        sg = c.get("sglang") or {}
        out.append({"case": _need(doc, c, "name", where), "pool": data.row_kv(c),
                    "prefixes": data._span(_need(doc, c, "prefix_lens", where)),
                    "new_tokens": data._span(_need(doc, c, "new_lens", where)),
                    "requests": len(c["new_lens"]), "heads": int(_need(doc, c, "heads", where)),
                    "page_size": int(c.get("page_size", 1)), "tiers": len(tiers),
                    "worst_rel_err": max(t["rel_err_all"] for t in tiers),
                    "worst_float64_rows": max(t["rel_err"] for t in tiers),
                    "fp32_ref_err": c.get("fp32_ref_rel_err"),
                    "failing": sum(not t["pass"] for t in tiers), "pass": bool(_need(doc, c, "pass", where)),
                    "sglang_rel_err": sg.get("rel_err_all", float("nan")),
                    "vs_sglang": sg.get("rel_err_vs_ours", float("nan"))})
    return pd.DataFrame(out)


def validation_summary(doc: dict) -> dict:
    """The headline: cases, checks, failing checks, worst error (case, pool), the tolerances, the
    mask-identity cases, and per pool a row of validation_cases' totals ("pools")."""
    cases = validation_cases(doc)
    n = int(_need(doc, doc, "n_cases", "the file"))
    if n != len(cases):
        raise data.MeasurementError(f"{_path(doc)}: n_cases={n} but {len(cases)} cases listed")
    n_checks = int(cases["tiers"].sum())
    if n_checks != int(_need(doc, doc, "n_checks", "the file")):
        raise data.MeasurementError(f"{_path(doc)}: n_checks={doc['n_checks']} but the cases hold {n_checks}")
    mask = _need(doc, doc, "mask_identity", "the file")
    w = cases.loc[cases["worst_rel_err"].idxmax()]
    pools = cases.groupby("pool", as_index=False).agg(
        cases=("case", "count"), passing=("pass", "sum"), checks=("tiers", "sum"), failing=("failing", "sum"),
        worst_rel_err=("worst_rel_err", "max"), fp32_ref_err=("fp32_ref_err", "max"),
        sglang_rel_err=("sglang_rel_err", "max"), vs_sglang=("vs_sglang", "max"))
    pools["mask_identity"] = [f"{sum(bool(m['pass']) for m in mask if data.row_kv(m) == p)} of "
                              f"{sum(data.row_kv(m) == p for m in mask)} equal" for p in pools["pool"]]
    return {"n_cases": len(cases), "n_pass": int(cases["pass"].sum()), "n_checks": n_checks,
            "n_failing": int(cases["failing"].sum()),
            "all_pass": bool(_need(doc, doc, "all_pass", "the file")) and bool(cases["pass"].all()),
            "tolerance": float(_need(doc, doc, "tolerance", "the file")),
            "fp32_ref_tolerance": float(_need(doc, doc, "fp32_ref_tolerance", "the file")),
            "sampled": int(doc.get("sampled_new_tokens") or 0),
            "worst": {"case": w["case"], "pool": w["pool"], "rel_err": float(w["worst_rel_err"])},
            "mask_cases": len(mask), "mask_pass": sum(bool(m.get("pass")) for m in mask), "pools": pools}


def _why(r: dict, tol: float) -> str:
    """Which of the check's gates a failing case missed, from its own fields."""
    if r["pass"]:
        return ""
    why = list(r.get("problems") or [])
    if r.get("finite") is False:
        why.append("an output of the flash arm is not finite (NaN or inf)")
    for k, name in (("err_float64_rows", "error on the float64 rows"), ("err_all", "error on every row")):
        if r.get(k) is not None and r[k] > tol:
            why.append(f"{name} {r[k]:.2e} > {tol:g}")
    if r.get("vs_control") is not None and r.get("control_tol") is not None and r["vs_control"] > r["control_tol"]:
        why.append(f"against triton {r['vs_control']:.2e} > {r['control_tol']:g}")
    if r.get("graph_vs_eager") is not None and r["graph_vs_eager"] > tol:
        why.append(f"graph against eager {r['graph_vs_eager']:.2e} > {tol:g}")
    return "; ".join(why) or "pass=False with no failing field recorded"


def sglang_cases(doc: dict) -> pd.DataFrame:
    """One row per case of an sglang-extend file, the eager EXTEND cases ("what": EXTEND) then
    EAGLE's draft extend in its CUDA graph ("what": draft extend): pool, shape, layers, pass,
    finite, worst errors (float64 rows, every row, against the triton arm; a draft case's over
    its replays, and its graph against eager), flash and triton ms (a layer for EXTEND, a graph
    replay for draft extend), triton over flash, and `why` a failing case failed."""
    tol = float(_need(doc, doc, "tol", "the file"))
    out = []
    for i, c in enumerate(_need(doc, doc, "cases", "the file")):
        where = f"cases[{i}]"
        out.append({"what": "EXTEND", "case": _need(doc, c, "name", where), "pool": data.row_kv(c),
                    "prefixes": data._span(c.get("prefix_lens")), "new_tokens": data._span(c.get("new_lens")),
                    "page_size": c.get("page_size"), "layers": c.get("layers"), "pass": bool(_need(doc, c, "pass", where)),
                    "finite": c.get("finite"), "err_float64_rows": c.get("rel_err_float64_rows"),
                    "err_all": c.get("rel_err_all"), "vs_control": c.get("rel_err_vs_control"),
                    "control_tol": c.get("control_tol"), "graph_vs_eager": None, "problems": c.get("problems"),
                    "flash_ms": c.get("flash_ms_per_layer"), "triton_ms": c.get("control_ms_per_layer"),
                    "per": "layer"})
    for i, c in enumerate(doc.get("draft_cases") or []):
        where = f"draft_cases[{i}]"
        reps = _need(doc, c, "replay_results", where)
        for j, r in enumerate(reps):
            for k in ("rel_err_float64_rows", "rel_err_all", "rel_err_vs_control", "rel_err_graph_vs_eager", "finite"):
                _need(doc, r, k, f"{where}.replay_results[{j}]")
        lens = [s for r in reps for s in r["prefix_lens"]]
        out.append({"what": "draft extend", "case": _need(doc, c, "name", where), "pool": data.row_kv(c),
                    "prefixes": data._span(lens), "new_tokens": data._span([c.get("width")] if c.get("width") else []),
                    "page_size": c.get("page_size"), "layers": c.get("layers"),
                    "pass": bool(_need(doc, c, "pass", where)),
                    "finite": all(bool(r["finite"]) for r in reps) if reps else None,
                    "err_float64_rows": data._max(*(r["rel_err_float64_rows"] for r in reps)),
                    "err_all": data._max(*(r["rel_err_all"] for r in reps)),
                    "vs_control": data._max(*(r["rel_err_vs_control"] for r in reps)),
                    "control_tol": c.get("control_tol"),
                    "graph_vs_eager": data._max(*(r["rel_err_graph_vs_eager"] for r in reps)),
                    "problems": c.get("problems"), "flash_ms": c.get("flash_ms_per_replay"),
                    "triton_ms": c.get("control_ms_per_replay"), "per": "graph replay"})
    df = pd.DataFrame(out)
    if df.empty:
        raise data.MeasurementError(f"{_path(doc)}: sglang-extend has no cases")
    df["why"] = [_why(r, tol) for r in df.to_dict("records")]
    df["speedup"] = pd.to_numeric(df["triton_ms"], errors="coerce") / pd.to_numeric(df["flash_ms"], errors="coerce")
    return df


def validation_by_case(doc: dict) -> pd.DataFrame:
    """validation_cases with the two pools of a case side by side: its shape, then per pool the
    tiers checked and the worst error over them, and whether every check passed on both."""
    c = validation_cases(doc)
    shape = c.drop_duplicates("case")[["case", "prefixes", "new_tokens", "requests", "heads", "page_size"]]
    out = shape.set_index("case")
    for pool, g in c.groupby("pool"):
        g = g.set_index("case")
        out[f"{pool} tiers"] = g["tiers"]
        out[f"{pool} worst"] = g["worst_rel_err"]
    out["pass"] = c.groupby("case")["pass"].all()
    return out.reset_index()


def fix_measured(doc: dict, fix_commit: str, repo: Path = ROOT) -> bool | None:
    """Whether the commit that measured doc contains fix_commit (git merge-base --is-ancestor):
    True, False, or None when git cannot tell here (no git, a shallow clone, an unknown commit)."""
    measured = str(doc.get("commit") or "")
    if not measured or measured == "not recorded":
        return None
    try:
        for c in (fix_commit, measured):   # both known here, else git's "no" would mean "unknown"
            if subprocess.run(["git", "-C", str(repo), "cat-file", "-e", f"{c}^{{commit}}"],
                              capture_output=True, timeout=20).returncode != 0:
                return None
        r = subprocess.run(["git", "-C", str(repo), "merge-base", "--is-ancestor", fix_commit, measured],
                           capture_output=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    return {0: True, 1: False}.get(r.returncode)


def failures(doc: dict) -> list[dict]:
    """Each failing case of an sglang-extend file: {case, what, why (from its fields), cause and
    fix (HARNESS_FIXES, None when none is recorded), fix_measured (fix_measured(); None without a
    recorded fix)}."""
    out = []
    for r in sglang_cases(doc).to_dict("records"):
        if r["pass"]:
            continue
        fix = HARNESS_FIXES.get((doc.get("kind"), r["case"]))
        out.append({"case": r["case"], "what": r["what"], "why": r["why"], "fix": fix,
                    "fix_measured": fix_measured(doc, fix["commit"]) if fix else None})
    return out
