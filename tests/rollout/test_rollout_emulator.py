"""The emulator speaks SGLang 0.5.23's HTTP API, says it is an emulator, and fails on demand;
run_ab and numerics.compare judge it correctly."""
import ctypes
import os
import signal
import threading
import time

import pytest

from rollout.ab import WARM_DECODE_TOKENS, make_input_ids, measure, run_ab
from rollout.client import EndpointError, get_json, post_json, request, stream_generate
from rollout.emulator import start_emulator
from rollout.numerics import compare
from rollout.speed_model import SpeedModel
from rollout_helpers import wait_for

TS = 0.2


@pytest.fixture
def pair(data_dir):
    with start_emulator("flash", data_dir=data_dir, time_scale=TS) as c, \
            start_emulator("triton", data_dir=data_dir, time_scale=TS) as k:
        yield c, k


def test_endpoints_and_emulator_flag(pair):
    c, _ = pair
    for path in ("/health", "/health_generate", "/server_info", "/model_info", "/metrics", "/flush_cache"):
        status, headers, _ = request(c.url, "GET", path)
        assert status == 200 and "emulator" in headers["x-emulator"], path
    info = get_json(c.url, "/server_info")
    assert info["emulator"] is True and info["emulated_arm"] == "flash" and info["time_scale"] == TS
    assert info["attention_backend"] == "triton" and info["page_size"] == 1
    assert "avg_spec_accept_length" in info["internal_states"][0]
    assert info["speed_model"]["bench_file"].endswith("bench-fixture.json")
    assert get_json(c.url, "/model_info")["is_generation"] is True
    status, headers, _ = request(c.url, "POST", "/generate", {"sampling_params": {}})
    assert status == 400 and "x-emulator" in headers


def test_generate_stream_and_meta_info(pair):
    c, _ = pair
    ids = make_input_ids(500, seed=3)
    body = {"input_ids": ids, "sampling_params": {"max_new_tokens": 12, "ignore_eos": True, "temperature": 0}}
    chunks = [ch for _, ch in stream_generate(c.url, body)]
    final = chunks[-1]["meta_info"]
    assert final["finish_reason"] == {"type": "length", "length": 12}
    assert final["completion_tokens"] == 12 and final["prompt_tokens"] == 500 and final["cached_tokens"] == 0
    assert final["spec_verify_ct"] >= 1 and final["spec_accept_length"] == pytest.approx(12 / final["spec_verify_ct"])
    assert {"id", "e2e_latency", "spec_accept_rate", "weight_version"} <= set(final)
    assert [ch["meta_info"]["completion_tokens"] for ch in chunks][:2] == [1, 3]  # prefill token, then a step
    flat = post_json(c.url, "/generate", body)
    assert flat["output_ids"] == chunks[-1]["output_ids"]  # greedy and deterministic
    assert flat["meta_info"]["cached_tokens"] == 499  # the prefix cache is warm now
    assert post_json(c.url, "/generate", {**body, "sampling_params": {"max_new_tokens": 200}})["meta_info"][
        "finish_reason"]["type"] == "stop"  # without ignore_eos an EOS ends it early
    request(c.url, "POST", "/flush_cache")
    assert post_json(c.url, "/generate", body)["meta_info"]["cached_tokens"] == 0
    comp = post_json(c.url, "/v1/completions", {"prompt": "hello", "max_tokens": 4, "ignore_eos": True})
    assert comp["usage"] == {"prompt_tokens": 5, "completion_tokens": 4, "total_tokens": 9}
    metrics = request(c.url, "GET", "/metrics")[2]
    assert "mla_verify_emulator" in metrics and "sglang:generation_tokens_total" in metrics


