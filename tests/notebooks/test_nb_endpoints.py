"""notebooks.endpoints: each A/B arm is labelled from what the endpoint itself serves."""
from __future__ import annotations

import pytest
from fake_endpoint import FakeEndpoint, contract_metrics

from notebooks import endpoints
from rollout.client import EndpointError

SGLANG_INFO = {"version": "0.5.23", "attention_backend": "triton", "model_path": "kimi-k2"}


def test_live_endpoint_arm_comes_from_the_plugin_metrics():
    with FakeEndpoint(SGLANG_INFO, contract_metrics("flash")) as ep:
        e = endpoints.identify(ep.url, "candidate")
    assert e["emulated"] is False and e["emulated_why"] == []
    assert (e["arm"], e["arm_confirmed"]) == ("flash", True)
    assert "/metrics" in e["arm_source"] and "8 rank(s)" in e["metrics"]


def test_live_endpoint_without_metrics_is_unknown_not_assumed():
    with FakeEndpoint(SGLANG_INFO, None) as ep:
        e = endpoints.identify(ep.url, "control")
    assert (e["arm"], e["arm_confirmed"], e["emulated"]) == ("unknown", False, False)
    assert "HTTP 404" in e["arm_source"]


def test_metrics_without_the_contract_leave_a_live_arm_unknown():
    """A server_info claim is only trusted from an endpoint that says it is an emulator."""
    info = {**SGLANG_INFO, "emulated_arm": "flash", "MLA_VERIFY_BACKEND": "flash"}
    plain = "# TYPE sglang:num_running_reqs gauge\nsglang:num_running_reqs 0\n"
    with FakeEndpoint(info, plain) as ep:
        e = endpoints.identify(ep.url, "candidate")
    assert e["emulated"] is False and e["arm"] == "unknown"


@pytest.mark.parametrize("marker", ["header", "server_info", "metrics"])
def test_each_emulator_marker_makes_the_endpoint_emulated(marker):
    info = {**SGLANG_INFO, "emulated_arm": "triton"}
    metrics = "mla_verify_emulator{arm=\"triton\"} 1\n" if marker == "metrics" else ""
    if marker == "server_info":
        info["emulator"] = True
    with FakeEndpoint(info, metrics, emulator_header=marker == "header") as ep:
        e = endpoints.identify(ep.url, "control")
    assert e["emulated"] is True and len(e["emulated_why"]) == 1
    assert (e["arm"], e["arm_confirmed"]) == ("triton", True)
    assert "emulator's own /server_info" in e["arm_source"]


def test_contract_metrics_beat_an_emulator_claim():
    info = {**SGLANG_INFO, "emulator": True, "emulated_arm": "flash"}
    with FakeEndpoint(info, contract_metrics("triton")) as ep:
        e = endpoints.identify(ep.url, "candidate")
    assert e["arm"] == "triton" and "/metrics" in e["arm_source"]


def _ends(cand_url, ctrl_url, cand_arm="flash", ctrl_arm="triton"):
    mk = lambda url, role, arm: {"url": url, "role": role, "arm": arm, "arm_confirmed":
                                 arm in ("flash", "triton"), "arm_source": "test", "metrics": "x"}
    return mk(cand_url, "candidate", cand_arm), mk(ctrl_url, "control", ctrl_arm)


@pytest.mark.parametrize("a,b", [("http://127.0.0.1:30000", "http://localhost:30000"),
                                 ("http://127.0.0.1", "http://127.0.0.1:80/"),
                                 ("http://[::1]:8000", "http://localhost:8000")])
def test_one_endpoint_for_both_arms_is_refused(a, b):
    with pytest.raises(EndpointError, match="are the same endpoint"):
        endpoints.check_pair(*_ends(a, b))


def test_an_arm_reporting_the_other_backend_or_mixed_ranks_is_refused():
    with pytest.raises(EndpointError, match="candidate http://h1:1: reports backend 'triton'.*"
                                            "must run 'flash'"):
        endpoints.check_pair(*_ends("http://h1:1", "http://h2:1", cand_arm="triton"))
    with pytest.raises(EndpointError, match="control http://h2:1: its ranks report different"):
        endpoints.check_pair(*_ends("http://h1:1", "http://h2:1", ctrl_arm="mixed"))
    endpoints.check_pair(*_ends("http://h1:1", "http://h2:1", cand_arm="unknown"))  # allowed


def test_server_info_must_answer():
    with FakeEndpoint(SGLANG_INFO, None) as ep:
        ep.server_info = ["not", "a", "dict"]
        with pytest.raises(EndpointError, match="not SGLang's server_info"):
            endpoints.identify(ep.url, "candidate")
