"""EXTEND over a cached prefix through SGLang's real TritonAttnBackend (kernel/sglang/extend.py,
driven by kernel/sglang/extend_harness.py): with flash the kernel (the CPU oracle stand-in)
serves eager EXTEND and MIXED batches, ragged, with empty prefixes, on bf16 and fp8 pools, after
SGLang's own KV write; a chunked prefill's next chunk reads what the last one wrote; what the
kernel cannot serve runs SGLang's kernel, counted and logged once; the triton arm, the draft
runner's decode backends and TARGET_VERIFY are as before."""
import copy
import logging

import pytest
import torch

from kernel.fp8 import FP8, quantize_mla_rows
from kernel.inputs import make_case
from kernel.sglang import adapter as sglang_adapter
from kernel.sglang import extend, metrics
from kernel.sglang.extend_harness import ExtendHarness
from kernel.sglang.harness import rel_err

BF16_TOL = 1e-2   # the stand-in's float64 result rounded to bf16: ~2e-3 relative


def _count(series: str, **labels) -> float:
    return metrics.extend_series()[series].labels(**labels)._value.get()


@pytest.fixture(autouse=True)
def fresh_log_once():
    extend._logged.clear()
    yield
    extend._logged.clear()


def test_flash_serves_a_ragged_extend_over_cached_prefixes(flash):
    h = ExtendHarness(layers=2)
    case = make_case([37, 0, 120], [9, 5, 1], 8, causal=True, layout="fragmented", seed=3)
    seen = flash.record_pool_rows(h.new_slots(15))
    before = _count("calls", mode="extend")
    outs = h.run_extend(case)
    qs, ks = h.layer_inputs(case)
    assert len(flash.calls) == 2 and _count("calls", mode="extend") == before + 2
    for layer, (out, call) in enumerate(zip(outs, flash.calls)):
        assert rel_err(out, h.oracle(case, layer=layer)) < BF16_TOL
        assert call["custom_mask"] is None and call["mask_indptr"] is None and call["max_draft_len"] == 9
        assert call["qo_indptr"].tolist() == [0, 9, 14, 15] and call["kv_indptr"].tolist() == [0, 37, 37, 157]
        assert torch.equal(call["k_extend"], ks[layer])          # the new tokens' K from k_extend
        assert call["out"].data_ptr() == out.data_ptr()           # SGLang's o, written in place
        # SGLang's save_kv_cache had written the new tokens' rows when the kernel was called
        assert torch.equal(seen[layer], ks[layer])


def test_a_mixed_batch_is_served_and_counted_as_mixed(flash):
    h = ExtendHarness()
    case = make_case([60, 33, 12], [20, 1, 1], 8, causal=True, seed=4)   # a chunk and two decoding requests
    before = _count("calls", mode="mixed")
    out = h.run_extend(case, mode="MIXED")
    assert rel_err(out, h.oracle(case)) < BF16_TOL
    assert len(flash.calls) == 1 and _count("calls", mode="mixed") == before + 1


def _chunk(case, t0: int, t1: int, earlier_slots: torch.Tensor):
    """New tokens t0..t1 of a one-request causal case, with the slots of tokens 0..t0 (written by
    the earlier chunks) appended to its cached prefix."""
    c = copy.copy(case)
    S = case.meta["prefix_lens"][0] + t0
    c.q, c.k_extend = case.q[t0:t1], case.k_extend[t0:t1]
    c.kv_indices = torch.cat([case.kv_indices, earlier_slots])
    c.kv_indptr = torch.tensor([0, S], dtype=torch.int32)
    c.qo_indptr = torch.tensor([0, t1 - t0], dtype=torch.int32)
    c.meta = dict(case.meta, prefix_lens=[S], draft_lens=[t1 - t0])
    return c


def test_a_chunked_prefills_next_chunk_reads_the_rows_the_last_one_wrote(flash):
    h = ExtendHarness()
    whole = make_case([40], [30], 8, causal=True, seed=9)   # 40 cached tokens, 30 new ones at once
    one_shot = h.run_extend(whole).clone()
    slots = h.new_slots(30)
    first = h.run_extend(_chunk(whole, 0, 18, slots[:0]), new=slots[:18]).clone()
    # the second chunk's prefix ends with the first chunk's 18 rows, as forward_extend wrote them
    second = h.run_extend(_chunk(whole, 18, 30, slots[:18]), new=slots[18:], fill=False)
    assert flash.calls[-1]["kv_indptr"].tolist() == [0, 58] and flash.calls[-1]["max_draft_len"] == 12
    assert rel_err(torch.cat([first, second]), one_shot) < BF16_TOL


@pytest.mark.parametrize("v_factor", [1.0, 3.0])
def test_flash_serves_an_fp8_pool_after_sglangs_scaled_write(flash, v_factor):
    h = ExtendHarness(kv_dtype=FP8)
    case = make_case([40, 0, 13], [6, 3, 2], 8, causal=True, seed=5, kv_dtype="fp8_e4m3")
    h.set_kv_scales(case.k_scale, case.k_scale * v_factor)
    out = h.run_extend(case)
    call = flash.calls[-1]
    assert call["kv_cache"].dtype == FP8 and call["k_scale"] == case.k_scale
    assert call["v_scale"] == pytest.approx(case.k_scale * v_factor)
    # SGLang's write path for a scaled MLA layer: k / k_scale, stored as e4m3 bytes
    written = h.layer_pool(0)[h.new_slots(11)]
    assert torch.equal(written, quantize_mla_rows(case.k_extend, case.k_scale).view(torch.uint8))
    assert rel_err(out, h.oracle(case)) < BF16_TOL


