"""The guarantee set in one command: the checks a production change of the kernel must pass before
it ships, side by side on one GPU (none of them is timed), their JSON into --out, a table last.

    PYTHONPATH=$PWD:$PWD/.sglang-site python -m kernel.guarantees --out DIR [--checks ...] [--tiers 1,2,4,6,8]

- validation: `gpu_run --stages validate,graph`: >= 500 random cases on each pool with NaN poison and
  the production shapes, against the float64 oracle and SGLang's kernel; graph replay against eager.
- sglang-backend: `gpu_run --stages sglang-backend`: SGLang's real TritonAttnBackend with the plugin,
  both pools, CUDA graphs of 61 layers, memcheck replays. Needs SGLang importable (`make
  sglang-bundle` on a machine with pip, then .sglang-site on PYTHONPATH).
- sanitize-memcheck, sanitize-synccheck (and -racecheck, -initcheck when asked):
  `kernel.bench.sanitize_tiers --under TOOL` at --tiers on both pools, the loaders' edge cases.
The library is built once before the checks start, so that they do not compile it side by side.
Logs go to --logs (default DIR/logs); guarantees-<gpu>-<stamp>.json sums up. Exit 0 only when
every check ran, wrote its file and passed; 1 when one failed; 2 on bad arguments or no GPU.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

CHECKS = ("validation", "sglang-backend", "sanitize-memcheck", "sanitize-synccheck")
OPTIONAL = ("sanitize-racecheck", "sanitize-initcheck")
MIN_CASES = 500          # the validation's random cases a pool that the guarantee promises
PROGRESS_S = 30
# the checks that gpu_run runs: its --stages and the file it writes (both need SGLang importable: the
# validation compares with SGLang's kernel, the backend check runs SGLang's backend)
GPU_RUN = {"validation": ("validate,graph", "validation-*.json"),
           "sglang-backend": ("sglang-backend", "sglang-backend-*.json")}


def command(check: str, out: Path, tiers: str, commit: str) -> list[str]:
    """The argv that runs `check`, writing its JSON into `out`."""
    py = [sys.executable, "-m"]
    if check in GPU_RUN:
        return py + ["kernel.gpu_run", "--stages", GPU_RUN[check][0], "--out", str(out), "--commit", commit]
    tool = check.removeprefix("sanitize-")
    return py + ["kernel.bench.sanitize_tiers", "--under", tool, "--out", str(out), "--commit", commit] + \
        (["--tiers", tiers] if tiers else [])


def result_file(check: str, out: Path, since: float) -> Path | None:
    """The newest file `check` wrote into `out` at or after `since` (epoch s); None if none."""
    pattern = GPU_RUN[check][1] if check in GPU_RUN else f"sanitize-tiers-{check.removeprefix('sanitize-')}.json"
    files = [Path(f) for f in glob.glob(str(out / pattern)) if os.path.getmtime(f) >= since - 1]
    return max(files, key=os.path.getmtime) if files else None


def verdict(check: str, doc: dict) -> tuple[bool, str]:
    """(passed, one line) from the JSON one check wrote."""
    if check == "validation":
        f8, pr = doc.get("fp8") or {}, doc.get("production") or {}
        parts = {"bf16": doc.get("all_pass") is True and doc.get("n_cases", 0) >= MIN_CASES,
                 "fp8": f8.get("all_pass") is True and f8.get("n_cases", 0) >= MIN_CASES,
                 "production": pr.get("all_pass") is True,
                 "graph": (doc.get("graph") or {}).get("all_pass") is True,
                 "fp8 graph": (f8.get("graph") or {}).get("all_pass") is True}
        bad = [k for k, ok in parts.items() if not ok]
        line = (f"{doc.get('n_cases', 0)} bf16 + {f8.get('n_cases', 0)} fp8 + {pr.get('n_cases', 0)} production "
                f"cases, graph replay" + (f"; failed: {', '.join(bad)}" if bad else ": all pass"))
        return not bad, line
    if check == "sglang-backend":
        cases = doc.get("cases") or []
        sans = [c for c in cases if c.get("kind") == "sanitizer"]
        failed = [c.get("name", "?") for c in cases if not c.get("pass")]
        ok = doc.get("all_pass") is True and bool(cases) and len(sans) > 0 and not failed
        return ok, (f"{len(cases)} cases ({len(sans)} memcheck replays)" +
                    (f"; failed: {', '.join(failed[:6])}" if failed else "" if ok else "; no memcheck replay"))
    san = doc.get("sanitizer") or {}
    rows = doc.get("rows") or []
    ok = doc.get("pass") is True and san.get("clean") is True and bool(rows)
    return ok, (f"{len(rows)} checks at tiers {sorted({r['tier'] for r in rows})}, "
                f"{san.get('summary') or 'no sanitizer summary'}")


def run_all(cmds: dict[str, list[str]], logs: Path, timeout_s: float, say=print) -> dict[str, dict]:
    """Start every command at once (each in its own process group, output to logs/<check>.log), report
    progress every PROGRESS_S, kill a group past timeout_s. {check: {"rc", "seconds", "timed_out", "log"}}."""
    logs.mkdir(parents=True, exist_ok=True)
    t0, procs, done = time.time(), {}, {}
    for name, cmd in cmds.items():
        log = logs / f"{name}.log"
        with open(log, "w") as fh:
            procs[name] = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)
    next_note = t0 + PROGRESS_S
    while len(done) < len(procs):
        now = time.time()
        for name, p in procs.items():
            if name in done:
                continue
            rc = p.poll()
            if rc is None and now - t0 > timeout_s:
                os.killpg(p.pid, signal.SIGKILL)
                rc = p.wait()
                done[name] = dict(rc=rc, seconds=round(now - t0, 1), timed_out=True)
            elif rc is not None:
                done[name] = dict(rc=rc, seconds=round(now - t0, 1), timed_out=False)
            if name in done:
                done[name]["log"] = str(logs / f"{name}.log")
                say(f"[guarantees] {name}: exit {done[name]['rc']} after {done[name]['seconds']:.0f} s"
                    + (" (timed out, killed)" if done[name]["timed_out"] else ""))
        if now >= next_note and len(done) < len(procs):
            say(f"[guarantees] {now - t0:.0f} s: running {', '.join(n for n in procs if n not in done)}")
            next_note += PROGRESS_S
        time.sleep(0.2)
    return done


def summarize(runs: dict[str, dict], out: Path, since: float) -> list[dict]:
    """One row per check: its verdict read from the file it wrote, or why there is none."""
    rows = []
    for name, r in runs.items():
        f = result_file(name, out, since)
        if f is None:
            why = "timed out" if r["timed_out"] else f"exit {r['rc']}"
            rows.append(dict(check=name, passed=False, seconds=r["seconds"], file=None,
                             detail=f"no result file ({why}; see {r['log']})"))
            continue
        ok, line = verdict(name, json.loads(f.read_text()))
        rows.append(dict(check=name, passed=ok, seconds=r["seconds"], file=f.name, detail=line))
    return rows


def log_tail(log: Path, lines: int = 15) -> str:
    """The last `lines` lines of a check's log ('' if it is missing)."""
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def table(rows: list[dict]) -> str:
    w = max(len(r["check"]) for r in rows)
    lines = [f"{'check':{w}s}  {'result':6s}  {'s':>5s}  detail"]
    lines += [f"{r['check']:{w}s}  {'pass' if r['passed'] else 'FAIL':6s}  {r['seconds']:5.0f}  {r['detail']}"
              for r in rows]
    return "\n".join(lines)


