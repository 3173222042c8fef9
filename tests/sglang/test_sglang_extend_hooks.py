"""extend.install's hooks on a stand-in backend, for what SGLang's CPU backend cannot be driven
into: a DCP extend (SGLang routes it to its DCP kernel before the call site: counted), an MHA
layer (not ours: passed through uncounted), extend_attention_fwd options a plain EXTEND never
passes, and a backend without the methods the plugin hooks (strict flash refuses it)."""
import types

import pytest
import torch
from sglang.srt.model_executor.forward_batch_info import ForwardMode

from kernel.sglang import extend, metrics
from kernel.sglang.strict import StrictFlashError


def _count(series: str, **labels) -> float:
    return metrics.extend_series()[series].labels(**labels)._value.get()


class Backend:
    """forward_extend calls the kernel call site unless `dcp_size` > 1 (SGLang's order)."""
    device, num_head = "cpu", 8

    def __init__(self, dcp_size=1):
        self.dcp_size, self.kernel_calls = dcp_size, []

    def forward_extend(self, q, k, v, layer, forward_batch, save_kv_cache=True):
        if self.dcp_size > 1:
            return "dcp"
        return self._forward_extend_kernel(layer, q)

    def _forward_extend_kernel(self, layer, *args, **kwargs):
        self.kernel_calls.append(layer)
        return "sglang"


ABSORBED = types.SimpleNamespace(qk_head_dim=576, v_head_dim=512)
MHA = types.SimpleNamespace(qk_head_dim=192, v_head_dim=128)


def _batch(mode="EXTEND"):
    return types.SimpleNamespace(forward_mode=getattr(ForwardMode, mode))


def test_a_dcp_extend_is_counted_as_a_fallback():
    b = Backend(dcp_size=2)
    extend.install(b)
    before = _count("fallbacks", mode="extend", reason="dcp")
    assert b.forward_extend(None, None, None, ABSORBED, _batch()) == "dcp"
    assert _count("fallbacks", mode="extend", reason="dcp") == before + 1
    b.forward_extend(None, None, None, MHA, _batch())                     # an MHA layer: not ours
    b.forward_extend(None, None, None, ABSORBED, _batch("TARGET_VERIFY"))   # the adapter's
    assert _count("fallbacks", mode="extend", reason="dcp") == before + 1


def test_an_mha_layer_goes_to_sglang_uncounted():
    b = Backend()
    extend.install(b)
    before = (_count("calls", mode="extend"), _count("fallbacks", mode="extend", reason="head_dim"))
    assert b.forward_extend(None, None, None, MHA, _batch()) == "sglang"
    assert b.kernel_calls == [MHA]
    assert (_count("calls", mode="extend"), _count("fallbacks", mode="extend", reason="head_dim")) == before


def test_the_kernel_call_site_outside_forward_extend_is_sglangs():
    b = Backend()
    extend.install(b)
    assert b._forward_extend_kernel(ABSORBED, None) == "sglang" and b.kernel_calls == [ABSORBED]


@pytest.mark.parametrize("option, value", [("score_mod", lambda s: s), ("lse_extend", torch.zeros(1)),
                                           ("skip_prefix", True), ("identity_kv_indices", True),
                                           ("new_keyword", 1)])
def test_extend_options_beyond_a_plain_extend_fall_back(option, value):
    before = _count("fallbacks", mode="extend", reason="extend_options")
    args = [None] * 15
    assert extend.serve("extend", *args, **{option: value}) is False
    assert _count("fallbacks", mode="extend", reason="extend_options") == before + 1


@pytest.mark.parametrize("missing", ["forward_extend", "_forward_extend_kernel"])
def test_strict_flash_refuses_a_backend_without_the_hooked_methods(missing):
    b = Backend()
    setattr(b, missing, None)
    with pytest.raises(StrictFlashError, match=f"TritonAttnBackend has no {missing}: the plugin routes EXTEND"):
        extend.install(b)


def test_token_bound_reads_sglangs_prefill_budget():
    from sglang.srt.runtime_context import get_schedule
    assert extend.token_bound() >= max(get_schedule().max_prefill_tokens or 0, 1)


def test_sglangs_forward_extend_writes_the_kv_before_its_kernel_call_site():
    # what extend.py relies on in SGLang 0.5.23: one call of _forward_extend_kernel, after the
    # new tokens' KV write and after the routes that leave (DCP, deterministic, dense MHA)
    import inspect

    from sglang.srt.layers.attention.triton_backend import TritonAttnBackend

    src = inspect.getsource(TritonAttnBackend.forward_extend)
    call = src.index("self._forward_extend_kernel(")
    assert src.count("self._forward_extend_kernel(") == 1
    assert src.index("self._set_kv_buffer(") < call and src.index("set_kv_buffer(") < call
    assert src.index("return self._forward_extend_dcp(") < call
    assert src.index("return self._forward_extend_unified(") < call
    assert src.index("forward_batch.forward_mode.is_target_verify()") < call


def test_a_second_install_changes_nothing():
    b = Backend()
    extend.install(b)
    hooked = (b.forward_extend, b._forward_extend_kernel)
    extend.install(b)
    assert (b.forward_extend, b._forward_extend_kernel) == hooked
