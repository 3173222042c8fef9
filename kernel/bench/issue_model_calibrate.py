"""issue_model against the measurements: every rows64d variant `overlap` timed, loads off or on.

For each rung file (reports/data/rungs/overlap*.json) and build in it, the measured ratio of its
no_loads time (--mode no_loads) or full time (--mode full) to production's in the same file (tier
8, KV from DRAM; mean over the files that repeat it) beside the model's ratio of the two builds,
each rebuilt for sm_90 from the commit the file names (`git archive` of kernel/csrc, nvcc -cubin
with the project's flags and the build's defines). With loads off the model runs the copy no_loads
ran (MATH_ALONE where the build has it); with loads on, the production copy's paths with the copies
taken, which charges their issue and shared-memory wavefronts but no DRAM time. Skipped:
dirty-tree commits, and the variants that changed which copy a mode runs (SKIP), for which the
path rule cannot tell what ran. Writes one JSON with every point and, per pool, the correlation,
the mean absolute error and the sign agreement where the measurement moved more than 1.5 %. Needs
git history and nvcc; ~20 s a build on one core.

    python -m kernel.bench.issue_model_calibrate [--mode no_loads|full] [--jobs 2] [--cache DIR] [--out DIR]
"""
from __future__ import annotations

import argparse
import functools
import glob
import hashlib
import json
import math
import statistics
import subprocess
import tempfile
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .. import build
from . import issue_model, probe_sass

ROOT = Path(__file__).resolve().parents[2]
SKIP = {"modes_runtime": "its no_loads ran the copy with run-time mode tests",
        "mode_const": "the mode bits compile-time constants: no_loads ran another copy",
        "loads_const": "as mode_const", "math_const": "as mode_const"}
POOLS = {"bfloat16": "mla_verify_kernel_rowsd", "fp8_e4m3": "mla_verify_kernel_rowsd_fp8"}


def measured(files, mode: str = "no_loads", gpu: str = "NVIDIA H200") -> list[dict]:
    """One row per (pool, commit, build, T): the mean ratio of its `mode` time to production's, over
    the files measured on `gpu` (a file that does not say is taken as gpu's): the model's MMA rate is
    the H200's, and an H100 runs the same code in 3-4 % fewer clocks (kernel/NOTES.md, 2026-12-05)."""
    acc = defaultdict(list)
    for f in files:
        d = json.loads(Path(f).read_text())
        if d.get("gpu", gpu) != gpu:
            continue
        pool, commit = d.get("kv_dtype") or "bfloat16", d.get("commit", "")
        t = defaultdict(list)
        defines = {}
        for r in d.get("rows", []):
            if r.get("tier") == 8 and r.get("mode") == mode and r.get("placement", "dram") == "dram":
                t[(r["build"], r["T"])].append(r["time_us"])
                defines[r["build"]] = tuple(r.get("defines", ()))
        for (b, T), v in t.items():
            if b != "production" and ("production", T) in t and b not in SKIP and "+" not in commit:
                acc[(pool, commit, b, defines[b], T)].append(statistics.mean(v) / statistics.mean(t[("production", T)]))
    return [{"pool": k[0], "commit": k[1], "build": k[2], "defines": list(k[3]), "T": k[4],
             "measured": statistics.mean(v), "files": len(v)} for k, v in sorted(acc.items())]


def cubin(commit: str, defines, cache: Path) -> Path:
    """sm_90 machine code of kernel/csrc at `commit` with `defines`, built once into `cache`."""
    tag = commit + "-" + (hashlib.sha1(" ".join(defines).encode()).hexdigest()[:8] if defines else "production")
    out = cache / f"{tag}.cubin"
    if out.exists():
        return out
    with tempfile.TemporaryDirectory() as src:
        subprocess.run(f"git -C {ROOT} archive {commit} kernel/csrc | tar -x -C {src}", shell=True, check=True)
        flags = [f for f in build._flags(defines) if f not in ("-shared", "-Xcompiler", "-fPIC", "-Xptxas", "-v")]
        tmp = out.with_suffix(".tmp")
        r = subprocess.run([build.find_nvcc(), *flags, "-cubin", "-arch", "sm_90",
                            str(Path(src) / "kernel/csrc/mla_verify.cu"), "-o", str(tmp)], capture_output=True, text=True)
        if r.returncode:
            raise build.BuildError(f"nvcc failed for {tag}: {r.stderr[-2000:]}")
        tmp.rename(out)
    return out


