"""The CUDA verify kernel as a torch custom op: `verify_attention(...)`.

Same signature as the oracle (`kernel.reference.verify_attention_reference`). The call
never synchronises with the host and allocates nothing when `out` (and `lse_out`) are
given: the split partials live in a `Workspace` sized once per device, so the call can be
captured in a CUDA graph and replayed with new lengths, slots and trees.
"""
from __future__ import annotations

import os
import threading

import torch

from . import build
from .checks import HEAD_DIM, V_DIM, VerifyInputError, check_shapes, check_values
from .fp8 import FP8, check_scale

MAX_HEADS = 128
DEFAULT_MAX_BS = 4096


# Kernel tiers: id -> query rows per CTA tile (csrc/mla_verify.cu). 0 = rows64 (query rows in
# the MMA's M dimension), 1/2/4 = small (operands swapped, 8 * id rows), 6/8 = rows32d/rows64d
# (design D of the kernel memo: 32-row pipelines, one or two per CTA), 9 = rows64d_pair (rows64d
# with one barrier pair per 32 tokens, issue 25; opt-in through tier=9, never picked by default,
# bf16 pools only).
TIERS = {0: 64, 1: 8, 2: 16, 4: 32, 6: 32, 8: 64, 9: 64}
# The tiers that read SGLang's fp8_e4m3 pool (1, 2, 4: tier_small8.cuh; 6, 8: tier_rowsd.cuh's fp8
# copies; both take f16 MMA operands converted from the e4m3 bytes in registers); rows64 (0), kept only
# to be forced in benchmarks, and rows64d_pair (9) read bf16 only.
FP8_TIERS = (1, 2, 4, 6, 8)
# The tier for requests of more than 32 rows, and when the rows per request are not known
# statically: rows64d (8), measured faster there than rows64 (0) and the 32-row tiers on the
# H200 (kernel/NOTES.md), and the lowest of every tier in the sm_120 model at 185k tokens too
# (kernel/bench/sm120_estimate.py, reports/data/sm120-model-*.json: a model, not a measurement;
# the first model ranked rows32d first from the H200's stream efficiencies, which say nothing
# about sm_120). So sm_120 picks as the H200 does, on both pools. MLA_VERIFY_LARGE_TIER overrides
# it (read once at import), on both pools: 6 or 4 select the 32-row tiles, for a canary to compare.
def _large_tier(value: str) -> int:
    if value.strip() not in {str(t) for t in TIERS}:
        raise VerifyInputError(f"MLA_VERIFY_LARGE_TIER={value!r} is not one of {sorted(TIERS)}")
    return int(value)


_LARGE_TIER_ENV = os.environ.get("MLA_VERIFY_LARGE_TIER", "")
LARGE_TIER = _large_tier(_LARGE_TIER_ENV or "8")
# Up to 8 rows: the small tier (8-row tiles); up to 32: rows32d (two 4-warp CTAs per SM), 1.5x
# faster than the small tier's 32-row tiles at T = 4 on the H200, and at 16 rows (T = 2) 2-3 % faster
# than its 16-row tiles on the H200 since rows32d's softmax skips its max shuffles (micro-h200-
# 20261203T0944.json, ...T1701.json); the sm_120 model has these two within 1 % of each other at
# T = 2, a tie it ranks either way from run to run (sm120_estimate.TIE).
ROW_TIERS = ((8, 1), (32, 6))
# On an fp8_e4m3 pool: the small tier's copy (tier_small8.cuh) up to 32 rows (8-, 16-, 32-row tiles)
# and wherever its 32-row tiles pad the rows to far fewer (pick_tier), rows64d's copy otherwise and
# when the rows per request are not known. The copy reads the e4m3 bytes in registers too and is
# 16-18 % faster than small8's 32-row tiles at 64, 128 and 256 rows on the H200
# (micro-h200-20261203T0944.json; kernel/NOTES.md). MLA_VERIFY_LARGE_TIER overrides it as on a
# bf16 pool (4: small8's 32-row tiles, the default before).
FP8_ROW_TIERS = ((8, 1), (16, 2), (32, 4))
FP8_LARGE_TIER = _large_tier(_LARGE_TIER_ENV or "8")


