"""The ldmatrix/mma.sync probe's machine code, checked before any of its figures is cited.

The first probe's figures followed what ptxas made of it, not what its source said: operands
it never reloaded were constants, the MMA chains were regrouped around them, and some MMAs issued
right behind the MMA whose result they needed (kernel/NOTES.md). This module disassembles the
built library (cuobjdump -sass) and reads, for every probe variant <PER, DEP> and arch, the
steady-state loop (the backward branch holding the HMMAs):
  - HMMA and LDSM instructions per iteration (BODY MMAs, BODY / PER ldmatrix.x4);
  - the dependency distance: for each HMMA, how many HMMAs back (cyclically, across the loop's
    back edge) the HMMA that wrote its accumulator is; the minimum over the loop must be DEP;
  - the load-to-use distance: HMMAs between an LDSM and the first HMMA that reads one of its
    registers; the minimum must be at least PER (a group of MMAs covers every load).

    python -m kernel.bench.probe_sass [--lib DIR]     # a table; exit 1 if a variant fails
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from .. import build

BODY = 24                                 # = mma_ldsm_probe.cu's BODY: MMAs per loop iteration
# (MMAs per ldmatrix.x4, accumulator chains): the variants mma_ldsm_probe_launch dispatches
VARIANTS = ((0, 8), (0, 4), (0, 2), (0, 1), *((p, d) for p in (8, 4, 2, 1) for d in (8, 4, 2)))
ARCHS = ("90", "120")                     # the measured arch and the production arch

_LINE = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
_REG = re.compile(r"\bR(\d+)\b")
_BRA = re.compile(r"\bBRA(?:\.\S+)?\s+(?:!?U?P\d+,\s*)?(0x[0-9a-f]+)")


class SassError(RuntimeError):
    """cuobjdump is missing or the probe's machine code is not what the check expects."""


def find_cuobjdump() -> str:
    """cuobjdump next to nvcc, on PATH, or the copy Triton's wheel ships (the project's venv has
    Triton pinned, so CI and the GPU machine have one even with a toolkit that lacks it)."""
    cands = [os.environ.get("CUOBJDUMP"), shutil.which("cuobjdump")]
    try:
        cands.append(str(Path(build.find_nvcc()).resolve().parent / "cuobjdump"))
    except build.BuildError:
        pass
    spec = importlib.util.find_spec("triton")
    if spec and spec.submodule_search_locations:
        cands.append(str(Path(list(spec.submodule_search_locations)[0]) / "backends" / "nvidia" / "bin" / "cuobjdump"))
    for c in cands:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    raise SassError("cuobjdump not found: set CUOBJDUMP, put the CUDA toolkit's bin on PATH, or install triton")


@dataclass
class Instr:
    addr: int
    op: str                    # mnemonic with modifiers, e.g. HMMA.16816.F32.BF16
    regs: list[int]            # register operands in order (R numbers), destination first
    target: int | None = None  # branch target
    pred: bool = False         # guarded by a predicate (@P0, @!UP1, ...)


def plain_name(name: str) -> str:
    """A rowsd kernel's mangled name without its tail flag when false: tier_rowsd.cuh's tail kernels
    (2026-12-05) gave its kernels a third template argument, TL, defaulted to false, which the name
    carries (...ILi2ELi0ELb0EEEvNS_6ParamsE); the tools name the kernels as they were before
    (...ILi2ELi0EEEvNS_6ParamsE), which libraries built from older sources still carry."""
    if "mla_verify_kernel_rowsd" in name and name.endswith("ELb0EEEvNS_6ParamsE"):
        return name[:-len("ELb0EEEvNS_6ParamsE")] + "EEEvNS_6ParamsE"
    return name


