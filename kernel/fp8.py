"""SGLang 0.5.23's fp8 MLA KV cache (`--kv-cache-dtype fp8_e4m3`): how a row is written and
how it is read back (kernel/FP8.md gives the source lines).

Write: the bf16 latent row k [.., 576] is divided by the layer's k_scale in k's own dtype,
then cast to float8_e4m3fn (round to nearest even, saturating at +-448; NaN stays NaN) and
stored as uint8 bytes. Read: SGLang's kernels see the bytes as float8_e4m3fn and multiply
q.k by k_scale (all 576 columns) and the P.V contribution by v_scale (V = the first 512
columns of the same row, written with k_scale). So K = fp8 * k_scale, V = fp8[:512] * v_scale.
"""
from __future__ import annotations

import math

import torch

from .checks import FP8_DTYPES, V_DIM, VerifyInputError

FP8 = torch.float8_e4m3fn
FP8_MAX = torch.finfo(FP8).max          # 448: the largest finite e4m3fn value
FP8_NAN_BYTES = (0x7F, 0xFF)            # e4m3fn has no infinity; these two bytes are its NaNs


def is_fp8(t) -> bool:
    """True when `t` is a tensor of one of torch's fp8 dtypes."""
    return isinstance(t, torch.Tensor) and t.dtype in FP8_DTYPES


def check_scale(name: str, value) -> float:
    """A KV scale as SGLang passes it (layer.k_scale_float / v_scale_float): a positive
    finite number. Returns it as a float; raises VerifyInputError naming `name` otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise VerifyInputError(f"{name}: expected a positive finite float, got {value!r} ({type(value).__name__})")
    if not (math.isfinite(value) and value > 0):
        raise VerifyInputError(f"{name}: must be positive and finite, got {value!r}")
    return float(value)


def quantize_mla_rows(rows: torch.Tensor, k_scale: float) -> torch.Tensor:
    """Rows as SGLang's Triton backend writes them into an fp8 MLA pool.

    rows: [..., 576] float (bf16 in SGLang: the model dtype); k_scale: the layer's k_scale.
    Returns float8_e4m3fn of rows' shape: (rows / k_scale, rounded to rows' dtype) cast to
    e4m3fn. The two roundings are SGLang's: it divides a clone of k in place, then casts.
    """
    k_scale = check_scale("k_scale", k_scale)
    if not isinstance(rows, torch.Tensor) or not rows.is_floating_point() or is_fp8(rows):
        raise VerifyInputError(f"rows: expected a bf16/fp16/fp32/fp64 tensor, got "
                               f"{getattr(rows, 'dtype', type(rows).__name__)}")
    # In SGLang the divisor is layer.k_scale, an fp32 0-dim tensor on the rows' device.
    divisor = torch.tensor(k_scale, dtype=torch.float32, device=rows.device)
    return rows.clone().div_(divisor).to(FP8)


def dequantize_keys(cache: torch.Tensor, k_scale: float) -> torch.Tensor:
    """K as SGLang's kernels read it: float64 [..., 576] = e4m3fn value * k_scale."""
    return cache.double() * check_scale("k_scale", k_scale)


def dequantize_values(cache: torch.Tensor, v_scale: float) -> torch.Tensor:
    """V as SGLang's kernels read it: float64 [..., 512] = first 512 columns * v_scale."""
    return cache[..., :V_DIM].double() * check_scale("v_scale", v_scale)
