"""The CUDA wrapper on a machine without a GPU: its checks, its errors, its registration."""
import pytest
import torch

from kernel.checks import VerifyInputError
from kernel.inputs import make_case
from kernel.ops import MAX_HEADS, Workspace, verify_attention


@pytest.fixture
def case():
    return make_case([10, 3], [4, 2], 2, seed=0)          # bf16, on the CPU


def test_registered_as_a_torch_custom_op():
    assert hasattr(torch.ops.mla_verify, "verify_attention")


def test_cpu_tensors_are_refused_by_name(case):
    with pytest.raises(VerifyInputError, match=r"q: is on cpu; the kernel runs on CUDA"):
        verify_attention(*case.args())


def test_only_bf16(case):
    with pytest.raises(VerifyInputError, match=r"q: dtype float32 not supported \(expected one of bfloat16\)"):
        verify_attention(case.q.float(), *case.args()[1:])


def test_too_many_heads():
    c = make_case([4], [1], MAX_HEADS + 1, seed=1)
    with pytest.raises(VerifyInputError, match=rf"q: {MAX_HEADS + 1} heads, the kernel supports at most {MAX_HEADS}"):
        verify_attention(*c.args())


def test_out_shape_checked(case):
    bad = torch.empty(6, 2, 256, dtype=torch.bfloat16)
    with pytest.raises(VerifyInputError, match=r"out: expected contiguous bf16 \[6, 2, 512\]"):
        verify_attention(*case.args(), out=bad)


def test_lse_dtype_checked(case):
    with pytest.raises(VerifyInputError, match=r"lse_out: expected contiguous float32 \[6, 2\]"):
        verify_attention(*case.args(), lse_out=torch.empty(6, 2, dtype=torch.bfloat16))


def test_non_contiguous_q(case):
    q = case.q.transpose(0, 1).contiguous().transpose(0, 1)
    with pytest.raises(VerifyInputError, match=r"q: must be contiguous"):
        verify_attention(q, *case.args()[1:])


def test_workspace_needs_cuda():
    with pytest.raises(VerifyInputError, match=r"device: the workspace needs a CUDA device, got cpu"):
        Workspace("cpu")


def test_tier_from_static_shapes():
    from kernel.ops import FP8_LARGE_TIER, LARGE_TIER, TIERS, pick_tier
    assert pick_tier(8, 1, 1) == 1                        # T = 1: 8 rows
    assert pick_tier(8, 2, 1) == 6 and pick_tier(16, 1, 1) == 6   # 16 rows: rows32d too
    assert pick_tier(8, 4, 1) == 6                        # 32 rows: rows32d
    assert pick_tier(8, 8, 1) == LARGE_TIER               # the centre: 64 rows
    assert pick_tier(8, 32, 8) == LARGE_TIER              # bs > 1, no hint: unknown rows per request
    assert pick_tier(8, 32, 8, max_draft_len=4) == 6      # SGLang's static draft length
    assert pick_tier(8, 32, 8, max_draft_len=5) == LARGE_TIER == 8   # 40 rows: rows64d
    # an fp8 pool: the small tier's copy up to 32 rows (8-, 16-, 32-row tiles) and where its 32-row
    # tiles pad to at most 85 % of the rows (72 rows: 96 against 128; DDTree's 17 x 8: 160 against
    # 192), rows64d's copy otherwise (DDTree's 33 x 8: 288 against 320) and for unknown rows per request
    assert [pick_tier(8, t, 1, kv_fp8=True) for t in (1, 2, 4, 5, 8, 9, 16, 17, 32, 33, 65)] == \
        [1, 2, 4, 8, 8, 4, 8, 4, 8, 8, 8]
    assert pick_tier(8, 32, 8, kv_fp8=True) == FP8_LARGE_TIER == 8          # unknown rows per request
    assert pick_tier(8, 32, 8, max_draft_len=4, kv_fp8=True) == 4
    assert set(TIERS) == {0, 1, 2, 4, 6, 8, 9} and TIERS[0] == TIERS[8] == TIERS[9] == 64 and TIERS[6] == 32
    # rows64d_pair (9) is opt-in: no row count and no override default picks it
    assert 9 not in {pick_tier(8, t, 1, kv_fp8=f) for t in (1, 2, 4, 8, 16, 64) for f in (False, True)}