# small8 keeps an fp8 request above 32 rows only where its 32-row tiles pad the rows to at most this
# percentage of rows64d's copy's 64-row tiles: the copy does 8-14 % less per padded row in the sm_120
# model at DDTree's 136 / 264 / 520 rows (160 / 288 / 544 against 192 / 320 / 576 padded), so small8
# keeps D = 17 (83 %) and rows64d's copy takes D = 33 (90 %) and 65 (94 %), as the model ranks them
# measured at those shapes (sm120-model-from-h200-20261203T1003.json) and as the H200 does, by wider
# margins at 33 and 65 (micro-h200-20261203T1003.json). Since half 0 issues rows64d's fp8 copies (its
# math alone now carries their setup) the model has the two within 1.3 % at D = 33 and 65, a tie
# (sm120-model-from-h200-20261204T1310.json, sm120_estimate.TIE), and on the H200 the copy takes 20 %
# and 27 % less time there, so it keeps them. At D = 17 the H200 now disagrees with the model: since
# rows64d's fp8 copies moved into half 0's PV the copy is 12 % faster there (315.7 against 357.5 us,
# micro-h200-20261205T0244.json; 315.6 / 356.2 at T1948), while the model still has small8 6 % lower
# (295.8 against 314.6 us at the boost clock, sm120-model-from-h200-20261205T0244.json; at D = 33 and
# 65 the two stay within 1 %). The default follows the model, since it serves sm_120; an sm_120 canary
# at D = 17 is what would settle it
SMALL8_PADDED_PERCENT = 85


