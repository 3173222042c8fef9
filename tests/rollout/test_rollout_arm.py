"""rollout.arm: the metrics contract between the plugin and the rollout tool / phase 3."""
import pytest

from rollout.arm import MetricsFormatError, arm_from_metrics, parse_prometheus

FLASH_2_RANKS = """\
# HELP mla_verify_backend_info Verify attention installed by the mla-verify plugin
# TYPE mla_verify_backend_info gauge
mla_verify_backend_info{backend="flash",device="cuda:0",kernel_hash="ab12",sglang_version="0.5.23"} 1.0
mla_verify_backend_info{backend="flash",device="cuda:1",kernel_hash="ab12",sglang_version="0.5.23"} 1.0
# TYPE mla_verify_graph_captures_total counter
mla_verify_graph_captures_total{backend="flash"} 122.0
mla_verify_kernel_calls_total 3.0
mla_verify_fallbacks_total{reason="fp8 kv cache"} 2.0
sglang:num_running_reqs{model_name="k2"} 0.0
"""


def test_flash_on_every_rank():
    r = arm_from_metrics(FLASH_2_RANKS)
    assert (r.arm, r.ranks, r.kernel_hashes, r.sglang_versions) == ("flash", 2, ["ab12"], ["0.5.23"])
    assert (r.graph_captures, r.kernel_calls, r.fallbacks) == (122.0, 3.0, {"fp8 kv cache": 2.0})
    assert r.confirmed and "2 fallbacks" in r.summary()


def test_mixed_ranks_and_unknown():
    mixed = FLASH_2_RANKS.replace('backend="flash",device="cuda:1"', 'backend="triton",device="cuda:1"')
    assert arm_from_metrics(mixed).arm == "mixed"
    assert not arm_from_metrics(mixed).confirmed
    unknown = arm_from_metrics("sglang:num_running_reqs 0\n")
    assert unknown.arm == "unknown" and "--enable-metrics" in unknown.summary()
    # a rank that reports 0 (a dead process's leftover gauge) does not count
    assert arm_from_metrics(FLASH_2_RANKS.replace("} 1.0", "} 0.0")).arm == "unknown"


def test_bad_line_names_its_number():
    with pytest.raises(MetricsFormatError, match="line 2"):
        parse_prometheus("a 1\nthis is not prometheus\n")
    assert parse_prometheus('x{a="q\\"uote"} 2 1700000000') == [("x", {"a": 'q"uote'}, 2.0)]
