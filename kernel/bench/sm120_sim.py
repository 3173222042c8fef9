"""A second sm_120 model of rows64d's math, from sm_120's own machine code: a model, on the CPU.

    python -m kernel.bench.sm120_sim [--lib DIR] [--data reports/data] [--micro FILE] [--model FILE] [--out DIR]

`sm120_estimate` takes a tile's math on sm_120 as the H200's non-MMA clocks plus the MMAs at sm_120's
rate, added: nothing measured on the H200 says how much of the non-MMA work (softmax, barriers, loop)
would hide under MMAs that take 2.3 times the clocks. The machine code can say. ptxas spaces one warp's
HMMA.16816 16 cycles apart on sm_120 (a stall of 15 and a NOP, or a load in the gap) against 6 on sm_90:
sm_120's 0.25 MMA a clock and SM over its 4 schedulers, so a warp in its MMAs holds its scheduler's
tensor pipe by itself and leaves the issue slots to the other half's warp. `issue_model` runs both
builds' steady tiles (8 warps, control words, one tensor pipe a scheduler: 6.85 cycles an HMMA on sm_90,
the H200's measured 8-warp ceiling; 16 on sm_120, its published rate) and this carries the sm_90 run's
shortfall against the H200's measured clocks per tile at each shape over to sm_120, two ways: as a
ratio (scaled) and as the same clocks (shifted). The two bracket the estimate; neither is measured.

Inputs (never typed by hand): the built library (default: production's, by source hash), a microbench
file (rows64d's math alone per tile on the H200, stage mma) and the sm120_model file of the same micro
file (its tiles per CTA and its math per tile, shown beside). Output: sm120-sim-*.json (kind
"sm120_sim"), one row per pool and T.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from collections import Counter
from pathlib import Path

from .. import build
from . import issue_model, probe_sass, sm120_estimate
from .env import git_commit

ARCHS = ("90", "120")
POOLS = {"bf16": "bfloat16", "fp8": sm120_estimate.FP8}
SCHEDULERS = 4
# a scheduler's tensor pipe per HMMA.16816: sm_90 the issue model's (the H200's measured 8-warp
# ceiling), sm_120 its published rate per SM spread over its schedulers
PIPE_CYCLES = {"90": issue_model.PARAMS["hmma_cycles"],
               "120": SCHEDULERS / sm120_estimate.SM120["mma_per_clk_sm"]}
TIER = 8                                  # rows64d: the tier the model's math-bound shapes pick


def hmma_spacing(path: list[issue_model.Op]) -> Counter:
    """{cycles: count}: the control words' cycles from each HMMA of a steady path to the warp's next
    HMMA (its own stall and every instruction's between), the path read round the loop once."""
    out, n = Counter(), len(path)
    for i, x in enumerate(path):
        if not x.op.startswith("HMMA"):
            continue
        cycles = max(x.stall, 1)
        for k in range(i + 1, i + n):
            y = path[k % n]
            if y.op.startswith("HMMA"):
                out[cycles] += 1
                break
            cycles += max(y.stall, 1)
    return out


def simulate(lib_dir: Path, seeds: int = 4, tiles: int = 24, warm: int = 6) -> dict:
    """{arch: {pool: {"math": cycles a tile, "copies": cycles a tile, "spacing": {cycles: count}}}}:
    the issue model on each arch's machine code at that arch's tensor-pipe rate; math runs the copy
    `overlap` times as no_loads (MATH_ALONE), copies the verify kernel with its copies taken."""
    out: dict = {}
    for arch in ARCHS:
        sass = probe_sass.sass_of(lib_dir, arch)
        for pool in POOLS:
            row: dict = {}
            for key, loads in (("math", False), ("copies", True)):
                paths = issue_model.loop_paths(sass, issue_model.FUNCTIONS[(pool, loads)], loads)
                r = issue_model.simulate(paths, {"hmma_cycles": PIPE_CYCLES[arch], "seeds": seeds}, tiles, warm)
                row[key] = r["cycles_per_tile"]
                if loads:
                    row["spacing"] = {str(c): v for c, v in sorted(sum((hmma_spacing(p) for p in paths), Counter()).items())}
            out.setdefault(arch, {})[pool] = row
    return out


def _h200_math(micro: dict) -> dict:
    """{(kv_dtype, T): the H200's measured math-alone clocks per tile of rows64d} at 185k, H = 8."""
    out = {}
    for r in micro["rows"]:
        if r["stage"] == "mma" and r["tier"] == TIER and r["S"] == 185000 and r["H"] == 8:
            out.setdefault((sm120_estimate._pool(r), r["T"]), r["clk_per_tile"])
    return out


def clk_range(r: dict) -> tuple[float, float]:
    """A row's sm_120 clocks a tile, (low, high): its scaled and shifted estimates in order."""
    return tuple(sorted((r["sm120_clk_per_tile_scaled"], r["sm120_clk_per_tile_shifted"])))


def rows(sim: dict, micro: dict, model_doc: dict, clock: str = sm120_estimate.DEFAULT_CLOCK) -> list[dict]:
    """Per pool and T (185k, H = 8, rows64d): sm_120's math per tile and per call, scaled and shifted
    from the sm_90 run's shortfall at that shape, beside the first model's and the MMAs' floor."""
    meas = _h200_math(micro)
    ghz = model_doc["clocks"][clock]
    first = {(r["kv_dtype"], r["T"]): r for r in model_doc["rows"]
             if r["tier"] == TIER and r["S"] == 185000 and r["H"] == 8 and r["clock"] == clock}
    out = []
    for pool, kv in POOLS.items():
        s90, s120 = sim["90"][pool]["math"], sim["120"][pool]["math"]
        for (k, T), m90 in sorted(meas.items()):
            if k != kv or (kv, T) not in first:
                continue
            f = first[(kv, T)]
            floor = f["mmas_per_tile"] / sm120_estimate.SM120["mma_per_clk_sm"]
            scaled, shifted = s120 * m90 / s90, s120 + (m90 - s90)
            lo, hi = sorted((scaled, shifted))
            tiles = f["sm120_tiles_per_cta"]
            out.append({"kv_dtype": kv, "T": T, "S": 185000, "H": 8, "tier": TIER, "clock": clock,
                        "h200_math_clk_per_tile": m90, "sim_sm90_clk_per_tile": s90, "sim_sm120_clk_per_tile": s120,
                        "sm120_clk_per_tile_scaled": scaled, "sm120_clk_per_tile_shifted": shifted,
                        "sm120_mma_floor_clk_per_tile": floor, "first_model_clk_per_tile": f["sm120_clk_per_tile"],
                        "sm120_tiles_per_cta": tiles,
                        "sm120_math_us_low": tiles * lo / (ghz * 1e3), "sm120_math_us_high": tiles * hi / (ghz * 1e3),
                        "first_model_math_us": f["sm120_math_us"],
                        "mma_share_low": floor / hi, "mma_share_high": floor / lo,
                        "first_model_mma_share": floor / f["sm120_clk_per_tile"]})
    return out


def document(sim: dict, micro: dict, model_doc: dict, names: dict, lib_dir: Path, commit: str) -> dict:
    """The sm120_sim file: the H200 provenance of its measured input (the micro file's gpu, driver...),
    the commit whose machine code it simulated, and its rows."""
    prov = {k: micro[k] for k in ("sms", "driver", "cuda", "torch") if k in micro}
    return {**prov, "kind": "sm120_sim", "commit": commit, "gpu": f"none: a CPU model on {micro.get('gpu', '?')} data",
            "data_gpu": micro.get("gpu"),
            "kernel_source": lib_dir.name.split("-")[0],
            "model": "a model, not a measurement: kernel/bench/sm120_sim.py, issue_model on the sm_90 and "
                     "sm_120 machine code, scaled by the sm_90 run's shortfall against the H200's clocks",
            "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "inputs": {**names, "library": lib_dir.name},
            "params": {**issue_model.PARAMS, "pipe_cycles": PIPE_CYCLES},
            "sim": sim, "rows": rows(sim, micro, model_doc)}


def table(doc: dict) -> list[str]:
    out = [f"sm_120 MODEL of rows64d's math (not a measurement), from {doc['inputs']['micro']}, "
           f"clocks a 64-row tile; ptxas' HMMA spacing a warp, cycles: "
           + ", ".join(f"sm_{a} {max(doc['sim'][a]['bf16']['spacing'].items(), key=lambda kv: kv[1])[0]}"
                       for a in ARCHS),
           "pool      T  H200 meas  sim sm_90  sim sm_120  sm_120 (range)  first model  MMA floor  math us (range) / first"]
    for r in doc["rows"]:
        lo, hi = clk_range(r)
        out.append(f"{r['kv_dtype']:9s} {r['T']:>2} {r['h200_math_clk_per_tile']:9.0f} {r['sim_sm90_clk_per_tile']:10.0f} "
                   f"{r['sim_sm120_clk_per_tile']:11.0f}  {lo:6.0f}-{hi:<6.0f}  "
                   f"{r['first_model_clk_per_tile']:11.0f} {r['sm120_mma_floor_clk_per_tile']:10.0f}  "
                   f"{r['sm120_math_us_low']:6.1f}-{r['sm120_math_us_high']:<6.1f} / {r['first_model_math_us']:.1f}")
    return out


def notes_lines(doc: dict) -> list[str]:
    """kernel/NOTES.md's table of the committed file (a test holds NOTES to these lines): per pool and T,
    the H200's measured math alone, both simulations, sm_120's range against the first model, the MMAs'
    floor, and the math per call."""
    out = ["| pool | T | H200 math alone, measured | sim sm_90 | sim sm_120 | sm_120, range | first model | "
           "MMAs alone | math, us, range / first model |",
           "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in doc["rows"]:
        lo, hi = clk_range(r)
        out.append(f"| {r['kv_dtype']} | {r['T']} | {r['h200_math_clk_per_tile']:,.0f} | {r['sim_sm90_clk_per_tile']:,.0f} | "
                   f"{r['sim_sm120_clk_per_tile']:,.0f} | {lo:,.0f}-{hi:,.0f} | {r['first_model_clk_per_tile']:,.0f} | "
                   f"{r['sm120_mma_floor_clk_per_tile']:,.0f} | {r['sm120_math_us_low']:.1f}-{r['sm120_math_us_high']:.1f} / "
                   f"{r['first_model_math_us']:.1f} |")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lib", type=Path, help="a built library's folder (default: build the production one)")
    ap.add_argument("--data", type=Path, default=Path("reports/data"), help="where the H200 JSON lives")
    ap.add_argument("--micro", type=Path, help="a microbench file (default: the newest in --data)")
    ap.add_argument("--model", type=Path, help="its sm120_model file (default: sm120-model-from-<micro's stamp>.json)")
    ap.add_argument("--out", type=Path, help="folder for sm120-sim-*.json (default: --data)")
    a = ap.parse_args(argv)
    micro_p = a.micro or sm120_estimate._newest(a.data, "micro")
    if micro_p is None:
        print(f"error: --micro: no micro-*.json in {a.data}", file=sys.stderr)
        return 2
    model_p = a.model or a.data / f"sm120-model-from-{micro_p.stem.removeprefix('micro-')}.json"
    if not model_p.is_file():
        print(f"error: --model: {model_p} not found (python -m kernel.bench.sm120_estimate --micro {micro_p} writes it)",
              file=sys.stderr)
        return 2
    lib = a.lib or build.build(build.ARCHS)
    print(f"simulating rows64d's steady tiles on sm_90 and sm_120 ({lib.name}): about a minute", file=sys.stderr)
    micro, model_doc = json.loads(micro_p.read_text()), json.loads(model_p.read_text())
    doc = document(simulate(lib), micro, model_doc, {"micro": micro_p.name, "model": model_p.name}, lib,
                   git_commit())
    stamp = doc["date"][:16].replace("-", "").replace(":", "")
    out = (a.out or a.data) / f"sm120-sim-cpu-{stamp}.json"
    out.write_text(json.dumps(doc, indent=1))
    print(out)
    print("\n".join(table(doc)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
