"""The newest measurement of each kind in reports/data/, and the tables the phase notebooks show.

Read-only: data flows kernel -> reports/data/*.json -> notebooks -> HTML, never back.
Times are microseconds (`time_us`) or milliseconds (`*_ms*`), bandwidths GB/s (1e9 B/s),
throughputs TFLOP/s (1e12 FLOP/s), intensities FLOP per byte.
"""
from __future__ import annotations

import math
import re
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd

from kernel.bench import data_files

from .glossary import IMPL_LABELS, VARIANT_LABELS

PROVENANCE_KEYS = ("gpu", "sms", "driver", "cuda", "torch", "commit", "date")
LAYERS = 61  # Kimi-K2 / DeepSeek-V3 decoder layers, each with one MLA attention
CENTRE = {"S": 185000, "T": 8, "H": 8, "layout": "scattered", "page_size": 1, "batch": 1}
CONFIG_KEYS = ("sweep", "S", "prefix", "T", "H", "layout", "page_size", "batch")
# SGLang 0.5.23 extend_attention_fwd tiles draft tokens by BLOCK_M = 32 on sm_90 and sm_120,
# so its CUDA grid is batch x heads x ceil(T / 32): the "8 thread blocks" of the baseline.
EXTEND_BLOCK_M = 32
OURS, BASELINE, SPLIT_KV, NAIVE = "flash", "sglang_extend", "sglang_verify_mla", "torch_naive"
# Kernel tier id (bench rows' "tier", micro rows, the validation's by_tier) -> query rows per
# tile: 0 is rows64, 1/2/4 the small tier (operands swapped), 6/8 rows32d/rows64d (design D).
# kernel/ops.py TIERS plus RETIRED_TIERS (below); a test holds this copy to them and to the
# rows_per_tile the micro and validation files record.
TIER_ROWS = {0: 64, 1: 8, 2: 16, 4: 32, 6: 32, 8: 64, 9: 64, 10: 64}
TIER_FAMILY = {0: "rows64", 1: "small", 2: "small", 4: "small", 6: "rows32d", 8: "rows64d", 9: "rows64d_pair", 10: "rows64d_pair_x4"}
# tiers the kernel no longer has whose measurements stay in reports/data: 10 (rows64d_pair_x4, tier 9
# with QK's K fragments by ldmatrix.x4: measured no faster than tier 9 and deleted, kernel/NOTES.md)
RETIRED_TIERS = (10,)
BENCH_COLUMNS = ("sweep", "S", "prefix_lens", "T", "H", "layout", "page_size", "batch", "impl",
                 "time_us", "bytes", "flops", "GBps", "TFLOPs", "roofline_us", "frac_roofline")


class MeasurementError(RuntimeError):
    """Measurement files are missing, unreadable or inconsistent; the message names the file."""


# Every kind of file kernel.gpu_run and the rollout tool write into reports/data/, and what
# reads it. A kind not listed here is still loaded (and listed on the phase 2 page as present
# but not analysed), so new measurement kinds never break a render; to show one, add it here
# and give it a frame function below.
KINDS = {
    "validation": "float64-oracle validation cases (phase 2)",
    "bench": "benchmark sweeps and both ceilings (phases 0-2, the emulator's speed model)",
    "sglang-integration": "61-layer verify step inside SGLang's attention backend (phase 2)",
    "microbench": "kernel microbenchmarks per tier and the sm_120 estimate (phase 2)",
    "sglang-backend": "SGLang's real TritonAttnBackend with the plugin, CUDA graphs, memcheck "
                      "(phase 2)",
    "rollout-ab": "canary A/B results written by the rollout tool",
    "dcp-sim": "decode context parallelism simulated on one GPU: N ranks' calls merged by LSE "
               "(phase 2)",
    "fixed_cost": "a call's time against S at T = 1 and 8 and its fixed cost, both pools (phase 2)",
    "trace": "per-CTA phase timestamps of one call from the diagnostic build (phase 2)",
    "mma-ldsm-probe": "mma.sync with ldmatrix at 1-8 MMAs per load, SASS-checked, beside its "
                      "predictions (kernel/NOTES.md)",
    "sm120_model": "the sm_120 MODEL (not a measurement) built from GH100 (H200 or H100) microbenchmarks (phase 2)",
    "sm120_sim": "a second sm_120 MODEL of rows64d's math, simulated from sm_120's own machine code "
                 "(phase 2, section 11)",
    "mma_kinds": "mma.sync's rate on bf16 m16n8k16 against e4m3 m16n8k32 on loop-invariant operands: "
                 "its e4m3 figure is an artefact of ptxas's sm_90 emulation (superseded by mma_forms, "
                 "kernel/NOTES.md)",
    "sink_check": "ours and SGLang's extend_attention_fwd against the oracle behind an attention sink, "
                  "both pools (phase 2, section 12)",
    "mma_forms": "mma.sync's rate by accumulation form (bf16 / f16 chains, fresh accumulators, e4m3), "
                 "machine code checked (kernel/NOTES.md)",
}


def _date(doc: dict, path) -> datetime:
    raw = doc.get("date")
    try:
        d = datetime.fromisoformat(str(raw).replace("Z", "+00:00"))
    except ValueError:
        raise MeasurementError(f"{path}: 'date' is not ISO-8601: {raw!r}") from None
    return d if d.tzinfo else d.replace(tzinfo=timezone.utc)


def _read(path: Path) -> dict:
    """A measurement file's JSON: an object with a top-level 'kind', or a MeasurementError."""
    try:
        doc = data_files.read_json(path)
    except data_files.UNREADABLE as e:
        raise MeasurementError(f"{path}: not readable JSON ({e})") from None
    if not isinstance(doc, dict) or "kind" not in doc:
        raise MeasurementError(f"{path}: not a measurement (no top-level 'kind')")
    return doc


def _showable(doc: dict, allow_fixture: bool) -> dict:
    """doc, if a report may show it: test fixtures ("fixture": true) only in smoke runs, so a
    report can never present generated numbers as measurements; provenance complete."""
    if doc.get("fixture") and not allow_fixture:
        raise MeasurementError(f"{doc['_path']}: is test fixture data (\"fixture\": true); "
                               "only smoke=True runs may render it")
    missing = [k for k in PROVENANCE_KEYS if k not in doc]
    if missing:
        raise MeasurementError(f"{doc['_path']}: missing provenance keys {missing}")
    return doc


def load_all(data_dir: str | Path, kind: str | None = None) -> list[dict]:
    """Every measurement JSON in data_dir (of `kind`, if given), each with '_path' and '_date'.

    Files of other kinds are read as JSON only: their own schema (or date) cannot break a
    report that does not show them.
    """
    data_dir = Path(data_dir)
    if not data_dir.is_dir():
        raise MeasurementError(f"data_dir: no such directory: {str(data_dir)!r}")
    docs = []
    for path in data_files.files(data_dir):
        doc = _read(path)
        if kind is not None and doc["kind"] != kind:
            continue
        doc["_path"], doc["_date"] = str(path), _date(doc, path)
        docs.append(doc)
    return docs


def newest(data_dir: str | Path, kind: str, *, allow_fixture: bool = False) -> dict:
    """The file of this kind with the latest 'date', if a report may show it (_showable)."""
    exists = Path(data_dir).is_dir()
    docs = load_all(data_dir, kind) if exists else []
    if not docs:
        raise MeasurementError(
            f"no measurement of kind {kind!r} in {str(data_dir)!r}"
            f"{'' if exists else ' (the directory does not exist)'}: run `make phase2` on a CUDA "
            f"machine (it runs `python -m kernel.gpu_run --out reports/data`) or copy its JSON there")
    return _showable(max(docs, key=lambda d: d["_date"]), allow_fixture)


def load_file(path: str | Path, *, allow_fixture: bool = False) -> dict:
    """One named measurement file (e.g. the bench file an emulator says its model read), with
    the same checks as newest()."""
    path = Path(path)
    doc = _read(path)
    doc["_path"], doc["_date"] = str(path), _date(doc, path)
    return _showable(doc, allow_fixture)


def not_shown(data_dir: str | Path, shown: list[dict]) -> list[dict]:
    """The newest file of each kind in data_dir that a page does not show: {kind, file, date,
    what} (what: KINDS' description, or 'unknown kind'). Files that cannot be read are left to
    the kinds that need them to report."""
    newest_of: dict[str, tuple[str, str]] = {}
    shown_kinds = {d["kind"] for d in shown}
    for path in data_files.files(data_dir):
        try:
            doc = data_files.read_json(path)
        except data_files.UNREADABLE:
            continue
        k = doc.get("kind") if isinstance(doc, dict) else None
        if not k or k in shown_kinds:
            continue
        date = str(doc.get("date", ""))
        if k not in newest_of or date > newest_of[k][1]:
            newest_of[k] = (path.name, date)
    return [{"kind": k, "file": f, "date": d, "what": KINDS.get(k, "unknown kind")}
            for k, (f, d) in sorted(newest_of.items())]


