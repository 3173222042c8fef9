"""The fp8 pool read by e4m3 MMAs, on paper: what they would do to the output's error, emulated
on the CPU against the float64 oracle (kernel/NOTES.md, 2026-12-03 seventh session and 2026-12-04).
mma.sync e4m3 takes both operands in e4m3, so q (into QK) and P (into PV) must be rounded to e4m3
too; each scheme below says how. Everything else is exact here (float64 products and sums; the
kernel accumulates in fp32), and the output is rounded to bf16 as the kernel writes it, so the f16
scheme (today's kernel) reproduces the validation's error floor.

Schemes (prefix rows; the draft rows stay bf16 in every scheme, as in the kernel), q's and P's
format each:
  f16        q exact (bf16 is exact in f16 at the kernel's per-CTA scale), P rounded to f16:
             today's rows64d fp8 copy
  e4m3       q and P rounded to e4m3 once: SGLang's own fp8 path (kernel/FP8.md)
  e4m3x2     q and P as two e4m3 terms, hi = e4m3(x) and lo = e4m3(x - hi), one scale each
             (q: times the power of two that puts a request's largest |value| in (128, 256];
             P: times 1, i.e. P <= 1 under a fresh max)
  e4m3x2_p16 as e4m3x2 with P times 2^4: a kernel whose stale max trails by at most 2^4 (not
             today's 2^8) keeps P x 16 <= 256, below e4m3's 448, and P's small values in range
  e4m3+e5m2  as e4m3x2 with lo in e5m2 (mma.sync takes e4m3 and e5m2 operands in either place;
             native on sm_120, two f16 HMMAs with converts on sm_90): lo keeps 2 bits but e5m2's
             range, so small values keep their low term
  qk_e4m3x2  q as two e4m3 terms, P f16: QK alone by e4m3 MMAs, PV as today
P is emulated under the exact running max (P <= 1): a stale max moves every value up, so this is
the harder case for the narrow formats.

The sink rows: one attention row over n keys, one of them (a sink) `gap` nats above the others'
mean (theirs spread by 0.5 nats), V a shared direction plus noise, so that the tail's mass carries
what the sink does not. P's format alone is applied (q exact): an e4m3 P drops every value below
its smallest subnormal, 2^-9 of its scale, and at 185k keys that tail can hold most of the mass.

    python -m kernel.bench.fp8_mma_precision --out DIR [--cases 60]   # JSON, a table last; CPU
"""
from __future__ import annotations

import argparse
import datetime as dt
import math
import sys

import torch

from ..fp8 import dequantize_keys, dequantize_values
from ..inputs import make_case, random_case
from ..reference import draft_tree, verify_attention_reference
from .env import write_json
from .timing import rel_err

E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2
FORMATS = ("f16", "e4m3", "e4m3x2", "e4m3+e5m2")
# scheme -> (q's format, P's format, P's scale into PV: a power of two)
SCHEMES = {"f16": ("f16", "f16", 1.0), "e4m3": ("e4m3", "e4m3", 1.0), "e4m3x2": ("e4m3x2", "e4m3x2", 1.0),
           "e4m3x2_p16": ("e4m3x2", "e4m3x2", 16.0), "e4m3+e5m2": ("e4m3+e5m2", "e4m3+e5m2", 1.0),
           "qk_e4m3x2": ("e4m3x2", "f16", 1.0)}
SINK_KEYS, SINK_GAPS, SINK_COLUMNS = (4096, 185000), (4, 8, 11, 14), 64


def rounded(x: torch.Tensor, dtype) -> torch.Tensor:
    """x (float64) rounded to dtype (round to nearest even) and back to float64."""
    return x.to(dtype).double()


def split2(x: torch.Tensor, lo_dtype=E4M3) -> torch.Tensor:
    """x as e4m3 hi plus lo_dtype lo: the value two MMAs on (hi, lo) would see, float64."""
    hi = rounded(x, E4M3)
    return hi + rounded(x - hi, lo_dtype)


def operand(x: torch.Tensor, fmt: str, scale: float) -> torch.Tensor:
    """x (float64) as an MMA operand of format fmt (FORMATS) sees it, computed at x * scale and
    scaled back."""
    if fmt not in FORMATS:
        raise ValueError(f"fmt: {fmt!r} is not one of {FORMATS}")
    y = x * scale
    if fmt == "f16":
        y = rounded(y, torch.float16)
    elif fmt == "e4m3":
        y = rounded(y, E4M3)
    elif fmt == "e4m3x2":
        y = split2(y)
    else:
        y = split2(y, E5M2)
    return y / scale


