"""SGLang TARGET_VERIFY metadata -> our verify kernel, or False to fall back.

`verify_fwd` has exactly the signature of SGLang 0.5.23's
`sglang.kernels.ops.attention.verify_mla.verify_shared_kv_fwd`, because the plugin
(kernel/sglang/plugin.py) installs it as `TritonAttnBackend.verify_shared_kv_fwd`.
`TritonAttnBackend.forward_extend` calls that slot only in TARGET_VERIFY, after the
draft tokens' KV rows are written to the pool, and runs `extend_attention_fwd` when it
returns False. So this function may decline anything it cannot serve exactly.

SGLang passes (eager and CUDA-graph forms differ only in index dtypes and sizes):
  q_extend    [N, H, 576] bf16, absorbed MLA query (N = sum of draft tokens)
  k_extend    [N, 1, 576] bf16, the draft tokens' latent rows (contiguous)
  v_extend    [N, 1, 512] bf16, == k_extend[..., :512] for MLA; not read
  o_extend    [N, H, 512] bf16 view of the layer's output buffer, written in place
  k_buffer    [slots, 1, 576] bf16, this layer's MLA pool; or float8_e4m3fn with
              `--kv-cache-dtype fp8_e4m3` (the pool's uint8 bytes viewed as e4m3, row
              stride 576 bytes)
  v_buffer    k_buffer[..., :512] (a view, same storage and dtype); not read
  qo_indptr   [bs + 1] int32 (eager) / int64 (graph, fixed buffer)
  kv_indptr   [bs + 1] int32, prefix only; kv_indices int64 per-token slots, possibly
              longer than kv_indptr[-1] (graph: a fixed max-size buffer)
  custom_mask flat uint8/bool FULL_MASK (graph: the whole fixed verify_mask buffer)
              or None (a causal chain); mask_indptr [bs + 1] int64
  sm_scale    layer.scaling (float)
  k_scale / v_scale  k_descale / v_descale: layer.k_scale_float / v_scale_float, Python
              floats (1.0 when the layer has no scales); the kernel reads an fp8 prefix as
              e4m3 * k_scale (K) and e4m3[:512] * v_scale (V), k_extend unscaled
Nothing here reads device memory or allocates: the call is captured in CUDA graphs and
replayed with new lengths, so every check is on shapes, dtypes and Python scalars. The call
site never reads an LSE (only SGLang's DCP path does, and the plugin's DCP path passes its
own), so the kernel writes none (`with_lse=False`, a null pointer): nothing is sized from the
draft tokens per request, which a fork may keep below what it verifies (DDTree's pull request:
a block of 16, D = 33 verified).

A fallback is counted and logged once per reason KIND (a short stable name such as
"kv_dtype" or "logit_cap", the `reason` label of mla_verify_fallbacks_total), with the
first occurrence's details; sizes never make a new kind.
"""
from __future__ import annotations

import logging
import math
from collections import Counter

import torch

from ..checks import HEAD_DIM, V_DIM, VerifyInputError
from ..fp8 import FP8
from . import metrics

logger = logging.getLogger(__name__)

MAX_HEADS = 128  # = kernel.ops.MAX_HEADS, checked here without importing (and building) the kernel
# The pools the kernel reads: SGLang's bf16 pool and its fp8_e4m3 pool (float8_e4m3fn, one
# per-tensor k/v scale per layer). e5m2, fnuz and fp4 pools are SGLang's kernel's.
KV_DTYPES = (torch.bfloat16, FP8)

# How often each outcome happened in this process: "flash" = our kernel ran, else the
# fallback's reason kind. Under a CUDA graph these count captures, not replays.
calls: Counter = Counter()
_logged: set[str] = set()

# The module that provides verify_attention and get_workspace: kernel.ops, imported on
# first use (it loads the CUDA extension); CPU tests put a CPU stand-in here.
_ops_module = None

def ops():
    """The kernel module (kernel.ops unless `use_ops` replaced it)."""
    global _ops_module
    if _ops_module is None:
        from .. import ops as module
        _ops_module = module
    return _ops_module


def use_ops(module):
    """Route kernel calls to `module` (needs verify_attention, get_workspace);
    None restores kernel.ops. Returns the previous module, for restoring."""
    global _ops_module
    previous, _ops_module = _ops_module, module
    return previous


def _fallback(kind: str, detail: str) -> bool:
    calls[kind] += 1
    metrics.count_fallback(kind)
    if kind not in _logged:
        _logged.add(kind)
        logger.warning("mla-verify: TARGET_VERIFY falls back to SGLang's extend_attention_fwd: %s: %s "
                       "(logged once per reason kind)", kind, detail)
    return False


def _draft_len(max_len_extend) -> int | None:
    ok = isinstance(max_len_extend, int) and not isinstance(max_len_extend, bool) and max_len_extend > 0
    return max_len_extend if ok else None