def newest_or_none(data_dir: str | Path, kind: str, *, allow_fixture: bool = False) -> dict | None:
    """newest(), or None when the data directory holds no file of this kind (for kinds a page
    shows when present: an older gpu_run, or one with fewer --stages, did not write them)."""
    if not load_all(data_dir, kind):
        return None
    return newest(data_dir, kind, allow_fixture=allow_fixture)


# The real-server canary's merged JSON (python -m kernel.sglang.real_server: real-server-*.json).
REAL_SERVER = "real-server-canary"
KINDS[REAL_SERVER] = ("the canary between two real SGLang servers on one GPU, its planted fault "
                      "and step breakdown (phase 3)")


def real_draft_extend(doc: dict) -> bool | None:
    """Whether a real-server run's flash servers ran EAGLE's draft-model extend through the kernel:
    its "draft_extend"; a file written before that key: on only with MLA_VERIFY_DRAFT_EXTEND=1 in
    its "plugin_env" (the default was off then). None for DFLASH (no EAGLE draft extend: its draft
    is a GQA model that stays on SGLang's kernels)."""
    if (doc.get("algorithm") or "EAGLE") != "EAGLE":
        return None
    if "draft_extend" in doc:
        return bool(doc["draft_extend"])
    return (doc.get("plugin_env") or {}).get("MLA_VERIFY_DRAFT_EXTEND") == "1"


def real_kv_cache_dtype(doc: dict) -> str:
    """The KV pool a real-server run's servers were asked for (the job's --kv-cache-dtype): its
    "kv_cache_dtype"; a file written before that key ran SGLang's default, auto (the model's bf16)."""
    return doc.get("kv_cache_dtype") or "auto"


def real_config(doc: dict) -> tuple:
    """What makes two real-server files the same configuration, so their parts may be shown
    together: emulated or not, GPU, algorithm (absent: EAGLE) and DFLASH's block, what the flash
    arm did with EAGLE's draft extend (real_draft_extend), the kernel's source hash and the KV
    pool (real_kv_cache_dtype: an fp8_e4m3 run's parts are never a bf16 run's)."""
    return (bool(doc.get("emulated")), doc.get("gpu"), doc.get("algorithm") or "EAGLE", doc.get("block_size"),
            real_draft_extend(doc), (doc.get("kernel") or {}).get("hash"), real_kv_cache_dtype(doc))


def _step_doc(main: dict, docs: list[dict], step: str) -> dict | None:
    """The file whose `step` phase 3 shows beside `main`: main's own, else the newest file of
    main's configuration with one, else the newest with one (of another configuration, which the
    page names)."""
    if (main.get("steps") or {}).get(step):
        return main
    has = [d for d in docs if (d.get("steps") or {}).get(step)]
    same = [d for d in has if real_config(d) == real_config(main)]
    return max(same or has, key=lambda d: d["_date"]) if has else None


def _merged_breakdowns(main: dict, docs: list[dict]) -> dict[int, dict]:
    """{layers: {"breakdown", "doc"}} over every file of main's configuration: per layer count the
    newest file that measured it itself (its own layer count, its own breakdown step), else the
    newest that carries it (the job copies its root's earlier breakdowns into later files)."""
    out: dict[int, tuple] = {}
    for d in docs:
        if real_config(d) != real_config(main):
            continue
        for k, b in (d.get("breakdowns") or {}).items():
            own = int(k) == d.get("layers") and bool((d.get("steps") or {}).get("breakdown"))
            rank = (own, d["_date"])
            if int(k) not in out or rank > out[int(k)][0]:
                out[int(k)] = (rank, {"breakdown": b, "doc": d})
    return {k: v for k, (_, v) in sorted(out.items())}


def _other_breakdowns(main: dict, docs: list[dict]) -> list[dict]:
    """[{"layers", "breakdown", "doc"}]: per configuration other than main's and per layer count,
    the newest file that profiled it itself (its own layer count and breakdown step, a classified
    profile), newest first: shown beside main's breakdowns, never merged into them."""
    out: dict[tuple, dict] = {}
    for d in sorted(docs, key=lambda d: d["_date"], reverse=True):
        if real_config(d) == real_config(main) or not (d.get("steps") or {}).get("breakdown"):
            continue
        b = (d.get("breakdowns") or {}).get(str(d.get("layers")))
        if b and b.get("classified"):
            out.setdefault((real_config(d), d.get("layers")), {"layers": d.get("layers"), "breakdown": b, "doc": d})
    return list(out.values())


def _merged_slopes(main: dict, docs: list[dict], merged: dict[int, dict]) -> tuple[dict | None, list[dict], bool]:
    """The per-layer slope over the merged breakdowns (breakdown.slopes of their classified
    profiles), the files it reads, and False; a recorded slope of main's configuration that covers
    more layer counts (its breakdowns from --prior files not in data_dir) wins: it, its file, True."""
    from kernel.sglang.real_server.breakdown import slopes

    classified = {k: m for k, m in merged.items() if (m["breakdown"] or {}).get("classified")}
    fit = slopes({k: m["breakdown"]["classified"] for k, m in classified.items()})
    recorded = [d for d in docs if real_config(d) == real_config(main) and (d.get("slopes") or {}).get("layers")]
    best = max(recorded, key=lambda d: (len(d["slopes"]["layers"]), d["_date"]), default=None)
    if best is not None and len(best["slopes"]["layers"]) > len((fit or {}).get("layers") or []):
        return best["slopes"], [best], True
    return fit, _unique(m["doc"] for m in classified.values()) if fit else [], False


def _unique(docs) -> list[dict]:
    seen, out = set(), []
    for d in docs:
        if d is not None and d["_path"] not in seen:
            seen.add(d["_path"])
            out.append(d)
    return out


def real_server(data_dir: str | Path, *, allow_fixture: bool = False) -> dict | None:
    """The real-server evidence phase 3 shows, chosen per part, None when there is no file.

    The device job writes one file per call, so one configuration's evidence is spread over
    several files. The returned doc is the canary run: the newest real file with a `canary` step
    (else the newest real file); only when no real file exists the newest emulated one (its
    "emulated": true, which the page must say): an emulated run never hides a real one. Attached:
      _planted_doc    the file whose `planted` step is shown (_step_doc: the run's own, else the
                      newest of its configuration, else the newest of any), or None
      _promote_doc    the same for `promote`
      _breakdowns     {layers: {"breakdown", "doc"}}: every file of the run's configuration
                      (real_config) merged by layer count; never another configuration's
      _slopes, _slopes_docs, _slopes_recorded  the per-layer slope over them (breakdown.slopes),
                      the files it reads, and whether it is a file's recorded one instead
      _other_breakdowns  per other configuration and layer count, the newest file's own classified
                      breakdown ({"layers", "breakdown", "doc"}, newest first), never merged
      _canaries       the newest file with a canary step of each configuration (real_config),
                      newest first, the run's own first: so a newer run of another algorithm
                      does not hide an older configuration's canary
      _files          every file used, the run first
    """
    docs = load_all(data_dir, REAL_SERVER) if Path(data_dir).is_dir() else []
    if not docs:
        return None
    for d in docs:   # a job older than its top-level provenance keys recorded the device only
        for k in ("gpu", "sms", "driver", "cuda", "torch"):
            d.setdefault(k, (d.get("device") or {}).get(k, "not recorded"))
        d.setdefault("commit", "not recorded")
    pool = [d for d in docs if not d.get("emulated")] or docs
    with_canary = [d for d in pool if (d.get("steps") or {}).get("canary")]
    main = max(with_canary or pool, key=lambda d: d["_date"])
    planted, promote = _step_doc(main, pool, "planted"), _step_doc(main, pool, "promote")
    merged = _merged_breakdowns(main, pool)
    fit, fit_docs, recorded = _merged_slopes(main, pool, merged)
    canaries: dict[tuple, dict] = {}
    for d in sorted(with_canary, key=lambda d: d["_date"], reverse=True):
        canaries.setdefault(real_config(d), d)
    others = _other_breakdowns(main, pool)
    files = _unique([main, planted, promote, *(m["doc"] for m in merged.values()), *fit_docs,
                     *canaries.values(), *(o["doc"] for o in others)])
    for d in files:
        _showable(d, allow_fixture)
    main.update(_planted_doc=planted, _promote_doc=promote, _breakdowns=merged, _slopes=fit,
                _slopes_docs=fit_docs, _slopes_recorded=recorded, _canaries=list(canaries.values()),
                _other_breakdowns=others, _files=files)
    return main


# The KV pool a measurement read (bench rows' and backend cases' "kv_dtype"): SGLang's bf16
# pool, or its fp8_e4m3 pool (kernel/FP8.md). Files written before fp8 carry no kv_dtype: bf16.
BF16_KV, FP8_KV = "bfloat16", "fp8_e4m3"


def row_kv(r: dict) -> str:
    """The pool a bench row or backend case read: FP8_KV, or BF16_KV (also for rows without
    the field, and for the backend's make_case name "auto")."""
    return FP8_KV if r.get("kv_dtype") == FP8_KV else BF16_KV


