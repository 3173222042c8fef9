"""The plugin serves TARGET_VERIFY on SGLang's fp8_e4m3 KV pool, through SGLang's real classes.

A real MLATokenToKVPool(float8_e4m3fn) (uint8 storage), written by TritonAttnBackend.forward_extend
(SGLang's write path: the draft rows divided by the layer's k_scale, then cast), and the verify
call SGLang makes with `layer.k_scale_float` / `v_scale_float`: the adapter hands the kernel (the
CPU stand-in, float64 oracle) the pool's e4m3 view and exactly those floats, and the output is
the oracle's on the dequantized pool. What the kernel cannot read (tensor scales, e5m2) still
goes to SGLang's kernel with its reason label.
"""
import pytest
import torch

from kernel.fp8 import FP8, quantize_mla_rows
from kernel.inputs import make_case
from kernel.reference import verify_attention_reference
from kernel.sglang import adapter as sglang_adapter
from kernel.sglang import metrics, strict
from kernel.sglang.harness import DRAFT, Harness, rel_err

BF16_TOL = 1e-2  # the stand-in's float64 output rounded to bf16: ~2e-3 relative
# SGLang's own fp8 prefix stage rounds P to e4m3 (tests/sglang/test_sglang_fp8_pool.py): twice
# e4m3's unit roundoff bounds it against the oracle when q is e4m3-exact.
SGLANG_FP8_BOUND = torch.finfo(FP8).eps


def _scaled_layer(h, k_scale, v_scale):
    # what Fp8KVCacheMethod.process_weights_after_loading leaves on a RadixAttention
    layer = h.layer
    layer.k_scale = torch.tensor(k_scale, dtype=torch.float32)
    layer.v_scale = torch.tensor(v_scale, dtype=torch.float32)
    layer.k_scale_float, layer.v_scale_float = k_scale, v_scale


def _case(seed, prefix=(40, 13), heads=8, **kw):
    return make_case(list(prefix), [DRAFT] * len(prefix), heads, tree="random", seed=seed, kv_dtype="fp8_e4m3", **kw)


def _counter(key, **labels) -> float:
    """This process's value of one of the plugin's Prometheus counters (0 before first use)."""
    for family in metrics.series()[key].collect():
        for s in family.samples:
            if s.name.endswith("_total") and all(s.labels.get(k) == v for k, v in labels.items()):
                return s.value
    return 0.0


def _pool_oracle(h, case, k_scale, v_scale):
    """Float64 oracle of layer 0 on the pool as SGLang holds it now, read with the given scales."""
    return verify_attention_reference(case.q, h.layer_pool(0).view(FP8), case.kv_indptr, case.kv_indices,
                                      case.k_extend, case.custom_mask, case.mask_indptr, case.qo_indptr,
                                      h.layer.scaling, k_scale=k_scale, v_scale=v_scale)[0]


@pytest.mark.parametrize("v_factor", [1.0, 3.0])
def test_flash_serves_verify_on_sglangs_fp8_pool(flash, v_factor):
    h = Harness(kv_dtype=FP8)
    case = _case(seed=5)
    k_scale, v_scale = case.k_scale, case.k_scale * v_factor
    assert k_scale != 1.0       # a kernel that ignored k_scale would be caught
    _scaled_layer(h, k_scale, v_scale)
    calls0, fallbacks0 = _counter("calls"), _counter("fallbacks")
    out = h.run_eager(case)
    # the flash arm served it: one kernel call, no fallback
    assert sglang_adapter.calls == {"flash": 1} and len(flash.calls) == 1
    assert _counter("calls") == calls0 + 1 and _counter("fallbacks") == fallbacks0
    c = flash.calls[0]
    # exactly SGLang's k_descale / v_descale (layer.k_scale_float / v_scale_float), as floats
    assert (c["k_scale"], c["v_scale"]) == (k_scale, v_scale) and type(c["k_scale"]) is float
    # the pool itself: SGLang's uint8 storage seen as e4m3, 576 bytes a row; V its first 512 columns
    storage = h.pool.kv_buffer[0]
    assert storage.dtype == torch.uint8 and c["kv_cache"].dtype == FP8
    assert c["kv_cache"].data_ptr() == storage.data_ptr() and c["kv_cache"].stride() == storage.stride() == (576, 576, 1)
    # the draft rows reach the kernel as the model's bf16 k, unscaled; SGLang stored them scaled
    assert c["k_extend"].dtype == torch.bfloat16 and torch.equal(c["k_extend"], case.k_extend)
    written = storage[h._draft_slots(case.q.shape[0])]
    assert torch.equal(written, quantize_mla_rows(case.k_extend, k_scale).view(torch.uint8))
    ref = h.oracle(case)   # the oracle on the pool SGLang holds, with the layer's scales
    assert torch.isfinite(out).all() and rel_err(out, ref) < BF16_TOL, rel_err(out, ref)
    # and the scales were applied, each to its part: other readings are far off
    assert rel_err(out, _pool_oracle(h, case, 1.0, 1.0)) > 10 * BF16_TOL
    assert rel_err(out, _pool_oracle(h, case, k_scale, 2 * v_scale)) > 10 * BF16_TOL


