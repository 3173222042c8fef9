"""The float64 oracle on an fp8 pool: it equals the oracle run on the explicitly dequantized
cache, applies v_scale to V alone, and refuses an fp8 pool without valid scales."""
import pytest
import torch
import torch.nn.functional as F

from kernel.checks import VerifyInputError
from kernel.fp8 import dequantize_keys, dequantize_values
from kernel.inputs import make_case, random_case
from kernel.reference import verify_attention_reference


def _dequantized(case):
    """The case with its fp8 pool replaced by the float64 values SGLang reads (one scale)."""
    assert case.k_scale == case.v_scale
    args = list(case.args())
    args[1] = dequantize_keys(case.kv_cache, case.k_scale)       # NaN poison stays NaN
    return args


@pytest.mark.parametrize("seed", range(60))
def test_fp8_oracle_is_the_oracle_on_the_dequantized_cache(seed):
    case = random_case(seed, kv_dtype="fp8_e4m3", dtype=torch.float64)
    o, lse = verify_attention_reference(*case.args(), **case.kwargs())
    ro, rl = verify_attention_reference(*_dequantized(case))
    assert torch.isfinite(o).all(), "a NaN pool slot leaked into the output"
    assert torch.equal(o, ro) and torch.equal(lse, rl)


def _sdpa_split_kv(case):
    """Independent formulation with K and V materialised separately per request."""
    kvp, qop = case.kv_indptr.tolist(), case.qo_indptr.tolist()
    outs = []
    for b in range(len(qop) - 1):
        q0, q1, k0, k1 = qop[b], qop[b + 1], kvp[b], kvp[b + 1]
        T, S = q1 - q0, k1 - k0
        rows = case.kv_cache[case.kv_indices[k0:k1], 0]
        k = torch.cat([dequantize_keys(rows, case.k_scale), case.k_extend[q0:q1, 0].double()])
        v = torch.cat([dequantize_values(rows, case.v_scale), case.k_extend[q0:q1, 0, :512].double()])
        m0 = int(case.mask_indptr[b])
        tree = case.custom_mask[m0: m0 + T * (S + T)].view(T, S + T)[:, S:].bool()
        allowed = torch.cat([torch.ones(T, S, dtype=torch.bool), tree], 1)
        q = case.q[q0:q1].double().transpose(0, 1)[None]
        H = q.shape[1]
        o = F.scaled_dot_product_attention(q, k[None, None].expand(1, H, -1, -1), v[None, None].expand(1, H, -1, -1),
                                           attn_mask=allowed, scale=case.sm_scale)
        outs.append(o[0].transpose(0, 1))
    return torch.cat(outs)


def test_v_scale_multiplies_the_prefix_values_only():
    case = make_case([37, 0, 90], [5, 3, 6], 4, tree="ddtree", layout="fragmented", page_size=16, seed=3,
                     kv_dtype="fp8_e4m3", dtype=torch.float64, v_scale=0.05)
    assert case.v_scale != case.k_scale
    o, lse = verify_attention_reference(*case.args(), **case.kwargs())
    ref = _sdpa_split_kv(case)
    assert float((o - ref).norm() / ref.norm()) < 1e-12
    # the logits (hence the LSE) see only k_scale
    _, lse_k = verify_attention_reference(*case.args(), k_scale=case.k_scale, v_scale=case.k_scale)
    assert torch.equal(lse, lse_k)
    o_k, _ = verify_attention_reference(*case.args(), k_scale=case.k_scale, v_scale=case.k_scale)
    assert float((o - o_k).norm() / o_k.norm()) > 1e-2


def test_scales_change_the_answer():
    case = make_case([60], [4], 2, seed=9, kv_dtype="fp8_e4m3", dtype=torch.float64)
    a, _ = verify_attention_reference(*case.args(), **case.kwargs())
    b, _ = verify_attention_reference(*case.args(), k_scale=1.0, v_scale=1.0)
    assert float((a - b).norm() / a.norm()) > 0.5


def test_model_dtype_calls_are_unchanged_and_accept_scales():
    case = make_case([30, 5], [4, 2], 2, seed=10, dtype=torch.float64)
    o, lse = verify_attention_reference(*case.args())
    o1, lse1 = verify_attention_reference(*case.args(), k_scale=1.0, v_scale=1.0)
    assert torch.equal(o, o1) and torch.equal(lse, lse1)
    # a bf16 pool with scales (SGLang stores k / k_scale there too): same as a prescaled pool
    args = list(case.args())
    args[1] = case.kv_cache * 0.5
    o2, lse2 = verify_attention_reference(*args)
    o3, lse3 = verify_attention_reference(*case.args(), k_scale=0.5, v_scale=0.5)
    assert torch.equal(o2, o3) and torch.equal(lse2, lse3)


@pytest.mark.parametrize("missing", ["k_scale", "v_scale"])
def test_fp8_without_a_scale_names_it(missing):
    case = make_case([8], [2], 1, seed=11, kv_dtype="fp8_e4m3")
    kw = case.kwargs()
    del kw[missing]
    with pytest.raises(VerifyInputError, match=rf"^{missing}: required with an fp8 kv_cache \(float8_e4m3fn\)"):
        verify_attention_reference(*case.args(), **kw)


@pytest.mark.parametrize("bad", [0.0, -0.5, float("nan"), float("inf"), True])
@pytest.mark.parametrize("name", ["k_scale", "v_scale"])
def test_bad_scales_name_the_argument_and_value(name, bad):
    case = make_case([8], [2], 1, seed=12, kv_dtype="fp8_e4m3")
    kw = case.kwargs() | {name: bad}
    with pytest.raises(VerifyInputError, match=rf"^{name}: .*{bad!r}"):
        verify_attention_reference(*case.args(), **kw)


def test_other_fp8_formats_are_refused():
    case = make_case([8], [2], 1, seed=13, kv_dtype="fp8_e4m3")
    args = list(case.args())
    args[1] = case.kv_cache.float().to(torch.float8_e5m2)
    with pytest.raises(VerifyInputError, match=r"^kv_cache: dtype float8_e5m2 not supported \(expected one of .*float8_e4m3fn\)"):
        verify_attention_reference(*args, **case.kwargs())
