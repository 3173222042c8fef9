"""TARGET_VERIFY under decode context parallelism: SGLang's real TritonAttnBackend on 2 and 4
spawned CPU ranks joined by a gloo group (SGLang's own GroupCoordinator and collectives), the
plugin's DCP path on the flash arm, each rank's KV shard laid out as SGLang's DCP lays it
(kernel/sglang/dcp_harness.py). The ranks' outputs, put side by side by head, must equal the
single-rank float64 oracle of the unsharded batch; chains must also equal SGLang's own DCP
path (`_forward_extend_dcp` with custom_mask None, Triton interpreter, float32).

One process group per rank count runs every job (tests/sglang/dcp_ranks.py), in a module
fixture bounded by a timeout; the tests read its results.
"""
import tempfile

import pytest
import torch

import dcp_ranks
from conftest import MODEL_DIR
from kernel.sglang.dcp_merge import simulated_ranks_merge
from kernel.sglang.harness import oracle, rel_err

BF16_TOL = 1e-2

# name: case (widened make_case arguments: pages of page_size * world slots, 2 heads per rank, 4 drafts)
TREES = {
    2: {
        "random-ragged-p1": dict(prefix_lens=[37, 5, 1], tree="random", seed=1),        # S=1: rank 1 holds nothing
        "ddtree-p64": dict(prefix_lens=[130, 64, 3], tree="ddtree", page_size=64, seed=2),
        "star-fragmented-p1": dict(prefix_lens=[90, 17], tree="star", layout="fragmented", seed=3, heads=4),
    },
    4: {
        "random-ragged-p1": dict(prefix_lens=[37, 2, 1, 11], tree="random", seed=4),    # ranks 1-3 / 2-3 empty
        "star-p64": dict(prefix_lens=[200, 3], tree="star", page_size=64, seed=5),
    },
}
# chains, as SGLang's DCP path computes them: custom_mask None, or the chain as a FULL_MASK tree
CHAINS = {
    2: {"chain-none-p1": dict(prefix_lens=[37, 5], tree="chain", causal=True, seed=6),
        "chain-mask-p64": dict(prefix_lens=[70, 129], tree="chain", page_size=64, seed=7)},
    4: {"chain-none-p64": dict(prefix_lens=[70, 5], tree="chain", causal=True, page_size=64, seed=8),
        "chain-mask-p1": dict(prefix_lens=[9, 40], tree="chain", seed=9)},
}
GRAPH = {2: (dict(prefix_lens=[40, 9], seed=10), dict(prefix_lens=[61, 3, 17], seed=11, tree="ddtree")),
         4: (dict(prefix_lens=[33, 2], seed=12, page_size=64), dict(prefix_lens=[3, 80, 1], seed=13, page_size=64))}
EVIDENCE = dict(prefix_lens=[37, 5], tree="random", seed=14)
MERGE = dict(tokens=6, heads=2, seed=15)
ACCEPT = dict(prefix_lens=[37, 6, 11], tree="random", seed=21)


def _jobs(world):
    jobs = [dict(name=n, kind="flash-verify", case=c) for n, c in TREES[world].items()]
    for n, c in CHAINS[world].items():
        sglang_case = dict(c, causal=True)     # SGLang's DCP path has no tree: the same chain, causal
        jobs += [dict(name=n, kind="flash-verify", case=c), dict(name=n + "/sglang", kind="sglang-extend",
                                                                  case=sglang_case)]
    first, second = GRAPH[world]
    jobs.append(dict(name="graph", kind="flash-graph", case=first, second=second))
    jobs += [dict(name="triton-write", kind="triton-verify", case=EVIDENCE),
             dict(name="triton-nowrite", kind="triton-verify", case=EVIDENCE, save_kv_cache=False),
             dict(name="kv-write", kind="flash-extend-write", case=dict(prefix_lens=[20, 7], tree="chain", seed=16)),
             dict(name="triton-extend", kind="triton-extend", case=dict(prefix_lens=[20, 7], tree="chain", seed=16)),
             dict(name="merge", kind="sglang-merge", **MERGE),
             dict(name="accept", kind="flash-accept", case=ACCEPT)]
    return jobs


@pytest.fixture(scope="module", params=[2, 4], ids=lambda w: f"{w}ranks")
def group(request):
    world = request.param
    results = dcp_ranks.run_group(world, _jobs(world), MODEL_DIR, tempfile.mkdtemp(prefix=f"dcp{world}-"),
                                  timeout=150)
    return world, results


def _result(results, name):
    for r, res in enumerate(results):
        assert "exception" not in res[name], f"rank {r}, job {name}:\n{res[name]['exception']}"
    return [res[name] for res in results]


def _side_by_side(results, name, key="out"):
    return torch.cat([r[key] for r in _result(results, name)], dim=1)


def test_trees_equal_the_single_rank_oracle(group):
    world, results = group
    for name, spec in TREES[world].items():
        case = dcp_ranks.case_of(dict(case=spec), world)
        got = _side_by_side(results, name)
        assert torch.isfinite(got).all(), name
        assert rel_err(got, oracle(case)) < BF16_TOL, name
        # two kernel calls per layer on every rank: the draft block and the prefix shard; the
        # layer counts as one call of the flash arm (adapter.calls, mla_verify_kernel_calls_total)
        assert [r["kernel_calls"] for r in _result(results, name)] == [2] * world, name
        assert [r["flash_calls"] for r in _result(results, name)] == [1] * world, name


