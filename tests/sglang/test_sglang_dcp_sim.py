"""The single-GPU DCP simulation (kernel/sglang/dcp_sim.py, stage dcp-sim of kernel.gpu_run) on
the CPU at a small S, with the CPU stand-in kernel and SGLang's own sharding helpers under the
Triton interpreter: the same code the GPU runs, timing left out."""
import json

import pytest
import torch

from kernel.inputs import make_case
from kernel.sglang import dcp_sim


@pytest.fixture(scope="module")
def result():
    from cpu_ops import CpuOps

    return dcp_sim.run(S=300, T=4, heads_per_rank=2, ranks=(2, 4), device="cpu", ops=CpuOps(), timing=False,
                       log=lambda m: None)


def test_simulated_ranks_equal_the_unsharded_call_and_the_oracle(result):
    assert result["kind"] == "dcp-sim" and result["all_pass"]
    for row in result["rows"]:
        assert row["finite"] and row["rel_err_vs_unsharded"] < 1e-2 and row["rel_err_vs_oracle"] < 1e-2, row
        assert sum(row["shard_lens"]) == 300 and max(row["shard_lens"]) - min(row["shard_lens"]) <= 1


def test_result_is_json_and_self_describing(result):
    back = json.loads(json.dumps(result))
    assert {"shape", "units", "assumed_links", "layers", "rows"} <= set(back)
    assert back["shape"]["S"] == 300 and back["layers"] == 61


def test_sharding_is_sglang_s_owner_rule():
    # rank r of n reads positions r, r + n, ... at rows slot // n of its pool
    case = make_case([37], [4], 4, page_size=4, seed=3)
    for r in range(4):
        kv_indptr, kv_indices = dcp_sim.shard_indices(case, 4, r)
        want = case.kv_indices[r::4] // 4
        assert kv_indptr.tolist() == [0, want.numel()]
        assert torch.equal(kv_indices[:want.numel()], want)
        pool = dcp_sim.rank_pool(case, 4, r, rows=64)
        assert torch.equal(pool[want], case.kv_cache[case.kv_indices[r::4]])


def test_collective_bytes_per_layer():
    # 8 tokens, 8 heads per rank, 2 ranks: q all-gather 8*8*576*2, LSE 8*16*4, fp32 out all-reduce 2*(1/2)*8*16*512*4
    b = dcp_sim.collective_bytes(8, 8, 2)
    assert (b["q_all_gather"], b["lse_all_gather"], b["out_all_reduce"]) == (73728, 512, 262144)
    assert dcp_sim.collective_bytes(8, 8, 8)["out_all_reduce"] == 2 * 7 * 8 * 64 * 512 * 4 // 8


def test_estimate_subtracts_collectives_from_the_kernel_saving():
    comm = {"total": 350_000, "collectives": 3}
    est = dcp_sim.estimate(100.0, 40.0, 5.0, comm, layers=61)["nvlink-h200"]
    link = dcp_sim.ASSUMED_LINKS["nvlink-h200"]
    assert est["kernel_saved_ms_per_step"] == pytest.approx(61 * 55.0 / 1e3)
    assert est["collectives_ms_per_step"] == pytest.approx(61 * (350_000 / (link["GBps"] * 1e3)
                                                                 + 3 * link["latency_us"]) / 1e3)
    assert est["net_saved_ms_per_step"] == pytest.approx(est["kernel_saved_ms_per_step"] - est["collectives_ms_per_step"])


def test_timed_run_builds_every_timed_call_and_the_estimate():
    # the GPU path with a stand-in timer: each closure runs (so its arguments are right), 1 ms each
    from cpu_ops import CpuOps

    ran = []

    def time_calls(fns, **kw):
        for f in fns:
            f()
        ran.append(len(fns))
        return 1.0
    res = dcp_sim.run(S=200, T=4, heads_per_rank=2, ranks=(2,), device="cpu", ops=CpuOps(), oracle=False,
                      log=lambda m: None, timer=(time_calls, 1 << 30))
    row = res["rows"][0]
    # unsharded, rank 0's two calls, its draft and prefix calls alone, rank 1's two calls (4 rotating
    # pool copies each: the pools are far below 3 x this L2), the epilogue
    assert ran == [4, 4, 4, 4, 4, 1]
    assert (row["unsharded_us"], row["rank_us"], row["draft_us"], row["epilogue_us"]) == (1e3, [1e3, 1e3], 1e3, 1e3)
    assert set(row["estimate"]) == set(dcp_sim.ASSUMED_LINKS)
    assert dcp_sim.summary_lines(res)[0].startswith("dcp-sim N=2: unsharded 1000.0 us/layer")
