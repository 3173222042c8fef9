"""The CPU-testable parts of the production-shape validation (kernel/bench/validate.py,
`validate_production`, issue 24): the plan covers DDTree's padded trees and DFLASH's blocks as the
issue asks, each case has the shape it claims, and the check itself fails a kernel that leaves a
row unwritten or gives a finite LSE where no key is seen. The kernel is replaced by the float64
oracle here (a stand-in with kernel.ops' signature); the GPU runs the real one."""
from __future__ import annotations

import pytest
import torch

from kernel.bench import validate
from kernel.ops import FP8_TIERS, TIERS
from kernel.reference import verify_attention_reference


def test_plan_covers_the_issues_shapes():
    plan = validate.production_plan()
    dd = [p for p in plan if p["family"] == "ddtree"]
    fl = [p for p in plan if p["family"] == "dflash"]
    assert {(p["budget"], p["topk"]) for p in dd} == {(b, k) for b in (7, 16, 32, 64) for k in (1, 2)}
    assert {(p["block"], p["batch"]) for p in fl} == {(b, n) for b in (8, 16, 32) for n in (1, 8, 48)}
    assert {p["batch"] for p in dd} == {1, 8, 48}
    assert [p["id"] for p in plan] == list(range(len(plan)))
    seeds = [p["seed"] for p in plan]
    assert len(set(seeds)) == len(seeds) and min(seeds) >= 200_000   # apart from every other case's seeds


@pytest.mark.parametrize("p", validate.production_plan(), ids=lambda p: f"{p['family']}-{p['id']}")
def test_each_case_has_the_shape_it_claims(p):
    c = validate.production_case(p, device="cpu", max_prefix=40)
    m = c.meta
    assert c.q.shape[1] == 8 and len(m["prefix_lens"]) == p["batch"]
    if p["batch"] > 1:
        assert m["prefix_lens"][-1] == 0
    if p["family"] == "dflash":
        assert c.custom_mask is None and m["draft_lens"] == [p["block"]] * p["batch"]
        return
    D = p["budget"] + 1
    assert m["draft_lens"] == [D] * p["batch"] and m["topk"] == p["topk"]
    assert all(1 <= n <= D for n in m["tree_sizes"])
    if p["batch"] > 1:
        assert m["tree_sizes"][0] == 1 and m["tree_sizes"][1] == D and m["tree_sizes"][-1] < D
    # padding rows all False in the PR's layout, the rest a tree (the oracle's checks, which read
    # every request's block, on the smaller batches)
    if p["batch"] <= 8:
        verify_attention_reference(*c.args())
    off = 0
    for S, n in zip(m["prefix_lens"], m["tree_sizes"]):
        block = c.custom_mask[off: off + D * (S + D)].view(D, S + D)
        assert not block[n:].any() and block[:n, :S].all()
        off += D * (S + D)


class OracleKernel:
    """kernel.ops.verify_attention's signature, the oracle behind it; `spoil` damages its output."""

    def __init__(self, spoil=None):
        self.spoil, self.tiers = spoil, []

    def __call__(self, q, kv_cache, kv_indptr, kv_indices, k_extend, custom_mask, mask_indptr, qo_indptr, sm_scale,
                 *, k_scale=None, v_scale=None, out=None, lse_out=None, max_draft_len=None, tier=None):
        self.tiers.append(tier)
        kw = {} if k_scale is None else dict(k_scale=k_scale, v_scale=v_scale)
        o, lse = verify_attention_reference(q, kv_cache, kv_indptr, kv_indices, k_extend, custom_mask, mask_indptr,
                                            qo_indptr, sm_scale, **kw)
        out.copy_(o)
        lse_out.copy_(lse)
        if self.spoil:
            self.spoil(out, lse_out)
        return out, lse_out


SMALL = [dict(family="ddtree", budget=7, topk=2, batch=8, id=0, seed=200_000),
         dict(family="dflash", block=8, batch=1, id=1, seed=200_001)]


def test_production_section_labels_every_case_and_passes_a_correct_kernel(monkeypatch):
    k = OracleKernel()
    monkeypatch.setattr(validate, "verify_attention", k)
    res = validate.validate_production(1e-2, None, plan=SMALL, device="cpu", max_prefix=30)
    assert res["all_pass"] and res["n_cases"] == 4
    assert set(res["families"]) == {"ddtree/bfloat16", "ddtree/fp8_e4m3", "dflash/bfloat16", "dflash/fp8_e4m3"}
    assert res["n_checks"] == 2 * len(TIERS) + 2 * len(FP8_TIERS)            # every tier of each pool
    dd = [r for r in res["cases"] if r["family"] == "ddtree"]
    assert all(r["budget"] == 7 and r["topk"] == 2 and len(r["tree_sizes"]) == 8 for r in dd)
    assert all(r["lse_inf_match"] for r in res["cases"])


def test_a_finite_lse_where_no_key_is_seen_fails(monkeypatch):
    def spoil(o, lse):
        lse[torch.isneginf(lse)] = 0.0           # a kernel that forgot the l = 0 case in its LSE
    monkeypatch.setattr(validate, "verify_attention", OracleKernel(spoil))
    res = validate.validate_production(1e-2, None, kv_dtypes=("auto",), plan=SMALL[:1], device="cpu", max_prefix=30)
    assert not res["all_pass"] and res["families"]["ddtree/bfloat16"]["failing"] == len(TIERS)
    assert not res["cases"][0]["lse_inf_match"]


def test_an_unwritten_padding_row_fails(monkeypatch):
    def spoil(o, lse):
        o[-1] = float("nan")                     # the poison left in the last row
    monkeypatch.setattr(validate, "verify_attention", OracleKernel(spoil))
    res = validate.validate_production(1e-2, None, kv_dtypes=("auto",), plan=SMALL[:1], device="cpu", max_prefix=30)
    assert not res["all_pass"] and res["cases"][0]["nan"] and res["cases"][0]["unwritten"] == 8 * 512