def function(fns, pool: str, mode: str = "no_loads") -> tuple[str, bool]:
    """The copy `mode` ran. no_loads: the MATH_ALONE one (Kind 2) where the build has it, else
    production's with its copies skipped; full: production's (Kind 0, or the one copy of builds
    before Kinds) with its copies taken. Returns (name, loads flag for the path rule)."""
    stem = f"{len(POOLS[pool])}{POOLS[pool]}ILi2E"
    names = [n for n in fns if stem in n and n.endswith("EEvNS_6ParamsE")]
    math_alone = next((n for n in names if f"{stem}Li2EE" in n), None)
    if mode == "no_loads" and math_alone:
        return math_alone, False
    production = next((n for n in names if f"{stem}Li0EE" in n or f"{stem}EE" in n), None)
    if production is None:
        raise probe_sass.SassError(f"no HALVES=2 rows64d function for {pool} ({mode}) among {len(fns)}")
    return production, mode == "full"


@functools.lru_cache(maxsize=None)
def _sass(path: Path) -> str:
    """A cubin's machine code, disassembled once for both pools."""
    return subprocess.run([probe_sass.find_cuobjdump(), "-sass", str(path)], capture_output=True, text=True).stdout


def predict(path: Path, pool: str, params: dict, mode: str = "no_loads") -> float:
    sass = _sass(path)
    name, loads = function(probe_sass.parse(sass), pool, mode)
    return issue_model.simulate(issue_model.loop_paths(sass, name, loads), params)["cycles_per_tile"]


def summary(rows) -> dict:
    xs = [r["measured"] - 1 for r in rows]
    ys = [r["model"] - 1 for r in rows]
    big = [(a, b) for a, b in zip(xs, ys) if abs(a) > 0.015]
    corr = statistics.correlation(xs, ys) if len(rows) > 2 and statistics.pstdev(ys) > 0 else math.nan
    return {"points": len(rows), "correlation": corr, "mean_abs_error_points": 100 * statistics.mean(abs(a - b) for a, b in zip(xs, ys)),
            "sign_agrees": sum((a > 0) == (b > 0) for a, b in big), "of_moved_over_1_5_percent": len(big)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mode", choices=("no_loads", "full"), default="no_loads",
                    help="the measured time the model's ratio stands beside (full: the model with the copies taken)")
    ap.add_argument("--gpu", default="NVIDIA H200", help="the GPU whose overlap files are read (default: the H200, "
                    "whose MMA rate the model takes)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "mlav-issue-model")
    ap.add_argument("--out", type=Path, default=ROOT / "reports/data/rungs")
    a = ap.parse_args(argv)
    a.cache.mkdir(parents=True, exist_ok=True)
    rows = measured(sorted(glob.glob(str(ROOT / "reports/data/rungs/overlap*.json"))), a.mode, a.gpu)
    builds = sorted({(r["commit"], tuple(d)) for r in rows for d in (r["defines"], ())})
    print(f"issue_model_calibrate: {len(rows)} measured points ({a.mode}), {len(builds)} sm_90 builds", flush=True)
    with ThreadPoolExecutor(a.jobs) as ex:
        paths = dict(zip(builds, ex.map(lambda b: cubin(b[0], b[1], a.cache), builds)))
    cycles = {}
    for r in rows:
        for d in (tuple(r["defines"]), ()):
            k = (r["commit"], d, r["pool"])
            if k not in cycles:
                cycles[k] = predict(paths[(r["commit"], d)], r["pool"], {}, a.mode)
        r["model"] = cycles[(r["commit"], tuple(r["defines"]), r["pool"])] / cycles[(r["commit"], (), r["pool"])]
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    out = {"kind": "issue-model-calibration", "mode": a.mode, "date": time.strftime("%Y%m%dT%H%M"), "commit": commit,
           "params": issue_model.PARAMS,
           "skipped": SKIP, "rows": rows,
           "summary": {f"{p} T={T}": summary([r for r in rows if r["pool"] == p and r["T"] == T])
                       for p in POOLS for T in (8, 16, 32) if any(r["pool"] == p and r["T"] == T for r in rows)}}
    a.out.mkdir(parents=True, exist_ok=True)
    f = a.out / f"issue-model-calibration-cpu-{out['date']}{'' if a.mode == 'no_loads' else '-' + a.mode}.json"
    f.write_text(json.dumps(out, indent=1))
    print(f"{'pool':9s} {'T':>3s} {'points':>6s} {'corr':>6s} {'mae pts':>8s} {'sign':>7s}")
    for k, s in out["summary"].items():
        p, T = k.split(" T=")
        print(f"{p:9s} {T:>3s} {s['points']:6d} {s['correlation']:6.2f} {s['mean_abs_error_points']:8.2f} "
              f"{s['sign_agrees']:3d}/{s['of_moved_over_1_5_percent']:<3d}")
    print(f"wrote {f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
