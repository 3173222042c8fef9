"""Every case the kernel cannot serve exactly returns False (SGLang's path runs), untouched
output, no kernel call, and one log line per reason kind however often, and at whatever
sizes, it recurs."""
import logging

import pytest
import torch

from kernel.sglang import adapter as sglang_adapter
from kernel.checks import VerifyInputError
from kernel.inputs import make_case
from kernel.reference import verify_attention_reference
from kernel.sglang.harness import rel_err

BF16_TOL = 1e-2  # the stand-in's float64 output rounded to bf16: ~2e-3 relative


def _sglang_args(heads=8, dim=576, kv_dtype="auto"):
    """verify_fwd's arguments as SGLang's eager TARGET_VERIFY passes them (kv_dtype="fp8_e4m3":
    SGLang's fp8 pool, float8_e4m3fn views of uint8 rows, with the case's k/v descales)."""
    case = make_case([40, 9], [8, 8], heads, tree="random", seed=7, kv_dtype=kv_dtype)
    pool = case.kv_cache
    if dim != 576:
        pool = torch.zeros(pool.shape[0], 1, dim, dtype=torch.bfloat16)
    N = case.q.shape[0]
    q = case.q if dim == 576 else torch.zeros(N, heads, dim, dtype=torch.bfloat16)
    k = case.k_extend if dim == 576 else torch.zeros(N, 1, dim, dtype=torch.bfloat16)
    o = torch.full((N, heads, 512), float("nan"), dtype=torch.bfloat16)
    args = dict(q_extend=q, k_extend=k, v_extend=k[..., :512].contiguous(), o_extend=o, k_buffer=pool,
                v_buffer=pool[..., :512], qo_indptr=case.qo_indptr, kv_indptr=case.kv_indptr,
                kv_indices=case.kv_indices, custom_mask=case.custom_mask, is_causal=True,
                mask_indptr=case.mask_indptr, max_len_extend=8, k_scale=case.k_scale or 1.0,
                v_scale=case.v_scale or 1.0, sm_scale=case.sm_scale,
                logit_cap=0.0, sliding_window_size=-1, sinks=None, window_kv_offsets=None, xai_temperature_len=-1,
                max_bs=4)
    return args


def _pool_as(dtype):
    """The pool's bytes viewed as another 1-byte or 2-byte float type, as SGLang's views are."""
    def change(a):
        pool = a["k_buffer"].view(dtype)
        return dict(k_buffer=pool, v_buffer=pool[..., :512])
    return change


def _unviewed_v(a):
    return dict(v_buffer=a["k_buffer"][..., :512].clone())


def _fp16_q(a):
    return dict(q_extend=a["q_extend"].half())


# name: (change, reason kind, text of the logged detail)
FALLBACKS = {
    "fp16 KV cache": (_pool_as(torch.float16), "kv_dtype", "KV cache dtype float16"),
    "sliding window": (lambda a: dict(sliding_window_size=128), "sliding_window", "sliding window"),
    "sliding window offsets": (lambda a: dict(window_kv_offsets=torch.zeros(2, dtype=torch.int32)),
                               "sliding_window", "sliding window"),
    "logit cap": (lambda a: dict(logit_cap=30.0), "logit_cap", "logit cap"),
    "sinks": (lambda a: dict(sinks=torch.zeros(8)), "sinks", "attention sinks"),
    "xai temperature": (lambda a: dict(xai_temperature_len=4), "xai_temperature", "xai temperature"),
    "k descale on bf16": (lambda a: dict(k_scale=0.5), "kv_scale", "k/v descale != 1 on a bf16 KV cache"),
    "v descale on bf16": (lambda a: dict(v_scale=2.0), "kv_scale", "k/v descale != 1 on a bf16 KV cache"),
    "descale tensor": (lambda a: dict(k_scale=torch.tensor(1.0)), "kv_scale", "descale given as a tensor"),
    "q not bf16": (_fp16_q, "q_dtype", "q dtype float16"),
    "head dim 192": ("dim192", "head_dim", "is not [N, H, 576]"),
    "H above 128": ("heads256", "heads", "H=256 query heads outside"),
    "full prefix mask": (lambda a: dict(skip_prefix_custom_mask=False), "prefix_mask", "skip_prefix_custom_mask=False"),
    "bidirectional": (lambda a: dict(is_causal=False, custom_mask=None), "non_causal", "non-causal"),
    "v not a view of k": (_unviewed_v, "kv_layout", "v_buffer is not the view"),
    "mask without indptr": (lambda a: dict(mask_indptr=None), "mask_indptr", "without a mask_indptr"),
    "no sm_scale": (lambda a: dict(sm_scale=None), "sm_scale", "sm_scale=None"),
}


