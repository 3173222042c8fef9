"""Nothing a captured CUDA graph writes may be freed while the process runs.

With --speculative-adaptive, EAGLE v2 builds more target backends after the first verify graph
was captured, each for another number of draft tokens per request (steps + 1). The plugin once
kept an LSE scratch sized per backend, grown (and the old one kept alive) when a larger backend
came; the verify call now passes no LSE at all (nothing at SGLang's call site reads it), so the
plugin holds no per-backend buffer a graph could outlive, and a later backend changes nothing
the first graph's replays write or read.
"""
import torch

from kernel.inputs import make_case
from kernel.sglang import adapter
from kernel.sglang.harness import Harness


def test_adaptive_sequence_keeps_the_first_graph_right(flash):
    # adaptive state 1: 3 steps -> 4 draft tokens per request; its graph captured at batch 4
    h = Harness(draft=4)
    case = make_case([30, 9], [4, 4], 8, tree="random", seed=3)
    first = h.capture(case, graph_bs=4)
    assert flash.calls[-1]["lse_out"] is None and flash.calls[-1]["with_lse"] is False
    # adaptive state 2, built after that capture: 15 steps -> 16 draft tokens per request
    h.runner.decode_num_tokens_per_req = lambda: 16
    second = h.build_backend()
    assert second.mla_verify_backend == "flash"
    assert not hasattr(adapter, "_lse_scratch") and not hasattr(adapter, "reserve_lse")
    again = h.replay(case)
    assert torch.equal(first, again)
    assert float((again.double() - h.oracle(case)).norm() / h.oracle(case).norm()) < 1e-2
