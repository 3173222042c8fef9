"""EAGLE's draft-model extend after each verify (DRAFT_EXTEND_V2, kernel/sglang/extend.py
install_draft) through SGLang's real TritonAttnBackend built as the draft runner's extend backend
(is_draft_runner, not skip_prefill), driven by kernel/sglang/extend_harness.py: eager with
accepted lengths varying per request, and the graph form as EAGLEDraftExtendCudaGraphRunner runs
it (SGLang's capture-time metadata on its dummy batch, then replays of real batches with new
lengths, padded, through init_forward_metadata_out_graph). With flash the kernel (the CPU oracle
stand-in) serves it with no LSE and a static tier; the triton arm, the draft decode backends, a
non-MLA draft and the target's paths stay as they were."""
import logging
import types

import pytest
import torch
from sglang.srt.configs.model_config import AttentionArch

from kernel.inputs import make_case
from kernel.sglang import adapter as sglang_adapter
from kernel.sglang import extend, metrics
from kernel.sglang.extend_harness import ExtendHarness
from kernel.sglang.harness import rel_err
from kernel.sglang.strict import StrictFlashError

BF16_TOL = 1e-2   # the stand-in's float64 result rounded to bf16: ~2e-3 relative
MODE = "DRAFT_EXTEND_V2"
W = 8             # the published --speculative-num-draft-tokens: the draft-extend graph's width


def _count(series: str, **labels) -> float:
    return metrics.extend_series()[series].labels(**labels)._value.get()


def _fallbacks() -> dict:
    return {k: v._value.get() for k, v in metrics.extend_series()["fallbacks"]._metrics.items()}


@pytest.fixture(autouse=True)
def fresh_log_once(monkeypatch):
    monkeypatch.delenv(extend.DRAFT_ENV, raising=False)   # the default: on
    extend._logged.clear()
    yield
    extend._logged.clear()


def _draft(**kwargs) -> ExtendHarness:
    return ExtendHarness(draft_worker=True, **kwargs)


def test_the_draft_extend_backend_is_hooked_and_its_decode_backends_are_not(flash):
    from sglang.srt.layers.attention.triton_backend import TritonAttnBackend

    h = _draft()
    assert h.backend.is_draft_runner and not h.backend.skip_prefill
    assert getattr(h.backend, "mla_verify_extend", False) and "forward_extend" in vars(h.backend)
    # the draft runner never verifies: no verify slot, no arm published from it
    assert h.backend.use_verify_shared_kv is False and not hasattr(h.backend, "mla_verify_backend")
    decode = TritonAttnBackend(h.runner, skip_prefill=True)   # a step of TritonMultiStepDraftBackend
    assert "forward_extend" not in vars(decode) and not hasattr(decode, "mla_verify_extend")


def test_the_draft_extend_is_on_by_default_off_with_0_and_a_bad_switch_is_refused(flash, monkeypatch):
    assert getattr(_draft().backend, "mla_verify_extend", False)            # unset: on (since the H200 run)
    monkeypatch.setenv(extend.DRAFT_ENV, "1")
    assert getattr(_draft().backend, "mla_verify_extend", False)
    monkeypatch.setenv(extend.DRAFT_ENV, "0")
    h = _draft()
    assert "forward_extend" not in vars(h.backend) and not hasattr(h.backend, "mla_verify_extend")
    monkeypatch.setenv(extend.DRAFT_ENV, "yes")
    with pytest.raises(StrictFlashError, match="MLA_VERIFY_DRAFT_EXTEND='yes' is not one of 0, 1"):
        _draft()


def test_eager_draft_extend_with_accepted_lengths_varying_per_request(flash):
    h = _draft(layers=2)
    case = make_case([37, 5, 120], [3, 1, 8], 8, causal=True, layout="fragmented", seed=3)
    seen = flash.record_pool_rows(h.new_slots(12))
    before, extend_before, fell = _count("calls", mode="draft_extend_v2"), _count("calls", mode="extend"), _fallbacks()
    outs = h.run_extend(case, mode=MODE)
    qs, ks = h.layer_inputs(case)
    assert len(flash.calls) == 2 and _count("calls", mode="draft_extend_v2") == before + 2
    assert _count("calls", mode="extend") == extend_before and _fallbacks() == fell
    for layer, (out, call) in enumerate(zip(outs, flash.calls)):
        assert rel_err(out, h.oracle(case, layer=layer)) < BF16_TOL
        assert call["custom_mask"] is None and call["mask_indptr"] is None      # causal over the new tokens
        assert call["with_lse"] is False and call["lse_out"] is None           # nothing reads one: graph-safe
        assert call["max_draft_len"] == 8                                      # SGLang's max_extend_len
        assert call["qo_indptr"].tolist() == [0, 3, 4, 12] and call["kv_indptr"].tolist() == [0, 37, 42, 162]
        assert torch.equal(call["k_extend"], ks[layer]) and call["out"].data_ptr() == out.data_ptr()
        assert torch.equal(seen[layer], ks[layer])   # SGLang's KV write ran first, as for the target