def _fp8_v_copy(a):
    return dict(v_buffer=a["k_buffer"][..., :512].view(torch.uint8).clone().view(torch.float8_e4m3fn))


# The same, on SGLang's fp8_e4m3 pool (which the kernel serves): what still falls back there.
FP8_FALLBACKS = {
    "fp8 e5m2 KV cache": (_pool_as(torch.float8_e5m2), "kv_dtype", "KV cache dtype float8_e5m2"),
    "fp8 e4m3fnuz KV cache": (_pool_as(torch.float8_e4m3fnuz), "kv_dtype", "KV cache dtype float8_e4m3fnuz"),
    "fp8 k descale tensor": (lambda a: dict(k_scale=torch.tensor(a["k_scale"])), "kv_scale",
                             "k_scale: Tensor"),
    "fp8 v descale tensor": (lambda a: dict(v_scale=torch.tensor(a["v_scale"])), "kv_scale",
                             "v_scale: Tensor"),
    "fp8 zero k descale": (lambda a: dict(k_scale=0.0), "kv_scale", "not positive and finite (k_scale=0.0"),
    "fp8 negative v descale": (lambda a: dict(v_scale=-1.0), "kv_scale", "v_scale=-1.0"),
    "fp8 inf k descale": (lambda a: dict(k_scale=float("inf")), "kv_scale", "k_scale=inf"),
    "fp8 nan v descale": (lambda a: dict(v_scale=float("nan")), "kv_scale", "v_scale=nan"),
    "fp8 bool descale": (lambda a: dict(k_scale=True), "kv_scale", "k_scale: bool"),
    "fp8 v not a view of k": (_fp8_v_copy, "kv_layout", "v_buffer is not the view"),
    "fp8 v of another dtype": (lambda a: dict(v_buffer=a["k_buffer"][..., :512].view(torch.float8_e5m2)),
                               "kv_layout", "v_buffer is not the view"),
    "fp8 logit cap": (lambda a: dict(logit_cap=30.0), "logit_cap", "logit cap"),
}


@pytest.mark.parametrize("name", list(FALLBACKS) + list(FP8_FALLBACKS))
def test_fallback_declines_logs_once_and_leaves_output(cpu_ops, caplog, name):
    change, kind, detail = FALLBACKS[name] if name in FALLBACKS else FP8_FALLBACKS[name]
    if change == "dim192":
        a = _sglang_args(dim=192)
    elif change == "heads256":
        a = _sglang_args(heads=256)
    else:
        a = _sglang_args(kv_dtype="fp8_e4m3" if name in FP8_FALLBACKS else "auto")
        a.update(change(a))
    caplog.set_level(logging.WARNING, logger="kernel.sglang.adapter")
    assert sglang_adapter.verify_fwd(**a) is False
    assert sglang_adapter.verify_fwd(**a) is False
    assert cpu_ops.calls == [], "the kernel ran for an unsupported case"
    assert torch.isnan(a["o_extend"]).all(), "output written although SGLang's path will write it"
    lines = [r.getMessage() for r in caplog.records if r.name == "kernel.sglang.adapter"]
    assert len(lines) == 1 and f": {kind}: " in lines[0] and detail in lines[0], lines
    assert sglang_adapter.calls == {kind: 2}


def test_one_log_line_per_reason_kind_whatever_the_sizes(cpu_ops, caplog):
    # A server meets many sizes of one unsupported feature; the log must not grow with them.
    caplog.set_level(logging.WARNING, logger="kernel.sglang.adapter")
    for cap in (30.0, 50.0, 12.5):
        assert sglang_adapter.verify_fwd(**dict(_sglang_args(), logit_cap=cap)) is False
    for heads in (256, 200):
        assert sglang_adapter.verify_fwd(**_sglang_args(heads=heads)) is False
    lines = [r.getMessage() for r in caplog.records if r.name == "kernel.sglang.adapter"]
    assert len(lines) == 2, lines
    assert sglang_adapter.calls == {"logit_cap": 3, "heads": 2}


@pytest.mark.parametrize("kv_dtype", ["auto", "fp8_e4m3"])
def test_supported_call_runs_the_kernel(cpu_ops, caplog, kv_dtype):
    # The unchanged arguments are served: the fallbacks above fail for their change alone.
    a = _sglang_args(kv_dtype=kv_dtype)
    assert sglang_adapter.verify_fwd(**a) is True
    assert len(cpu_ops.calls) == 1 and torch.isfinite(a["o_extend"]).all()
    assert sglang_adapter.calls == {"flash": 1}
    assert not [r for r in caplog.records if r.name == "kernel.sglang.adapter"]