def bench_frame(doc: dict, *, variants: bool = False, kv_dtype: str = BF16_KV) -> pd.DataFrame:
    """One row per (configuration, impl) with 'label' and 'intensity' (FLOP/B) added.

    Rows of our kernel's variants (glossary.VARIANTS: a forced tier, a flushed L2) are left
    out unless variants=True, so no comparison, figure or median mixes them into `flash`.
    Rows of the other KV pool are left out too: kv_dtype BF16_KV (the default: every bf16
    comparison on the pages) or FP8_KV (fp8_bench_frame, which allows none).
    """
    rows = [r for r in doc.get("rows") or [] if (variants or r.get("impl") not in VARIANT_LABELS)
            and row_kv(r) == kv_dtype]
    if not rows:
        raise MeasurementError(f"{doc['_path']}: bench has no 'rows'"
                               + ("" if kv_dtype == BF16_KV else f" of kv_dtype {kv_dtype!r}"))
    df = pd.DataFrame(rows)
    missing = [c for c in BENCH_COLUMNS if c not in df.columns]
    if missing:
        raise MeasurementError(f"{doc['_path']}: bench rows lack columns {missing}")
    for k in ("read_GBps", "mma_TFLOPs"):
        if k not in doc.get("ceilings", {}):
            raise MeasurementError(f"{doc['_path']}: 'ceilings' lacks {k!r}")
    df["prefix"] = df["prefix_lens"].map(lambda p: ",".join(str(int(x)) for x in p))
    df["label"] = df["impl"].map(lambda i: IMPL_LABELS.get(i) or VARIANT_LABELS.get(i, i))
    df["intensity"] = df["flops"] / df["bytes"]
    return df


def ceilings(doc: dict) -> tuple[float, float]:
    """(read ceiling GB/s, matrix ceiling TFLOP/s), both measured in the same run as the rows."""
    return float(doc["ceilings"]["read_GBps"]), float(doc["ceilings"]["mma_TFLOPs"])


def select(df: pd.DataFrame, **eq) -> pd.DataFrame:
    """Rows whose columns equal the given values (e.g. sweep='S', impl='flash')."""
    mask = pd.Series(True, index=df.index)
    for k, v in eq.items():
        mask &= df[k] == v
    return df[mask]


def centre(df: pd.DataFrame) -> pd.DataFrame:
    """The centre configuration (S=185000, T=8, H=8, scattered page 1, batch 1), one row per
    impl; the centre appears in several sweeps, so the median time of its repeats is kept."""
    rows = select(df, **CENTRE)
    if rows.empty:
        return rows
    return (rows.groupby("impl", as_index=False)
            .agg(label=("label", "first"), time_us=("time_us", "median"),
                 GBps=("GBps", "median"), frac_roofline=("frac_roofline", "median"),
                 roofline_us=("roofline_us", "median")))


def speedups(df: pd.DataFrame, over: tuple[str, ...] = (BASELINE, SPLIT_KV)) -> pd.DataFrame:
    """Per configuration: our time and, for each other impl, its time and time_other / time_ours.

    Only configurations measured for both appear in a ratio (SGLang's split-KV verify handles
    chain trees only, so it may be absent from some sweeps).
    """
    keys = list(CONFIG_KEYS)
    wide = df.pivot_table(index=keys, columns="impl", values="time_us", aggfunc="median")
    if OURS not in wide.columns:
        raise MeasurementError(f"bench rows have no impl {OURS!r} (ours)")
    out = wide[[OURS]].rename(columns={OURS: "ours_us"})
    for impl in over:
        if impl in wide.columns:
            out[f"{impl}_us"] = wide[impl]
            out[f"x_over_{impl}"] = wide[impl] / wide[OURS]
    return out.reset_index()


def repeat_spread(df: pd.DataFrame, impl: str = OURS) -> tuple[int, float]:
    """(repeats, (max - min) / median) of impl's time at the centre configuration, which every
    sweep measures again: the run-to-run noise of this bench file, for reading small
    differences (a layout "slow-down" inside this band is noise)."""
    t = select(df, impl=impl, **CENTRE)["time_us"]
    if len(t) < 2:
        return len(t), float("nan")
    return len(t), float((t.max() - t.min()) / t.median())


def step_ms(df: pd.DataFrame, impl: str, S: int = CENTRE["S"], layers: int = LAYERS) -> float:
    """Attention time of one verify step (all layers) at the centre shape with prefix S, in ms."""
    rows = select(df, impl=impl, **{**CENTRE, "S": S})
    if rows.empty:
        raise MeasurementError(f"bench has no {impl!r} row at S={S} (centre T/H/layout)")
    return float(rows["time_us"].median()) * layers / 1e3


def validation_summary(doc: dict) -> dict:
    """Headline of a validation run: case count, tolerance, worst case, NaN-poison outcome."""
    cases = doc.get("cases") or []
    if len(cases) != doc.get("n_cases"):
        raise MeasurementError(f"{doc['_path']}: n_cases={doc.get('n_cases')} but "
                               f"{len(cases)} cases listed")
    worst = doc.get("worst") or max(cases, key=lambda c: c["rel_err"])
    return {
        "n_cases": len(cases),
        "n_pass": sum(bool(c["pass"]) for c in cases),
        "all_pass": bool(doc["all_pass"]) and all(c["pass"] for c in cases),
        "tolerance": doc["tolerance"],
        "max_rel_err": max(c["rel_err"] for c in cases),
        "max_lse_rel_err": max(c["lse_rel_err"] for c in cases),
        "nan_cases": sum(bool(c["nan"]) for c in cases),
        "unwritten_total": sum(int(c["unwritten"]) for c in cases),
        "worst": worst,
    }


def validation_groups(doc: dict) -> pd.DataFrame:
    """Cases grouped by tree shape and pool layout: count, worst errors, all passed."""
    df = pd.DataFrame(doc["cases"])
    g = df.groupby(["tree", "layout"], as_index=False).agg(
        cases=("id", "count"), worst_rel_err=("rel_err", "max"),
        worst_lse_rel_err=("lse_rel_err", "max"), nan_outputs=("nan", "sum"),
        unwritten_rows=("unwritten", "sum"), all_pass=("pass", "all"))
    return g


def validation_tiers(doc: dict) -> pd.DataFrame:
    """The validation's checks per kernel tier ('by_tier': every case runs at its default tier
    and again at the others its shape allows); empty for a file without it."""
    by = doc.get("by_tier") or {}
    rows = [{"tier": int(t), "tile": tier_name(int(t)), "checks": int(v["checks"]),
             "failing": int(v["failing"]),
             # None: no check ran at that tier (a short run's rotation did not reach it)
             "worst_rel_err": float("nan") if v["worst_rel_err"] is None else float(v["worst_rel_err"])}
            for t, v in by.items()]
    return pd.DataFrame(rows).sort_values("tier").reset_index(drop=True) if rows else pd.DataFrame()


# ---- SGLang's fp8_e4m3 KV pool: the validation's "fp8" section, bench rows, backend cases ----
def fp8_validation(doc: dict) -> dict | None:
    """The validation file's "fp8" section in brief: None when the file has none (written before
    fp8 validation, or with --fp8-cases 0); {"error": text} when it failed to run; else
    validation_summary's keys for it plus the variety it covered (k_scales: distinct k_scale
    values, split_scales: cases with v_scale != k_scale, nan_bytes: the NaN bytes poisoning
    unowned slots), graph_pass / graph_cases (CUDA-graph replay against eager) and seconds."""
    f = doc.get("fp8")
    if f is None:
        return None
    if f.get("error"):
        return {"error": str(f["error"])}
    s = validation_summary({**f, "_path": f"{doc['_path']} (section 'fp8')"})
    cases = f["cases"]
    graph = (f.get("graph") or {}).get("cases") or []
    s.update(k_scales=len({c.get("k_scale") for c in cases}),
             split_scales=sum(c.get("k_scale") != c.get("v_scale") for c in cases),
             nan_bytes=sorted({int(c["nan_byte"]) for c in cases if c.get("nan_byte") is not None}),
             graph_cases=len(graph), graph_pass=sum(bool(c.get("pass")) for c in graph),
             graph_max_diff=max((c["max_abs_diff_vs_eager"] for c in graph), default=None),
             seconds=f.get("seconds"))
    return s


def fp8_sglang_frame(doc: dict) -> pd.DataFrame:
    """The fp8 validation's comparison with SGLang's extend_attention_fwd on the same fp8 pool:
    per comparison (ours vs oracle, SGLang vs oracle, ours vs SGLang) the cases, median and
    largest relative error. Empty without it."""
    sg = pd.DataFrame(((doc.get("fp8") or {}).get("sglang") or {}).get("cases") or [])
    if sg.empty:
        return sg
    pairs = {"ours vs oracle": "rel_err", "SGLang vs oracle": "sglang_rel_err",
             "ours vs SGLang": "rel_err_vs_sglang"}
    return pd.DataFrame([{"comparison": k, "cases": int(sg[c].notna().sum()),
                          "median relative error": sg[c].median(),
                          "largest relative error": sg[c].max()} for k, c in pairs.items() if c in sg])