def _capturing(t: torch.Tensor) -> bool:
    """Whether this call is being recorded into a CUDA graph (on t's device)."""
    return t.is_cuda and torch.cuda.is_current_stream_capturing()


def _dt(t: torch.Tensor) -> str:
    return str(t.dtype).replace("torch.", "")


def _is_number(x) -> bool:
    # bool is an int, but never a scale; a 0-dim tensor would need a device read to use
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def unsupported_reason(q_extend, k_extend, v_extend, o_extend, k_buffer, v_buffer, qo_indptr,
                       kv_indptr, kv_indices, custom_mask, is_causal, mask_indptr, k_scale, v_scale,
                       sm_scale, logit_cap, skip_prefix_custom_mask, sliding_window_size, sinks,
                       window_kv_offsets, xai_temperature_len) -> tuple[str, str] | None:
    """(reason kind, detail) when the kernel cannot serve this call exactly, else None.

    Served KV caches: bf16 with k_scale = v_scale = 1.0 (SGLang's value for a layer without
    KV scales), and float8_e4m3fn with positive finite float scales (passed to the kernel)."""
    if sinks is not None:
        return "sinks", "attention sinks"
    if (sliding_window_size is not None and sliding_window_size > 0) or window_kv_offsets is not None:
        return "sliding_window", f"sliding window (sliding_window_size={sliding_window_size})"
    if logit_cap is not None and logit_cap > 0:
        return "logit_cap", f"logit cap (logit_cap={logit_cap})"
    if xai_temperature_len is not None and xai_temperature_len > 0:
        return "xai_temperature", f"xai temperature (xai_temperature_len={xai_temperature_len})"
    if not _is_number(k_scale) or not _is_number(v_scale):
        return "kv_scale", (f"k/v descale given as a tensor or non-number (k_scale: {type(k_scale).__name__}, "
                            f"v_scale: {type(v_scale).__name__}; the kernel takes per-layer Python floats)")
    if k_buffer.dtype not in KV_DTYPES:
        return "kv_dtype", (f"KV cache dtype {_dt(k_buffer)} (the kernel reads bfloat16 or float8_e4m3fn, "
                            "--kv-cache-dtype auto/bf16 or fp8_e4m3)")
    if k_buffer.dtype == FP8:
        if not (math.isfinite(k_scale) and k_scale > 0 and math.isfinite(v_scale) and v_scale > 0):
            return "kv_scale", f"fp8 k/v descale not positive and finite (k_scale={k_scale}, v_scale={v_scale})"
    elif k_scale != 1.0 or v_scale != 1.0:
        # SGLang passes 1.0 unless the layer has fp8 KV scales; on a bf16 pool nothing to undo
        return "kv_scale", f"k/v descale != 1 on a bf16 KV cache (k_scale={k_scale}, v_scale={v_scale})"
    if not isinstance(sm_scale, (int, float)) or not sm_scale > 0:
        return "sm_scale", f"sm_scale={sm_scale!r} is not a positive number"
    if not skip_prefix_custom_mask:
        return "prefix_mask", "skip_prefix_custom_mask=False (the mask would cover the prefix)"
    if not is_causal:
        return "non_causal", "non-causal (bidirectional) extend"
    if q_extend.dtype != torch.bfloat16:
        return "q_dtype", f"q dtype {_dt(q_extend)} (the kernel takes bf16)"
    if q_extend.dim() != 3 or q_extend.shape[2] != HEAD_DIM:
        return "head_dim", f"q shape {tuple(q_extend.shape)} is not [N, H, {HEAD_DIM}] (absorbed MLA)"
    N, H = q_extend.shape[0], q_extend.shape[1]
    if not 1 <= H <= MAX_HEADS:
        return "heads", f"H={H} query heads outside the kernel's range 1..{MAX_HEADS}"
    if k_buffer.dim() != 3 or tuple(k_buffer.shape[1:]) != (1, HEAD_DIM):
        return "kv_layout", f"k_buffer shape {tuple(k_buffer.shape)} is not [slots, 1, {HEAD_DIM}]"
    # fp8: both are `.view(float8_e4m3fn)` of the same uint8 rows, so pointer, strides
    # (576 elements = 576 bytes a row) and dtype agree exactly as for bf16
    if (v_buffer.data_ptr() != k_buffer.data_ptr() or tuple(v_buffer.shape) != (k_buffer.shape[0], 1, V_DIM)
            or v_buffer.stride() != k_buffer.stride() or v_buffer.dtype != k_buffer.dtype):
        return "kv_layout", "v_buffer is not the view k_buffer[..., :512] (the kernel reads V from the K pool)"
    if tuple(k_extend.shape) != (N, 1, HEAD_DIM) or k_extend.dtype != torch.bfloat16 or not k_extend.is_contiguous():
        return "extend_layout", f"k_extend {tuple(k_extend.shape)} {_dt(k_extend)} is not a contiguous bf16 [N, 1, {HEAD_DIM}]"
    if v_extend.dim() != 3 or tuple(v_extend.shape[1:]) != (1, V_DIM):
        return "extend_layout", f"v_extend shape {tuple(v_extend.shape)} is not [N, 1, {V_DIM}]"
    if tuple(o_extend.shape) != (N, H, V_DIM) or o_extend.dtype != torch.bfloat16 or not o_extend.is_contiguous():
        return "out_layout", f"o {tuple(o_extend.shape)} {_dt(o_extend)} is not a contiguous bf16 [N, H, {V_DIM}]"
    for name, t in (("qo_indptr", qo_indptr), ("kv_indptr", kv_indptr), ("kv_indices", kv_indices)):
        if t.dtype not in (torch.int32, torch.int64):
            return "index_dtype", f"{name} dtype {_dt(t)} (need int32/int64)"
    if qo_indptr.shape[0] < 2 or kv_indptr.shape[0] != qo_indptr.shape[0]:
        return "indptr", f"qo_indptr/kv_indptr lengths {qo_indptr.shape[0]}/{kv_indptr.shape[0]} (need equal, >= 2)"
    if custom_mask is not None:
        if custom_mask.dtype not in (torch.uint8, torch.bool):
            return "mask_dtype", f"custom_mask dtype {_dt(custom_mask)} (need uint8/bool FULL_MASK)"
        if mask_indptr is None or mask_indptr.shape[0] != qo_indptr.shape[0]:
            return "mask_indptr", "custom_mask given without a mask_indptr of length bs + 1"
    devices = {t.device for t in (q_extend, k_extend, o_extend, k_buffer, qo_indptr, kv_indptr, kv_indices,
                                  custom_mask, mask_indptr) if t is not None}
    if len(devices) != 1:
        return "devices", f"tensors on several devices {sorted(map(str, devices))}"
    return None


