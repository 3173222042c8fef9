"""Issue 26's measurements in the real-server job (kernel/sglang/real_server/extend_over_prefix.py):
the flash prefill timed from the rollout CLI's progress lines, fresh follow-up suffixes that hit
the cached prompt and never each other, the greedy comparison and the plugin's counters, against
two emulators; the records and the table lines the job prints."""
from __future__ import annotations

from pathlib import Path

import pytest

from kernel.sglang.real_server import estimates
from kernel.sglang.real_server import extend_over_prefix as eop
from rollout.ab import TOKEN_HI, TOKEN_LO, make_input_ids
from rollout.client import post_json
from rollout.emulator import start_emulator

ROOT = Path(__file__).resolve().parents[2]
CAND, CTRL = "http://127.0.0.1:30000", "http://127.0.0.1:30001"


def lines(*pairs):
    return [(t, f"{text}\n") for t, text in pairs]


def test_flash_prefill_is_the_time_between_the_warm_up_line_and_the_next():
    out = lines((10.0, "[h200-a] gate health_generate: pass -- ok"),
                (10.5, f"[h200-a]   warming the prefix cache of {CAND} with the 185000-token prompt"),
                (18.75, f"[h200-a]   warming the prefix cache of {CTRL} with the 185000-token prompt"),
                (18.8, "[h200-a]   numerics short prompt 1/9 (64 tokens)"))
    w = eop.warm_from_progress(out, CAND)
    assert w["prefill_s"] == pytest.approx(8.25) and w["prompt_tokens"] == 185000
    assert CTRL in w["to_line"]
    # the control's warm-up (a cache hit) is not the candidate's
    assert eop.warm_from_progress(out, CTRL)["prefill_s"] == pytest.approx(0.05)


def test_without_a_long_numerics_prompt_the_speed_gates_warm_up_is_timed():
    out = lines((1.0, "[h200-a]   numerics short prompt 1/8 (64 tokens)"),
                (2.0, "[h200-a]   warming the prefix cache on candidate (185000 tokens)"),
                (9.0, "[h200-a]   warming the prefix cache on control (185000 tokens)"))
    assert eop.warm_from_progress(out, CAND)["prefill_s"] == pytest.approx(7.0)


@pytest.mark.parametrize("after, why", [
    ("[h200-a] gate numerics: transient error, attempt 1/3: connection reset", "did not answer cleanly"),
    ("[h200-a] gate numerics: INCONCLUSIVE -- HTTP 400", "did not answer cleanly"),
    (None, "ended inside the warm-up"),
])
def test_a_warm_up_that_did_not_answer_is_no_prefill_time(after, why):
    out = [(1.0, f"[h200-a]   warming the prefix cache of {CAND} with the 185000-token prompt\n")]
    if after:
        out.append((5.0, after + "\n"))
    w = eop.warm_from_progress(out, CAND)
    assert "prefill_s" not in w and why in w["error"]
    e = eop.prefill_entry("h200-a", w, 4, "canary")
    assert e["measured"] is False and e["prefill_s"] is None and why in e["why"]
    assert "no warm-up of" in eop.warm_from_progress(out, "http://127.0.0.1:39999")["error"]


def test_prefill_entry_per_layer_and_a_cached_prompt_is_no_prefill():
    e = eop.prefill_entry("h200-b", {"seconds": 25.4, "prompt_tokens": 185000, "cached_tokens": 0}, 4, "up")
    assert e["measured"] and e["prefill_ms_per_layer"] == pytest.approx(6350.0)
    hit = eop.prefill_entry("h200-b", {"seconds": 0.2, "prompt_tokens": 185000, "cached_tokens": 184999}, 4, "up")
    assert hit["measured"] is False and "cached already (184999 tokens)" in hit["why"]
    assert eop.prefill_entry("h200-b", None, 4, "up")["measured"] is False


def test_suffixes_are_fresh_reproducible_and_of_the_asked_sizes():
    plan = [n for n in eop.FOLLOWUP_TOKENS for _ in range(eop.REPEATS)] + [eop.GREEDY_SUFFIX]
    s = eop.suffixes(len(plan), plan, seed=0)
    assert [len(x) for x in s] == plan
    assert len({x[0] for x in s}) == len(s)          # no two share a radix branch after the prompt
    assert all(TOKEN_LO <= t < TOKEN_HI for x in s for t in x)
    assert s == eop.suffixes(len(plan), plan, seed=0) and s != eop.suffixes(len(plan), plan, seed=1)


@pytest.fixture(scope="module")
def arms():
    hs = {arm: start_emulator(arm, data_dir=ROOT / "reports" / "data", time_scale=0.02) for arm in ("flash", "triton")}
    yield {arm: h.url for arm, h in hs.items()}
    for h in hs.values():
        h.stop()


def test_followups_hit_the_cached_prompt_and_not_each_other(arms):
    prompt = make_input_ids(2048, seed=3)
    for url in arms.values():
        post_json(url, "/generate", {"input_ids": prompt, "sampling_params": {"max_new_tokens": 1}})
    said = []
    r = eop.measure_followups(arms, prompt, seed=3, timeout=60, sizes=(1, 16), repeats=3, say=said.append)
    assert set(r["followup"]) == {"flash", "triton"} and r["all_prefix_hit"]
    for arm, by_n in r["followup"].items():
        for n, row in by_n.items():
            assert row["cached_tokens"] == [len(prompt)] * 3, (arm, n, row)   # the prompt, and nothing of a suffix
            assert row["prompt_tokens"] == [len(prompt) + int(n)] * 3
            assert row["median_ttft_ms"] == sorted(row["ttft_ms"])[1] > 0
    assert set(r["ratio_triton_over_flash"]) == {"1", "16"} and len(said) == 6
    g = r["greedy"]
    assert g["equal"] and g["first_divergence"] is None and len(g["tokens"]["flash"]) == eop.GREEDY_TOKENS
    assert g["cached_tokens"] == {"flash": len(prompt), "triton": len(prompt)}
    # the greedy decode ran verify steps on the flash arm: its counter moved, the control's did not
    assert r["counters"]["flash"]["delta"].get("mla_verify_kernel_calls_total", 0) > 0
    assert "mla_verify_kernel_calls_total" not in r["counters"]["triton"]["delta"]


