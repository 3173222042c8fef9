"""The numerics gate for servers that cannot return logprobs (mode "tokens", issue 24): DDTree's
worker raises on return_logprob, so the gate compares greedy tokens, position by position at the
candidate's context, and never asks for logprobs. Its threshold's separation is measured here on
the emulator (rollout/numerics_tokens.py quotes these numbers); DDTree-shaped emulators (D = 33,
no logprobs) answer return_logprob with HTTP 400, so a gate that asked would fail these tests."""
import pytest

from rollout.client import EndpointError
from rollout.emulator import start_emulator
from rollout.numerics import compare

TS = 0.01
LONG = 3000
DDTREE = ["--speculative-algorithm", "DDTREE", "--draft-tokens", "33"]


def pair(data_dir, fault=None, fault_arm="flash"):
    extra = DDTREE + (["--fault", fault, "--fault-arm", fault_arm] if fault else [])
    return (start_emulator("flash", data_dir=data_dir, time_scale=TS, extra_args=extra),
            start_emulator("triton", data_dir=data_dir, time_scale=TS, extra_args=extra))


@pytest.mark.parametrize("seed", [0, 1])
def test_threshold_separates_agreeing_arms_from_a_corrupt_verify_path(data_dir, seed):
    good_c, good_k = pair(data_dir)
    with good_c, good_k:
        good = compare(good_c.url, good_k.url, mode="tokens", prompts=8, long_context_tokens=LONG, seed=seed)
    bad_c, bad_k = pair(data_dir, "corrupt_verify")
    with bad_c, bad_k:
        bad = compare(bad_c.url, bad_k.url, mode="tokens", prompts=8, long_context_tokens=LONG, seed=seed)
    assert good["mode"] == "tokens" and good["settings"]["mode"] == "tokens"
    assert good["verdict"] == "pass" and good["token_agreement"] == 1.0 and good["gated"]["positions"] == 9 * 15
    assert good["exact_prompts"] == 9 and good["control_requests"] == 18   # no continuation needed
    assert good["mean_abs_logprob_diff"] is None and "no logprobs asked" in good["gated_quantity"]
    # measured: 0.733-0.756 overall at seeds 0-3 (a quarter of the argmaxes flipped), every
    # position still compared (the control continues from the candidate's context)
    assert bad["verdict"] == "fail" and 0.70 < bad["token_agreement"] < 0.80
    assert bad["gated"]["positions"] == 9 * 15 and bad["first_token_agreement"] == 1.0
    assert bad["contexts"]["long"]["gated"]["top1_agreement"] < 0.9
    assert bad["control_requests"] > good["control_requests"] and "prefill tokens agree" in bad["reason"]


def test_the_logprob_mode_is_refused_by_a_server_without_logprobs(data_dir):
    c, k = pair(data_dir)
    with c, k, pytest.raises(EndpointError, match="HTTP 400.*does not return logprobs"):
        compare(c.url, k.url, mode="logprobs", prompts=1)


def test_a_corrupt_prefill_is_not_blamed_on_the_kernel(data_dir):
    c, k = pair(data_dir, "corrupt_prefill")
    with c, k:
        r = compare(c.url, k.url, mode="tokens", prompts=4, long_context_tokens=0)
    assert r["verdict"] == "inconclusive" and not r["passed"] and r["first_token_agreement"] < 0.95
    assert "not the kernel under test" in r["reason"]


def test_recorded_reference_for_the_last_group(data_dir):
    c, k = pair(data_dir)
    with c, k:
        live = compare(c.url, k.url, mode="tokens", prompts=2, long_context_tokens=LONG)
        again = compare(c.url, None, mode="tokens", prompts=2, long_context_tokens=LONG,
                        recorded_control=live["control_outputs"])
    assert again["verdict"] == "pass" and again["control_source"] == "recorded"
    assert again["gated"]["positions"] == live["gated"]["positions"]
    with pytest.raises(ValueError, match="recorded by mode 'logprobs'"):
        compare(c.url, None, mode="tokens", recorded_control=[{"continuation": [1], "ref_lp": [0.0]}])
    with pytest.raises(ValueError, match="mode: 'text' is not one of logprobs, tokens"):
        compare(c.url, k.url, mode="text")
