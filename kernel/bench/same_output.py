"""Does a diagnostic build write the production library's output, bit for bit? A rung that moves
work in time but not its arithmetic (tier_rowsd.cuh's H0_LAG and SPLIT_COPIES: the same MMAs on
the same P and alpha, issued later) must; overlap.py asks it of every variant, on the loaders' edge cases
(sanitize_tiers.cases) and at each shape it times, before it times the variant, so that no
time of a build that computes something else is recorded. Production itself is the validated one.
A build that changes the schedule's split boundaries (tier_rowsd.cuh's TAIL) rounds its merge
differently by design: overlap.py holds such builds to production's output within a tolerance
instead (rel_err beside equal on every row).
"""
from __future__ import annotations

import torch

from ..ops import launch
from .timing import rel_err


def bits_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Same shape, dtype and bytes (NaN equals NaN of the same pattern; -0.0 is not 0.0)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    ints = {2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
    return bool(torch.equal(a.contiguous().view(ints), b.contiguous().view(ints)))


def outputs(lib, case, tier: int, ws) -> tuple[torch.Tensor, torch.Tensor]:
    """(o [N, H, 512] bf16, lse [N, H] fp32) of one call of `lib` at `tier`, NaN-poisoned first."""
    N, H = case.q.shape[0], case.q.shape[1]
    o = torch.full((N, H, 512), float("nan"), dtype=torch.bfloat16, device=case.q.device)
    lse = torch.full((N, H), float("nan"), dtype=torch.float32, device=case.q.device)
    launch(*case.args(), o, lse, ws.buffer, ws.target_ctas, ws.max_bs, tier=tier, lib=lib, **case.kwargs())
    torch.cuda.synchronize()
    return o, lse


def compare(prod, variants: dict, cases, ws) -> list[dict]:
    """Each (name, case) of `cases` through production `prod` once per tier and through every
    variant at that tier: variants = {build: (lib, tiers)}. One row per variant call: build, case,
    tier, equal, and the unwritten (NaN) outputs of each side."""
    rows = []
    for name, case in cases:
        for t in sorted({t for _, ts in variants.values() for t in ts}):
            po, plse = outputs(prod, case, t, ws)
            for b, (lib, ts) in variants.items():
                if t in ts:
                    o, lse = outputs(lib, case, t, ws)
                    eq = bits_equal(o, po) and bits_equal(lse, plse)
                    rows.append({"build": b, "case": name, "tier": t, "equal": eq,
                                 "rel_err": 0.0 if eq else max(rel_err(o, po), rel_err(lse, plse)),
                                 "nan": int(torch.isnan(o).sum()), "nan_production": int(torch.isnan(po).sum())})
    return rows
