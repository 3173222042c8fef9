"""Buffers a captured CUDA graph writes stay allocated for as long as the process runs.

With --speculative-adaptive, EAGLE v2 builds more target backends after the first verify
graph was captured, each for another number of draft tokens per request (steps + 1). The
plugin sizes the LSE scratch when a backend is built; a larger later backend must not free
the scratch an earlier graph's kernel launches still point at (the caching allocator would
hand that memory to another tensor, and every replay would write fp32 over it).
"""
import gc
import weakref

import pytest
import torch

from kernel.inputs import make_case
from kernel.sglang import adapter
from kernel.sglang.harness import Harness

CPU = torch.device("cpu")


def test_adaptive_sequence_keeps_the_first_graphs_scratch_alive(flash, monkeypatch):
    monkeypatch.setattr(adapter, "_lse_scratch", {})
    monkeypatch.setattr(adapter, "_retired_lse", [])
    # adaptive state 1: 3 steps -> 4 draft tokens per request; its graph captured at batch 4
    h = Harness(draft=4)
    h.capture(make_case([30, 9], [4, 4], 8, tree="random", seed=3), graph_bs=4)
    lse_out = flash.calls[-1]["lse_out"]
    ptr, need = lse_out.data_ptr(), lse_out.numel()
    first = weakref.ref(adapter._lse_scratch[CPU])
    first_size = first().numel()
    assert first().data_ptr() == ptr and first_size >= need
    flash.calls.clear()
    del lse_out
    # adaptive state 2, built after that capture: 15 steps -> 16 draft tokens per request
    h.runner.decode_num_tokens_per_req = lambda: 16
    second = h.build_backend()
    assert second.mla_verify_backend == "flash"
    assert adapter._lse_scratch[CPU].numel() >= h.max_bs * 16 * 8 > first_size   # it grew
    gc.collect()
    # the first graph's pointer is still owned memory of the size it was captured with
    assert first() is not None, "the scratch the first graph writes was freed"
    assert first().data_ptr() == ptr and first().numel() >= need


def test_reserve_lse_never_shrinks_and_names_bad_sizes(monkeypatch):
    monkeypatch.setattr(adapter, "_lse_scratch", {})
    monkeypatch.setattr(adapter, "_retired_lse", [])
    big = adapter.reserve_lse("cpu", 64, 8)
    assert adapter.reserve_lse("cpu", 4, 8) is big
    with pytest.raises(ValueError, match="tokens=0"):
        adapter.reserve_lse("cpu", 0, 8)
