"""A cycle model of rows64d's steady tile, read from its machine code: a model, not a measurement.

Each sm_70+ instruction carries a control word, the top 23 bits of its 128-bit encoding, that the
compiler sets and the scheduler obeys: `stall` (cycles before the warp's next instruction may
issue: how ptxas spaces fixed-latency work, e.g. 6 between two HMMA.16816 on sm_90), a write
scoreboard (0-5, 7 = none) that a variable-latency result (LDS, LDSM, SHFL, MUFU, S2R...)
releases, a read scoreboard released once its source registers are read, and a wait mask of the
scoreboards it must wait for. On sm_90 HMMA sets no scoreboard: its results are spaced by stalls.

The model runs one SM for a number of tiles: 8 warps, warps 0-3 on half 0's steady loop path and
4-7 on half 1's (half_paths' path rules; the copy with loads off takes the fewest LDGSTS), warp w
on scheduler w % 4, one issue a scheduler and cycle. What it assumes, not read from the code
(PARAMS): the latency of each variable-latency class, the pipes' occupancy (a scheduler's tensor
pipe takes one HMMA.16816 every 6.85 cycles, the 8-warp mma.sync ceiling of the micro stage;
16-lane ALU and FMA-heavy pipes 2 cycles a warp, MUFU 8), shared memory at one 128-byte wavefront
a cycle an SM (no bank conflicts), a CTA barrier over the 8 warps and a named barrier over a
half's 4, and a scheduler that picks between its two ready warps at random (the average of
`seeds` runs). It leaves out instruction fetch, register-bank conflicts and the loads (DRAM).

How far to trust it: `issue_model_calibrate.py` rebuilds, from git history, every rows64d variant
that `overlap` timed and compares the model's ratio to production's with the measured one
(kernel/NOTES.md, 2026-12-05). With loads off it follows fp8's math alone (correlation 0.85) and not
bf16's (-0.21); with the copies taken against the full call, both pools loosely (0.47-0.54, the sign
right in ~70 % of the moves): the unrolled loops within a point, the copies' placement in sign (at
the loop top half the measured +13 %), the softmax's placement (H1_LAG, H1_MIX) not at all. A loop
unrolled by two is simulated two tiles a pass and reported per tile. `--load-use` lists each shared
load's cycles to its first use (load_use).

    python -m kernel.bench.issue_model [--lib DIR] [--arch 90] [--pool bf16|fp8] [--loads on|off] [--load-use]
"""
from __future__ import annotations

import argparse
import random
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from .. import build
from . import half_paths, probe_sass

PARAMS = {
    "hmma_cycles": 6.85,           # a scheduler's tensor pipe per HMMA.16816 (mma.sync ceiling, 8 warps an SM)
    "latency": {"LDS": 30, "LDSM": 30, "SHFL": 26, "MUFU": 18, "other": 24},   # cycles, unloaded
    "read_cycles": 4,              # until a read scoreboard releases (source registers read)
    "barrier_cycles": 16,          # from the last arrival to the release
    "mio_queue": 8,                # cycles of shared-memory backlog a warp may issue into
    "seeds": 4,                    # runs averaged (the scheduler's choice is random)
}
# (mnemonic prefix, pipe, cycles a warp instruction holds it); HMMA's pipe is PARAMS' hmma_cycles
PIPES = (("HMMA", "tensor", 0), ("MUFU", "sfu", 8), ("I2F", "sfu", 8), ("F2I", "sfu", 8), ("POPC", "sfu", 8),
         ("IMAD", "fma_heavy", 2), ("VIADD", "fma_heavy", 2),
         ("FADD", "fma", 1), ("FMUL", "fma", 1), ("FFMA", "fma", 1), ("HADD2", "fma", 1), ("HMUL2", "fma", 1),
         ("HFMA2", "fma", 1),
         *((p, "alu", 2) for p in ("LOP3", "IADD3", "ISETP", "FSETP", "FMNMX", "IMNMX", "FSEL", "SEL", "SHF", "LEA",
                                   "PRMT", "MOV", "F2FP", "PLOP3", "P2R", "R2P")))