def test_flash_decodes_faster_and_ab_passes(pair):
    c, k = pair
    seen = []
    r = run_ab(c.url, k.url, context_tokens=4096, max_new_tokens=24, progress=seen.append)
    assert r["passed"] and r["ratio"] > 1.5 and r["ci"]["low"] > 1.2
    assert len(r["candidate"]["tok_s"]) == 5 and len(r["control"]["tok_s"]) == 5
    assert r["order"][0] == ["candidate", "control"] and r["order"][1] == ["control", "candidate"]
    assert all(x == 4095 for x in r["candidate"]["cached_tokens"])  # measured requests decode, not prefill
    assert r["candidate"]["median_accept_length"] > 2 and r["emulated"] is True
    assert any("round 5/5" in m for m in seen)
    # each arm decoded WARM_DECODE_TOKENS, untimed, after every prefill warm-up and before round 1
    assert all(r["warm"][role]["decoded_tokens"] == WARM_DECODE_TOKENS for role in ("candidate", "control"))
    at = {m.split(" (")[0]: i for i, m in enumerate(seen)}
    assert (at["warming the prefix cache on control"] < at["warming the decode path on candidate"]
            < at["warming the decode path on control"] < next(i for i, m in enumerate(seen) if m.startswith("round 1/5")))
    # the same judge refuses when the roles are swapped
    back = run_ab(k.url, c.url, context_tokens=4096, max_new_tokens=24)
    assert not back["passed"] and back["ratio"] < 0.8 and "FAIL" in back["reason"]


def _modelled_tok_s(data_dir, arm: str, context: int, new_tokens: int, accept: float = 2.5) -> float:
    """The emulator's model: after the prefill token, verify step k ends with 1 + floor(k x accept)
    tokens and lasts step_ms(context so far) x TS; decode tok/s = tokens after the first / that time."""
    speed, out, steps, seconds = SpeedModel(data_dir), 1, 0, 0.0
    while out < new_tokens:
        seconds += speed.step_ms(context + out, arm) * TS / 1000
        steps += 1
        out = min(new_tokens, 1 + int(steps * accept))
    return (new_tokens - 1) / seconds


def test_the_speed_gate_times_emulators_by_their_modelled_clock(pair, data_dir):
    # exactly the model's tok/s, however loaded the machine: no arrival time enters it
    c, k = pair
    r = run_ab(c.url, k.url, context_tokens=2048, max_new_tokens=16)
    assert r["clock"] == "emulated" and r["candidate"]["clock"] == "emulated" and "modelled clock" in r["reason"]
    for role, emu, arm in (("candidate", c, "flash"), ("control", k, "triton")):
        want = _modelled_tok_s(data_dir, arm, 2048, 16)
        assert r[role]["tok_s"] == pytest.approx([want] * 5, rel=1e-9), (role, r[role]["tok_s"], want)
    chunks = [ch["meta_info"] for _, ch in stream_generate(c.url, {"input_ids": [5, 6, 7], "sampling_params": {
        "max_new_tokens": 8, "ignore_eos": True}})]
    clocks = [m["emulated_clock_s"] for m in chunks]
    assert clocks == sorted(clocks) and clocks[0] > 0 and clocks[-1] == chunks[-1]["emulated_clock_s"]


def test_measure_names_a_bad_clock_and_a_stream_without_the_modelled_clock(pair, monkeypatch):
    c, _ = pair
    with pytest.raises(ValueError, match="clock"):
        measure(c.url, [5, 6, 7], 8, timeout=10, clock="sundial")
    assert measure(c.url, [5, 6, 7], 8, timeout=10, clock="wall")["completion_tokens"] == 8
    import rollout.ab as ab

    real = ab.stream_generate
    monkeypatch.setattr(ab, "stream_generate", lambda *a, **kw: (
        (t, {**ch, "meta_info": {k: v for k, v in ch["meta_info"].items() if k != "emulated_clock_s"}})
        for t, ch in real(*a, **kw)))
    with pytest.raises(EndpointError, match="without meta_info.emulated_clock_s"):
        measure(c.url, [5, 6, 7], 8, timeout=10, clock="emulated")


def test_ab_bad_arguments_are_named(pair):
    c, k = pair
    with pytest.raises(ValueError, match="rounds"):
        run_ab(c.url, k.url, rounds=3)
    with pytest.raises(ValueError, match="threshold"):
        run_ab(c.url, k.url, threshold=1.5)
    with pytest.raises(ValueError, match="recorded_control"):
        run_ab(c.url, None)


