"""What each half of rows64d issues a tile: the instructions along each half's loop, read from the
built library's machine code (cuobjdump -sass, as pair_sass.py).

rows64d's two halves run loops of their own (tier_rowsd.cuh), and barwait has half 0 the longer
path by ~210 clocks a tile with the same math. This counts, per half's loop (the two loops of the
production function of the pool with the most HMMAs), the instructions on one pass of the steady
state: the path from the loop's head to its back edge, taking no other backward branch, with the
most HMMAs, then the most MUFU.EX2 (the softmax's exponentials taken), then the most LDGSTS (the
copies taken), then the fewest instructions (the rare rescale and edge-mask branches left out).
Only EX2 counts among the MUFUs: the edge mask divides by H (I2F, MUFU.RCP, F2I), and counting its
RCP drew the path into that rare branch, ~55-67 instructions a half (the counts before 2026-12-04's
fifth session, kernel/NOTES.md). The slot-id copies (LDGSTS of 4 or 8 bytes) are warp 4's, a warp of
half 1: half 1's path takes them, half 0's path leaves them out where its loop holds them (until
2026-12-04's eighth session it took them: ~30 sm_90 instructions that half 0 never runs). A
predicated-off instruction is counted: it still takes an issue slot. Reported per path: its
length, HMMAs, LDGSTS (of them slot-id copies), shared loads, and the never-executed `@!PT LDS
RZ, [RZ]` that ptxas puts before an LDGSTS following shared loads, over one pass: `tiles` tiles,
two where the loop is unrolled by two (fp8's production since 2026-12-05, UNROLL_FP8), else one. The loop with the copy pieces
(bf16's nine, fp8's five H0PV pieces) is half 0; the other, whose only LDGSTS are warp 4's slot
ids, is half 1. (That is production's layout: with -DMLAV_SPLIT_COPIES=0 half 1 issues the copies
and the two labels swap.)

    python -m kernel.bench.half_paths [--lib DIR] [--arch 90] [--pool bf16|fp8]
"""
from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path

from .. import build
from . import pair_sass, probe_sass

FUNCTIONS = {"bf16": pair_sass.FUNCTIONS[8],                          # rows64d, the verify kernel (Kind PROD)
             "fp8": "_ZN4mlav5rowsd27mla_verify_kernel_rowsd_fp8ILi2ELi0EEEvNS_6ParamsE"}
MIN_HMMA = 60                            # a half's loop holds 68 (36 QK + 32 PV a warp)
HMMA_A_TILE = 68                         # a warp's HMMA.16816 a 64-row tile (36 QK + 32 PV), both pools


def tiles_a_pass(path) -> int:
    """Tiles one pass of a loop's path (instructions with .op) covers: 1, or 2 where the loop is
    unrolled by two (fp8's production since 2026-12-05, UNROLL_FP8)."""
    return max(round(sum(x.op.startswith("HMMA") for x in path) / HMMA_A_TILE), 1)


def is_id_copy(x: probe_sass.Instr) -> bool:
    """A slot-id copy (4 or 8 bytes); the tile's copy pieces are 16-byte LDGSTS (.128)."""
    return x.op.startswith("LDGSTS") and ".128" not in x.op


def _step(x: probe_sass.Instr, ids: bool) -> tuple[int, int, int, int, int]:
    """ids=False: a slot-id copy is not an LDGSTS taken but one to leave out (half 0's path)."""
    skip = not ids and is_id_copy(x)
    return (x.op.startswith("HMMA"), x.op.startswith("MUFU.EX2"), x.op.startswith("LDGSTS") and not skip, -skip, -1)


def steady_path(fn: list[probe_sass.Instr], head: int, back: int, ids: bool = True) -> list[probe_sass.Instr]:
    """The path head -> back (indices into fn) described in the module docstring; [] if none.
    ids=False: the path with the fewest slot-id copies (half 0's)."""
    try:
        return probe_sass._trace(fn, fn[head].addr, fn[back].addr, score=lambda x: _step(x, ids))
    except probe_sass.SassError:
        return []