def attention(case, scheme: str) -> torch.Tensor:
    """[N, H, 512] float64: the verify attention with scheme's roundings on the prefix's q and P,
    output rounded to bf16 (the kernel's o); masked as kernel.reference masks (draft_tree)."""
    if scheme not in SCHEMES:
        raise ValueError(f"scheme: {scheme!r} is not one of {sorted(SCHEMES)}")
    q_fmt, p_fmt, p_scale = SCHEMES[scheme]
    q, kv, kv_indptr, kv_indices, k_ext, mask, mask_indptr, qo_indptr, sm_scale = case.args()
    kvp, qop = kv_indptr.tolist(), qo_indptr.tolist()
    N, H, _ = q.shape
    o = torch.zeros(N, H, 512, dtype=torch.float64)
    for b in range(len(qop) - 1):
        q0, q1, k0, k1 = qop[b], qop[b + 1], kvp[b], kvp[b + 1]
        T, S = q1 - q0, k1 - k0
        if T == 0:
            continue
        rows = kv[kv_indices[k0:k1].long(), 0]
        pk, pv = dequantize_keys(rows, case.k_scale), dequantize_values(rows, case.v_scale)   # [S, 576], [S, 512]
        draft = k_ext[q0:q1, 0].double()
        qb = q[q0:q1].double()                                                                  # [T, H, 576]
        qmax = float(qb.abs().max()) or 1.0
        # a power of two, as the kernel's 2^-qe, that puts the request's largest |q| in (128, 256]
        qp = operand(qb, q_fmt, 2.0 ** (8 - math.ceil(math.log2(qmax))))   # the prefix QK's q
        logits = torch.cat([torch.einsum("thd,kd->thk", qp, pk), torch.einsum("thd,kd->thk", qb, draft)], -1) * sm_scale
        tree = draft_tree(mask, mask_indptr, b, T, S, qb.device)
        allowed = torch.cat([torch.ones(T, S, dtype=torch.bool), tree], 1)
        logits = logits.masked_fill(~allowed[:, None, :], float("-inf"))
        m = logits.amax(-1, keepdim=True)
        m = torch.where(torch.isneginf(m), torch.zeros_like(m), m)
        p = torch.exp(logits - m)                                                               # <= 1
        l = p.sum(-1, keepdim=True)
        pp = operand(p[..., :S], p_fmt, p_scale)          # the prefix PV's P
        pd = rounded(p[..., S:], torch.bfloat16)          # the draft P: bf16, as in the kernel
        acc = pp @ pv + pd @ draft[:, :512]
        o[q0:q1] = torch.where(l > 0, acc / l.clamp_min(1e-300), torch.zeros_like(acc))
    return rounded(o, torch.bfloat16)


def cases(n: int):
    """n random fp8 cases (the validation's generator) and four larger prefixes at DDTree's and
    DFLASH's draft lengths (S = 4,096: many small P per row, where narrow P loses the most)."""
    for i in range(n):
        yield f"random-{i}", random_case(i, kv_dtype="fp8_e4m3")
    for tree, T in (("ddtree", 17), ("chain", 16), ("random", 33), ("star", 8)):
        yield f"{tree}-S4096-T{T}", make_case([4096], [T], 8, tree=tree, seed=7 + T, kv_dtype="fp8_e4m3",
                                              causal=tree == "chain")


def sink_row(n: int, gap: float, scheme: str, seed: int = 0) -> dict:
    """One row's output with P in scheme's P format (q exact) against float64: n keys, key 0 a
    sink `gap` nats above the other keys' mean logit (theirs N(0, 0.5^2)), V = one shared
    direction + N(0, 0.5^2) noise, SINK_COLUMNS columns. P under the exact max, l from the unrounded
    P, the output rounded to bf16, as in `attention`. {rel_err, tail_mass}: tail_mass is the
    share of sum P that is not the sink's."""
    _, p_fmt, p_scale = SCHEMES[scheme]
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(n, generator=g, dtype=torch.float64) * 0.5
    logits[0] = gap
    v = torch.randn(n, SINK_COLUMNS, generator=g, dtype=torch.float64) * 0.5 + \
        torch.randn(SINK_COLUMNS, generator=g, dtype=torch.float64)
    p = torch.exp(logits - logits.max())
    l = p.sum()
    ref = p @ v / l
    o = rounded(operand(p, p_fmt, p_scale) @ v / l, torch.bfloat16)
    return {"rel_err": rel_err(o, ref), "tail_mass": float(p[1:].sum() / l)}


def run(n: int) -> dict:
    rows = []
    for name, c in cases(n):
        ref, _ = verify_attention_reference(*c.args(), **c.kwargs())
        rows.append({"case": name, **{s: rel_err(attention(c, s), ref) for s in SCHEMES}})
    summary = {s: {"worst": max(r[s] for r in rows), "median": sorted(r[s] for r in rows)[len(rows) // 2]}
               for s in SCHEMES}
    sinks = []
    for keys in SINK_KEYS:
        for gap in SINK_GAPS:
            errs = {s: sink_row(keys, gap, s) for s in SCHEMES}
            sinks.append({"keys": keys, "gap_nats": gap, "tail_mass": errs["f16"]["tail_mass"],
                          **{s: e["rel_err"] for s, e in errs.items()}})
    return {"kind": "fp8-mma-precision", "device": "cpu", "torch": torch.__version__,
            "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "tolerance": 1e-2, "schemes": list(SCHEMES), "scheme_formats": SCHEMES, "summary": summary,
            "rows": rows, "sink_rows": sinks}


def table(doc: dict) -> list[str]:
    out = [f"{'scheme':10s} {'median':>9s} {'worst':>9s}  (relative error against the float64 oracle; "
           f"bar {doc['tolerance']:g})"]
    for s in doc["schemes"]:
        v = doc["summary"][s]
        out.append(f"{s:10s} {v['median']:9.2e} {v['worst']:9.2e}")
    out.append(f"sink rows: {'keys':>6s} {'gap':>4s} {'tail':>5s} " + " ".join(f"{s:>10s}" for s in doc["schemes"]))
    for r in doc.get("sink_rows", ()):
        out.append(f"           {r['keys']:6d} {r['gap_nats']:4g} {r['tail_mass']:5.2f} "
                   + " ".join(f"{r[s]:10.2e}" for s in doc["schemes"]))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="folder for fp8-mma-precision-cpu-<stamp>.json")
    ap.add_argument("--cases", type=int, default=60, help="random cases (default 60; four larger ones follow)")
    a = ap.parse_args(argv)
    if a.cases < 1:
        print(f"error: --cases: {a.cases} (at least 1)", file=sys.stderr)
        return 2
    doc = run(a.cases)
    # named as every measurement file is, with the CPU in the GPU's place
    print(f"wrote {write_json(a.out, 'fp8-mma-precision', doc, {'date': doc['date'], 'gpu': 'cpu'})}")
    print("\n".join(table(doc)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