_CONTROL = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;\s*/\* (0x[0-9a-f]{16}) \*/")
_HIGH = re.compile(r"^\s*/\* (0x[0-9a-f]{16}) \*/\s*$")


@dataclass(frozen=True)
class Op:
    addr: int
    text: str          # the instruction as cuobjdump prints it, predicate included
    op: str            # mnemonic with modifiers
    stall: int         # cycles before this warp's next instruction (0 taken as 1)
    write_sb: int      # scoreboard the result releases; 7 = none
    read_sb: int       # scoreboard the sources release; 7 = none
    wait: int          # mask of scoreboards waited for before issue


def control(high: int) -> dict:
    """The control word of an instruction's upper 64 bits: stall, yield, write/read scoreboards,
    wait mask, reuse flags."""
    c = high >> 41
    return {"stall": c & 15, "yield": c >> 4 & 1, "write_sb": c >> 5 & 7, "read_sb": c >> 8 & 7,
            "wait": c >> 11 & 63, "reuse": c >> 17 & 15}


def ops_of(sass: str, function: str) -> dict[int, Op]:
    """{address: Op} of `function` in cuobjdump -sass text (sm_70+: two 64-bit words a line pair)."""
    out, cur, first = {}, None, None
    for line in sass.splitlines():
        if "Function :" in line:
            cur, first = probe_sass.plain_name(line.split("Function :")[1].strip()), None
            continue
        if cur != function:
            continue
        m = _CONTROL.search(line)
        if m:
            first = (int(m.group(1), 16), m.group(2))
            continue
        m = _HIGH.match(line)
        if m and first:
            c = control(int(m.group(1), 16))
            op = re.sub(r"^@!?U?P\w+\s+", "", first[1]).split()[0]
            out[first[0]] = Op(first[0], first[1], op, c["stall"], c["write_sb"], c["read_sb"], c["wait"])
            first = None
    return out


def _no_loads(x: probe_sass.Instr) -> tuple:
    return (x.op.startswith("HMMA"), x.op.startswith("MUFU.EX2"), -x.op.startswith("LDGSTS"), -1)


def loop_paths(sass: str, function: str, loads: bool = True) -> list[list[Op]]:
    """The steady paths of the function's two loops with the most HMMAs (rows64d's halves; fp8's
    draft-tile loops have fewer). loads=False: the path with the fewest LDGSTS (the copies off)."""
    fns = probe_sass.parse(sass)
    if function not in fns:
        raise probe_sass.SassError(f"{function} not in this machine code")
    fn, ops = fns[function], ops_of(sass, function)
    found = [path for _, _, path in half_paths.mma_loops(fn, None if loads else _no_loads)]
    found.sort(key=lambda p: -sum(y.op.startswith("HMMA") for y in p))
    if len(found) < 2:
        raise probe_sass.SassError(f"{function}: {len(found)} loop(s) with {half_paths.MIN_HMMA}+ HMMAs, expected two")
    return [[ops[y.addr] for y in p] for p in sorted(found[:2], key=lambda p: p[0].addr)]


def _pipe(op: str) -> tuple[str | None, int]:
    for prefix, pipe, cycles in PIPES:
        if op.startswith(prefix):
            return pipe, cycles
    return None, 0


def _wavefronts(op: str) -> int:
    """128-byte shared-memory wavefronts of a warp's access, without bank conflicts."""
    if op.startswith("LDSM"):
        return 4 if op.endswith(".4") else 2 if op.endswith(".2") else 1
    if op.startswith(("LDS", "STS")):
        return 4 if ".128" in op else 2 if ".64" in op else 1
    return 1 if op.startswith("SHFL") else 0


def _barrier(x: Op) -> str | None:
    """'cta' for barrier 0 (all threads), 'half' for a named barrier with a thread count."""
    if not x.op.startswith(("BAR.SYNC", "BAR.ARV")):
        return None
    return "half" if "," in x.text.split(x.op, 1)[1] else "cta"


def _compile(path: list[Op], params: dict) -> list[tuple]:
    lat = params["latency"]
    out = []
    for x in path:
        pipe, cycles = _pipe(x.op)
        base = x.op.split(".")[0]
        out.append((max(x.stall, 1), x.write_sb, x.read_sb, x.wait, _barrier(x), pipe,
                    params["hmma_cycles"] if pipe == "tensor" else cycles, _wavefronts(x.op),
                    lat.get(base, lat["other"])))
    return out