def test_numerics_pass_between_arms(pair):
    c, k = pair
    r = compare(c.url, k.url, prompts=3)
    assert r["passed"] and r["top1_agreement"] == 1.0 and 0 < r["mean_abs_logprob_diff"] < 0.005
    again = compare(c.url, None, prompts=3, recorded_control=r["control_outputs"])
    assert again["passed"] and again["control_source"] == "recorded"


def test_fault_different_tokens(data_dir):
    with start_emulator("flash", data_dir=data_dir, time_scale=TS, fault="different_tokens") as c, \
            start_emulator("triton", data_dir=data_dir, time_scale=TS) as k:
        r = compare(c.url, k.url, prompts=2)
        assert not r["passed"] and r["top1_agreement"] < 0.2 and r["prompts"][0]["first_divergence"] == 0


def test_fault_slower(data_dir):
    with start_emulator("flash", data_dir=data_dir, time_scale=TS, fault="slower") as c, \
            start_emulator("triton", data_dir=data_dir, time_scale=TS) as k:
        r = run_ab(c.url, k.url, context_tokens=2048, max_new_tokens=16)
        assert not r["passed"] and r["ratio"] < 0.5


def test_fault_die_midstream(data_dir):
    with start_emulator("flash", data_dir=data_dir, time_scale=TS, fault="die_midstream") as c:
        with pytest.raises(EndpointError, match="without \\[DONE\\]|connection"):
            measure(c.url, [5, 6, 7], 16, timeout=10)
        assert c.proc.wait(5) == 3


def test_fault_hang_health_and_fail_start(data_dir):
    with start_emulator("flash", data_dir=data_dir, time_scale=TS, fault="hang_health") as c:
        with pytest.raises(EndpointError, match="timed out|TimeoutError"):
            request(c.url, "GET", "/health", timeout=0.5)
    with pytest.raises(RuntimeError, match="fault fail_start"):
        start_emulator("triton", data_dir=data_dir, fault="fail_start")


def test_sigterm_drains_in_flight_requests(data_dir):
    with start_emulator("triton", data_dir=data_dir, time_scale=1.0) as k:
        box = {}

        def slow():  # ~8 decode steps of ~80 ms at 4096 tokens, real time
            box["r"] = post_json(k.url, "/generate", {"input_ids": list(range(1, 4096)),
                                                      "sampling_params": {"max_new_tokens": 20, "ignore_eos": True}})
        t = threading.Thread(target=slow)
        t.start()
        time.sleep(0.2)
        k.proc.send_signal(signal.SIGTERM)
        time.sleep(0.1)
        assert request(k.url, "GET", "/health", timeout=2)[0] == 503  # draining: out of rotation
        t.join(20)
        assert box["r"]["meta_info"]["completion_tokens"] == 20
        assert k.proc.wait(10) == 0


def _signal_a_server_thread(pid: int, sig: int):
    """Hand sig to one of the emulator's non-main threads (tgkill), as the kernel may do with
    os.kill under load: the case where an untimed wait in the main thread never saw it."""
    libc = ctypes.CDLL(None, use_errno=True)
    tids = sorted(int(t) for t in os.listdir(f"/proc/{pid}/task") if int(t) != pid)
    assert tids, "the emulator runs its HTTP server on a thread of its own"
    assert libc.tgkill(pid, tids[0], sig) == 0, os.strerror(ctypes.get_errno())