def parse(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="folder for every check's JSON and the summary")
    ap.add_argument("--logs", help="folder for each check's log (default: OUT/logs)")
    ap.add_argument("--checks", default=",".join(CHECKS),
                    help=f"comma-separated, of {', '.join(CHECKS + OPTIONAL)} (default: {','.join(CHECKS)})")
    ap.add_argument("--tiers", default="", help="the sanitizer checks' tiers, comma-separated (default: every tier)")
    ap.add_argument("--timeout", type=float, default=1500, help="seconds before a check is killed (default 1500)")
    ap.add_argument("--commit", default=os.environ.get("MLA_VERIFY_COMMIT"),
                    help="the commit the files record (default: $MLA_VERIFY_COMMIT, else this checkout's HEAD)")
    a = ap.parse_args(argv)
    checks = [c for c in a.checks.split(",") if c]
    unknown = [c for c in checks if c not in CHECKS + OPTIONAL]
    if unknown or not checks:
        ap.error(f"--checks: {unknown or a.checks!r} not among {', '.join(CHECKS + OPTIONAL)}")
    a.checks = checks
    try:
        [int(t) for t in a.tiers.split(",") if t]
    except ValueError:
        ap.error(f"--tiers: expected comma-separated integers, got {a.tiers!r}")
    if not a.timeout > 0:
        ap.error(f"--timeout: expected seconds > 0, got {a.timeout}")
    return a


def main(argv=None) -> int:
    a = parse(argv)
    from . import build
    from .bench.env import env_info, git_commit, no_gpu, write_json
    if no_gpu("kernel.guarantees", "runs its checks on a GPU"):
        return 2
    need = [c for c in a.checks if c in GPU_RUN]
    if need:
        try:
            import sglang  # noqa: F401
        except ImportError as e:
            print(f"error: --checks {','.join(need)} need SGLang importable ({e}): `make sglang-bundle` where pip "
                  "works, then PYTHONPATH=$PWD:$PWD/.sglang-site; or leave them out of --checks", file=sys.stderr)
            return 2
    commit = a.commit or git_commit()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    print(f"[guarantees] building the library once ({build.lib_dir()})", flush=True)
    build.build()
    since = time.time()
    cmds = {c: command(c, out, a.tiers, commit) for c in a.checks}
    print(f"[guarantees] {len(cmds)} checks side by side: {', '.join(cmds)}", flush=True)
    runs = run_all(cmds, Path(a.logs) if a.logs else out / "logs", a.timeout,
                   say=lambda s: print(s, flush=True))
    rows = summarize(runs, out, since)
    info = env_info(commit)
    all_pass = all(r["passed"] for r in rows)
    path = write_json(out, "guarantees", dict(info, kind="guarantees", all_pass=all_pass, checks=rows), info)
    for r in rows:
        if not r["passed"]:
            print(f"\n[guarantees] {r['check']} failed; the end of {runs[r['check']]['log']}:\n"
                  + log_tail(Path(runs[r["check"]]["log"])))
    print(f"\n{table(rows)}\n[guarantees] {path}")
    return 0 if all_pass else 1


if __name__ == "__main__":
    sys.exit(main())