def test_a_rank_with_an_empty_shard_contributes_nothing_and_breaks_nothing(group):
    world, results = group
    spec = TREES[world]["random-ragged-p1"]
    case = dcp_ranks.case_of(dict(case=spec), world)
    short = [b for b, S in enumerate(spec["prefix_lens"]) if S < world]    # some rank owns none of it
    assert short
    rows = torch.cat([torch.arange(case.qo_indptr[b], case.qo_indptr[b + 1]) for b in short])
    got = _side_by_side(results, "random-ragged-p1")
    assert rel_err(got[rows], oracle(case)[rows]) < BF16_TOL


def test_chains_equal_sglang_own_dcp_path_and_the_oracle(group):
    world, results = group
    for name, spec in CHAINS[world].items():
        case = dcp_ranks.case_of(dict(case=spec), world)
        ours, sglang = _side_by_side(results, name), _side_by_side(results, name + "/sglang")
        ref = oracle(case)
        assert rel_err(sglang, ref) < 1e-5, name   # SGLang's DCP path, exact in float32, on this layout
        assert rel_err(ours, sglang) < BF16_TOL, name
        assert rel_err(ours, ref) < BF16_TOL, name


def test_graph_form_reads_fixed_buffers_and_replays_new_lengths(group):
    world, results = group
    first, second = (dcp_ranks.case_of(dict(case=c), world) for c in GRAPH[world])
    res = _result(results, "graph")
    for r in res:   # the shard buffer the captured calls read is the one replay refilled
        assert r["ptrs"] and set(r["ptrs"]) == set(r["ptrs2"])
    assert rel_err(torch.cat([r["out"] for r in res], 1), oracle(first)) < BF16_TOL
    assert rel_err(torch.cat([r["out2"] for r in res], 1), oracle(second)) < BF16_TOL


def test_sglang_own_arm_cannot_verify_under_dcp(group):
    # Step 1 of issue 14, on SGLang's real classes: TARGET_VERIFY reaches forward_extend, whose
    # DCP KV write hands MLATokenToKVPool a keyword it does not take; without the write,
    # _forward_extend_dcp refuses the tree mask.
    world, results = group
    for r in _result(results, "triton-write"):
        assert r["error"] == ("TypeError: MLATokenToKVPool.set_kv_buffer() got an unexpected keyword argument "
                              "'dcp_kv_mask'")
    for r in _result(results, "triton-nowrite"):
        assert r["error"] == "NotImplementedError: DCP Triton extend does not support custom masks"
    # the same write in every extend that carries a prefix on the MLA path (chunked prefill)
    for r in _result(results, "triton-extend"):
        assert "unexpected keyword argument 'dcp_kv_mask'" in r["error"]


def test_kv_write_lands_on_the_owner_rank_at_row_slot_over_n(group):
    world, results = group
    case = dcp_ranks.case_of(dict(case=dict(prefix_lens=[20, 7], tree="chain", seed=16)), world)
    widened = 4096 * world
    slots = torch.arange(widened - case.q.shape[0], widened)   # the harness's draft slots, token order
    for rank, r in enumerate(_result(results, "kv-write")):
        mine = slots % world == rank
        assert torch.equal(r["slots"], slots[mine])
        assert torch.equal(r["rows"], case.k_extend[mine].float())


def test_sglang_collective_merge_is_the_simulated_merge(group):
    # The single-GPU simulation (kernel/sglang/dcp_sim.py) merges N ranks' shards in one process:
    # its arithmetic must be SGLang's cp_lse_ag_out_rs_mha over a real group.
    world, results = group
    outs, lses = dcp_ranks.merge_inputs(MERGE, world)
    sim = simulated_ranks_merge(outs, lses)
    for rank, r in enumerate(_result(results, "merge")):
        assert torch.allclose(r["out"], sim[rank][0], rtol=1e-5, atol=1e-5)
        assert torch.allclose(r["lse"], sim[rank][1], rtol=1e-5, atol=1e-5)


def test_accepted_tree_path_moves_to_the_front_slots_across_ranks(group):
    # After a tree verify SGLang's accept path (move_accept_tokens_to_target_kvcache) moves each
    # accepted node's row to its request's front slot with widened ids: the pool's own move
    # indexes the rank's rows with them (here past the pool), the plugin's moves across ranks.
    world, results = group
    case = dcp_ranks.case_of(dict(case=ACCEPT), world)
    T, paths = case.meta["draft_lens"][0], dcp_ranks.accept_paths(case)
    assert any(p != list(range(len(p))) for p in paths)     # some node really moves
    widened = 4096 * world
    loc = torch.arange(widened - case.q.shape[0], widened)
    front = torch.cat([loc[b * T:b * T + len(p)] for b, p in enumerate(paths)])
    node = torch.tensor([b * T + n for b, p in enumerate(paths) for n in p])
    for rank, r in enumerate(_result(results, "accept")):
        mine = front % world == rank
        assert torch.equal(r["slots"], front[mine])
        assert torch.equal(r["rows"], case.k_extend[node[mine]].float())
        assert r["sglang"].get("error", "").startswith("IndexError"), r["sglang"]