def test_sigusr1_a_server_thread_takes_still_acts(data_dir):
    with start_emulator("flash", data_dir=data_dir, time_scale=TS) as e:
        _signal_a_server_thread(e.pid, signal.SIGUSR1)
        body = {"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 2}}
        wait_for(lambda: request(e.url, "POST", "/generate", body)[0] == 500, timeout=5)


def test_sigterm_a_server_thread_takes_still_drains(data_dir):
    with start_emulator("flash", data_dir=data_dir, time_scale=TS) as e:
        _signal_a_server_thread(e.pid, signal.SIGTERM)
        assert e.proc.wait(5) == 0  # drained (nothing in flight) and exited


def test_metrics_speak_sglangs_names_and_the_arm_contract(pair, data_dir):
    """/metrics parses with Prometheus' own parser, carries SGLang's metric names, and the
    plugin's arm series read by rollout.arm; without --enable-metrics there is none (404)."""
    from prometheus_client.parser import text_string_to_metric_families
    from rollout.arm import read_arm
    from rollout.metrics_check import scrape
    c, k = pair
    post_json(c.url, "/generate", {"input_ids": list(range(1, 300)),
                                   "sampling_params": {"max_new_tokens": 12, "ignore_eos": True}})
    request(c.url, "POST", "/generate", {"sampling_params": {}})  # a 400, counted by endpoint and status
    families = {f.name: f for f in text_string_to_metric_families(request(c.url, "GET", "/metrics")[2])}
    for name in ("sglang:num_queue_reqs", "sglang:spec_accept_length", "sglang:http_responses",
                 "sglang:e2e_request_latency_seconds", "sglang:inter_token_latency_seconds",
                 "sglang:time_to_first_token_seconds", "sglang:num_aborted_requests", "mla_verify_backend_info"):
        assert name in families, name
    assert families["sglang:inter_token_latency_seconds"].type == "histogram"
    codes = {s.labels["status_code"] for s in families["sglang:http_responses"].samples if s.labels["endpoint"] == "/generate"}
    assert codes == {"200", "400"}
    assert read_arm(c.url).arm == "flash" and read_arm(k.url).arm == "triton"
    s = scrape(c.url)
    assert s["responses"] == 2 and s["itl_count"] >= 4 and s["accept_length"] > 1
    with start_emulator("flash", data_dir=data_dir, time_scale=TS, metrics=False) as bare:
        assert request(bare.url, "GET", "/metrics")[0] == 404
        assert "without --enable-metrics" in read_arm(bare.url).summary()


def test_the_speed_gate_refuses_arms_on_different_kv_pools(data_dir):
    # a bf16 control beside an fp8_e4m3 candidate: the A/B would time the pools, so it times nothing
    with start_emulator("flash", data_dir=data_dir, time_scale=TS, extra_args=["--kv-cache-dtype", "fp8_e4m3"]) as c, \
            start_emulator("triton", data_dir=data_dir, time_scale=TS) as k:
        seen = []
        with pytest.raises(EndpointError) as e:
            run_ab(c.url, k.url, context_tokens=512, max_new_tokens=8, progress=seen.append)
        assert f"kv_cache_dtype 'fp8_e4m3' (candidate {c.url}) against 'auto' (control {k.url})" in str(e.value)
        assert e.value.transient is False and e.value.url == c.url and seen == []   # nothing warmed or timed
        # the same pool on both arms passes the check
        with start_emulator("triton", data_dir=data_dir, time_scale=TS, extra_args=["--kv-cache-dtype", "fp8_e4m3"]) as k8:
            assert run_ab(c.url, k8.url, context_tokens=512, max_new_tokens=8)["passed"]


def test_config_mismatch_compares_only_what_both_arms_report():
    from rollout.ab import config_mismatch
    arm = lambda role, emulated=False, **info: {"role": role, "url": f"http://{role}:1", "emulated": emulated,   # noqa: E731
                                                "server_info": info}
    assert config_mismatch([arm("candidate", kv_cache_dtype="auto", page_size=1),
                            arm("control", kv_cache_dtype="auto", page_size=1)]) is None
    assert config_mismatch([arm("candidate", kv_cache_dtype="fp8_e4m3"), arm("control")]) is None
    words = config_mismatch([arm("candidate", speculative_num_draft_tokens=16, page_size=1),
                             arm("control", speculative_num_draft_tokens=8, page_size=1)])
    assert words.startswith("the arms serve different configurations: speculative_num_draft_tokens 16 (candidate")
    assert "page_size" not in words
    # the emulator beside a real server (tests/server's rig) is not a configuration to compare
    assert config_mismatch([arm("candidate", emulated=True, speculative_num_draft_tokens=8),
                            arm("control", speculative_num_draft_tokens=2)]) is None
