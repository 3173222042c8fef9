"""The EXTEND validation stage's logic (kernel/bench/extend_validate.py) on the CPU, with the
float64 oracle standing in for the kernel: a correct kernel passes every check, and a kernel
that leaves rows unwritten, errs only on rows the float64 sample skips, drops v_scale or
mishandles the spelled-out mask fails; the case list covers issue 26's shapes."""
import pytest
import torch

from kernel.bench import extend_validate as ev
from kernel.reference import verify_attention_reference

SPEC = dict(name="tiny", S=[30, 0, 7], T=[9, 5, 1], H=2)


def oracle_kernel(break_with=None):
    """verify_attention's signature; the oracle's result in bf16, optionally broken."""
    def kernel(q, kv_cache, kv_indptr, kv_indices, k_extend, custom_mask, mask_indptr, qo_indptr, sm_scale, *,
               k_scale=None, v_scale=None, out=None, lse_out=None, max_draft_len=None, tier=None):
        scales = {} if k_scale is None else dict(k_scale=k_scale, v_scale=v_scale)
        if break_with == "v_scale" and scales:
            scales["v_scale"] = k_scale
        o, lse = verify_attention_reference(q, kv_cache, kv_indptr, kv_indices, k_extend, custom_mask, mask_indptr,
                                            qo_indptr, sm_scale, **scales)
        n = q.shape[0] - (1 if break_with == "unwritten" else 0)
        out[:n], lse_out[:n] = o[:n].to(out.dtype), lse[:n].float()
        if break_with == "mask" and custom_mask is not None:
            out[0, 0, 0] *= 1.5                            # the masked path differs in one value
        if break_with == "unsampled_row":
            out[4] += 1.0                                  # token 4 of request 0: not among its samples
    return kernel


@pytest.fixture(autouse=True)
def on_cpu(monkeypatch):
    monkeypatch.setattr(ev, "DEVICE", "cpu")
    monkeypatch.setattr(ev, "SAMPLED", 4)
    # request 0 (9 x 2 rows over 39 keys) is sampled; the others fit the oracle
    monkeypatch.setattr(ev, "ORACLE_BYTES", 9 * 2 * 39 * 8 - 1)
    monkeypatch.setattr(ev, "sample_tokens", lambda T, n, seed: [0, 1, T - 1] if T > n else list(range(T)))


@pytest.mark.parametrize("kv_dtype", ev.KV_DTYPES)
def test_a_correct_kernel_passes_at_every_tier(monkeypatch, kv_dtype):
    monkeypatch.setattr(ev, "verify_attention", oracle_kernel())
    row = ev.check(dict(SPEC, v_factor=0.5), kv_dtype, 1, 1e-2, None)
    assert row["pass"], row
    assert row["requests_sampled"] == 1 and row["requests_oracle"] == 2
    assert row["checked_rows_float64"] == (3 + 5 + 1) * 2
    assert len(row["tiers"]) == len(ev.FP8_TIERS if kv_dtype == ev.FP8_KV else ev.TIERS)
    assert row["fp32_ref_rel_err"] < ev.FP32_REF_TOL
    if kv_dtype == ev.FP8_KV:
        assert row["v_scale"] == pytest.approx(row["k_scale"] * 0.5)


@pytest.mark.parametrize("broken, kv_dtype", [("unwritten", "auto"), ("unsampled_row", "auto"),
                                              ("v_scale", ev.FP8_KV)])
def test_a_broken_kernel_fails(monkeypatch, broken, kv_dtype):
    monkeypatch.setattr(ev, "verify_attention", oracle_kernel(broken))
    row = ev.check(dict(SPEC, v_factor=0.5), kv_dtype, 1, 1e-2, None)
    assert not row["pass"]
    d = row["tiers"][0]
    if broken == "unwritten":
        assert d["unwritten"] > 0
    if broken == "unsampled_row":    # only the all-rows reference sees it
        assert d["rel_err"] < 1e-2 < d["rel_err_all"]


def test_mask_identity_needs_equal_outputs(monkeypatch):
    spec = dict(name="m", S=[12, 0], T=[6, 3], H=2)
    monkeypatch.setattr(ev, "verify_attention", oracle_kernel())
    assert ev.check_mask_identity(spec, "auto", 3)["pass"]
    monkeypatch.setattr(ev, "verify_attention", oracle_kernel("mask"))
    assert not ev.check_mask_identity(spec, "auto", 3)["pass"]


def test_spelled_out_mask_is_the_oracles_causal_chain():
    case = ev.build(dict(name="m", S=[12, 0], T=[6, 3], H=2), "auto", 3)
    mask, mask_indptr = ev.spelled_out_mask(case)
    args = list(case.args())
    a = verify_attention_reference(*args)
    args[5], args[6] = mask, mask_indptr
    b = verify_attention_reference(*args)
    assert torch.equal(a[0], b[0]) and mask_indptr.tolist() == [0, 6 * 18, 6 * 18 + 9]


def test_cases_cover_issue_26s_shapes():
    new = {t for c in ev.CASES for t in c["T"]}
    assert {1, 2, 16, 256, 2048, 8192, 16384} <= new
    assert max(s for c in ev.CASES for s in c["S"]) == 180000
    big = [c for c in ev.CASES if 8192 in c["T"]]
    assert {c["S"][0] for c in big} >= {0, 16384, 180000}
    assert any(0 in c["S"] and len(c["S"]) > 1 and len(set(c["T"])) > 1 for c in ev.CASES)   # ragged, empty prefixes
    assert ev.KV_DTYPES == ("auto", ev.FP8_KV)


def test_registered_as_a_gpu_run_stage():
    from kernel import gpu_run
    assert {"extend", "extend-bench", "sglang-extend"} <= set(gpu_run.STAGES)


def test_the_stage_body_and_its_summary(monkeypatch):
    monkeypatch.setattr(ev, "verify_attention", oracle_kernel())
    monkeypatch.setattr(ev, "CASES", (SPEC, dict(name="one", S=[3], T=[2], H=1)))
    monkeypatch.setattr(ev, "MASK_CASES", (dict(name="m", S=[5], T=[4], H=1),))
    v = ev.validate_extend(1e-2, None)
    assert v["kind"] == "extend-validation" and v["all_pass"] and v["n_cases"] == 4
    assert v["n_failing_checks"] == 0 and len(v["mask_identity"]) == 2
    lines = ev.summary_lines(v)
    assert len(lines) == 5 and lines[-1].startswith("extend validation: 4 cases") and "all_pass=True" in lines[-1]


def test_sglangs_kernel_failing_is_recorded_not_fatal(monkeypatch):
    from kernel.bench import validate

    def broken(sgl, case, o):
        raise RuntimeError("out of shared memory")
    monkeypatch.setattr(validate, "sglang_extend", broken)
    monkeypatch.setattr(ev, "verify_attention", oracle_kernel())
    row = ev.check(SPEC, "auto", 1, 1e-2, object())
    assert row["pass"] and row["sglang"] == {"error": "RuntimeError: out of shared memory"}
    assert "SGLang nan" in ev.summary_lines(dict(cases=[row], n_cases=1, n_checks=1, all_pass=True, seconds=1,
                                                 worst=dict(rel_err_all=0.0, kv_dtype="auto", name="tiny"),
                                                 mask_identity=[]))[0]