def fp8_bench_frame(doc: dict) -> pd.DataFrame:
    """bench_frame of the file's fp8_e4m3 rows; empty when it has none (files before fp8)."""
    if not any(row_kv(r) == FP8_KV for r in doc.get("rows") or []):
        return pd.DataFrame()
    return bench_frame(doc, kv_dtype=FP8_KV)


def fp8_speed(doc: dict) -> pd.DataFrame:
    """Ours on the fp8 pool per shape (median over the fp8 sweeps that repeat it): its time,
    tier and % of the fp8 roofline (the row's own: fp8 prefix bytes), with ours on the bf16
    pool at the same shape from the same file beside it: fp8_speedup = bf16 time / fp8 time,
    and roofline_ratio = bf16 roofline / fp8 roofline (what the bytes saved allow at most).
    Empty without fp8 rows; bf16 columns NaN where the bf16 sweeps lack the shape."""
    f8 = fp8_bench_frame(doc)
    if f8.empty:
        return f8
    keys = list(SHAPE_KEYS)
    ours = f8[f8["impl"] == OURS]
    if ours.empty:
        return pd.DataFrame()
    agg = dict(fp8_us=("time_us", "median"), frac=("frac_roofline", "median"),
               fp8_roofline_us=("roofline_us", "median"))
    if "tier" in ours:
        agg["tier"] = ("tier", "first")
    out = ours.groupby(keys, as_index=False).agg(**agg)
    try:
        bf = bench_frame(doc)
    except MeasurementError:   # a file of fp8 rows only: nothing to compare with
        bf = pd.DataFrame(columns=keys + ["impl", "time_us", "roofline_us"])
    bf = (bf[bf["impl"] == OURS].groupby(keys, as_index=False)
          .agg(bf16_us=("time_us", "median"), bf16_roofline_us=("roofline_us", "median")))
    out = out.merge(bf, on=keys, how="left")
    out["pct_fp8_roofline"] = 100 * out["frac"]
    out["fp8_speedup"] = out["bf16_us"] / out["fp8_us"]
    out["roofline_ratio"] = out["bf16_roofline_us"] / out["fp8_roofline_us"]
    if "tier" in out:
        out["tile"] = out["tier"].map(lambda t: tier_name(t) if t == t and t is not None else None)
    return out.sort_values(["batch", "page_size", "T", "S"]).reset_index(drop=True)


def integration_frame(doc: dict) -> pd.DataFrame:
    """SGLang-integration cases with the per-step speed-up triton_ms / plugin_ms added."""
    cases = doc.get("cases") or []
    if not cases:
        raise MeasurementError(f"{doc['_path']}: sglang-integration has no 'cases'")
    df = pd.DataFrame(cases)
    df["speedup"] = df["triton_ms_per_step"] / df["plugin_ms_per_step"]
    return df


def integration_headline(it: pd.DataFrame) -> pd.Series:
    """The integration case a headline quotes: the longest prefix, at the centre's T when it
    was measured (else the smallest T measured there)."""
    big = it[it["S"] == it["S"].max()]
    at_t = big[big["T"] == CENTRE["T"]]
    return (at_t if not at_t.empty else big.sort_values("T")).iloc[0]


# ---- kernel tiers: bench rows' "tier", the forced-rows64 and L2-flushed variants ----
SHAPE_KEYS = ("S", "prefix", "T", "H", "layout", "page_size", "batch")
ROWS64, L2FLUSHED = "flash_rows64", "flash_l2flushed"


def gpu_short(doc: dict | None) -> str:
    """The GPU a measurement or model file's figures come from, without the vendor ("H200"): a CPU
    model's (sm120_sim: "data_gpu", or its "none: a CPU model on <GPU> data") or the file's "gpu";
    the H200 where the file does not say (every file before the first H100 run of 2026-12-05)."""
    doc = doc or {}
    gpu = str(doc.get("data_gpu") or doc.get("gpu") or "NVIDIA H200")
    if gpu.startswith("none: a CPU model on ") and gpu.endswith(" data"):
        gpu = gpu.removeprefix("none: a CPU model on ").removesuffix(" data")
    return gpu.removeprefix("NVIDIA ")


def tier_name(tier) -> str:
    """A tier id as a reader reads it: 'rows64 (64-row tiles)', 'small (8-row tiles)'."""
    t = int(tier)
    if t not in TIER_ROWS:
        return f"tier {t} (not in notebooks.data.TIER_ROWS)"
    return f"{TIER_FAMILY[t]} ({TIER_ROWS[t]}-row tiles)"


def tier_phrase(tier) -> str:
    """A tier inside a sentence: 'rows64d' or 'the small tier, 8-row tiles'."""
    t = int(tier)
    if TIER_FAMILY.get(t) == "small":
        return f"the small tier, {TIER_ROWS[t]}-row tiles"
    return TIER_FAMILY.get(t, f"tier {t}")


def tier_frame(df: pd.DataFrame) -> pd.DataFrame:
    """Which tier served each configuration of ours (one row per configuration and tier,
    median over the sweeps that repeat it), with the 64-row tier forced beside it where the
    bench measured that (ROWS64): small_gain = rows64 time / default time.

    df is bench_frame(doc, variants=True); empty when the bench rows carry no 'tier'.
    """
    if "tier" not in df:
        return pd.DataFrame()
    ours = df[(df["impl"] == OURS) & df["tier"].notna()]
    if ours.empty:
        return pd.DataFrame()
    keys = list(SHAPE_KEYS)
    g = ours.groupby(keys + ["tier"], as_index=False).agg(
        ours_us=("time_us", "median"), frac=("frac_roofline", "median"))
    forced = (df[df["impl"] == ROWS64].groupby(keys, as_index=False)["time_us"].median()
              .rename(columns={"time_us": "rows64_us"}))
    g = g.merge(forced, on=keys, how="left")
    g["tier"] = g["tier"].astype(int)
    g["tile"] = g["tier"].map(tier_name)
    g["query_rows"] = g["H"] * g["T"]
    g["requests"] = g["batch"]
    g["pct_roofline"] = 100 * g["frac"]
    g["small_gain"] = g["rows64_us"] / g["ours_us"]
    return g.sort_values(["query_rows", "S", "batch", "layout", "page_size"]).reset_index(drop=True)


def centre_tier(tab: pd.DataFrame) -> int | None:
    """The tier that served the centre configuration (data.tier_frame), None if unrecorded."""
    if tab.empty:
        return None
    at = select(tab, **{k: v for k, v in CENTRE.items()})
    return int(at["tier"].iloc[0]) if not at.empty else None


def l2_flush_frame(df: pd.DataFrame) -> pd.DataFrame:
    """Ours with the L2 warm (the default timing) against L2 flushed before every call
    (L2FLUSHED), per configuration the bench flushed; df is bench_frame(doc, variants=True)."""
    keys = list(SHAPE_KEYS)
    fl = df[df["impl"] == L2FLUSHED]
    if fl.empty:
        return pd.DataFrame()
    fl = fl.groupby(keys, as_index=False).agg(flushed_us=("time_us", "median"),
                                                kv_bytes=("bytes", "first"))
    warm = (df[df["impl"] == OURS].groupby(keys, as_index=False)["time_us"].median()
            .rename(columns={"time_us": "warm_us"}))
    out = fl.merge(warm, on=keys, how="inner").sort_values("S")
    out["kv_mb"] = out["kv_bytes"] / 1e6
    out["flushed_over_warm"] = out["flushed_us"] / out["warm_us"]
    return out.reset_index(drop=True)


# ---- microbenchmarks (kernel/bench/micro.py): stream, mma, full per (S, T, H, tier) ----
MICRO_KEYS = ["S", "T", "H", "tier"]


def _pool_rows(df: pd.DataFrame, kv_dtype: str) -> pd.DataFrame:
    """The rows of one KV pool; a file from before the fp8 rows holds bf16 rows only."""
    pool = df["kv_dtype"] if "kv_dtype" in df else pd.Series(BF16_KV, index=df.index)
    return df[pool.fillna(BF16_KV) == kv_dtype].copy()


def _micro_rows(doc: dict, kv_dtype: str = BF16_KV) -> pd.DataFrame:
    rows = doc.get("rows") or []
    if not rows:
        raise MeasurementError(f"{doc['_path']}: microbench has no 'rows'")
    df = pd.DataFrame(rows)
    missing = [c for c in MICRO_KEYS + ["stage", "time_us", "rows_per_tile"] if c not in df]
    if missing:
        raise MeasurementError(f"{doc['_path']}: microbench rows lack columns {missing}")
    return _pool_rows(df, kv_dtype)