def test_graph_form_captures_once_and_replays_new_lengths(flash, monkeypatch):
    h = _draft(layers=2)
    b = h.backend
    before = (_count("captures", mode="draft_extend_v2"), _count("calls", mode="draft_extend_v2"), _fallbacks())
    # inside SGLang's capture: a CUDA-graph capture on a CUDA device (the CPU stand-in records the call)
    monkeypatch.setattr(sglang_adapter, "_capturing", lambda t: True)
    h.capture_draft_extend(graph_bs=4)
    monkeypatch.undo()
    assert _count("captures", mode="draft_extend_v2") == before[0] + 2
    assert _count("calls", mode="draft_extend_v2") == before[1] and _fallbacks() == before[2]
    captured = flash.calls[0]
    assert captured["with_lse"] is False and captured["lse_out"] is None
    assert captured["max_draft_len"] == W                        # the static width, not a device read
    assert captured["qo_indptr"].data_ptr() == b.qo_indptr.data_ptr() and captured["qo_indptr"].dtype == torch.int64
    assert captured["kv_indices"].data_ptr() == b.cuda_graph_kv_indices.data_ptr()
    assert captured["qo_indptr"].tolist() == [0, 8, 16, 24, 32]
    assert captured["kv_indptr"].tolist() == [0, 1, 2, 3, 4]     # the dummy batch: one fill-length row each
    flash.calls.clear()
    # replays: 3 requests padded to 4 (row 0, no prefix), then 4 with other lengths, same buffers
    for prefixes, layout, seed in (([37, 300, 120], "fragmented", 4), ([200, 3, 17, 90], "scattered", 5)):
        case = make_case(prefixes, [W] * len(prefixes), 8, causal=True, layout=layout, seed=seed)
        seen = flash.record_pool_rows(h.new_slots(W * len(prefixes)))
        outs = h.replay_draft_extend(case)
        qs, ks = h.layer_inputs(case, 0)
        for layer, out in enumerate(outs):
            assert rel_err(out, h.oracle(case, layer=layer)) < BF16_TOL
            assert torch.equal(seen[layer], ks[layer])
        for call in flash.calls:
            for name in ("qo_indptr", "kv_indptr", "kv_indices"):
                assert call[name].data_ptr() == captured[name].data_ptr(), name
            assert call["out"].shape[0] == 4 * W and call["max_draft_len"] == W
        kvp = flash.calls[-1]["kv_indptr"].tolist()
        assert kvp[:len(prefixes) + 1] == [0, *torch.tensor(prefixes).cumsum(0).tolist()]
        assert kvp[len(prefixes) + 1:] == [kvp[len(prefixes)]] * (4 - len(prefixes))   # padding: no prefix
        flash.calls.clear()


def test_a_target_extend_under_capture_still_falls_back(flash, monkeypatch):
    # the target's EXTEND keeps its eager-only scratch: under a capture it stays on SGLang's kernel
    h = ExtendHarness()
    monkeypatch.setattr(sglang_adapter, "_capturing", lambda t: True)
    before = _count("fallbacks", mode="extend", reason="graph_capture")
    h.run_extend(make_case([12, 4], [3, 2], 8, causal=True, seed=6))
    assert flash.calls == [] and _count("fallbacks", mode="extend", reason="graph_capture") == before + 1


def test_flash_draft_extend_agrees_with_sglangs_kernel(flash, bf16_interpreter):
    case = make_case([90, 33], [5, 8], 8, causal=True, seed=7)
    ours = _draft().run_extend(case, mode=MODE)
    control = _draft(dtype=torch.float32, arm="triton")   # float32: SGLang's kernel is exact under the interpreter
    sglang = control.run_extend(case, mode=MODE)
    assert len(flash.calls) == 1
    assert rel_err(sglang, control.oracle(case)) < 1e-5   # SGLang reads this metadata as the oracle does
    assert rel_err(ours, sglang) < BF16_TOL