def test_bad_tier_arguments_name_the_argument(case):
    from kernel.ops import pick_tier
    with pytest.raises(VerifyInputError, match="max_draft_len"):
        pick_tier(8, 8, 1, max_draft_len=-1)
    with pytest.raises(VerifyInputError, match="tier: 3"):
        verify_attention(*case.args(), tier=3)


def test_large_tier_override_is_checked():
    from kernel.ops import _large_tier
    assert _large_tier("4") == 4
    with pytest.raises(VerifyInputError, match="MLA_VERIFY_LARGE_TIER='fast'"):
        _large_tier("fast")


@pytest.mark.parametrize("env, want", [(None, "8 8"), ("6", "6 6"), ("4", "4 4")])
def test_large_tier_override_applies_to_both_pools(env, want):
    import os
    import subprocess
    import sys
    e = {k: v for k, v in os.environ.items() if k != "MLA_VERIFY_LARGE_TIER"}
    if env is not None:
        e["MLA_VERIFY_LARGE_TIER"] = env
    out = subprocess.run([sys.executable, "-c", "import kernel.ops as o; print(o.LARGE_TIER, o.FP8_LARGE_TIER)"],
                         env=e, capture_output=True, text=True, check=True, cwd=os.path.dirname(os.path.dirname(
                             os.path.abspath(__file__))))
    assert out.stdout.split()[-2:] == want.split()


@pytest.fixture
def fp8_case():
    return make_case([10, 3], [4, 2], 2, seed=0, kv_dtype="fp8_e4m3", k_scale=0.5, v_scale=0.25)


def test_fp8_pool_passes_the_checks_with_its_scales(fp8_case):
    # SGLang's fp8 pool (float8_e4m3fn view) with both scales gets past every check; the call
    # stops only at the device check, so the CPU never reaches a launch
    with pytest.raises(VerifyInputError, match=r"^q: is on cpu; the kernel runs on CUDA"):
        verify_attention(*fp8_case.args(), **fp8_case.kwargs())


@pytest.mark.parametrize("missing", ["k_scale", "v_scale"])
def test_fp8_pool_needs_both_scales(fp8_case, missing):
    kw = dict(fp8_case.kwargs(), **{missing: None})
    with pytest.raises(VerifyInputError, match=rf"^{missing}: required with an fp8 kv_cache \(float8_e4m3fn\)"):
        verify_attention(*fp8_case.args(), **kw)


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), float("inf"), "1.0"])
def test_fp8_scales_must_be_positive_finite_floats(fp8_case, bad):
    with pytest.raises(VerifyInputError, match=r"^v_scale: "):
        verify_attention(*fp8_case.args(), k_scale=1.0, v_scale=bad)


def test_a_bf16_pool_takes_no_scale(case):
    with pytest.raises(VerifyInputError, match=r"^k_scale: 2.0 with a bf16 kv_cache"):
        verify_attention(*case.args(), k_scale=2.0)


def test_rows64_does_not_read_fp8(fp8_case):
    with pytest.raises(VerifyInputError, match=r"^tier: 0 \(rows64\) reads a bf16 pool only"):
        verify_attention(*fp8_case.args(), **fp8_case.kwargs(), tier=0)


def test_other_fp8_formats_are_refused_by_dtype(fp8_case):
    e5m2 = fp8_case.kv_cache.view(torch.uint8).view(torch.float8_e5m2)
    args = list(fp8_case.args())
    args[1] = e5m2
    with pytest.raises(VerifyInputError, match=r"^kv_cache: dtype float8_e5m2 not supported \(expected one of "
                                               r"bfloat16, float8_e4m3fn\)"):
        verify_attention(*args, **fp8_case.kwargs())


def test_no_lse_means_no_lse_buffer(case):
    """with_lse=False (the SGLang verify call site: nothing reads the LSE) takes no lse_out: the
    kernel gets a null pointer, which its tiers and merge skip (verify_common.cuh store_tile,
    combine.cuh), so nothing is sized from the tokens per request."""
    with pytest.raises(VerifyInputError, match=r"lse_out: given with with_lse=False"):
        verify_attention(*case.args(), lse_out=torch.empty(6, 2), with_lse=False)
    with pytest.raises(VerifyInputError, match=r"q: is on cpu"):   # otherwise the usual checks run
        verify_attention(*case.args(), with_lse=False)