def micro_frame(doc: dict, kv_dtype: str = BF16_KV) -> pd.DataFrame:
    """One row per (S, T, H, tier) of a microbench file's rows on one KV pool (BF16_KV or
    FP8_KV): the stream stage's GB/s per L2 option and its best fraction of the read ceiling,
    the mma stage's SM clocks per 16-token tile, the full kernel's time and its merge's share.
    A stage the file did not run reads NaN."""
    df = _micro_rows(doc, kv_dtype)
    if df.empty:
        return pd.DataFrame(columns=MICRO_KEYS + ["tile", "fastest"])
    out = df.groupby(MICRO_KEYS, as_index=False).agg(rows_per_tile=("rows_per_tile", "first"),
                                                     tiles_per_cta=("tiles_per_cta", "first"))

    def add(part: pd.DataFrame, col: str, name: str, how: str = "median") -> None:
        nonlocal out
        val = (part.groupby(MICRO_KEYS)[col].agg(how).rename(name).reset_index()
               if not part.empty and col in part else pd.DataFrame(columns=MICRO_KEYS + [name]))
        out = out.merge(val, on=MICRO_KEYS, how="left")

    stream = df[df["stage"] == "stream"]
    opt = stream["option"] if "option" in stream else pd.Series(dtype=object)
    add(stream[opt == "plain"], "GBps", "stream_plain_gbps")
    add(stream[opt == "evict_first"], "GBps", "stream_evict_gbps")
    add(stream, "frac_read_ceiling", "stream_frac", "max")
    add(df[df["stage"] == "mma"], "clk_per_tile", "clk_per_tile")
    full = df[df["stage"] == "full"]
    add(full, "time_us", "full_us")
    add(full, "merge_us", "merge_us")
    out["tier"] = out["tier"].astype(int)
    out["tile"] = out["tier"].map(tier_name)
    fastest = out.loc[out.groupby(["S", "T", "H"])["full_us"].idxmin().dropna()]
    best = {(r.S, r.T, r.H): r.tier for r in fastest.itertuples()}
    out["fastest"] = [best.get((r.S, r.T, r.H)) == r.tier for r in out.itertuples()]
    return out.sort_values(["S", "T", "H", "tier"], ascending=[False, True, True, False]
                           ).reset_index(drop=True)


PARTS = ("math", "no_softmax", "no_qk", "no_pv", "softmax_only", "skeleton")


def parts_frame(doc: dict) -> pd.DataFrame:
    """The design D tiers' math-only microbenchmark with parts left out ('parts' rows): SM
    clocks per 16-token tile of one CTA per variant, one row per (S, T, H, tier), and what each
    part adds (the whole minus the whole without it). Empty when the file has no such rows."""
    df = pd.DataFrame([r for r in doc.get("rows", []) if r.get("stage") == "parts"])
    if df.empty:
        return df
    keys = ["S", "T", "H", "tier", "tiles_per_cta"]
    wide = df.pivot_table(index=keys, columns="part", values="clk_per_tile", aggfunc="median").reset_index()
    missing = [p for p in PARTS if p not in wide]
    if missing:
        raise MeasurementError(f"{doc['_path']}: parts rows lack {missing}")
    for part, without in (("softmax", "no_softmax"), ("qk", "no_qk"), ("pv", "no_pv")):
        wide[f"adds_{part}"] = wide["math"] - wide[without]
    wide["tier"] = wide["tier"].astype(int)
    wide["tile"] = wide["tier"].map(tier_name)
    return wide.sort_values(["S", "T", "tier"]).reset_index(drop=True)


FIXED_PARTS = {"time_us": "whole call", "no_merge_us": "without the merge",
               "math_alone_us": "math alone, without the merge"}


def fixed_cost_frame(doc: dict) -> pd.DataFrame:
    """A fixed-cost file's line fits (kernel/bench/fixed_cost.py), one row per pool, T and
    whole call, verify kernel alone or its math alone (files from 2026-12-06 on): the intercept
    (us, the call's cost beyond its KV bytes) and the marginal rate (GB/s of KV bytes) from the
    prefix lengths it fits; where the file has them, the line against the busiest CTA's tiles:
    its intercept (us a call) and a tile's SM clocks (NaN in older files)."""
    rows = [{"pool": f["kv_dtype"], "T": f["T"], "H": f["H"], "tile": tier_name(f["tier"]),
             "part": FIXED_PARTS[f["of"]], "fit_from_S": f["fit_from_S"], "intercept_us": f["intercept_us"],
             "marginal_gbps": f["marginal_GBps"], "tile_intercept_us": f.get("tile_intercept_us", float("nan")),
             "marginal_clk_per_tile": f.get("marginal_clk_per_tile", float("nan"))} for f in doc["fits"]]
    return pd.DataFrame(rows)


def trace_frame(doc: dict) -> pd.DataFrame:
    """A trace file's rows (kernel/bench/trace.py), one per shape and pool, in us: the launch
    spread of the CTAs with work (of all CTAs in files before 18:00 on 2026-12-01), schedule,
    prologue, the CTAs' loops (shortest, median, longest), how much longer the loops of the CTAs
    dispatched second on an SM run, the last store after the median one, the merge's last store
    after the verify kernel's last, and the traced span beside the graph-replayed time."""
    rows = []
    for r in doc["rows"]:
        rows.append({"pool": r["kv_dtype"], "S": r["S"], "T": r["T"], "H": r["H"], "tile": tier_name(r["tier"]),
                     "graph_us": r["graph_us"], "span_us": r.get("span_us"),
                     "launch_spread_us": r.get("working_launch_spread_us", r["verify_launch_spread_us"]),
                     "plan_us": r["plan_us"], "prologue_us": r.get("prologue_us"),
                     "loop_min_us": r.get("loop_min_us"), "loop_median_us": r.get("loop_median_us"),
                     "loop_max_us": r.get("loop_max_us"), "second_cta_us": r.get("second_cta_loop_excess_us"),
                     "store_tail_us": r.get("store_tail_us"),
                     "merge_after_us": r.get("merge_last_store_after_verify_us")})
    return pd.DataFrame(rows)


def micro_ladder(docs: list[dict]) -> tuple[pd.DataFrame, list[dict]]:
    """The full-kernel time of every (S, T, H, tier) that every given microbench file measured,
    one column per file, oldest first, named by its commit and time; and per file
    {"column", "file", "commit", "date"} for the caption."""
    docs = sorted(docs, key=lambda d: d["_date"])
    cols, files = [], []
    for d in docs:
        f = _micro_rows(d)
        name = f"{str(d['commit'])[:12]} ({d['_date']:%m-%d %H:%M})"
        cols.append(f[f["stage"] == "full"].groupby(MICRO_KEYS)["time_us"].median().rename(name))
        files.append({"column": name, "file": Path(d["_path"]).name, "commit": d["commit"],
                      "date": d["date"]})
    if not cols:
        return pd.DataFrame(), files
    wide = pd.concat(cols, axis=1, join="inner").reset_index()
    wide["tier"] = wide["tier"].astype(int)
    wide.insert(4, "tile", wide["tier"].map(tier_name))
    return (wide.sort_values(["S", "T", "H", "tier"], ascending=[False, True, True, False])
            .reset_index(drop=True), files)


SM120_COLUMNS = ("S", "T", "H", "tier", "clock", "clock_ghz", "h200_us", "h200_overlap",
                 "sm120_estimate_us", "sm120_overlapped_us", "sm120_memory_us", "sm120_math_us",
                 "sm120_floor_us", "bound")


def sm120_frame(doc: dict, kv_dtype: str = BF16_KV, clock: str | None = None) -> pd.DataFrame:
    """The sm_120 model file's rows (kind "sm120_model", kernel/bench/sm120_estimate.py: a MODEL
    built from GH100 microbenchmarks and sm_120's published figures, not a measurement) on one KV
    pool at one clock (default: the file's default_clock), with `lowest_estimate` marking the
    tier whose estimate (the serial bound) is lowest at each shape; empty when it has none."""
    rows = doc.get("rows") or []
    if not rows:
        return pd.DataFrame()
    df = _pool_rows(pd.DataFrame(rows), kv_dtype)
    if df.empty:
        return pd.DataFrame()
    missing = [c for c in SM120_COLUMNS if c not in df]
    if missing:
        raise MeasurementError(f"{doc['_path']}: sm120_model rows lack columns {missing}")
    clock = clock or doc.get("default_clock")
    df = df[df["clock"] == clock].copy()
    if df.empty:
        raise MeasurementError(f"{doc['_path']}: no sm120_model rows at clock {clock!r}")
    df["tier"] = df["tier"].astype(int)
    df["tile"] = df["tier"].map(tier_name)
    low = df.loc[df.groupby(["S", "T", "H"])["sm120_estimate_us"].idxmin()]
    best = {(r.S, r.T, r.H): r.tier for r in low.itertuples()}
    df["lowest_estimate"] = [best[(r.S, r.T, r.H)] == r.tier for r in df.itertuples()]
    return df.sort_values(["S", "T", "H", "tier"], ascending=[False, True, True, False]
                          ).reset_index(drop=True)