def _counts(path: list[probe_sass.Instr]) -> dict:
    ops = Counter(y.op.split(".")[0] for y in path)
    return {"tiles": tiles_a_pass(path), "instructions": len(path), "hmma": ops["HMMA"], "mufu": ops["MUFU"], "ldgsts": ops["LDGSTS"],
            "id_copies": sum(map(is_id_copy, path)), "lds": ops["LDS"],
            "dummy_lds": sum(y.op.startswith("LDS") and y.pred and not y.regs for y in path),
            "ops": dict(ops.most_common())}


def mma_loops(fn: list[probe_sass.Instr], score=None) -> list[tuple[int, int, list[probe_sass.Instr]]]:
    """(head, back edge, steady path) of each loop laid out with at least MIN_HMMA HMMAs (indices
    into fn). score: the path rule probe_sass._trace takes (default: this module's, slot ids taken)."""
    score = score or (lambda y: _step(y, True))
    at = {x.addr: i for i, x in enumerate(fn)}
    out = []
    for k, x in enumerate(fn):
        if x.target is None or x.target > x.addr or x.target not in at:
            continue
        head = at[x.target]
        if sum(y.op.startswith("HMMA") for y in fn[head:k + 1]) < MIN_HMMA:
            continue
        try:
            path = probe_sass._trace(fn, x.target, x.addr, score=score)
        except probe_sass.SassError:
            continue
        if path:
            out.append((head, k, path))
    return out


def half_loops(fn: list[probe_sass.Instr]) -> list[dict]:
    """One row per loop laid out with at least MIN_HMMA HMMAs: its steady path's counts."""
    return [{"head": fn[h].addr, "back": fn[k].addr, **_counts(path)} for h, k, path in mma_loops(fn)]


def check(lib_dir: Path, arch: str = "90", pool: str = "bf16") -> list[dict]:
    """The two halves' rows of `pool`'s rows64d (half 0 first: the loop with the most LDGSTS), on `arch`."""
    if pool not in FUNCTIONS:
        raise ValueError(f"pool: {pool!r} is not one of {sorted(FUNCTIONS)}")
    function = FUNCTIONS[pool]
    fns = probe_sass.parse(probe_sass.sass_of(lib_dir, arch))
    if function not in fns:
        raise probe_sass.SassError(f"{function} not in the sm_{arch} code of {lib_dir}")
    fn = fns[function]
    # half 0: the most copy pieces; half 1: then the most LDGSTS (its slot ids) and HMMAs (fp8's draft
    # tiles run loops of their own, without copies)
    rows = sorted(half_loops(fn), key=lambda r: (r["id_copies"] - r["ldgsts"], -r["ldgsts"], -r["hmma"]))
    if len(rows) < 2:
        raise probe_sass.SassError(f"sm_{arch}: {len(rows)} loop(s) with {MIN_HMMA}+ HMMAs, expected one a half")
    at = {x.addr: i for i, x in enumerate(fn)}
    h0 = dict(rows[0], **_counts(steady_path(fn, at[rows[0]["head"]], at[rows[0]["back"]], ids=False)))
    return [dict(r, arch=f"sm_{arch}", half=h) for h, r in enumerate((h0, rows[1]))]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lib", type=Path, help="a built library's folder (default: build.build())")
    ap.add_argument("--arch", default="90", choices=("80", "86", "89", "90", "120"))
    ap.add_argument("--pool", default="bf16", choices=sorted(FUNCTIONS),
                    help="bf16 (default) or fp8: which rows64d (fp8's half 0 issues its five H0PV pieces)")
    a = ap.parse_args(argv)
    for r in check(a.lib or build.build(build.ARCHS), a.arch, a.pool):
        print(f"{r['arch']} half {r['half']}: {r['instructions']} instructions a warp a pass of {r['tiles']} tile(s), {r['hmma']} HMMA, "
              f"{r['mufu']} MUFU, {r['ldgsts']} LDGSTS ({r['id_copies']} slot-id copies), {r['lds']} LDS of which {r['dummy_lds']} never executed "
              f"(loop {r['head']:#x}..{r['back']:#x})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
