"""SGLang's fp8 MLA row encoding (kernel/fp8.py): e4m3fn rounding, saturation, NaN, scales."""
import math

import pytest
import torch

from kernel.checks import VerifyInputError
from kernel.fp8 import (FP8, FP8_MAX, FP8_NAN_BYTES, check_scale, dequantize_keys, dequantize_values,
                        quantize_mla_rows)


def _all_finite_fp8() -> torch.Tensor:
    """Every finite e4m3fn value, from its 256 byte patterns."""
    v = torch.arange(256, dtype=torch.uint8).view(FP8).double()
    return v[torch.isfinite(v)]


def test_the_format_constants_come_from_torch():
    assert FP8_MAX == float(_all_finite_fp8().max())
    nan_bytes = [b for b in range(256) if math.isnan(float(torch.tensor([b], dtype=torch.uint8).view(FP8)))]
    assert tuple(nan_bytes) == FP8_NAN_BYTES


def test_every_fp8_value_survives_a_round_trip():
    # an fp8 value times the scale, written again with the same scale, gives the same byte
    for scale in (1.0, 0.0123, 3.5):
        v = _all_finite_fp8()
        rows = (v * scale).float()
        back = dequantize_keys(quantize_mla_rows(rows, scale), scale)
        assert torch.allclose(back, v * scale, rtol=1e-6, atol=0), scale


def test_quantize_divides_by_k_scale_then_rounds_to_nearest():
    values = _all_finite_fp8().sort().values
    scale = 0.25
    lo, hi = values[200], values[201]                   # two neighbouring positive fp8 values
    just_below_mid = ((lo + (hi - lo) * 0.4) * scale).float().reshape(1, 1)
    just_above_mid = ((lo + (hi - lo) * 0.6) * scale).float().reshape(1, 1)
    assert float(quantize_mla_rows(just_below_mid, scale).double()) == float(lo)
    assert float(quantize_mla_rows(just_above_mid, scale).double()) == float(hi)


def test_overflow_saturates_and_nan_stays_nan():
    rows = torch.tensor([[10 * FP8_MAX, -10 * FP8_MAX, float("inf"), float("nan")]])
    q = quantize_mla_rows(rows, 1.0).view(torch.uint8)[0].tolist()
    sat = torch.tensor([FP8_MAX, -FP8_MAX]).to(FP8).view(torch.uint8).tolist()
    assert q[:3] == [sat[0], sat[1], sat[0]]
    assert q[3] in FP8_NAN_BYTES


def test_division_happens_in_the_rows_dtype():
    # SGLang divides a bf16 clone in place: the quotient is rounded to bf16 before the fp8 cast
    rows = torch.randn(4096, generator=torch.Generator().manual_seed(0)).to(torch.bfloat16)
    scale = 0.0137
    ours = quantize_mla_rows(rows, scale)
    two_roundings = (rows.float() / scale).to(torch.bfloat16).to(FP8)
    assert torch.equal(ours.view(torch.uint8), two_roundings.view(torch.uint8))
    assert ours.dtype == FP8 and ours.shape == rows.shape


def test_values_are_the_first_512_columns_times_v_scale():
    cache = quantize_mla_rows(torch.randn(3, 1, 576), 0.5)
    k, v = dequantize_keys(cache, 0.5), dequantize_values(cache, 2.0)
    assert k.shape == (3, 1, 576) and v.shape == (3, 1, 512) and v.dtype == torch.float64
    assert torch.equal(v, k[..., :512] * 4.0)


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), float("inf"), True, "1.0", None])
def test_bad_scales_name_the_argument(bad):
    with pytest.raises(VerifyInputError, match=r"^k_scale: "):
        check_scale("k_scale", bad)
    with pytest.raises(VerifyInputError, match=r"^k_scale: "):
        quantize_mla_rows(torch.ones(1, 576), bad)


def test_fp8_rows_are_not_quantized_twice():
    with pytest.raises(VerifyInputError, match=r"^rows: expected a bf16/fp16/fp32/fp64 tensor, got torch.float8"):
        quantize_mla_rows(torch.ones(1, 576).to(FP8), 1.0)