def _padded(rows: int, tier: int) -> int:
    """`rows` query rows rounded up to whole row tiles of `tier`."""
    return -(-rows // TIERS[tier]) * TIERS[tier]


def pick_tier(H: int, num_tokens: int, bs: int, max_draft_len: int | None = None, kv_fp8: bool = False) -> int:
    """The tier for requests of at most `max_draft_len` draft tokens x `H` heads on a bf16 pool,
    or (kv_fp8) on SGLang's fp8_e4m3 pool, from static shapes only (no device reads, so
    CUDA-graph capture keeps working). With bs == 1 the one request has all `num_tokens` draft
    tokens."""
    if max_draft_len is not None and (not isinstance(max_draft_len, int) or max_draft_len < 0):
        raise VerifyInputError(f"max_draft_len: expected a non-negative int, got {max_draft_len!r}")
    T = max_draft_len if max_draft_len is not None else (num_tokens if bs == 1 else None)
    large = FP8_LARGE_TIER if kv_fp8 else LARGE_TIER
    if T is None:
        return large
    rows = T * H
    for most, tier in FP8_ROW_TIERS if kv_fp8 else ROW_TIERS:
        if rows <= most:
            return tier
    if kv_fp8 and not _LARGE_TIER_ENV and 100 * _padded(rows, 4) <= SMALL8_PADDED_PERCENT * _padded(rows, large):
        return 4
    return large


class Workspace:
    """Device scratch for split partials: 4 x SMs x 64 rows x 512 bf16 (35 MB on an H200).

    Create it once per device, outside graph capture (`get_workspace` caches one).
    """

    def __init__(self, device, max_bs: int = DEFAULT_MAX_BS, target_ctas: int | None = None):
        device = torch.device(device)
        if device.type != "cuda":
            raise VerifyInputError(f"device: the workspace needs a CUDA device, got {device}")
        if device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        self.lib = build.load()
        self.device = device
        self.max_bs = int(max_bs)
        # one resident CTA per SM (253 registers x 256 threads); the schedule fills one wave
        self.target_ctas = int(target_ctas or torch.cuda.get_device_properties(device).multi_processor_count)
        nbytes = self.lib.mla_verify_workspace_bytes(self.target_ctas, self.max_bs)
        self.buffer = torch.empty(nbytes, dtype=torch.uint8, device=device)


_WORKSPACES: dict[torch.device, Workspace] = {}
_LOCK = threading.Lock()


def get_workspace(device) -> Workspace:
    """The cached workspace of `device` (allocated on first use: call it before capture)."""
    device = torch.device(device)
    if device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    with _LOCK:
        ws = _WORKSPACES.get(device)
        if ws is None:
            ws = _WORKSPACES[device] = Workspace(device)
        return ws


def _is64(t: torch.Tensor) -> int:
    return int(t.dtype == torch.int64)


def launch(q, kv_cache, kv_indptr, kv_indices, k_extend, custom_mask, mask_indptr, qo_indptr, sm_scale, o, lse,
           workspace: torch.Tensor, target_ctas: int, max_bs: int, mode: int = 0, tier: int = 0,
           k_scale: float = 1.0, v_scale: float = 1.0, lib=None) -> None:
    """Enqueue the kernel of `tier` and the merge on the current stream (no checks: callers check).
    An fp8 kv_cache (float8_e4m3fn) is read with k_scale / v_scale on the prefix rows. `lib`: a
    diagnostic build (`build.load(defines=...)`) instead of the production library."""
    lib = lib or build.load()
    stream = torch.cuda.current_stream(q.device).cuda_stream
    err = lib.mla_verify_launch(
        q.data_ptr(), kv_cache.data_ptr(), kv_cache.stride(0), kv_indptr.data_ptr(), _is64(kv_indptr),
        kv_indices.data_ptr() if kv_indices is not None else None, _is64(kv_indices) if kv_indices is not None else 1,
        k_extend.data_ptr(), k_extend.stride(0),
        custom_mask.data_ptr() if custom_mask is not None else None,
        mask_indptr.data_ptr() if mask_indptr is not None else None, _is64(mask_indptr) if mask_indptr is not None else 1,
        qo_indptr.data_ptr(), _is64(qo_indptr), qo_indptr.shape[0] - 1, q.shape[0], q.shape[1], float(sm_scale),
        o.data_ptr(), lse.data_ptr() if lse is not None else None, workspace.data_ptr(), target_ctas, max_bs, stream,
        mode, tier, int(kv_cache.dtype == FP8), float(k_scale), float(v_scale))
    if err != 0:
        raise RuntimeError(f"mla_verify launch failed: {lib.mla_verify_error_string(err).decode()} (cudaError {err})")


@torch.library.custom_op("mla_verify::verify_attention", mutates_args=("o", "lse", "workspace"))
def _verify_op(q: torch.Tensor, kv_cache: torch.Tensor, kv_indptr: torch.Tensor, kv_indices: torch.Tensor | None,
               k_extend: torch.Tensor, custom_mask: torch.Tensor | None, mask_indptr: torch.Tensor | None,
               qo_indptr: torch.Tensor, sm_scale: float, o: torch.Tensor, lse: torch.Tensor | None,
               workspace: torch.Tensor, target_ctas: int, max_bs: int, tier: int, k_scale: float,
               v_scale: float) -> None:
    launch(q, kv_cache, kv_indptr, kv_indices, k_extend, custom_mask, mask_indptr, qo_indptr, sm_scale, o, lse,
           workspace, target_ctas, max_bs, 0, tier, k_scale, v_scale)


@_verify_op.register_fake
def _(q, kv_cache, kv_indptr, kv_indices, k_extend, custom_mask, mask_indptr, qo_indptr, sm_scale, o, lse,
      workspace, target_ctas, max_bs, tier, k_scale, v_scale):
    return None


def _check_layout(name: str, t: torch.Tensor, row_elems: int) -> None:
    # 16-byte cp.async loads need unit stride along the head dim and 16-byte-aligned rows
    if t.stride(-1) != 1 or (t.stride(0) * t.element_size()) % 16 or t.data_ptr() % 16:
        raise VerifyInputError(f"{name}: rows must be 16-byte aligned with unit stride along the last dim "
                               f"(strides {tuple(t.stride())})")
    if t.dim() == 3 and t.shape[1] == 1:
        return
    if not t.is_contiguous():
        raise VerifyInputError(f"{name}: must be contiguous (strides {tuple(t.stride())}, {row_elems} per row)")


def verify_attention(q, kv_cache, kv_indptr, kv_indices, k_extend, custom_mask, mask_indptr, qo_indptr, sm_scale,
                     *, k_scale: float | None = None, v_scale: float | None = None, out=None, lse_out=None,
                     workspace: Workspace | None = None, validate: bool = False,
                     max_draft_len: int | None = None, tier: int | None = None, with_lse: bool = True):
    """Paged MLA tree-verify attention on the GPU, on a bf16 or an fp8_e4m3 KV pool.

    Args: exactly the oracle's (see `verify_attention_reference`), on one CUDA device:
      q [N, H, 576] bf16 contiguous; kv_cache [num_slots, 1, 576] bf16, or float8_e4m3fn
      (SGLang's `--kv-cache-dtype fp8_e4m3` pool as `get_key_buffer` returns it; rows of 576
      bytes) (V = first 512 columns); kv_indptr [bs + 1] int32/int64; kv_indices int32/int64 per-token slots, or
      None for identity (request b's prefix is slots kv_indptr[b] ..); k_extend [N, 1, 576]
      bf16; custom_mask uint8/bool FULL_MASK layout with mask_indptr [bs + 1], or None for a
      causal chain; qo_indptr [bs + 1] int32/int64; sm_scale float. H <= 128.
    Keyword args:
      k_scale, v_scale: floats > 0, SGLang's layer.k_scale_float / v_scale_float (1.0 when the
               checkpoint has none): prefix K = e4m3 row * k_scale, prefix V = row[:512] * v_scale;
               k_extend is read as given. Required with an fp8 kv_cache; with bf16, None or 1.0.
      out:     [N, H, 512] bf16 to write (allocated when None)
      lse_out: [N, H] fp32 natural-log LSE to write (allocated when None)
      with_lse: False: the kernel writes no LSE (a null pointer: the tiers and the merge skip
               the store), nothing is allocated for it, lse_out must be None, and the call
               returns (out, None); for callers that never read the LSE (SGLang's verify call
               site without DCP)
      workspace: a Workspace on q's device (`get_workspace(q.device)` when None)
      validate: also check index/mask values (reads them back: a host sync)
      max_draft_len: the most draft tokens any request has (SGLang knows it statically: the
               speculative num_draft_tokens); picks the row tier. Any value gives correct
               results; an undercount only costs speed.
      tier:    force a tier (TIERS: 0 = rows64, 1/2/4 = small with 8/16/32-row tiles, 6/8 = rows32d/
               rows64d, 9 = rows64d_pair, bf16 only); for benchmarks. Default: `pick_tier`.
    Returns (o, lse), lse None when with_lse is False.
    """
    bs, H = check_shapes(q, kv_cache, kv_indptr, kv_indices if kv_indices is not None else kv_indptr, k_extend,
                         custom_mask, mask_indptr, qo_indptr, sm_scale, float_dtypes=(torch.bfloat16,),
                         kv_dtypes=(torch.bfloat16, FP8))
    fp8 = kv_cache.dtype == FP8
    k_scale, v_scale = kernel_scales(fp8, k_scale, v_scale)
    N = q.shape[0]
    if tier is None:
        tier = pick_tier(H, N, bs, max_draft_len, kv_fp8=fp8)
        if fp8 and tier not in FP8_TIERS:   # MLA_VERIFY_LARGE_TIER=0 (rows64): its fp8 stand-in
            tier = 8
    elif tier not in TIERS:
        raise VerifyInputError(f"tier: {tier!r} is not one of {sorted(TIERS)}")
    if fp8 and tier not in FP8_TIERS:
        raise VerifyInputError(f"tier: {tier} ({'rows64' if tier == 0 else 'rows64d_pair'}) reads a bf16 pool "
                               f"only; an fp8 kv_cache takes one of {list(FP8_TIERS)}")
    if H > MAX_HEADS:
        raise VerifyInputError(f"q: {H} heads, the kernel supports at most {MAX_HEADS}")
    _check_layout("q", q, HEAD_DIM)
    _check_layout("kv_cache", kv_cache, HEAD_DIM)
    _check_layout("k_extend", k_extend, HEAD_DIM)
    if kv_cache.shape[0] >= 2 ** 31:
        raise VerifyInputError(f"kv_cache: {kv_cache.shape[0]} slots; slot ids must fit in 31 bits")
    if out is not None and (out.shape != (N, H, V_DIM) or out.dtype != torch.bfloat16 or not out.is_contiguous()):
        raise VerifyInputError(f"out: expected contiguous bf16 [{N}, {H}, {V_DIM}], got {out.dtype} "
                               f"{tuple(out.shape)} strides {tuple(out.stride())}")
    if not with_lse and lse_out is not None:
        raise VerifyInputError("lse_out: given with with_lse=False (the kernel writes no LSE then)")
    if lse_out is not None and (lse_out.shape != (N, H) or lse_out.dtype != torch.float32
                                or not lse_out.is_contiguous()):
        raise VerifyInputError(f"lse_out: expected contiguous float32 [{N}, {H}], got {lse_out.dtype} "
                               f"{tuple(lse_out.shape)}")
    for name, t in (("q", q), ("out", out), ("lse_out", lse_out)):
        if t is not None and t.device.type != "cuda":
            raise VerifyInputError(f"{name}: is on {t.device}; the kernel runs on CUDA "
                                   "(kernel.reference.verify_attention_reference runs anywhere)")
    if custom_mask is not None and custom_mask.dtype == torch.bool:
        custom_mask = custom_mask.view(torch.uint8)
    ws = workspace if workspace is not None else get_workspace(q.device)
    if ws.device != q.device:
        raise VerifyInputError(f"workspace: is on {ws.device} but q is on {q.device}")
    if bs > ws.max_bs:
        raise VerifyInputError(f"qo_indptr: batch of {bs} requests exceeds the workspace's max_bs {ws.max_bs}")
    if validate:
        check_values(q, kv_cache, kv_indptr, kv_indices if kv_indices is not None else
                     torch.arange(int(kv_indptr[-1]), device=q.device), k_extend, custom_mask, mask_indptr, qo_indptr)
    if out is None:
        out = torch.empty(N, H, V_DIM, dtype=torch.bfloat16, device=q.device)
    if lse_out is None and with_lse:
        lse_out = torch.empty(N, H, dtype=torch.float32, device=q.device)
    torch.ops.mla_verify.verify_attention(q, kv_cache, kv_indptr, kv_indices, k_extend, custom_mask, mask_indptr,
                                          qo_indptr, float(sm_scale), out, lse_out, ws.buffer, ws.target_ctas,
                                          ws.max_bs, int(tier), k_scale, v_scale)
    return out, lse_out


def kernel_scales(fp8: bool, k_scale, v_scale) -> tuple[float, float]:
    """(k_scale, v_scale) as the kernel takes them, floats; raises VerifyInputError naming the
    scale otherwise. An fp8 pool needs both (positive, finite); the bf16 kernels read an
    unscaled pool (None or 1.0). No device read: also the CPU stand-in's check."""
    if fp8:
        for name, value in (("k_scale", k_scale), ("v_scale", v_scale)):
            if value is None:
                raise VerifyInputError(f"{name}: required with an fp8 kv_cache (float8_e4m3fn): pass the layer's "
                                       f"scale (SGLang's layer.{name}_float; 1.0 when the checkpoint has none)")
        return check_scale("k_scale", k_scale), check_scale("v_scale", v_scale)
    for name, value in (("k_scale", k_scale), ("v_scale", v_scale)):
        if value is not None and value != 1.0:
            raise VerifyInputError(f"{name}: {value!r} with a bf16 kv_cache; the kernel scales only an fp8 "
                                   "pool (None or 1.0 here)")
    return 1.0, 1.0