def _oracle(a, **scales):
    return verify_attention_reference(a["q_extend"], a["k_buffer"], a["kv_indptr"], a["kv_indices"], a["k_extend"],
                                      a["custom_mask"], a["mask_indptr"], a["qo_indptr"], a["sm_scale"], **scales)[0]


@pytest.mark.parametrize("v_factor", [1.0, 0.25])
def test_fp8_pool_goes_to_the_kernel_with_sglangs_descales(cpu_ops, v_factor):
    # SGLang's forward_extend passes layer.k_scale_float / v_scale_float; the kernel must get
    # exactly those floats (v_scale != k_scale is legal: separate checkpoint scales).
    a = _sglang_args(kv_dtype="fp8_e4m3")
    a["v_scale"] = a["k_scale"] * v_factor
    assert a["k_buffer"].dtype == torch.float8_e4m3fn and a["k_scale"] != 1.0
    assert sglang_adapter.verify_fwd(**a) is True
    c = cpu_ops.calls[0]
    assert (c["k_scale"], c["v_scale"]) == (a["k_scale"], a["v_scale"])
    assert type(c["k_scale"]) is float and type(c["v_scale"]) is float
    assert c["kv_cache"] is a["k_buffer"] and c["k_extend"] is a["k_extend"]   # the pool view, unscaled drafts
    ref = _oracle(a, k_scale=a["k_scale"], v_scale=a["v_scale"])
    assert rel_err(a["o_extend"], ref) < BF16_TOL
    # the scales matter at these sizes: an unscaled or swapped reading is far off
    assert rel_err(a["o_extend"], _oracle(a, k_scale=1.0, v_scale=1.0)) > 10 * BF16_TOL
    if v_factor != 1.0:
        assert rel_err(a["o_extend"], _oracle(a, k_scale=a["k_scale"], v_scale=a["k_scale"])) > 10 * BF16_TOL


def test_fp8_pool_without_checkpoint_scales_runs_at_one(cpu_ops):
    # A layer without KV scales: SGLang writes unscaled and passes 1.0 / 1.0; an int 1 too.
    a = _sglang_args(kv_dtype="fp8_e4m3")
    a.update(k_scale=1, v_scale=1.0)
    assert sglang_adapter.verify_fwd(**a) is True
    c = cpu_ops.calls[0]
    assert (c["k_scale"], c["v_scale"]) == (1.0, 1.0) and type(c["k_scale"]) is float


def test_bf16_pool_passes_no_scales(cpu_ops):
    # kernel.ops refuses a scale other than 1.0 with a bf16 pool; the adapter passes none.
    a = _sglang_args()
    assert sglang_adapter.verify_fwd(**a) is True
    assert (cpu_ops.calls[0]["k_scale"], cpu_ops.calls[0]["v_scale"]) == (None, None)


def test_the_call_site_asks_for_no_lse(cpu_ops, caplog):
    # nothing reads the LSE at the verify call site: the kernel gets a null LSE, and no buffer
    # sized from the draft tokens per request can be too small (the old lse_scratch fallback)
    a = _sglang_args()
    assert sglang_adapter.verify_fwd(**a) is True
    assert cpu_ops.calls[0]["with_lse"] is False and cpu_ops.calls[0]["lse_out"] is None
    assert not any("lse" in r.getMessage() for r in caplog.records)


def test_batch_beyond_workspace_falls_back(cpu_ops, caplog):
    a = _sglang_args()
    cpu_ops.get_workspace("cpu").max_bs = 1  # the batch has 2 requests
    assert sglang_adapter.verify_fwd(**a) is False and cpu_ops.calls == []
    assert "batch_size: batch of 2 requests exceeds the workspace's max_bs 1" in caplog.records[-1].getMessage()


def test_kernel_shape_rejection_falls_back(cpu_ops, caplog, monkeypatch):
    # kernel.ops raises VerifyInputError from its checks before launching: SGLang's path runs.
    def reject(*args, **kwargs):
        raise VerifyInputError("kv_cache: rows must be 16-byte aligned")
    monkeypatch.setattr(cpu_ops, "verify_attention", reject)
    a = _sglang_args()
    assert sglang_adapter.verify_fwd(**a) is False and torch.isnan(a["o_extend"]).all()
    assert "kernel_rejected: kernel.ops rejected the call: kv_cache: rows must be 16-byte aligned" in \
        caplog.records[-1].getMessage()
