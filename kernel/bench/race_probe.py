"""racecheck on minimal reproductions of rowsd's epilogue (race_probe.cu beside it), one ingredient of
the kernel added a variant: are racecheck's hazards on rowsd<2,0> (the epilogue's STS of the
staged O against store_tile's LDS of it, across a CTA barrier) the tool mis-tracking that barrier
after half barriers (named, named_split; uneven, uneven_split: the halves pass different numbers
of them, as rowsd's do), mis-timing cp.async writes (cpasync, full), losing track of a CTA whose
shared memory a finished one used (waves), or a race of the kernel's own (no variant flagged)?

    python -m kernel.bench.race_probe --out DIR [--arch sm_90] [--kernel-racecheck]

Compiles race_probe.cu with nvcc, runs it once as is (its own exact check of every variant's
output), then each variant under `compute-sanitizer --tool racecheck`, and writes
DIR/race-probe.json: nvcc, gpu, and per variant output_ok, racecheck's exit code (3: hazards),
its summary line's counts and the first EXCERPT_LINES lines of its report; prints a table last.
--kernel-racecheck also runs racecheck with per-hazard detail (block, threads, address, PCs) over
sanitize_tiers' tier 8 on bf16 and keeps its whole output in DIR/racecheck-kernel-tier8.txt.
Exits 1 when a variant's output is wrong, 2 when a tool is missing or the build fails.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .env import git_commit

SRC = Path(__file__).resolve().parent / "race_probe.cu"   # beside this file: not in csrc/, whose hash names the library
# race_probe.cu's VARIANTS table, in its order (a CPU test holds the two together)
VARIANTS = ("plain", "named", "named_split", "cpasync", "full", "uneven", "uneven_split", "waves")
EXCERPT_LINES = 40
# "RACECHECK SUMMARY: 33 hazards displayed (33 errors, 0 warnings)"; singular forms too
SUMMARY = re.compile(r"RACECHECK SUMMARY: (\d+) hazards? displayed \((\d+) errors?, (\d+) warnings?\)")
VERDICT = re.compile(r"^variant (\S+) (ok|FAIL)\s*$", re.M)
BANNER = "========="
# "all": each hazard (block, both threads, the byte, both PCs) as well as the per-PC-pair analysis
# the default report gives; host backtraces left out (every launch has the same one)
RACECHECK = ("--tool", "racecheck", "--racecheck-report", "all", "--show-backtrace", "no", "--error-exitcode", "3")
KERNEL_OUT = "racecheck-kernel-tier8.txt"
KERNEL_PRINT_LIMIT = 200    # hazards are reported per byte: the first 200 are ~50 words of one CTA
KERNEL_TIMEOUT_S = 480      # the kernel's racecheck is cut off here, what it printed kept
PARALLEL = 4                # racecheck is CPU-bound on the host: variants side by side on one GPU


class ToolMissing(RuntimeError):
    """nvcc or compute-sanitizer is nowhere this looks."""


def find_tool(name: str) -> str:
    """`name` on PATH, else in $CUDA_HOME/bin, else in /usr/local/cuda/bin."""
    found = shutil.which(name)
    if found:
        return found
    dirs = [os.path.join(os.environ["CUDA_HOME"], "bin")] if os.environ.get("CUDA_HOME") else []
    dirs.append("/usr/local/cuda/bin")
    for d in dirs:
        cand = os.path.join(d, name)
        if os.path.isfile(cand) and os.access(cand, os.X_OK):
            return cand
    raise ToolMissing(f"{name} not found on PATH nor in {', '.join(dirs)}: install the CUDA toolkit, "
                      "put its bin/ on PATH or set CUDA_HOME")


def compile_cmd(nvcc: str, exe: Path, arch: str) -> list[str]:
    # -lineinfo: racecheck names each access's source line, not only its PC
    return [nvcc, "-O3", f"-arch={arch}", "-lineinfo", "-o", str(exe), str(SRC)]


def racecheck_cmd(sanitizer: str, exe: Path, variant: str) -> list[str]:
    return [sanitizer, *RACECHECK, str(exe), variant]


def kernel_racecheck_cmd(sanitizer: str, out: Path) -> list[str]:
    # sanitize_tiers run directly under the tool (its --under keeps only the summary); its --tool
    # names the JSON it writes, out/kernel/sanitize-tiers-racecheck.json
    return [sanitizer, *RACECHECK, "--print-limit", str(KERNEL_PRINT_LIMIT), sys.executable, "-m",
            "kernel.bench.sanitize_tiers", "--tiers", "8", "--pools", "bf16", "--out", str(out / "kernel"),
            "--tool", "racecheck"]


def parse_summary(text: str) -> dict:
    """The last RACECHECK SUMMARY line and its counts (None each where the tool printed none)."""
    found = list(SUMMARY.finditer(text))
    if not found:
        return {"summary": None, "hazards": None, "errors": None, "warnings": None}
    m = found[-1]
    return {"summary": m.group(0), "hazards": int(m.group(1)), "errors": int(m.group(2)), "warnings": int(m.group(3))}


def hazard_excerpt(text: str, limit: int = EXCERPT_LINES) -> list[str]:
    """racecheck's report lines, less the banner, the summary and empty ones: the first `limit`."""
    keep = [ln.rstrip() for ln in text.splitlines()
            if ln.startswith(BANNER) and ln.strip("= \t") and "COMPUTE-SANITIZER" not in ln and "SUMMARY" not in ln]
    return keep[:limit]