def parse(sass: str) -> dict[str, list[Instr]]:
    """cuobjdump -sass text -> {function name: instructions}; a rowsd kernel of TL = false is also
    found under its plain_name."""
    out: dict[str, list[Instr]] = {}
    cur = None
    for line in sass.splitlines():
        if "Function :" in line:
            name = line.split("Function :")[1].strip()
            cur = out.setdefault(name, [])
            out.setdefault(plain_name(name), cur)
            continue
        m = _LINE.search(line)
        if cur is None or not m:
            continue
        text = re.sub(r"^@!?U?P\w+\s+", "", m.group(2))
        op = text.split()[0]
        b = _BRA.search(text)
        cond = text != m.group(2) or (op.startswith("BRA") and re.search(r"BRA(?:\.\S+)?\s+!?U?P\d", text))
        cur.append(Instr(int(m.group(1), 16), op, [int(r) for r in _REG.findall(text)],
                         int(b.group(1), 16) if b and op.startswith("BRA") else None, bool(cond)))
    return out


def _trace(fn: list[Instr], head: int, back: int, score=lambda x: (-1,)) -> list[Instr]:
    """The path through a loop from its head to its backward branch at `back` that takes no other
    backward branch and has the highest sum of `score` over its instructions (tuples, compared in
    order): by default the shortest, the steady state without the probe's never-taken side blocks
    (which ptxas may lay out inside the loop's address range, each behind a branch that skips it)."""
    at = {x.addr: i for i, x in enumerate(fn)}
    if head not in at or back not in at:
        raise SassError(f"loop {head:#x}..{back:#x} not in the function")
    lo, hi = at[head], at[back]
    best: dict[int, tuple[tuple, int | None]] = {lo: (score(fn[lo]), None)}   # index -> (score, previous index)
    for i in range(lo, hi):
        if i not in best:
            continue
        x, n = fn[i], best[i][0]
        succ = []
        if x.target is not None:
            if at.get(x.target, -1) > i:
                succ.append(at[x.target])
            if x.pred:
                succ.append(i + 1)
        elif not (x.op == "EXIT" and not x.pred):
            succ.append(i + 1)
        for j in succ:
            s = tuple(a + b for a, b in zip(n, score(fn[j])))
            if j <= hi and (j not in best or best[j][0] < s):
                best[j] = (s, i)
    if hi not in best:
        raise SassError(f"no path from {head:#x} to the loop's branch at {back:#x}")
    path, i = [], hi
    while i is not None:
        path.append(fn[i])
        i = best[i][1]
    return path[::-1]


def _is_hmma(x: Instr) -> bool:
    return x.op.startswith("HMMA")


def loop_body(fn: list[Instr], counted=_is_hmma) -> list[Instr]:
    """The steady-state path of the loop (a backward branch's) that holds the most instructions
    `counted` selects (default: HMMAs)."""
    best: list[Instr] = []
    for ins in fn:
        if ins.target is not None and ins.target <= ins.addr:
            try:
                body = _trace(fn, ins.target, ins.addr)
            except SassError:
                continue
            if sum(map(counted, body)) > sum(map(counted, best)):
                best = body
    if not best:
        raise SassError("no loop with HMMA instructions" if counted is _is_hmma else
                        "no loop with the instructions sought")
    return best


def _span(base: int, n: int) -> set[int]:
    return set(range(base, base + n))


