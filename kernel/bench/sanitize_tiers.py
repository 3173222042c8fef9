"""Every tier, forced, on small cases whose lengths sit on the loaders' edges (a tile, a pair of
tiles, a split's end), checked against the float64 oracle; meant to run under compute-sanitizer
so that an out-of-bounds copy, a misused barrier or a shared-memory race in any tier's loader is
seen, not only in the default tiers SGLang's backend check reaches.

    python -m kernel.bench.sanitize_tiers --under racecheck --tiers 8 --pools bf16 --out DIR
    compute-sanitizer --tool memcheck --error-exitcode 3 python -m kernel.bench.sanitize_tiers --tool memcheck --out DIR
    python -m kernel.bench.sanitize_tiers --tiers 9 --pools bf16 --out DIR   (without the sanitizer: the checks alone)

Writes DIR/sanitize-tiers-<tool>.json (rows: pool, tier, case, rel_err, pass; "pass" is the checks')
and prints a table last; exits 1 when a check fails. Run by hand under compute-sanitizer, only the
tool's exit code says what it found; with --under TOOL this runs itself under compute-sanitizer
and adds the tool's verdict to the file ("sanitizer": exit code, summary line, clean), exiting 3
when the tool reported anything.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import torch

from ..inputs import make_case
from ..ops import FP8_TIERS, TIERS
from ..reference import verify_attention_reference
from .env import add_commit_arg, env_info, git_commit
from .validate import run_checked

# prefix lengths around 16-token tiles and 32-token pairs (a pair whose second tile is empty,
# a last tile with one row), draft lengths 1-8 so 8 heads give 8-64 rows, one long prefix so
# the KV splits and some split ends mid-pair; and rows64d's tail row tiles (D = 17: 8 rows past two
# full 64-row tiles, on their own longer splits; D = 12: 32 rows, on one split)
EDGE_BATCHES = (
    ([0, 1, 15, 16], [1, 8, 3, 8]),
    ([17, 31, 32, 33], [8, 2, 8, 5]),
    ([47, 63, 64, 65], [8, 8, 1, 7]),
    ([3000], [8]),
    ([1000, 5], [8, 8]),
    ([3000, 40], [17, 12]),
)
TOL = 1e-2


def cases(pool: str, device: str):
    kv = "fp8_e4m3" if pool == "fp8" else "auto"
    for i, (prefix, draft) in enumerate(EDGE_BATCHES):
        for causal in (False, True):
            yield f"{prefix}/{draft}/{'causal' if causal else 'tree'}", make_case(
                prefix, draft, 8, tree="random", layout="scattered", seed=700 + i, device=device, causal=causal,
                kv_dtype=kv)


SANITIZER_TOOLS = ("memcheck", "racecheck", "synccheck", "initcheck")
# the tool's last word: "ERROR SUMMARY: 0 errors" (memcheck, synccheck, initcheck) or
# "RACECHECK SUMMARY: 33 hazards displayed (33 errors, 0 warnings)"
SUMMARY = re.compile(r"(?:ERROR|RACECHECK) SUMMARY: .*")


def sanitizer_verdict(returncode: int, output: str) -> dict:
    """What compute-sanitizer said: its exit code (3 = it reported something, with
    --error-exitcode 3), its last summary line, and clean = exit 0 with a summary seen."""
    found = SUMMARY.findall(output)
    summary = found[-1].strip() if found else None
    return {"returncode": returncode, "summary": summary, "clean": returncode == 0 and summary is not None}


def run_under(tool: str, argv: list[str], out: Path) -> int:
    """Run this module under compute-sanitizer's `tool` with argv (its own arguments but --under),
    echo its output, and add the tool's verdict to the JSON the child wrote."""
    exe = shutil.which("compute-sanitizer")
    if exe is None:
        print(f"error: --under {tool}: compute-sanitizer is not on PATH", file=sys.stderr)
        return 2
    cmd = [exe, "--tool", tool, "--error-exitcode", "3", sys.executable, "-m", "kernel.bench.sanitize_tiers",
           *argv, "--tool", tool]
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    print(proc.stdout, end="")
    verdict = dict(tool=tool, **sanitizer_verdict(proc.returncode, proc.stdout))
    path = out / f"sanitize-tiers-{tool}.json"
    if not path.exists():   # the child died before writing (a kernel fault under the tool, say)
        print(f"sanitize_tiers --under {tool}: no {path} written; exit {proc.returncode}, "
              f"{verdict['summary'] or 'no summary'}", file=sys.stderr)
        return proc.returncode or 1
    doc = json.loads(path.read_text())
    doc["sanitizer"] = verdict
    path.write_text(json.dumps(doc, indent=1))
    print(f"sanitize_tiers --under {tool}: checks {'pass' if doc['pass'] else 'FAIL'}; "
          f"{verdict['summary'] or 'no summary'} (exit {proc.returncode})")
    if not doc["pass"]:
        return 1
    return 0 if verdict["clean"] else 3


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="folder for sanitize-tiers-<tool>.json")
    ap.add_argument("--tiers", default="", help="comma-separated tier ids (default: every tier of each pool)")
    ap.add_argument("--pools", default="bf16,fp8", help="bf16, fp8 or both (default)")
    ap.add_argument("--tool", default=os.environ.get("MLAV_SANITIZER_TOOL", "none"),
                    help="the sanitizer tool this runs under, for the file's name (default: none)")
    add_commit_arg(ap)
    ap.add_argument("--under", choices=SANITIZER_TOOLS,
                    help="run under compute-sanitizer's TOOL and record its verdict in the file")
    argv = list(sys.argv[1:] if argv is None else argv)
    a = ap.parse_args(argv)
    pools = [p for p in a.pools.split(",") if p]
    bad = [p for p in pools if p not in ("bf16", "fp8")]
    if bad:
        ap.error(f"--pools: expected bf16 and/or fp8, got {bad}")
    try:
        want = [int(t) for t in a.tiers.split(",") if t]
    except ValueError:
        ap.error(f"--tiers: expected comma-separated integers, got {a.tiers!r}")
    unknown = [t for t in want if t not in TIERS]
    if unknown:
        ap.error(f"--tiers: {unknown} not among the tiers {sorted(TIERS)}")
    if a.under:
        if any(x == "--tool" or x.startswith("--tool=") for x in argv):
            ap.error(f"--tool: --under {a.under} names the tool; leave --tool out")
        child, skip = [], False
        for x in argv:   # the same arguments, less --under and its value
            if skip or x.startswith("--under="):
                skip = False
                continue
            if x == "--under":
                skip = True
                continue
            child.append(x)
        return run_under(a.under, child, Path(a.out))
    if not torch.cuda.is_available():
        print("sanitize_tiers: needs a CUDA GPU", file=sys.stderr)
        return 2
    rows = []
    for pool in pools:
        tiers = [t for t in (want or sorted(TIERS)) if pool == "bf16" or t in FP8_TIERS]
        for name, case in cases(pool, "cuda"):
            ref = verify_attention_reference(*case.args(), **case.kwargs())
            for t in tiers:
                r = run_checked(case, ref, TOL, t)
                rows.append(dict(pool=pool, case=name, **r))
    torch.cuda.synchronize()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    ok = all(r["pass"] for r in rows)
    doc = {"tool": a.tool, "pass": ok, **env_info(a.commit or git_commit()), "rows": rows}
    (out / f"sanitize-tiers-{a.tool}.json").write_text(json.dumps(doc, indent=1))
    print(f"{'pool':5s} {'tier':>4s} {'cases':>5s} {'failed':>6s} {'worst rel err':>13s}")
    for pool in pools:
        for t in sorted({r["tier"] for r in rows if r["pool"] == pool}):
            rs = [r for r in rows if r["pool"] == pool and r["tier"] == t]
            print(f"{pool:5s} {t:4d} {len(rs):5d} {sum(not r['pass'] for r in rs):6d} "
                  f"{max(r['rel_err'] for r in rs):13.2e}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
