"""mma.sync's rate by input type on this card: bf16 m16n8k16 (what every verify kernel issues)
against e4m3 m16n8k32 (what an fp8 pool read by fp8 MMAs would issue, with no e4m3 -> f16
converts), register-resident, at the verify tiers' 8 warps per SM and at the best of four
occupancies. Whether an fp8-MMA rung can pay (kernel/NOTES.md, issue 25's fp8 targets).

    python -m kernel.bench.mma_kinds --out DIR     # JSON mma-kinds-<gpu>-<stamp>.json, a table last
"""
from __future__ import annotations

import argparse
import sys

import torch

from .. import build
from .ceilings import MMA_KINDS, mma_ceiling
from .env import add_commit_arg, env_info, git_commit, write_json
from .timing import log

# (CTAs per SM, threads per CTA): the verify tiers' one CTA of 8 warps, then the best of ceilings'
OCCUPANCIES = {"8_warps_per_sm": ((1, 256),), "best": ((2, 256), (4, 256), (8, 128), (4, 512))}


def run(commit: str | None = None) -> dict:
    lib, info = build.load(), env_info(commit or git_commit())
    rows = []
    for kind in MMA_KINDS:
        for occ, configs in OCCUPANCIES.items():
            tfl = mma_ceiling(lib, info["sms"], configs, kind=kind)
            log(f"mma_kinds {kind:5s} {occ:15s} {tfl:8.1f} TFLOP/s")
            rows.append({"kind": kind, "occupancy": occ, "configs": [list(c) for c in configs],
                         "TFLOPs": None if tfl != tfl else tfl})
    return {**info, "kind": "mma_kinds", "rows": rows}


def table(doc: dict) -> list[str]:
    by = {(r["kind"], r["occupancy"]): r["TFLOPs"] for r in doc["rows"]}
    out = [f"{'kind':6s} {'8 warps/SM':>12s} {'best':>10s}  (TFLOP/s, dense, fp32 accumulate)"]
    for kind in MMA_KINDS:
        cells = [by.get((kind, o)) for o in OCCUPANCIES]
        out.append(f"{kind:6s} " + " ".join(f"{c:>12.1f}" if c is not None else f"{'none':>12s}" for c in cells))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="folder for mma-kinds-<gpu>-<stamp>.json")
    add_commit_arg(ap)
    a = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("error: mma_kinds needs a CUDA device", file=sys.stderr)
        return 2
    doc = run(a.commit)
    print(f"wrote {write_json(a.out, 'mma-kinds', doc)}")
    print("\n".join(table(doc)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