def test_the_triton_arm_leaves_the_draft_extend_to_sglang(monkeypatch, cpu_ops, bf16_interpreter):
    monkeypatch.setenv("MLA_VERIFY_BACKEND", "triton")
    h = _draft()
    assert "forward_extend" not in vars(h.backend) and not hasattr(h.backend, "mla_verify_extend")
    before = _count("calls", mode="draft_extend_v2")
    case = make_case([37, 12], [4, 8], 8, causal=True, seed=8)
    assert rel_err(h.run_extend(case, mode=MODE), h.oracle(case)) < BF16_TOL
    assert cpu_ops.calls == [] and _count("calls", mode="draft_extend_v2") == before


def test_the_draft_models_prefill_extend_is_served_as_the_targets(flash):
    h = _draft()
    before = _count("calls", mode="extend")
    case = make_case([40, 0], [6, 3], 8, causal=True, seed=9)
    out = h.run_extend(case)            # _draft_extend_for_prefill: forward mode EXTEND on this backend
    assert rel_err(out, h.oracle(case)) < BF16_TOL and _count("calls", mode="extend") == before + 1
    assert flash.calls[-1]["lse_out"] is not None   # eager, with the target's LSE scratch


def test_a_non_mla_draft_is_left_to_sglang_and_logged_once(flash, caplog):
    with caplog.at_level(logging.INFO, logger=extend.__name__):
        backends = [_draft(arch=AttentionArch.MHA).backend for _ in range(2)]   # EAGLE3's external draft
    assert all("forward_extend" not in vars(b) for b in backends)
    logged = [r.getMessage() for r in caplog.records if "draft model's attention is not MLA" in r.getMessage()]
    assert len(logged) == 1


def test_target_paths_are_unchanged_beside_the_draft(flash):
    target, draft = ExtendHarness(), _draft()
    assert getattr(target.backend, "mla_verify_backend", None) == "flash"
    verify = make_case([37, 120], [8, 8], 8, tree="random", seed=11)
    out = target.run_eager(verify)                       # TARGET_VERIFY through the adapter's slot
    call = flash.calls[-1]
    assert call["custom_mask"] is not None and sglang_adapter.calls["flash"] == 1
    assert rel_err(out, target.oracle(verify)) < BF16_TOL
    before = _count("calls", mode="extend")
    target.run_extend(make_case([30], [4], 8, causal=True, seed=1))
    assert _count("calls", mode="extend") == before + 1 and flash.calls[-1]["lse_out"] is not None
    # a draft forward mode reaching the target's backend is not served there (counted, SGLang's kernel)
    fell = _count("fallbacks", mode="draft_extend_v2", reason="forward_mode")
    target.run_extend(make_case([30], [8], 8, causal=True, seed=2), mode=MODE)
    assert _count("fallbacks", mode="draft_extend_v2", reason="forward_mode") == fell + 1


def test_a_draft_extend_on_another_backend_is_named_at_start(flash, monkeypatch, caplog):
    from sglang.srt import runtime_context

    assert extend._draft_extend_backend() == "triton"     # the published launch: the draft on triton too

    def published(**fields):
        args = dict(speculative_algorithm="EAGLE", attention_backend="triton", prefill_attention_backend=None,
                    decode_attention_backend=None, speculative_attention_mode="prefill",
                    speculative_draft_attention_backend=None)
        monkeypatch.setattr(runtime_context, "get_server_args", lambda: types.SimpleNamespace(**dict(args, **fields)))
    published(speculative_attention_mode="decode", decode_attention_backend="flashinfer")
    assert extend._draft_extend_backend() == "flashinfer"   # draft_utils: the decode backend in decode mode
    published(speculative_algorithm=None)
    assert extend._draft_extend_backend() is None
    published(speculative_draft_attention_backend="fa3")
    with caplog.at_level(logging.WARNING, logger=extend.__name__):
        ExtendHarness()                                      # a flash target backend is built
    assert any("the draft model's extend runs on the 'fa3' attention backend" in r.getMessage() for r in caplog.records)
