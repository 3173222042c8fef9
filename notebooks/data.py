"""The newest measurement of each kind in reports/data/, and the tables the phase notebooks show.

Read-only: data flows kernel -> reports/data/*.json -> notebooks -> HTML, never back.
Times are microseconds (`time_us`) or milliseconds (`*_ms*`), bandwidths GB/s (1e9 B/s),
throughputs TFLOP/s (1e12 FLOP/s), intensities FLOP per byte.
"""
from __future__ import annotations

import json
import math
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd

from .glossary import IMPL_LABELS

PROVENANCE_KEYS = ("gpu", "sms", "driver", "cuda", "torch", "commit", "date")
LAYERS = 61  # Kimi-K2 / DeepSeek-V3 decoder layers, each with one MLA attention
CENTRE = {"S": 185000, "T": 8, "H": 8, "layout": "scattered", "page_size": 1, "batch": 1}
CONFIG_KEYS = ("sweep", "S", "prefix", "T", "H", "layout", "page_size", "batch")
# SGLang 0.5.23 extend_attention_fwd tiles draft tokens by BLOCK_M = 32 on sm_90 and sm_120,
# so its CUDA grid is batch x heads x ceil(T / 32): the "8 thread blocks" of the baseline.
EXTEND_BLOCK_M = 32
OURS, BASELINE, SPLIT_KV, NAIVE = "flash", "sglang_extend", "sglang_verify_mla", "torch_naive"
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
    "microbench": "kernel microbenchmarks (not analysed by any report yet)",
    "sglang-backend": "SGLang real-backend GPU run (not analysed by any report yet)",
    "rollout-ab": "canary A/B results written by the rollout tool",
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
        doc = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
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
    for path in sorted(data_dir.glob("*.json")):
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
    for path in sorted(Path(data_dir).glob("*.json")):
        try:
            doc = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        k = doc.get("kind") if isinstance(doc, dict) else None
        if not k or k in shown_kinds:
            continue
        date = str(doc.get("date", ""))
        if k not in newest_of or date > newest_of[k][1]:
            newest_of[k] = (path.name, date)
    return [{"kind": k, "file": f, "date": d, "what": KINDS.get(k, "unknown kind")}
            for k, (f, d) in sorted(newest_of.items())]


def bench_frame(doc: dict) -> pd.DataFrame:
    """One row per (configuration, impl) with 'label' and 'intensity' (FLOP/B) added."""
    rows = doc.get("rows") or []
    if not rows:
        raise MeasurementError(f"{doc['_path']}: bench has no 'rows'")
    df = pd.DataFrame(rows)
    missing = [c for c in BENCH_COLUMNS if c not in df.columns]
    if missing:
        raise MeasurementError(f"{doc['_path']}: bench rows lack columns {missing}")
    for k in ("read_GBps", "mma_TFLOPs"):
        if k not in doc.get("ceilings", {}):
            raise MeasurementError(f"{doc['_path']}: 'ceilings' lacks {k!r}")
    df["prefix"] = df["prefix_lens"].map(lambda p: ",".join(str(int(x)) for x in p))
    df["label"] = df["impl"].map(lambda i: IMPL_LABELS.get(i, i))
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


def fmt_us(us: float) -> str:
    """A time in microseconds as text with a unit that keeps 3 significant digits."""
    if not math.isfinite(us):
        return str(us)
    return f"{us / 1e3:.3g} ms" if us >= 1000 else f"{us:.3g} us"
