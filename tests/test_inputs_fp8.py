"""The generator's fp8 pools: SGLang's bytes, NaN poison where no prefix token lives, the
same cases as the model-dtype pool, scales recorded for the oracle."""
import pytest
import torch

from kernel.checks import VerifyInputError
from kernel.fp8 import FP8, FP8_MAX, FP8_NAN_BYTES, quantize_mla_rows
from kernel.inputs import LAYOUTS, make_case, random_case


def _used(case):
    used = torch.zeros(case.kv_cache.shape[0], dtype=torch.bool)
    used[case.kv_indices] = True
    return used


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("page_size", [1, 16, 64])
def test_fp8_pool_holds_sglangs_bytes_of_the_bf16_rows(layout, page_size):
    bf16 = make_case([50, 20, 0], [3, 2, 4], 2, layout=layout, page_size=page_size, seed=4)
    fp8 = make_case([50, 20, 0], [3, 2, 4], 2, layout=layout, page_size=page_size, seed=4, kv_dtype="fp8_e4m3")
    assert fp8.kv_cache.dtype == FP8 and fp8.kv_cache.shape == bf16.kv_cache.shape
    for f in ("q", "k_extend", "kv_indices", "kv_indptr", "qo_indptr", "custom_mask", "mask_indptr"):
        assert torch.equal(getattr(fp8, f), getattr(bf16, f)), f
    idx = bf16.kv_indices
    want = quantize_mla_rows(bf16.kv_cache[idx], fp8.k_scale).view(torch.uint8)
    assert torch.equal(fp8.kv_cache[idx].view(torch.uint8), want)


def test_unused_fp8_slots_are_nan_bytes_and_used_are_finite():
    c = make_case([50, 20], [3, 2], 2, layout="fragmented", page_size=16, seed=5, kv_dtype="fp8_e4m3")
    used = _used(c)
    assert torch.isfinite(c.kv_cache[used].float()).all()
    assert torch.isin(c.kv_cache[~used].view(torch.uint8), torch.tensor(FP8_NAN_BYTES, dtype=torch.uint8)).all()
    assert not used[:16].any(), "page 0 is SGLang's padding page"


def test_default_scale_uses_the_whole_e4m3_range():
    c = make_case([300], [4], 2, seed=6, kv_dtype="fp8_e4m3")
    stored = c.kv_cache[c.kv_indices].float().abs()
    assert float(stored.max()) == FP8_MAX               # the largest row value lands on 448
    ref = make_case([300], [4], 2, seed=6)
    assert c.k_scale == float(ref.kv_cache[ref.kv_indices].abs().max()) / FP8_MAX
    assert c.v_scale == c.k_scale
    assert c.kwargs() == {"k_scale": c.k_scale, "v_scale": c.v_scale}


def test_given_scales_are_recorded_and_used():
    c = make_case([40], [3], 1, seed=7, kv_dtype="fp8_e4m3", k_scale=0.02, v_scale=0.05)
    assert (c.k_scale, c.v_scale) == (0.02, 0.05)
    ref = make_case([40], [3], 1, seed=7)
    assert torch.equal(c.kv_cache[c.kv_indices].view(torch.uint8),
                       quantize_mla_rows(ref.kv_cache[ref.kv_indices], 0.02).view(torch.uint8))


def test_no_prefix_rows_means_sglangs_default_scale():
    c = make_case([0, 0], [2, 3], 1, seed=8, kv_dtype="fp8_e4m3")
    assert c.k_scale == c.v_scale == 1.0
    assert torch.isin(c.kv_cache.view(torch.uint8), torch.tensor(FP8_NAN_BYTES, dtype=torch.uint8)).all()


def test_model_dtype_cases_are_unchanged():
    c = make_case([10, 3], [4, 2], 2, seed=0)
    assert c.kv_cache.dtype == torch.bfloat16 and c.k_scale is None and c.v_scale is None
    assert c.kwargs() == {} and len(c.args()) == 9 and c.meta["kv_dtype"] == "auto"


def test_random_case_fp8_draws_the_same_configuration():
    for seed in range(5):
        a, b = random_case(seed), random_case(seed, kv_dtype="fp8_e4m3")
        assert a.meta | {"kv_dtype": "fp8_e4m3"} == b.meta
        assert torch.equal(a.q, b.q) and b.kv_cache.dtype == FP8


def test_bad_fp8_arguments_name_the_argument():
    with pytest.raises(VerifyInputError, match="kv_dtype: unknown 'fp8_e5m2'"):
        make_case([4], [2], 1, kv_dtype="fp8_e5m2")
    with pytest.raises(VerifyInputError, match="k_scale: scales are for kv_dtype='fp8_e4m3'"):
        make_case([4], [2], 1, k_scale=0.5)
    with pytest.raises(VerifyInputError, match="v_scale: scales are for kv_dtype='fp8_e4m3', got kv_dtype='auto'"):
        make_case([4], [2], 1, v_scale=0.5)
    with pytest.raises(VerifyInputError, match="v_scale: must be positive and finite, got -1.0"):
        make_case([4], [2], 1, kv_dtype="fp8_e4m3", v_scale=-1.0)
