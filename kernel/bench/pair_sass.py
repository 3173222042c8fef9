"""The machine code of the 64-row design D tiers' main loop: what QK's K loads became.

Issue 25's rungs on rows64d_pair (tier 9: ldmatrix.x2 per n-tile; rows64d, tier 8: ldmatrix.x4
per k-step; tier 10, tier 9 with the x4 loads, measured no faster and deleted: kernel/NOTES.md)
are about where QK's K fragments are loaded relative to the MMAs that read them, and ptxas, not
the source, decides that (kernel/NOTES.md: the probe's loads moved next to their use). This reads
the built library (cuobjdump -sass, as probe_sass does) and reports, per tier and arch, for the
loop (the backward branch whose range holds the most HMMAs, taken as laid out: QK and PV are
straight-line code there):
  - HMMA, K-load (LDSM without .MT88: K is read untransposed, V transposed) and V-load counts;
  - local-memory instructions (LDL/STL) in the loop and in the whole function;
  - per K load, the HMMAs issued between it and the first HMMA that reads its registers.

    python -m kernel.bench.pair_sass [--lib DIR]     # a table
"""
from __future__ import annotations

import argparse
from pathlib import Path

from .. import build
from . import probe_sass

ARCHS = ("90", "120")
# tier -> the verify kernel's instantiation's mangled name (rowsd Kind PROD, rows64d_pair DIAG = 0)
FUNCTIONS = {8: "_ZN4mlav5rowsd23mla_verify_kernel_rowsdILi2ELi0EEEvNS_6ParamsE",
             9: "_ZN4mlav8rowspair30mla_verify_kernel_rows64d_pairILi0EEEvNS_6ParamsE"}


def _width(op: str) -> int:
    return 4 if ".4" in op.split(".M88")[-1] else 2 if ".2" in op.split(".M88")[-1] else 1


def main_loop(fn: list[probe_sass.Instr]) -> list[probe_sass.Instr]:
    """The instructions from the head to the backward branch of the loop holding the most HMMAs."""
    best, most = [], -1
    index = {x.addr: i for i, x in enumerate(fn)}
    for k, x in enumerate(fn):
        if x.target is not None and x.target <= x.addr and x.target in index:
            body = fn[index[x.target]:k + 1]
            n = sum(y.op.startswith("HMMA") for y in body)
            if n > most:
                best, most = body, n
    if most <= 0:
        raise probe_sass.SassError("no loop with HMMA instructions")
    return best


def analyse(fn: list[probe_sass.Instr]) -> dict:
    body = main_loop(fn)
    kl = [(i, x) for i, x in enumerate(body) if x.op.startswith("LDSM") and "MT88" not in x.op]
    dist = []
    for i, x in kl:
        regs = set(range(x.regs[0], x.regs[0] + _width(x.op)))
        n = 0
        for y in body[i + 1:]:
            if y.op.startswith("HMMA"):
                if (set(range(y.regs[1], y.regs[1] + 4)) | set(range(y.regs[2], y.regs[2] + 2))) & regs:
                    break
                n += 1
        else:
            n = None               # first read across the back edge (not expected here)
        dist.append(n)
    return {"instructions": len(body), "hmma": sum(x.op.startswith("HMMA") for x in body),
            "k_loads": len(kl), "k_load_op": sorted({x.op for _, x in kl}),
            "v_loads": sum(x.op.startswith("LDSM") and "MT88" in x.op for x in body),
            "local_in_loop": sum(x.op.startswith(("LDL", "STL")) for x in body),
            "local_in_function": sum(x.op.startswith(("LDL", "STL")) for x in fn),
            "k_load_to_use": dist}


def check(lib_dir: Path, tiers=tuple(FUNCTIONS), archs=ARCHS) -> list[dict]:
    rows = []
    for a in archs:
        fns = probe_sass.parse(probe_sass.sass_of(lib_dir, a))
        for t in tiers:
            if FUNCTIONS[t] not in fns:
                raise probe_sass.SassError(f"{FUNCTIONS[t]} not in the sm_{a} code of {lib_dir}")
            rows.append({"arch": f"sm_{a}", "tier": t, **analyse(fns[FUNCTIONS[t]])})
    return rows


def table(rows: list[dict]) -> list[str]:
    out = []
    for r in rows:
        d = [x for x in r["k_load_to_use"] if x is not None]
        out.append(f"{r['arch']:6s} tier {r['tier']:>2}: loop {r['instructions']} instr, {r['hmma']} HMMA, "
                   f"{r['k_loads']} K loads {'/'.join(r['k_load_op'])}, {r['v_loads']} V loads, LDL/STL "
                   f"{r['local_in_loop']} in loop / {r['local_in_function']} in function; K load->use HMMAs "
                   f"min {min(d)} mean {sum(d) / len(d):.1f}, < 2: {sum(x < 2 for x in d)}, < 4: {sum(x < 4 for x in d)}: {d}")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lib", type=Path, help="a built library's folder (default: build.build())")
    a = ap.parse_args(argv)
    print("\n".join(table(check(a.lib or build.build(build.ARCHS)))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