SM120_SIM_COLUMNS = ("kv_dtype", "T", "sm120_clk_per_tile_scaled", "sm120_clk_per_tile_shifted",
                     "first_model_clk_per_tile", "sm120_mma_floor_clk_per_tile", "sm120_math_us_low",
                     "sm120_math_us_high", "first_model_math_us", "mma_share_low", "mma_share_high",
                     "first_model_mma_share")


def sm120_sim_frame(doc: dict) -> pd.DataFrame:
    """The second sm_120 model's rows (kind "sm120_sim", kernel/bench/sm120_sim.py: rows64d's math
    simulated from sm_120's machine code, a MODEL): per pool and T, its range of clocks per 64-row
    tile and of math per call (low, high) beside the first model's and the MMAs' floor."""
    df = pd.DataFrame(doc.get("rows") or [])
    if df.empty:
        return df
    missing = [c for c in SM120_SIM_COLUMNS if c not in df]
    if missing:
        raise MeasurementError(f"{doc['_path']}: sm120_sim rows lack columns {missing}")
    df["clk_low"] = df[["sm120_clk_per_tile_scaled", "sm120_clk_per_tile_shifted"]].min(axis=1)
    df["clk_high"] = df[["sm120_clk_per_tile_scaled", "sm120_clk_per_tile_shifted"]].max(axis=1)
    return df.sort_values(["kv_dtype", "T"]).reset_index(drop=True)