def simulate(paths: list[list[Op]], params: dict | None = None, tiles: int = 24, warm: int = 6) -> dict:
    """Cycles a tile (the mean over the 8 warps of tiles warm..tiles) and, per path, the cycles a
    warp spent a tile in each state (issuing, or the reason it did not). paths: the two halves'
    steady loop paths (warps 0-3 run the first, 4-7 the second; which half is which does not
    change the cycles)."""
    p = {**PARAMS, **(params or {})}
    if len(paths) != 2 or not all(paths):
        raise ValueError(f"paths: expected two non-empty loop paths, got {[len(x) for x in paths]}")
    # a loop unrolled by two (-DMLAV_UNROLL) runs two tiles a pass: the other half's path is taken
    # twice so that a pass is the same tiles in both, and the cycles are divided back per tile
    per = [half_paths.tiles_a_pass(x) for x in paths]
    k = max(per)
    if any(k % t for t in per):
        raise ValueError(f"paths: tiles a pass {per}: neither a multiple of the other")
    prog = [_compile(paths[0] * (k // per[0]), p)] * 4 + [_compile(paths[1] * (k // per[1]), p)] * 4
    runs = [_run(prog, p, tiles, warm, random.Random(seed)) for seed in range(max(1, p["seeds"]))]
    reasons = [sum((r[1][h] for r in runs), Counter()) for h in range(2)]
    return {"cycles_per_tile": sum(r[0] for r in runs) / len(runs) / k,
            "reasons": [{k2: v / len(runs) / tiles / 4 / k for k2, v in sorted(c.items())} for c in reasons]}


def _run(prog, p, tiles, warm, rng):
    """One run of the 8 warps' compiled paths (half 0's warps first); (cycles a tile, reasons by half)."""
    n = 8
    pc, ready, tile = [0] * n, [0.0] * n, [0] * n
    sb = [[0.0] * 6 for _ in range(n)]
    starts = [[] for _ in range(n)]
    pipe_free = [Counter() for _ in range(4)]
    mio_free = 0.0
    waiting = [None] * n                      # the barrier a warp arrived at, until it passes
    passes = [Counter() for _ in range(n)]    # barriers of each kind a warp arrived at
    arrived: dict[tuple, list] = {}
    release: dict[tuple, float] = {}
    reasons = [Counter(), Counter()]
    t = 0

    def advance(w):
        pc[w] += 1
        if pc[w] == len(prog[w]):
            pc[w], tile[w] = 0, tile[w] + 1
            starts[w].append(t)

    while min(tile) < tiles:
        for s in range(4):
            issued = False
            for w in ((s, s + 4) if rng.random() < 0.5 else (s + 4, s)):
                if tile[w] >= tiles:
                    continue
                stall, wsb, rsb, wait, bar, pipe, pcyc, wf, lat = prog[w][pc[w]]
                why = None
                if issued:
                    why = "not_selected"
                elif ready[w] > t:
                    why = "stall"
                elif wait and any(sb[w][b] > t for b in range(6) if wait >> b & 1):
                    why = "scoreboard"
                elif waiting[w] is not None:
                    if release.get(waiting[w], float("inf")) > t:
                        why = "barrier"
                    else:                       # passes the barrier it arrived at
                        waiting[w], ready[w] = None, t + stall
                        advance(w)
                        why = "barrier"
                elif pipe and pipe_free[s][pipe] > t:
                    why = "pipe"
                elif wf and mio_free > t + p["mio_queue"]:
                    why = "shared_memory"
                if why:
                    reasons[w // 4][why] += 1
                    continue
                issued = True
                reasons[w // 4]["issue"] += 1
                ready[w] = t + stall
                if bar:
                    g = passes[w][bar]
                    passes[w][bar] += 1
                    key = (bar, g, 0 if bar == "cta" else w // 4)
                    arrived.setdefault(key, []).append(t)
                    if len(arrived[key]) == (8 if bar == "cta" else 4):
                        release[key] = t + p["barrier_cycles"]
                    waiting[w] = key
                    continue
                if pipe:
                    pipe_free[s][pipe] = max(pipe_free[s][pipe], t) + pcyc
                queued = 0.0
                if wf:
                    start = max(mio_free, t)
                    mio_free = start + wf
                    queued = start - t + wf
                if wsb != 7:
                    sb[w][wsb] = max(sb[w][wsb], t + lat + queued)
                if rsb != 7:
                    sb[w][rsb] = max(sb[w][rsb], t + p["read_cycles"] + queued)
                advance(w)
        t += 1
        if t > 1000 * tiles * max(len(x) for x in prog):
            raise RuntimeError("issue_model: no progress (a barrier no warp reaches?)")
    per = sum(starts[w][tiles - 1] - starts[w][warm - 1] for w in range(n)) / n / (tiles - warm)
    return per, reasons


def load_use(path: list[Op]) -> list[tuple[Op, int]]:
    """(load, cycles) for each shared-memory load (LDS*, LDSM*) of a loop's steady path that sets a
    write scoreboard: the control words' stall cycles from it to the first instruction that waits
    for that scoreboard, the path read round the loop once. Below the load's latency (~30 cycles
    unloaded, more while copies land in shared memory) the warp waits for the rest; a static
    figure, blind to the other warps that fill the wait."""
    out, n = [], len(path)
    for i, x in enumerate(path):
        if x.write_sb == 7 or not x.op.startswith(("LDS", "LDSM")):
            continue
        cycles = max(x.stall, 1)
        for k in range(i + 1, i + n):
            y = path[k % n]
            if y.wait >> x.write_sb & 1:
                out.append((x, cycles))
                break
            cycles += max(y.stall, 1)
    return out


FUNCTIONS = {("bf16", True): half_paths.FUNCTIONS["bf16"],
             ("bf16", False): "_ZN4mlav5rowsd23mla_verify_kernel_rowsdILi2ELi2EEEvNS_6ParamsE",
             ("fp8", True): half_paths.FUNCTIONS["fp8"],
             ("fp8", False): "_ZN4mlav5rowsd27mla_verify_kernel_rowsd_fp8ILi2ELi2EEEvNS_6ParamsE"}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lib", type=Path, help="a built library's folder (default: build the production one)")
    ap.add_argument("--arch", default="90")
    ap.add_argument("--pool", choices=("bf16", "fp8"), default="bf16")
    ap.add_argument("--loads", choices=("on", "off"), default="off",
                    help="off: the copy `overlap` times as no_loads (MATH_ALONE)")
    ap.add_argument("--load-use", action="store_true",
                    help="also list each loop's shared loads with the cycles before their first use (load_use)")
    a = ap.parse_args(argv)
    lib = a.lib or build.build((a.arch,))
    loads = a.loads == "on"
    paths = loop_paths(probe_sass.sass_of(lib, a.arch), FUNCTIONS[(a.pool, loads)], loads)
    if a.load_use:
        for path in paths:
            tiles = half_paths.tiles_a_pass(path)
            lu = load_use(path)
            print(f"load_use loop at {path[0].addr:#x} ({tiles} tile(s) a pass): {len(lu) / tiles:.1f} shared loads a tile, "
                  f"{sum(c < 10 for _, c in lu) / tiles:.1f} used within 10 cycles; in order: "
                  + " ".join(f"{x.op.split('.', 1)[0]}:{c}" for x, c in lu))
    r = simulate(paths)
    print(f"issue_model sm_{a.arch} {a.pool} loads {a.loads}: a model's {r['cycles_per_tile']:.0f} cycles a 64-row tile")
    for path, why in zip(paths, r["reasons"]):
        print(f"  loop at {path[0].addr:#x} ({half_paths.tiles_a_pass(path)} tile(s) a pass): {len(path)} instructions, "
              f"{sum(x.op.startswith('HMMA') for x in path)} HMMA, "
              f"stall sum {sum(max(x.stall, 1) for x in path)}; cycles a warp and tile by state: "
              + ", ".join(f"{k} {v:.0f}" for k, v in why.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