def test_fp8_pool_without_checkpoint_scales_is_read_at_one(flash):
    # --kv-cache-dtype fp8_e4m3 on a checkpoint without KV scales: the layer has none, SGLang
    # writes unscaled rows and passes k_descale = v_descale = 1.0
    h = Harness(kv_dtype=FP8)
    assert h.layer.k_scale is None
    case = _case(seed=6, k_scale=1.0)
    out = h.run_eager(case)
    assert sglang_adapter.calls == {"flash": 1}
    assert (flash.calls[0]["k_scale"], flash.calls[0]["v_scale"]) == (1.0, 1.0)
    written = h.layer_pool(0)[h._draft_slots(case.q.shape[0])]
    assert torch.equal(written, case.k_extend.to(FP8).view(torch.uint8))   # no division
    assert rel_err(out, _pool_oracle(h, case, 1.0, 1.0)) < BF16_TOL


def test_fp8_graph_form_captures_and_replays_with_the_layer_scales(flash):
    h = Harness(kv_dtype=FP8)
    first = _case(seed=7, prefix=(30, 70, 5))
    _scaled_layer(h, first.k_scale, first.k_scale / 2)
    o = h.capture(first, graph_bs=4)            # padded with dummy requests, fixed buffers
    c = flash.calls[0]
    assert (c["k_scale"], c["v_scale"]) == (first.k_scale, first.k_scale / 2)
    assert c["kv_cache"].data_ptr() == h.pool.kv_buffer[0].data_ptr() and c["qo_indptr"].dtype == torch.int64
    assert rel_err(o, h.oracle(first)) < BF16_TOL
    # new lengths, same scales (per layer, fixed at load): the replay reads the new pool rows
    second = _case(seed=8, prefix=(90, 11), k_scale=first.k_scale)
    o2 = h.replay(second)
    assert sglang_adapter.calls == {"flash": 2}
    assert rel_err(o2, h.oracle(second)) < BF16_TOL


def test_flash_agrees_with_sglangs_own_fp8_kernel_on_the_same_pool(flash, bf16_interpreter):
    # The control arm on the same pool: SGLang's extend_attention_fwd (Triton interpreter). With an
    # e4m3-exact q only its P rounding to e4m3 separates it from the oracle; ours stays at bf16's.
    h = Harness(heads=2, kv_dtype=FP8)
    case = _case(seed=9, heads=2)
    case.q = case.q.to(FP8).to(torch.bfloat16)
    _scaled_layer(h, case.k_scale, case.k_scale * 1.5)
    ours = h.run_eager(case)
    ref = h.oracle(case)
    sglang = h.run_eager(case, backend=h.build_backend("triton"))
    assert len(flash.calls) == 1, "the control arm ran the kernel"
    assert rel_err(ours, ref) < BF16_TOL
    assert rel_err(sglang, ref) < SGLANG_FP8_BOUND, rel_err(sglang, ref)
    assert rel_err(ours, sglang) < SGLANG_FP8_BOUND + BF16_TOL


def test_tensor_scales_fall_back_to_sglangs_kernel(flash):
    # Only per-layer Python floats are served (a tensor would need a device read per call).
    # SGLang 0.5.23 always passes floats (k_scale_float comes from `.tolist()`), and its own
    # extend kernel cannot take a tensor either, so its kernel is recorded here, not run.
    h = Harness(heads=2, kv_dtype=FP8)
    case = _case(seed=10, heads=2)
    _scaled_layer(h, case.k_scale, case.k_scale)
    h.layer.k_scale_float = torch.tensor(case.k_scale)     # what forward_extend hands on as k_descale
    handed_back = []

    def sglang_kernel(layer, q, k, v, o, *args, **kwargs):
        handed_back.append(args[9:11])                      # (k_descale, v_descale)
        o.zero_()

    h.backend._forward_extend_kernel = sglang_kernel
    fallbacks0 = _counter("fallbacks", reason="kv_scale")
    out = h.run_eager(case)
    assert flash.calls == [] and sglang_adapter.calls == {"kv_scale": 1}
    assert _counter("fallbacks", reason="kv_scale") == fallbacks0 + 1
    assert len(handed_back) == 1 and handed_back[0][0] is h.layer.k_scale_float   # SGLang's path got the call
    assert handed_back[0][1] == case.k_scale and not out.any()


def test_e5m2_pool_falls_back_even_past_the_start_check(flash, bf16_interpreter, monkeypatch):
    # strict flash refuses an e5m2 pool when the backend is built (test_sglang_switch.py); were one
    # served anyway, every call would still go to SGLang's kernel, labelled kv_dtype
    monkeypatch.setattr(strict, "check_backend", lambda backend: None)
    h = Harness(heads=2, kv_dtype=torch.float8_e5m2)
    assert h.backend.mla_verify_backend == "flash"
    case = make_case([40, 13], [DRAFT, DRAFT], 2, tree="random", seed=11)
    fallbacks0 = _counter("fallbacks", reason="kv_dtype")
    out = h.run_eager(case)
    assert flash.calls == [] and sglang_adapter.calls == {"kv_dtype": 1}
    assert _counter("fallbacks", reason="kv_dtype") == fallbacks0 + 1
    assert torch.isfinite(out).all()