def test_a_failing_arm_is_recorded_and_the_other_still_measured(arms):
    prompt = make_input_ids(512, seed=5)
    post_json(arms["flash"], "/generate", {"input_ids": prompt, "sampling_params": {"max_new_tokens": 1}})
    r = eop.measure_followups({"flash": arms["flash"], "triton": "http://127.0.0.1:1"}, prompt, seed=5, timeout=5,
                              sizes=(1,), repeats=2)
    assert r["followup"]["flash"]["1"]["median_ttft_ms"] > 0 and r["followup"]["flash"]["1"]["prefix_hit"]
    t = r["followup"]["triton"]["1"]
    assert t["median_ttft_ms"] is None and len(t["errors"]) == 2 and not r["all_prefix_hit"]
    assert r["ratio_triton_over_flash"] == {"1": None} and "triton" in r["greedy"]["errors"]
    text = "\n".join(eop.table_lines({"layers": 4, **r}))
    assert "triton FAILED, flash" in text and "greedy 16 tokens after a 16-token follow-up: FAILED" in text


def test_a_reused_suffix_would_show_as_a_cache_hit(arms):
    """What prefix_hit guards against: the same suffix twice is partly cached the second time."""
    prompt = make_input_ids(1024, seed=4)
    url = arms["triton"]
    post_json(url, "/generate", {"input_ids": prompt, "sampling_params": {"max_new_tokens": 1}})
    (s,) = eop.suffixes(1, [16], seed=4)
    first, again = eop.followup(url, prompt + s, 60), eop.followup(url, prompt + s, 60)
    assert first["cached_tokens"] == len(prompt) and again["cached_tokens"] > len(prompt)


def test_prefix_hit_takes_the_prompt_less_its_uncached_tail_and_nothing_of_a_suffix():
    """SGLang 0.5.23 with EAGLE on the H200 reported 184,999 cached of a 185,000-token prompt
    (reports/data/real-server-h200-20261202T054726Z.json): a hit, not the miss an exact test said."""
    assert eop.prefix_hit(184999, 185000) and eop.prefix_hit(185000, 185000)
    assert not eop.prefix_hit(185001, 185000)      # part of a suffix came from the cache
    assert not eop.prefix_hit(180000, 185000) and not eop.prefix_hit(None, 185000)


def test_counters_read_only_the_plugins_totals(arms):
    c = eop.plugin_counters(arms["flash"])
    assert c and all(k.startswith("mla_verify_") and "_total" in k for k in c)
    assert "error" in eop.plugin_counters("http://127.0.0.1:1", timeout=1)
    assert eop.counter_delta({"a": 1.0}, {"a": 3.0, "b": 0.0}) == {"a": 2.0}


def test_record_falls_back_to_the_up_steps_triton_prefill_and_the_table_says_so():
    up = {"layers": 4, "groups": {"h200-a": {"warm": {"seconds": 30.0, "prompt_tokens": 185000, "cached_tokens": 0}},
                                  "h200-b": {"warm": {"seconds": 25.0, "prompt_tokens": 185000, "cached_tokens": 0}}}}
    rec = eop.record({"up": up})
    assert [e["group"] for e in rec["prefill"]["triton"]] == ["h200-a", "h200-b"]
    text = "\n".join(eop.table_lines(rec))
    assert "triton 25.00 s = 6.250 s/layer (h200-b)" in text and "follow-up" not in text
    canary = {"extend_over_prefix": {"layers": 4, "x": 1}}
    assert eop.record({"up": up, "canary": canary}) == canary["extend_over_prefix"]
    assert eop.record({}) is None and eop.table_lines(None) == []


def test_table_lines_show_each_size_per_arm_with_the_ratio():
    fu = {arm: {str(n): {"median_ttft_ms": ms * n, "ttft_ms": [ms * n] * 3} for n in (1, 16, 256)}
          for arm, ms in (("triton", 200.0), ("flash", 2.0))}
    rec = {"layers": 4, "context_tokens": 185000, "followup": fu, "all_prefix_hit": False,
           "ratio_triton_over_flash": {"1": 100.0, "16": 100.0, "256": 100.0},
           "greedy": {"max_new_tokens": 16, "suffix_tokens": 16, "equal": False, "first_divergence": 5},
           "wall_s": 6.5}
    text = eop.table_lines(rec)
    assert text[0] == "EXTEND over the cached prompt (issue 26), L=4, 185,000 tokens:"
    assert any("follow-up of  16 token(s), TTFT median of 3 (ms): triton 3200.0, flash 32.0  triton/flash x100.0" in t
               for t in text)
    assert any("NOT every follow-up hit the cached prompt" in t for t in text)
    assert any("DIFFER from token 5" in t for t in text) and text[-1] == "  (follow-ups and greedy took 6.5 s)"


def test_the_canary_estimate_holds_the_followups_and_they_stay_small():
    base, how = estimates.step_estimate("canary", layers=4)
    assert "issue-26 follow-ups and greedy" in how
    assert 0 < estimates.followups_s(4) < 0.05 * base
    assert estimates.followups_s(16) > estimates.followups_s(4)