def analyse(body: list[Instr]) -> dict:
    """HMMA / LDSM / all instruction counts, the minimum HMMA dependency distance and load-to-use
    distance of a loop body (cyclic: the loop runs many times, so the first HMMAs read the last ones' results)."""
    hmma = [i for i, x in enumerate(body) if x.op.startswith("HMMA")]
    ldsm = [i for i, x in enumerate(body) if x.op.startswith("LDSM")]
    n = len(body)

    def writes(x: Instr) -> set[int]:
        if x.op.startswith("HMMA") or (x.op.startswith("LDSM") and ".4" in x.op):
            return _span(x.regs[0], 4)
        if x.op.startswith(("ST", "BRA", "BAR", "WARPSYNC", "NOP", "DEPBAR")) or not x.regs:
            return set()
        return {x.regs[0]}

    def producer(k: int, regs: set[int]) -> int:
        """Index of the last instruction before body[k] (cyclically) that writes any of regs."""
        for step in range(1, n + 1):
            j = (k - step) % n
            if writes(body[j]) & regs:
                return j
        raise SassError(f"no producer of R{min(regs)} in the loop")

    dep = []
    for pos, k in enumerate(hmma):
        c = body[k].regs[3]
        j = producer(k, _span(c, 4))
        if not body[j].op.startswith("HMMA") or body[j].regs[0] != c:
            raise SassError(f"HMMA at {body[k].addr:#x} reads R{c} from {body[j].op} at {body[j].addr:#x}, not an HMMA")
        dep.append((pos - hmma.index(j)) % len(hmma) or len(hmma))
    use = []
    for k in ldsm:
        regs = _span(body[k].regs[0], 4)
        for step in range(1, n + 1):
            j = (k + step) % n
            x = body[j]
            if x.op.startswith("HMMA") and (_span(x.regs[1], 4) | _span(x.regs[2], 2)) & regs:
                use.append(sum(1 for h in hmma if 0 < (h - k) % n < (j - k) % n))
                break
            if writes(x) & regs == regs:      # overwritten unused (the x4's unused half at PER = 1 is fine)
                break
    return {"hmma": len(hmma), "ldsm": len(ldsm), "instructions": n, "min_dep_distance": min(dep),
            "min_load_to_use": min(use) if use else None}


def expected(per: int, dep: int) -> dict:
    """What a variant's loop must hold: BODY HMMAs, BODY / PER LDSMs, dependency distance DEP,
    every load covered by at least PER MMAs."""
    return {"hmma": BODY, "ldsm": BODY // per if per else 0, "min_dep_distance": dep,
            "min_load_to_use": per if per else None}


def sass_of(lib_dir: Path, arch: str) -> str:
    """The probe kernels' SASS for one arch from the built library."""
    lib = Path(lib_dir) / build.LIB
    r = subprocess.run([find_cuobjdump(), "-sass", "-arch", f"sm_{arch}", str(lib)], capture_output=True, text=True)
    if r.returncode != 0:
        raise SassError(f"cuobjdump -sass -arch sm_{arch} {lib} failed: {r.stderr[-2000:]}")
    return r.stdout


def check(lib_dir: Path, archs=ARCHS) -> list[dict]:
    """One row per (arch, variant): found vs expected, and ok (every field as expected)."""
    rows = []
    for arch in archs:
        fns = {build._variant(name): body for name, body in parse(sass_of(lib_dir, arch)).items()
               if "mma_ldsm_probe_kernel" in name}
        for per, dep in VARIANTS:
            want = expected(per, dep)
            name = f"probe_m{per}_d{dep}"
            if name not in fns:
                rows.append({"arch": f"sm_{arch}", "per": per, "dep": dep, "ok": False, "error": "not in the library"})
                continue
            try:
                got = analyse(loop_body(fns[name]))
            except SassError as e:
                rows.append({"arch": f"sm_{arch}", "per": per, "dep": dep, "ok": False, "error": str(e)})
                continue
            ok = (got["hmma"] == want["hmma"] and got["ldsm"] == want["ldsm"]
                  and got["min_dep_distance"] == want["min_dep_distance"]
                  and (per == 0 or (got["min_load_to_use"] or 0) >= want["min_load_to_use"]))
            rows.append({"arch": f"sm_{arch}", "per": per, "dep": dep, **got, "expected": want, "ok": ok})
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lib", type=Path, default=None, help="a built library's folder (default: build for every arch)")
    a = ap.parse_args(argv)
    rows = check(a.lib or build.build())
    for r in rows:
        print(f"{r['arch']:7s} per {r['per']} dep {r['dep']}: " + (f"ERROR {r['error']}" if "error" in r else
              f"HMMA {r['hmma']} LDSM {r['ldsm']} dep distance {r['min_dep_distance']} load-to-use "
              f"{r['min_load_to_use']}") + ("" if r["ok"] else "   <-- FAILS"))
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