def verdicts(text: str) -> dict[str, bool]:
    """race_probe's "variant NAME ok|FAIL" lines."""
    return {m.group(1): m.group(2) == "ok" for m in VERDICT.finditer(text)}


def variant_record(name: str, plain_ok: dict[str, bool], proc: subprocess.CompletedProcess) -> dict:
    """One variant's row: its output check from the run without the tool, what racecheck said."""
    return {"name": name, "output_ok": plain_ok.get(name), "output_ok_under_racecheck": verdicts(proc.stdout).get(name),
            "racecheck_returncode": proc.returncode, **parse_summary(proc.stdout), "excerpt": hazard_excerpt(proc.stdout)}


def _run(cmd: list[str], timeout: float) -> subprocess.CompletedProcess:
    """cmd's exit code and output, stderr merged in; past `timeout` seconds, exit code None and what
    it had printed (a report cut short is still worth keeping)."""
    try:
        return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        out = e.stdout or ""
        out = out.decode(errors="replace") if isinstance(out, bytes) else out
        return subprocess.CompletedProcess(cmd, None, stdout=out + f"\n[race_probe: killed after {timeout:.0f} s]\n")


def nvcc_version(nvcc: str) -> str:
    lines = _run([nvcc, "--version"], 60).stdout.strip().splitlines()
    return next((ln for ln in lines if "release" in ln), lines[-1] if lines else "unknown")


def gpu_name() -> str:
    try:
        line = _run(["nvidia-smi", "-L"], 30).stdout.strip().splitlines()[0]   # "GPU 0: NVIDIA H200 (UUID: ...)"
        return line.split(": ", 1)[1].split(" (UUID")[0]
    except (OSError, IndexError):
        pass
    try:
        import torch
        return torch.cuda.get_device_name(0) if torch.cuda.is_available() else "unknown"
    except ImportError:
        return "unknown"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="folder for race-probe.json (and the kernel's racecheck text)")
    ap.add_argument("--arch", default="sm_90", help="nvcc -arch (default sm_90)")
    ap.add_argument("--kernel-racecheck", action="store_true",
                    help=f"also run racecheck with per-hazard detail over sanitize_tiers tier 8 (bf16) into {KERNEL_OUT}")
    a = ap.parse_args(argv)
    if not re.fullmatch(r"sm_\d+a?", a.arch):
        ap.error(f"--arch: expected sm_NN such as sm_90, got {a.arch!r}")
    try:
        nvcc, sanitizer = find_tool("nvcc"), find_tool("compute-sanitizer")
    except ToolMissing as e:
        print(f"race_probe: {e}", file=sys.stderr)
        return 2
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="race-probe-") as tmp:   # the binary stays out of --out
        exe = Path(tmp) / "race_probe"
        build = _run(compile_cmd(nvcc, exe, a.arch), 300)
        if build.returncode != 0:
            print(f"race_probe: nvcc failed (exit {build.returncode}) on {SRC} for --arch {a.arch}:\n"
                  f"{build.stdout[-4000:]}", file=sys.stderr)
            return 2
        plain = _run([str(exe)], 120)
        print(plain.stdout, end="")
        with ThreadPoolExecutor(PARALLEL) as pool:
            procs = list(pool.map(lambda name: _run(racecheck_cmd(sanitizer, exe, name), 300), VARIANTS))
    plain_ok = verdicts(plain.stdout)
    rows = [variant_record(name, plain_ok, proc) for name, proc in zip(VARIANTS, procs)]
    doc = {"kind": "race_probe", "nvcc": nvcc_version(nvcc), "gpu": gpu_name(), "arch": a.arch,
           "commit": os.environ.get("MLA_VERIFY_COMMIT") or git_commit(), "probe_returncode": plain.returncode,
           "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "variants": rows}
    if a.kernel_racecheck:
        cmd = kernel_racecheck_cmd(sanitizer, out)
        proc = _run(cmd, KERNEL_TIMEOUT_S)
        (out / KERNEL_OUT).write_text(" ".join(cmd) + "\n" + proc.stdout)
        doc["kernel_racecheck"] = {"cmd": cmd, "returncode": proc.returncode, "file": KERNEL_OUT,
                                   **parse_summary(proc.stdout)}
    (out / "race-probe.json").write_text(json.dumps(doc, indent=1))
    # hazards: those displayed (the print limit caps them); errors: every one the tool found
    print(f"{'variant':12s} {'output ok':>9s} {'hazards':>7s} {'errors':>7s}  racecheck exit")
    for r in rows:
        ok = {True: "yes", False: "NO", None: "?"}[r["output_ok"]]
        print(f"{r['name']:12s} {ok:>9s} {_count(r['hazards']):>7s} {_count(r['errors']):>7s}  "
              f"{r['racecheck_returncode']}")
    if a.kernel_racecheck:
        k = doc["kernel_racecheck"]
        print(f"{'rowsd tier 8':12s} {'':>9s} {_count(k['hazards']):>7s} {_count(k['errors']):>7s}  "
              f"{k['returncode']} ({KERNEL_OUT})")
    return 0 if plain.returncode == 0 and all(r["output_ok"] for r in rows) else 1


def _count(n) -> str:
    return "?" if n is None else str(n)


if __name__ == "__main__":
    sys.exit(main())
