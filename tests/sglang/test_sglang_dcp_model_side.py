"""The DeepSeek MLA layer's side of DCP verify, on SGLang 0.5.23's real
`DeepseekMLAForwardMixin.forward_absorb_core` (forward_mla.py) with a stand-in layer object.

Under --dcp-size > 1 SGLang treats TARGET_VERIFY as its "DCP MLA decode phase": it all-gathers
q before attention and merges the ranks afterwards with an `lse` that only the
FORWARD_ABSORB_CORE_ATTENTION_BACKENDS branch assigns. On the triton branch that is an
UnboundLocalError. With the plugin's hook (kernel/sglang/plugin.py, dcp_verify.keeps_local_heads)
a flash target keeps its own heads and the backend does the gather and merge.
"""
import types

import pytest
import torch
from sglang.srt.model_executor.forward_batch_info import ForwardMode
from sglang.srt.models.deepseek_common.attention_forward_methods.forward_mla import DeepseekMLAForwardMixin

from kernel.sglang import dcp_verify

H, N, V = 2, 3, 16   # heads per rank, tokens, the model's v_head_dim


def _layer(calls):
    def attn_mqa(q, k, v, forward_batch, save_kv_cache=True):
        calls.append(q.shape)
        return torch.full((q.shape[0], q.shape[1] * 512), 0.5)   # the backend's [N, heads * 512] output

    layer = types.SimpleNamespace(current_attention_backend="triton", dcp_size=2, use_dsa=False, num_local_heads=H,
                                  kv_lora_rank=512, v_head_dim=V, attn_mqa=attn_mqa, use_deep_gemm_bmm=False,
                                  w_vc=torch.ones(H, 512, V), o_proj=lambda x: (x, None), next_skip_topk=None)
    layer.is_dcp_mla_decode_phase = types.MethodType(DeepseekMLAForwardMixin.is_dcp_mla_decode_phase, layer)
    return layer


def _core(layer, mode, heads=H):
    """forward_absorb_core on q of `heads` heads (forward_absorb_prepare gathered H * dcp_size
    when the layer is in SGLang's DCP decode phase)."""
    fb = types.SimpleNamespace(forward_mode=mode)
    q_nope_out, q_pe = torch.randn(N, heads, 512), torch.randn(N, heads, 64)
    k_nope, k_pe = torch.randn(N, 1, 512), torch.randn(N, 1, 64)
    return DeepseekMLAForwardMixin.forward_absorb_core(layer, q_pe, k_pe, q_nope_out, k_nope, fb, None, None, None, None)


@pytest.fixture
def installed(monkeypatch):
    monkeypatch.setattr(dcp_verify, "_installed", True)


def test_sglang_alone_cannot_finish_a_dcp_verify_layer_on_triton(monkeypatch):
    monkeypatch.setattr(dcp_verify, "_installed", False)   # no flash target backend: SGLang's own flow
    with pytest.raises(UnboundLocalError, match="lse"):
        _core(_layer([]), ForwardMode.TARGET_VERIFY, heads=2 * H)


def test_with_the_plugin_a_verify_layer_keeps_its_heads_and_skips_the_model_merge(installed):
    calls = []
    out = _core(_layer(calls), ForwardMode.TARGET_VERIFY)
    assert calls == [torch.Size([N, H, 576])]            # its own heads, q = cat(q_nope_out, q_pe)
    assert torch.allclose(out, torch.full((N, H * V), 0.5 * 512))   # w_vc then o_proj on the backend's output


def test_the_hook_changes_target_verify_only(installed):
    layer = _layer([])
    for mode, want in ((ForwardMode.TARGET_VERIFY, False), (ForwardMode.DECODE, True), (ForwardMode.EXTEND, False)):
        assert layer.is_dcp_mla_decode_phase(types.SimpleNamespace(forward_mode=mode)) is want, mode
    layer.current_attention_backend = "flashinfer"       # an absorb backend: SGLang's flow serves it
    assert layer.is_dcp_mla_decode_phase(types.SimpleNamespace(forward_mode=ForwardMode.TARGET_VERIFY)) is True


def test_a_dcp_decode_on_triton_fails_in_sglang_with_or_without_the_plugin(installed):
    # Why strict.py refuses a DeepSeek NextN draft on triton under DCP: every draft step is a decode.
    with pytest.raises(UnboundLocalError, match="lse"):
        _core(_layer([]), ForwardMode.DECODE, heads=2 * H)
