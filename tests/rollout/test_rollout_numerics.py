"""The numerics gate tests the verify path (our kernel), at a short and a long context: a
corrupt verify path fails it, a corrupt prefill path is reported as what it is."""
import pytest

from rollout.emulator import start_emulator
from rollout.numerics import compare

TS = 0.02
LONG = 3000


def pair(data_dir, fault=None, fault_arm=None):
    extra = ["--fault", fault, "--fault-arm", fault_arm] if fault else []
    return (start_emulator("flash", data_dir=data_dir, time_scale=TS, extra_args=extra),
            start_emulator("triton", data_dir=data_dir, time_scale=TS, extra_args=extra))


def run(data_dir, fault=None, fault_arm=None, **kw):
    c, k = pair(data_dir, fault, fault_arm)
    with c, k:
        return compare(c.url, k.url, prompts=3, long_context_tokens=LONG, **kw)


def test_agreeing_arms_pass_at_short_and_long_context(data_dir):
    r = run(data_dir)
    assert r["verdict"] == "pass" and r["passed"] and r["top1_agreement"] == 1.0
    assert 0 < r["mean_abs_logprob_diff"] < 0.005  # the two verify kernels' rounding, nothing more
    assert r["contexts"]["long"]["gated"]["positions"] == 15 and r["contexts"]["short"]["gated"]["positions"] == 45
    assert [p["prompt_tokens"] for p in r["prompts"]] == [64, 64, 64, LONG]
    assert r["control_self"]["mean_abs_logprob_diff"] < 0.005  # the control's own verify vs its own prefill
    assert "TARGET_VERIFY" in r["gated_quantity"]


def test_corrupt_verify_path_fails(data_dir):
    # Prefill is right on both arms, so scoring the control's tokens by teacher forcing on the
    # candidate (a prefill, SGLang's kernel) would see nothing; the candidate's own decode does.
    r = run(data_dir, "corrupt_verify", "flash")
    assert r["verdict"] == "fail" and not r["passed"]
    assert r["top1_agreement"] < 0.9 and r["mean_abs_logprob_diff"] > 0.1
    assert r["candidate_prefill"]["mean_abs_logprob_diff"] < 0.005  # its prefill path is fine
    assert r["contexts"]["long"]["gated"]["mean_abs_logprob_diff"] > 0.1  # caught at long context too
    assert "verify path disagrees" in r["reason"] and "control's own verify path agrees" in r["reason"]


def test_corrupt_prefill_on_the_candidate_is_reported_not_blamed_on_the_kernel(data_dir):
    r = run(data_dir, "corrupt_prefill", "flash")
    assert r["verdict"] == "inconclusive" and not r["passed"]
    assert r["gated"]["mean_abs_logprob_diff"] < 0.005  # the verify path under test agrees
    assert r["candidate_prefill"]["mean_abs_logprob_diff"] > 0.1
    assert "candidate's prefill scoring disagrees" in r["reason"] and "not the kernel under test" in r["reason"]


def test_corrupt_prefill_on_the_control_is_a_suspect_reference(data_dir):
    r = run(data_dir, "corrupt_prefill", "triton")
    assert r["verdict"] == "inconclusive"
    assert r["control_self"]["mean_abs_logprob_diff"] > 0.1
    assert "control's prefill path is suspect" in r["reason"]


def test_recorded_reference_for_the_last_group(data_dir):
    c, k = pair(data_dir)
    with c, k:
        live = compare(c.url, k.url, prompts=2, long_context_tokens=LONG)
        again = compare(c.url, None, prompts=2, long_context_tokens=LONG, recorded_control=live["control_outputs"])
    assert again["verdict"] == "pass" and again["control_source"] == "recorded"
    assert again["gated"]["positions"] == live["gated"]["positions"]
    with start_emulator("flash", data_dir=data_dir, time_scale=TS, extra_args=["--fault", "corrupt_verify"]) as bad:
        r = compare(bad.url, None, prompts=2, long_context_tokens=LONG, recorded_control=live["control_outputs"])
    # a continuation that leaves the recorded one early cannot be judged against it
    assert r["verdict"] in ("fail", "inconclusive") and not r["passed"]


def test_bad_arguments_are_named(data_dir):
    with pytest.raises(ValueError, match="recorded_control"):
        compare("http://127.0.0.1:1", None)
    with pytest.raises(ValueError, match="long_context_tokens"):
        compare("http://127.0.0.1:1", "http://127.0.0.1:2", long_context_tokens=1)


def test_measured_bf16_spread_is_read_from_the_validation_json():
    from rollout.kernel_spread import bf16_spread
    s = bf16_spread()
    assert s is not None and s["file"].startswith("validation-")
    assert s["kernel_vs_oracle"]["cases"] > 100 and s["kernel_vs_oracle"]["max"] < 0.01
    assert s["max_prefix_tokens"] >= 185000


def test_bf16_spread_reads_a_compressed_validation_file_by_its_date(tmp_path):
    """Superseded validation files are kept gzip-compressed; the newest by recorded date wins,
    compressed or not, and an unreadable file is passed over."""
    import gzip
    import json

    from rollout.kernel_spread import bf16_spread
    case = {"rel_err": 1e-3, "prefix_lens": [4096]}
    old = {"kind": "validation", "date": "2026-12-01T00:00:00", "gpu": "old", "cases": [case]}
    new = {"kind": "validation", "date": "2026-12-04T00:00:00", "gpu": "new", "cases": [case, case]}
    (tmp_path / "validation-h200-a.json").write_text(json.dumps(old))
    (tmp_path / "validation-h200-b.json.gz").write_bytes(gzip.compress(json.dumps(new).encode()))
    (tmp_path / "validation-h200-c.json.gz").write_bytes(b"not gzip")
    s = bf16_spread(tmp_path)
    assert (s["file"], s["gpu"], s["kernel_vs_oracle"]["cases"]) == ("validation-h200-b.json.gz", "new", 2)
