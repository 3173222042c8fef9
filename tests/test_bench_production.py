"""The bench's production algorithm's shapes (kernel/bench/sweeps.py, issue 24): DFLASH's causal
block of 16 at batch 1 and 8, DDTree's trees padded to D = 17, 33, 65, at S = 185k, 8 heads, on
both pools; their rows name the algorithm and the shape, and their roofline counts every row the
kernel computes (padding included)."""
import torch

from kernel.bench import sweeps
from kernel.checks import FP8_ROW_BYTES, ROW_BYTES


def test_production_configs_are_the_issues_shapes():
    cfgs = sweeps.production_configs()
    got = {(c["sweep"], c["T"], c["batch"], c.get("kv_dtype", "auto")) for c in cfgs}
    want = {(p + "dflash", 16, b, kv) for b in (1, 8) for p, kv in (("", "auto"), ("fp8_", "fp8_e4m3"))} | \
           {(p + "ddtree", D, 1, kv) for D in (17, 33, 65) for p, kv in (("", "auto"), ("fp8_", "fp8_e4m3"))}
    assert got == want and len(cfgs) == len(want)
    assert all(c["S"] == 185000 and c["H"] == 8 and c["page"] == 1 and c["layout"] == "scattered" for c in cfgs)
    assert all(c["budget"] == c["T"] - 1 for c in cfgs if c["sweep"].endswith("ddtree"))
    full, quick = sweeps.bench_configs(False), sweeps.bench_configs(True)
    assert all(c in full for c in cfgs)
    assert {c["T"] for c in quick if "algorithm" in c} == {16, 17, 33}   # quick: T <= 64


def test_production_cases_and_row_fields():
    cfg = next(c for c in sweeps.production_configs() if c["sweep"] == "ddtree" and c["T"] == 33)
    case = sweeps.production_case(cfg, [40], seed=3, kv="auto", device="cpu")
    assert case.meta["draft_lens"] == [33] and case.meta["tree_sizes"] == [24]       # 3/4 of D real nodes
    block = case.custom_mask.view(33, 40 + 33)
    assert not block[24:].any() and block[:24, :40].all()
    assert sweeps.production_fields(case) == {"algorithm": "DDTREE", "budget": 32, "topk": 2, "tree_sizes": [24],
                                              "causal": False}
    cfg = next(c for c in sweeps.production_configs() if c["sweep"] == "fp8_dflash")
    case = sweeps.production_case(cfg, [40, 7], seed=4, kv="fp8_e4m3", device="cpu")
    assert case.custom_mask is None and case.kv_cache.dtype == torch.float8_e4m3fn
    assert sweeps.production_fields(case) == {"algorithm": "DFLASH", "block": 16, "causal": True}


def test_production_roofline_counts_every_verified_row():
    t = sweeps.traffic([185000], 65, 8)
    assert t["kv_bytes"] == 185000 * ROW_BYTES + 65 * ROW_BYTES
    assert t["flops"] == 65 * 8 * (185000 + 65) * 2 * (576 + 512)
    assert sweeps.traffic([185000], 16, 8, "fp8_e4m3")["kv_bytes"] == 185000 * FP8_ROW_BYTES + 16 * ROW_BYTES
