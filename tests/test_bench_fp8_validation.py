"""The CPU-testable parts of the fp8 validation (kernel/bench/validate.py): its case plan
(scales, NaN bytes, the second tier), how the plan is applied to a case, and the summary."""
from __future__ import annotations

from collections import Counter

import pytest
import torch

from kernel.bench import validate
from kernel.fp8 import FP8_NAN_BYTES, quantize_mla_rows
from kernel.inputs import make_case, random_case
from kernel.ops import FP8_TIERS, TIERS, pick_tier


def test_bf16_random_sizes_are_the_ones_validation_always_drew():
    for i in range(30):
        big = i % 10 == 0
        assert validate.random_sizes(i) == dict(max_prefix=8192 if big else 2048, max_draft=64 if big else 24,
                                                max_batch=8, max_heads=128 if big else 16)


def test_fp8_plan_rotates_the_second_tier_and_varies_scales_and_nan_bytes():
    n = 500
    # defaults as the validation sees them: mostly rows64d (8) and the 32-row tier (6)
    g = torch.Generator().manual_seed(3)
    defaults = [(8, 8, 8, 6, 6, 2, 1)[int(torch.randint(0, 7, (1,), generator=g))] for _ in range(n)]
    plans = [validate.fp8_plan(i, d) for i, d in enumerate(defaults)]
    for p, d in zip(plans, defaults):
        assert p["tier"] in FP8_TIERS and p["tier"] != d
    seconds = Counter(p["tier"] for p in plans)
    assert set(seconds) == set(FP8_TIERS) and min(seconds.values()) >= n // (2 * len(FP8_TIERS))
    combos = Counter((p["k_scale"], p["v_factor"], p["nan_byte"]) for p in plans)
    assert {k for k, _, _ in combos} == set(validate.FP8_K_SCALES)
    assert len(combos) == len(set(validate.FP8_K_SCALES)) * len(validate.FP8_V_FACTORS) * len(FP8_NAN_BYTES)
    assert sum(p["v_factor"] != 1.0 for p in plans) >= n // 2   # v_scale != k_scale in most
    # every tier sees every k_scale and every v/k ratio as the second tier
    assert {(p["tier"], p["k_scale"]) for p in plans} == {(t, k) for t in FP8_TIERS for k in validate.FP8_K_SCALES}
    assert {(p["tier"], p["v_factor"]) for p in plans} == {(t, f) for t in FP8_TIERS for f in validate.FP8_V_FACTORS}
    # whatever the default, every fp8 tier still gets cases as the second one
    for d in FP8_TIERS:
        assert {validate.fp8_plan(i, d)["tier"] for i in range(n)} == set(FP8_TIERS) - {d}
    with pytest.raises(ValueError, match=r"default_tier: 0 is not one of the fp8 tiers \[1, 2, 4, 6, 8\]"):
        validate.fp8_plan(3, 0)


def test_the_fp8_tiers_and_every_default_pick_are_tiers_the_kernel_has():
    assert set(FP8_TIERS) <= set(TIERS) and 0 not in FP8_TIERS
    for i in range(0, 500, 7):   # the validation's defaults: sizes of random_sizes(i), draft hint given
        c = random_case(validate.FP8_SEED0 + i, max_prefix=8, max_draft=64 if i % 10 == 0 else 24,
                        max_batch=8, max_heads=128 if i % 10 == 0 else 16, kv_dtype="fp8_e4m3")
        d = validate.default_tier(c)
        assert d == pick_tier(c.q.shape[1], c.q.shape[0], len(c.meta["draft_lens"]), max(c.meta["draft_lens"]),
                              kv_fp8=True)
        assert d in FP8_TIERS


@pytest.mark.parametrize("k_scale, v_factor, nan_byte", [(None, 3.0, 0xFF), (0.0625, 0.5, 0x7F), (1.0, 1.0, 0xFF)])
def test_with_fp8_plan_requantizes_with_k_scale_and_poisons_only_unowned_slots(k_scale, v_factor, nan_byte):
    base = random_case(12, max_prefix=300, kv_dtype="fp8_e4m3")
    c = validate.with_fp8_plan(base, {"k_scale": k_scale, "v_factor": v_factor, "nan_byte": nan_byte, "tier": 1})
    k = base.k_scale if k_scale is None else k_scale
    assert c.k_scale == k and c.v_scale == pytest.approx(k * v_factor)
    assert c.kwargs() == {"k_scale": c.k_scale, "v_scale": c.v_scale}
    m = c.meta
    auto = make_case(m["prefix_lens"], m["draft_lens"], m["heads"], tree=m["tree"], layout=m["layout"],
                     page_size=m["page_size"], seed=m["seed"], causal=m["causal"])
    raw = c.kv_cache.view(torch.uint8)
    owned = torch.zeros(raw.shape[0], dtype=torch.bool)
    owned[c.kv_indices] = True
    # the owned rows are the same model rows quantized as SGLang writes them with this k_scale
    assert torch.equal(raw[c.kv_indices], quantize_mla_rows(auto.kv_cache[auto.kv_indices], k).view(torch.uint8))
    assert bool((raw[~owned] == nan_byte).all()) and (~owned).any()
    assert torch.equal(c.q, auto.q) and torch.equal(c.k_extend, auto.k_extend)


def test_summarise_counts_checks_per_fp8_tier_and_puts_a_failure_worst():
    def check(tier, e, ok=True):
        return {"tier": tier, "rel_err": e, "pass": ok}
    cases = [{**check(8, 1e-3), "tiers": [check(2, 2e-3)], "pass_all_tiers": True},
             {**check(6, 5e-3), "tiers": [check(1, 4e-3, False)], "pass_all_tiers": False},
             {**check(1, 9e-3), "tiers": [], "pass_all_tiers": True}]
    s = validate.summarise(cases, {t: TIERS[t] for t in FP8_TIERS}, 1e-2)
    assert s["n_cases"] == 3 and s["n_checks"] == 5 and s["all_pass"] is False
    assert s["worst"] is cases[1]   # failing first, then the largest error
    assert set(s["by_tier"]) == {"1", "2", "4", "6", "8"}
    assert s["by_tier"]["1"] == {"rows_per_tile": 8, "checks": 2, "failing": 1, "worst_rel_err": 9e-3}
    assert s["by_tier"]["4"]["checks"] == 0 and s["by_tier"]["4"]["worst_rel_err"] is None


def test_default_tier_of_an_fp8_case_is_the_one_the_kernel_runs(monkeypatch):
    c = random_case(5, max_prefix=50, kv_dtype="fp8_e4m3")
    monkeypatch.setattr(validate, "pick_tier", lambda *a, **k: 0)   # MLA_VERIFY_LARGE_TIER=0 picks rows64
    assert validate.default_tier(c) == 8                       # which ops.verify_attention swaps for rows64d
    assert validate.default_tier(random_case(5, max_prefix=50)) == 0