def verify_fwd(q_extend, k_extend, v_extend, o_extend, k_buffer, v_buffer, qo_indptr, kv_indptr,
               kv_indices, custom_mask, is_causal, mask_indptr, max_len_extend, k_scale, v_scale,
               sm_scale=None, logit_cap=0.0, skip_prefix_custom_mask=True, sliding_window_size=-1,
               sinks=None, window_kv_offsets=None, xai_temperature_len=-1, max_bs=None):
    """Run our kernel for one layer's TARGET_VERIFY; True when o_extend was written.

    Drop-in for `verify_shared_kv_fwd` (same parameters; max_bs is not needed: the kernel
    reads per-request lengths from the indptrs on the device; max_len_extend, the draft
    tokens per request, only picks the kernel's row tier).
    An fp8_e4m3 pool goes to the kernel with k_scale / v_scale as SGLang passed them
    (layer.k_scale_float / v_scale_float), the draft rows k_extend unscaled, as SGLang's
    own extend kernel reads them.
    Returns False, logging the reason once, for anything the kernel cannot do exactly.
    """
    reason = unsupported_reason(q_extend, k_extend, v_extend, o_extend, k_buffer, v_buffer, qo_indptr,
                                kv_indptr, kv_indices, custom_mask, is_causal, mask_indptr, k_scale,
                                v_scale, sm_scale, logit_cap, skip_prefix_custom_mask, sliding_window_size,
                                sinks, window_kv_offsets, xai_temperature_len)
    if reason is not None:
        return _fallback(*reason)
    m = ops()
    workspace = m.get_workspace(q_extend.device)
    if qo_indptr.shape[0] - 1 > workspace.max_bs:
        return _fallback("batch_size", f"batch of {qo_indptr.shape[0] - 1} requests exceeds the workspace's "
                         f"max_bs {workspace.max_bs}")
    # The kernel takes scales only with an fp8 pool (a bf16 pool is checked at 1.0 above)
    scales = dict(k_scale=float(k_scale), v_scale=float(v_scale)) if k_buffer.dtype == FP8 else {}
    try:
        # max_len_extend is SGLang's draft tokens per request, a Python int in eager and graph
        # form alike: it picks the kernel's row tier without reading the device
        m.verify_attention(q_extend, k_buffer, kv_indptr, kv_indices, k_extend, custom_mask, mask_indptr,
                           qo_indptr, float(sm_scale), **scales, out=o_extend, with_lse=False,
                           workspace=workspace, max_draft_len=_draft_len(max_len_extend))
    except VerifyInputError as e:  # raised by its shape checks, before anything is launched or written
        return _fallback("kernel_rejected", f"kernel.ops rejected the call: {e}")
    calls["flash"] += 1
    if _capturing(q_extend):
        metrics.count_capture("flash")   # replays run this kernel without Python: count the capture
    else:
        metrics.count_kernel_call()
    return True