def fp8_large_tiers(micro: dict, model: dict | None = None) -> pd.DataFrame:
    """On the fp8 pool, each microbench shape above 32 query rows per request that the file times
    at both small8's 32-row tiles (tier 4) and rows64d's fp8 copy (tier 8): the rows each pads to,
    both full-kernel times on the H200, both sm_120 estimates where the model file has them (a
    MODEL, not a measurement), and which tier is faster / lower in each. pick_tier chooses between
    these two above 32 rows. Empty when the file has no such shape."""
    mf = micro_frame(micro, FP8_KV)
    est = sm120_frame(model, FP8_KV) if model is not None else pd.DataFrame()
    out = []
    for (S, T, H), g in mf.groupby(["S", "T", "H"]):
        t = g.set_index("tier")
        rows = int(T * H)
        if rows <= 32 or not {4, 8} <= set(t.index) or t.loc[[4, 8], "full_us"].isna().any():
            continue
        r = {"S": int(S), "T": int(T), "H": int(H), "query_rows": rows,
             "rows_small8": -(-rows // TIER_ROWS[4]) * TIER_ROWS[4], "rows_copy": -(-rows // TIER_ROWS[8]) * TIER_ROWS[8],
             "h200_small8_us": float(t.loc[4, "full_us"]), "h200_copy_us": float(t.loc[8, "full_us"]),
             "model_small8_us": float("nan"), "model_copy_us": float("nan")}
        e = est[(est["S"] == S) & (est["T"] == T) & (est["H"] == H)].set_index("tier") if not est.empty else est
        if not e.empty and {4, 8} <= set(e.index):
            r["model_small8_us"] = float(e.loc[4, "sm120_estimate_us"])
            r["model_copy_us"] = float(e.loc[8, "sm120_estimate_us"])
        out.append(r)
    if not out:
        return pd.DataFrame()
    df = pd.DataFrame(out)
    name = {True: tier_name(4), False: tier_name(8)}
    df["h200_faster"] = [name[a < b] for a, b in zip(df["h200_small8_us"], df["h200_copy_us"])]
    df["model_lower"] = [name[a < b] if not (math.isnan(a) or math.isnan(b)) else "n/a"
                         for a, b in zip(df["model_small8_us"], df["model_copy_us"])]
    return df.sort_values(["S", "T", "H"], ascending=[False, True, True]).reset_index(drop=True)


def budget_steps(micro: dict) -> pd.DataFrame:
    """Where one more verified node per request costs a row tile: each microbench shape (S, T, H) on
    either pool whose T + 1 the file also times, the fastest tier's full-kernel time at both (measured,
    on the file's GPU) and the 64-row tiles each fills. DDTree verifies D = budget + 1 nodes, so a budget
    whose D x H is a multiple of 64 fills its tiles and one more node opens a tile of mostly padding.
    Empty when no such pair is in the file."""
    out = []
    for kv in (BF16_KV, FP8_KV):
        mf = micro_frame(micro, kv)
        if mf.empty:
            continue
        best = mf.dropna(subset=["full_us"]).loc[lambda d: d["fastest"]].set_index(["S", "T", "H"])
        for (S, T, H), r in best.iterrows():
            if (S, T + 1, H) not in best.index:
                continue
            n = best.loc[(S, T + 1, H)]
            tiles, tiles_next = -(-int(T * H) // 64), -(-int((T + 1) * H) // 64)
            if tiles_next == tiles:
                continue                  # the same tiles: not a budget's step
            out.append({"kv_dtype": kv, "S": int(S), "H": int(H), "T": int(T), "T_next": int(T + 1),
                        "tiles": tiles, "tiles_next": tiles_next,
                        "us": float(r["full_us"]), "us_next": float(n["full_us"]),
                        "tile": r["tile"], "tile_next": n["tile"]})
    df = pd.DataFrame(out)
    if not df.empty:
        df["ratio"] = df["us_next"] / df["us"]
    return df


def sm120_clocks_frame(doc: dict, kv_dtype: str = BF16_KV) -> pd.DataFrame:
    """Per shape, the tier the model ranks lowest at the default clock and its estimate and
    overlapped bound at every clock of the file (columns "<clock> estimate" / "<clock> overlapped",
    microseconds; a MODEL, not a measurement)."""
    base = sm120_frame(doc, kv_dtype)
    if base.empty:
        return base
    out = base[base["lowest_estimate"]][["S", "T", "H", "tier", "tile"]].copy()
    for clock in doc.get("clocks", {}):
        at = sm120_frame(doc, kv_dtype, clock).set_index(["S", "T", "H", "tier"])
        key = list(zip(out["S"], out["T"], out["H"], out["tier"]))
        out[f"{clock} estimate"] = [at.loc[k, "sm120_estimate_us"] for k in key]
        out[f"{clock} overlapped"] = [at.loc[k, "sm120_overlapped_us"] for k in key]
    return out.reset_index(drop=True)


def estimate_at(est: pd.DataFrame, tier: int | None, S: int = CENTRE["S"], T: int = CENTRE["T"],
                H: int = CENTRE["H"]) -> dict | None:
    """The sm_120 estimate row (a model) for one shape and tier, as a dict; None if absent."""
    if est.empty or tier is None:
        return None
    at = select(est, S=S, T=T, H=H, tier=tier)
    return at.iloc[0].to_dict() if not at.empty else None


_ROWSD_MANGLED = re.compile(r"mla_verify_kernel_rowsdILi(\d)ELi(\d)E")


def _readable_variant(variant: str) -> str:
    """A build record's variant as kernel.build names it now: a record made before the design D
    kernels had readable names kept their mangled <HALVES, DIAG> ones."""
    m = _ROWSD_MANGLED.search(variant)
    return f"rows{32 * int(m.group(1))}d" + ("_diag" if m.group(2) == "1" else "") if m else variant


# kernel.build's suffix of a tier's copy (Kind, kernel/csrc/verify_common.cuh) -> its words
_COPY = {None: "", "_diag": ", diagnostic copy", "_math": ", math-alone copy", "_modes": ", diagnostic-modes copy"}


def _variant_tier(variant: str) -> str:
    """The build record's variant name as a tile: small_nt4 -> small (32-row tiles), rows64,
    rows64d, rows32d_diag -> rows32d (32-row tiles), diagnostic copy, rows64d_fp8 -> rows64d
    (64-row tiles), fp8 copy, combine_r32 -> merge of 32-row tiles, combine_r32_few -> merge of
    32-row tiles, few-CTA shape; rows64d_tail -> rows64d (64-row tiles), tail kernel."""
    variant = _readable_variant(variant)
    if variant.endswith("_tail"):   # rows64d's tail kernels (tier_rowsd.cuh, TL)
        return _variant_tier(variant[:-5]) + ", tail kernel"
    if variant.endswith("_fp8"):   # the fp8_e4m3 pool's copy of a tier (kernel/FP8.md)
        return _variant_tier(variant[:-4]) + ", fp8 copy"
    m = re.fullmatch(r"small_nt(\d+)(_math|_modes)?", variant)
    if m:
        return tier_name(int(m.group(1))) + _COPY[m.group(2)]
    if variant == "rows64":
        return tier_name(0)
    if variant.startswith("rows64d_pair"):   # issue 25's opt-in rung (tier 9)
        return tier_name(9) + (_COPY["_diag"] if variant.endswith("_diag") else "")
    m = re.fullmatch(r"rows(32|64)d(_diag|_math|_modes)?", variant)
    if m:
        return tier_name(8 if m.group(1) == "64" else 6) + _COPY[m.group(2)]
    m = re.fullmatch(r"combine_r(\d+)(_few)?", variant)
    if not m:
        return variant
    return f"merge of {m.group(1)}-row tiles" + (", few-CTA shape" if m.group(2) else "")


def resources_frame(doc: dict, arch: str, beside: str = "sm_90") -> pd.DataFrame:
    """The bench file's build record ('resources') for our two kernels on `arch`: registers,
    spills, stack and static shared memory per variant (tier), with the registers on `beside`
    (the measured arch) next to them. The dynamic shared memory a tier asks for at launch is
    not in the record, so it is not here. Empty without a record for `arch`."""
    res = pd.DataFrame(doc.get("resources") or [])
    if res.empty or "arch" not in res or "variant" not in res:
        return pd.DataFrame()
    ours = res[res["kernel"].str.startswith("mla_verify")]
    on = ours[ours["arch"] == arch].copy()
    if on.empty:
        return on
    other = (ours[ours["arch"] == beside].set_index(["kernel", "variant"])["registers"]
             .rename("registers_sm90"))
    other = other[~other.index.duplicated()]
    on = on.join(other, on=["kernel", "variant"])
    on["tile"] = on["variant"].map(_variant_tier)
    on["variant"] = on["variant"].map(_readable_variant)
    return on[["kernel", "variant", "tile", "registers", "registers_sm90", "spill_stores",
               "spill_loads", "stack", "smem_static"]].reset_index(drop=True)


# ---- SGLang's real backend (kernel/sglang/backend_check.py) ----
ERRORS_RE = re.compile(r"ERROR SUMMARY: (\d+) error")


def _span(values) -> str:
    v = [int(x) for x in values or []]
    if not v:
        return "none"
    lo, hi = min(v), max(v)
    return f"{lo:,}" if lo == hi else f"{lo:,}-{hi:,}"


def _graph_covers(c: dict) -> str:
    ctl = "; against the control arm too" if c.get("control") else ""
    if ctl and row_kv(c) == FP8_KV and c.get("control_tol") is not None:
        ctl += f" (tolerance {c['control_tol']:g}: SGLang's fp8 kernel rounds q and P to e4m3)"
    pool = ""
    if row_kv(c) == FP8_KV:
        pool = (f"fp8_e4m3 pool, k_scale {c.get('k_scale'):g}, v_scale {c.get('v_scale'):g}, "
                if c.get("k_scale") is not None else "fp8_e4m3 pool, ")

    def reqs(n: int) -> str:
        return f"{n} request{'' if n == 1 else 's'}"
    algo = ""
    if c.get("algorithm") == "DFLASH":
        algo = f"DFLASH (SGLang's DFlashVerifyInput, a causal block of {c['draft']}), "
    elif c.get("algorithm") == "DDTREE":
        algo = (f"DDTree (pull request #29907's verify input: D = {int(c['budget']) + 1}, budget {c['budget']}, "
                f"topk {c.get('topk', 2)}, padded trees, on a server block of {c['draft']}), ")
    text = (f"{algo}{pool}{c['layers']} layers, H = {c['heads']}, T = {c['draft']}, page {c['page']}: graph "
            f"for batch {c['graph_bs']} captured with {reqs(c['capture_bs'])} (S "
            f"{_span(c['capture'])}, tree {c['tree']}), replayed with {reqs(c['replay_bs'])} (S "
            f"{_span(c['replay'])}, tree {c['replay_tree']}){ctl}")
    if c.get("refused"):
        text += f". NOT RUN: the plugin refused the flash arm: {c['refused']}"
    elif c.get("fallbacks") and c.get("rel_err_oracle_replay") is None:
        text += (". NOT RUN: every layer fell back to SGLang's kernel ("
                 + ", ".join(f"{k} x{n}" for k, n in sorted(c["fallbacks"].items())) + ")")
    elif c.get("fallbacks"):
        text += ("; FALLBACKS at capture: "
                 + ", ".join(f"{k} x{n}" for k, n in sorted(c["fallbacks"].items())))
    return text


def _max(*values):
    """The largest of the values that are numbers; None when none is (a case not run)."""
    nums = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
    return max(nums) if nums else None


def sanitizer_errors(c: dict) -> int | None:
    """The error count compute-sanitizer printed for a sanitizer case, None if unreadable."""
    m = ERRORS_RE.search(str(c.get("summary") or ""))
    return int(m.group(1)) if m else None


def backend_frame(doc: dict) -> pd.DataFrame:
    """One row per case of an sglang-backend file: what it covers, the KV pool it read ("kv":
    BF16_KV or FP8_KV), pass, its errors against the float64 oracle, its graph replay against
    eager and against the control arm, and the 61-layer graph's replay time on each arm (ms).
    A case that did not run (refused, or every layer fell back) has no errors (None)."""
    cases = doc.get("cases") or []
    if not cases:
        raise MeasurementError(f"{doc['_path']}: sglang-backend has no 'cases'")
    out = []
    for c in cases:
        kind = c.get("kind")
        row = {"case": c.get("name", "?"), "kv": row_kv(c), "pass": bool(c.get("pass"))}
        g = c.get("case") if kind == "sanitizer" else c
        if kind == "graph" or (kind == "sanitizer" and isinstance(g, dict)):
            row.update(
                oracle_err=_max(g["rel_err_oracle_capture"], g["rel_err_oracle_replay"]),
                graph_vs_eager=g["rel_err_graph_vs_eager"], bitwise=bool(g["graph_equals_eager"]),
                control_err=g.get("rel_err_vs_control"))
        if kind == "graph":
            row.update(covers=_graph_covers(c), flash_replay_ms=c.get("flash_replay_ms"),
                       control_replay_ms=c.get("control_replay_ms"))
        elif kind == "adaptive":
            row.update(covers="adaptive draft length: a backend for more draft tokens built after "
                       "a graph was captured must leave that graph's replays right and free nothing "
                       f"they write (memory sentinel intact: {'yes' if c.get('sentinel_intact') else 'NO'})",
                       oracle_err=c.get("rel_err_oracle"))
        elif kind == "sanitizer":
            n = sanitizer_errors(c)
            what = _graph_covers(g) if isinstance(g, dict) else "one capture and replay"
            row.update(covers=f"compute-sanitizer memcheck of {what}: "
                       f"{'errors unreadable' if n is None else f'{n} errors'}")
        else:
            row.update(covers=f"kind {kind!r}")
        out.append(row)
    df = pd.DataFrame(out)
    for col in ("oracle_err", "graph_vs_eager", "bitwise", "control_err", "flash_replay_ms",
                "control_replay_ms"):
        if col not in df:
            df[col] = None
    df["replay_speedup"] = (pd.to_numeric(df["control_replay_ms"], errors="coerce")
                            / pd.to_numeric(df["flash_replay_ms"], errors="coerce"))
    return df


def backend_summary(doc: dict, kv_dtype: str = BF16_KV) -> dict | None:
    """Headline of an sglang-backend file's cases on one KV pool (row_kv; the adaptive case is
    bf16): cases passing, memcheck outcome, worst errors. None for FP8_KV when the file has no
    fp8 case (written before fp8)."""
    df = backend_frame(doc)
    keep = [row_kv(c) == kv_dtype for c in doc["cases"]]
    if not any(keep):
        if kv_dtype == FP8_KV:
            return None
        raise MeasurementError(f"{doc['_path']}: sglang-backend has no {kv_dtype} case")
    cases = [c for c, k in zip(doc["cases"], keep) if k]
    df = df[keep].reset_index(drop=True)
    san = [c for c in cases if c.get("kind") == "sanitizer"]
    errors = [sanitizer_errors(c) for c in san]
    graph = [c for c in cases if c.get("kind") == "graph"]
    # cases that stopped before ours ran: refused by the plugin, or every layer fell back
    not_run = [c for c in graph if c.get("refused")
               or (c.get("fallbacks") and c.get("rel_err_oracle_replay") is None)]
    return {
        "n_cases": len(df), "n_pass": int(df["pass"].sum()),
        # the file's all_pass covers both pools: it must agree only when all cases are this pool's
        "all_pass": bool(df["pass"].all()) and (bool(doc.get("all_pass")) or not all(keep)),
        "memcheck_ran": bool(san),
        "memcheck_clean": bool(san) and all(e == 0 for e in errors)
        and all(c.get("returncode") == 0 and c.get("pass") for c in san),
        "memcheck_errors": errors,
        "graph_cases": len(graph), "bitwise": sum(bool(c.get("graph_equals_eager")) for c in graph),
        "not_run": [{"case": c.get("name", "?"), "refused": c.get("refused"),
                     "fallbacks": c.get("fallbacks") or {}} for c in not_run],
        "max_oracle_err": float(pd.to_numeric(df["oracle_err"], errors="coerce").max()),
        "max_control_err": float(pd.to_numeric(df["control_err"], errors="coerce").max()),
        "max_graph_vs_eager": float(pd.to_numeric(df["graph_vs_eager"], errors="coerce").max()),
        "layers": doc.get("layers"), "sglang": doc.get("sglang_version"),
        "triton": doc.get("triton_version"), "tol": doc.get("tol"),
        "control_tol": doc.get("fp8_control_tol") if kv_dtype == FP8_KV else doc.get("tol"),
    }


def fmt_us(us: float) -> str:
    """A time in microseconds as text with a unit that keeps 3 significant digits."""
    if not math.isfinite(us):
        return str(us)
    return f"{us / 1e3:.3g} ms" if us >= 1000 else f"{us:.3g} us"


def dcp_frame(doc: dict) -> pd.DataFrame:
    """One row per simulated DCP group size N of a dcp-sim file: correctness against the
    unsharded call, per-layer times (us), what the collectives move, KV memory per rank, and
    the per-step estimate for each assumed link (ms over all layers; positive = saved)."""
    rows = doc.get("rows") or []
    if not rows:
        raise MeasurementError(f"{doc['_path']}: dcp-sim has no 'rows'")
    full_kv = 576 * 2 * int(doc.get("layers") or 0)
    out = []
    for r in rows:
        row = {"ranks": r["N"], "heads_gathered": r["heads_gathered"],
               "shard_tokens": max(r["shard_lens"]), "pass": bool(r["pass"]),
               "err_vs_unsharded": r["rel_err_vs_unsharded"], "unsharded_us": r["unsharded_us"],
               "rank_us": r["rank_us_max"], "epilogue_us": r["epilogue_us"],
               "collective_kb": r["collective_bytes_per_layer"]["total"] / 1024,
               "kv_share": r["kv_bytes_per_token_per_rank"] / full_kv if full_kv else float("nan")}
        for link, e in (r.get("estimate") or {}).items():
            row[f"net_ms:{link}"] = e["net_saved_ms_per_step"]
        out.append(row)
    return pd.DataFrame(out).sort_values("ranks").reset_index(drop=True)


# ---- the production algorithm's shapes (issue 24): DFLASH blocks and DDTree's padded trees ----
ALGORITHM_NAMES = {"DFLASH": "DFLASH", "DDTREE": "DDTree", "dflash": "DFLASH", "ddtree": "DDTree"}


def _shape_text(r: dict) -> str:
    """What a production row or case verifies per request, in words."""
    if r.get("algorithm") == "DFLASH" or r.get("family") == "dflash":
        return f"a causal block of {int(r.get('block') or r['T'])} tokens (no mask)"
    sizes = [int(s) for s in r.get("tree_sizes") or []]
    D = int(r["budget"]) + 1
    real = f", {_span(sizes)} of {D} nodes real (the rest padding)" if sizes else ""
    return f"D = {D} nodes (budget {int(r['budget'])}, topk {int(r.get('topk') or 2)}){real}"


def production_validation(doc: dict) -> pd.DataFrame | dict | None:
    """The validation file's "production" section (kernel/bench/validate.py validate_production)
    per family and pool: cases, checks at every tier, failing checks, worst error against the
    oracle, the shapes covered, ours against SGLang's extend_attention_fwd. None for a file
    without the section (written before it); {"error": text} when it failed to run."""
    p = doc.get("production")
    if p is None:
        return None
    if "error" in p:
        return {"error": str(p["error"])}
    cases = pd.DataFrame(p.get("cases") or [])
    if cases.empty:
        raise MeasurementError(f"{doc['_path']}: section 'production' has no cases")
    sg = pd.DataFrame((p.get("sglang") or {}).get("cases") or [])
    out = []
    for key, f in (p.get("families") or {}).items():
        mine = cases[(cases["family"] == f["family"]) & (cases["kv_dtype"] == f["kv_dtype"])]
        if f["family"] == "dflash":
            shapes = f"blocks of {_span(list(mine['block']))} tokens, causal"
        else:
            sizes = [n for s in mine["tree_sizes"] for n in s]
            shapes = (f"budgets {', '.join(str(int(b)) for b in sorted(set(mine['budget'])))}, topk "
                      f"{', '.join(str(int(k)) for k in sorted(set(mine['topk'])))}, trees of {_span(sizes)} nodes "
                      "padded to D = budget + 1")
        s = sg[(sg["family"] == f["family"]) & (sg["kv_dtype"] == f["kv_dtype"])] if not sg.empty else sg
        out.append({"algorithm": ALGORITHM_NAMES[f["family"]], "pool": f["kv_dtype"], "cases": int(f["n_cases"]),
                    "n_checks": int(f["n_checks"]), "n_failing": int(f["failing"]),
                    "worst_rel_err": float(f["worst_rel_err"]),
                    "batches": _span([len(x) for x in mine["prefix_lens"]]), "shapes": shapes,
                    "no_nan": not bool(mine["nan"].any()) and all(not t["nan"] for ts in mine["tiers"] for t in ts),
                    "vs_sglang_max": float(s["rel_err_vs_sglang"].max()) if not s.empty else float("nan")})
    return pd.DataFrame(out)


def production_frame(doc: dict) -> pd.DataFrame:
    """The bench's production rows (sweeps dflash, ddtree and their fp8_ twins: rows with
    "algorithm"), one per shape and pool: ours at its default tier against the roofline of the
    ceilings measured in the same run, which term bounds it, SGLang's extend_attention_fwd at the
    same shape (bf16 pool), the 61-layer step, and ours at this shape over ours at the centre
    (T = 8) on the same pool, batch and prefixes (n/a where the bench has no T = 8 row of them).
    Empty for a file without them."""
    rows = [r for r in doc.get("rows") or [] if r.get("algorithm")]
    if not rows:
        return pd.DataFrame()
    read, mma = ceilings(doc)
    df = pd.DataFrame(rows)
    df["pool"] = [row_kv(r) for r in rows]
    ours = df[df["impl"] == OURS]
    out = []
    for _, o in ours.iterrows():
        same = df[(df["algorithm"] == o["algorithm"]) & (df["pool"] == o["pool"]) & (df["T"] == o["T"])
                  & (df["batch"] == o["batch"])]
        sgl = same[same["impl"] == BASELINE]
        centre_rows = [r for r in doc["rows"] if r.get("impl") == OURS and row_kv(r) == o["pool"]
                       and not r.get("algorithm") and r.get("T") == CENTRE["T"] and r.get("H") == o["H"]
                       and r.get("layout") == o["layout"] and r.get("page_size") == o["page_size"]
                       and list(r.get("prefix_lens") or []) == list(o["prefix_lens"])]
        centre_us = float(pd.Series([r["time_us"] for r in centre_rows]).median()) if centre_rows else float("nan")
        mem_us, math_us = o["bytes"] / (read * 1e3), o["flops"] / (mma * 1e6)
        out.append({"algorithm": ALGORITHM_NAMES[o["algorithm"]], "pool": o["pool"], "T": int(o["T"]),
                    "batch": int(o["batch"]), "S": int(o["S"]), "H": int(o["H"]), "shape": _shape_text(o.to_dict()),
                    "prefixes": _span(o["prefix_lens"]),
                    "tile": tier_name(o["tier"]) if pd.notna(o.get("tier")) else "n/a",
                    "query_rows": int(o["T"] * o["H"]), "ours_us": float(o["time_us"]),
                    "roofline_us": float(o["roofline_us"]), "pct_roofline": 100 * float(o["frac_roofline"]),
                    "roofline_bound": "memory" if mem_us >= math_us else "math",
                    "sglang_us": float(sgl["time_us"].median()) if not sgl.empty else float("nan"),
                    "step_ms": float(o["time_us"]) * LAYERS / 1e3, "vs_centre": float(o["time_us"]) / centre_us})
    g = pd.DataFrame(out)
    g["speedup"] = g["sglang_us"] / g["ours_us"]
    return g.sort_values(["pool", "algorithm", "T", "batch"], ascending=[True, False, True, True]).reset_index(drop=True)


def sink_frame(doc: dict) -> pd.DataFrame:
    """A sink_check file's rows: pool, S, gap (nats), tail mass, ours and SGLang's relative error
    against the float64 oracle (SGLang's NaN where its kernel did not run)."""
    rows = [{"pool": r["kv_dtype"] if r["kv_dtype"] != "auto" else BF16_KV, "S": r["S"], "gap (nats)": r["gap_nats"],
             "tail mass": r["tail_mass"], "ours": r["rel_err"], "SGLang": r.get("sglang_rel_err", float("nan"))}
            for r in doc["rows"]]
    return pd.DataFrame(rows)


def sink_lost(frame: pd.DataFrame) -> pd.Series:
    """SGLang's fp8 errors in a sink_frame where its e4m3 P must lose the tail: the sink 8 nats or
    more up (the tail's P below e^-8, under e4m3's 2^-9 after the spread) and the tail holding
    more than half of the mass."""
    return frame[(frame["pool"] == FP8_KV) & (frame["gap (nats)"] >= 8) & (frame["tail mass"] > 0.5)]["SGLang"]