def test_what_the_kernel_cannot_serve_runs_sglangs_kernel_counted_and_logged_once(flash, bf16_interpreter, caplog):
    case = make_case([20, 0], [6, 3], 8, causal=True, seed=2)
    h = ExtendHarness()
    h.layer.logit_cap = 30.0          # a tanh logit cap: SGLang's extend kernel applies one, ours none
    before = _count("fallbacks", mode="extend", reason="logit_cap")
    with caplog.at_level(logging.WARNING, logger=extend.__name__):
        out = h.run_extend(case).clone()
        h.run_extend(case)
    assert flash.calls == [] and _count("fallbacks", mode="extend", reason="logit_cap") == before + 2
    logged = [r.getMessage() for r in caplog.records if "logit_cap" in r.getMessage()]
    assert len(logged) == 1 and logged[0].startswith("mla-verify: EXTEND falls back to SGLang's extend_attention_fwd")
    control = ExtendHarness(arm="triton")
    control.layer.logit_cap = 30.0
    assert torch.equal(out, control.run_extend(case))


def test_a_forward_mode_not_served_is_counted(flash):
    h = ExtendHarness()
    case = make_case([12], [3], 8, causal=True, seed=6)
    before = _count("fallbacks", mode="split_prefill", reason="forward_mode")
    h.run_extend(case, mode="SPLIT_PREFILL")
    assert flash.calls == [] and _count("fallbacks", mode="split_prefill", reason="forward_mode") == before + 1


def test_a_batch_over_the_workspace_falls_back(flash, monkeypatch):
    h = ExtendHarness()
    monkeypatch.setattr(flash, "get_workspace", lambda device: type("W", (), {"max_bs": 2})())
    before = _count("fallbacks", mode="extend", reason="batch_size")
    h.run_extend(make_case([5, 6, 7], [2, 2, 2], 8, causal=True, seed=7))
    assert flash.calls == [] and _count("fallbacks", mode="extend", reason="batch_size") == before + 1


def test_the_lse_scratch_grows_for_a_longer_extend(flash):
    h = ExtendHarness()
    dev = torch.device("cpu")
    assert extend._lse[dev].numel() >= extend.token_bound() * 8     # sized at install
    extend._lse[dev] = torch.empty(8)                                # as if the bound were one token
    h.run_extend(make_case([10], [20], 8, causal=True, seed=8))
    assert extend._lse[dev].numel() >= 20 * 8 and flash.calls[-1]["lse_out"].shape == (20, 8)


def test_the_triton_arm_leaves_extend_to_sglang(monkeypatch, cpu_ops, bf16_interpreter):
    monkeypatch.setenv("MLA_VERIFY_BACKEND", "triton")
    h = ExtendHarness()
    b = h.backend
    assert "forward_extend" not in vars(b) and "_forward_extend_kernel" not in vars(b)
    before = _count("calls", mode="extend")
    case = make_case([37, 0], [5, 4], 8, causal=True, seed=3)
    assert rel_err(h.run_extend(case), h.oracle(case)) < BF16_TOL
    assert cpu_ops.calls == [] and _count("calls", mode="extend") == before


def test_the_draft_runners_decode_backends_keep_sglangs_extend(flash):
    # its extend backend is hooked for EAGLE's draft extend (test_sglang_draft_extend.py); the
    # multi-step draft decode backends (skip_prefill) run only DECODE and stay SGLang's
    from sglang.srt.layers.attention.triton_backend import TritonAttnBackend

    b = TritonAttnBackend(ExtendHarness(draft_worker=True).runner, skip_prefill=True)
    assert "forward_extend" not in vars(b) and not hasattr(b, "mla_verify_extend")


def test_target_verify_is_unchanged_beside_extend(flash):
    h = ExtendHarness()
    assert getattr(h.backend, "mla_verify_extend", False)
    h.run_extend(make_case([30], [4], 8, causal=True, seed=1))
    calls = _count("calls", mode="extend")
    verify = make_case([37, 120], [8, 8], 8, tree="random", seed=11)
    out = h.run_eager(verify)                       # TARGET_VERIFY through the adapter's slot
    call = flash.calls[-1]
    assert len(flash.calls) == 2 and call["custom_mask"] is not None and call["max_draft_len"] == 8
    assert sglang_adapter.calls["flash"] == 1 and _count("calls", mode="extend") == calls
    assert rel_err(out, h.oracle(verify)) < BF16_TOL


def test_a_target_verify_the_adapter_declines_is_not_counted_as_extend(flash, monkeypatch):
    h = ExtendHarness()
    monkeypatch.setattr(sglang_adapter, "unsupported_reason", lambda *a: ("test_kind", "declined for the test"))
    def fallbacks():
        return {k: v._value.get() for k, v in metrics.extend_series()["fallbacks"]._metrics.items()}
    before = fallbacks()
    h.run_eager(make_case([9], [8], 8, tree="random", seed=12))    # SGLang's extend kernel verifies
    assert flash.calls == [] and sglang_adapter.calls["test_kind"] == 1
    assert fallbacks() == before
