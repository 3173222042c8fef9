"""Numerics gate: fixed prompts, greedy, candidate vs control on the same input.

Token-exact equality is too strict across kernels (a different reduction order flips
near-tie argmaxes), so the gate is teacher-forced: the candidate scores the control's greedy
continuation (same input_ids, return_logprob, top-1), and we compare its top-1 predictions
and logprobs with the control's at every position. The free-running first divergence is
reported, not gated.
"""
from __future__ import annotations

import random
import statistics

from rollout.client import post_json


def make_prompts(n: int, tokens: int, seed: int) -> list[list[int]]:
    rng = random.Random(f"numerics-{seed}")
    return [[rng.randrange(1000, 31000) for _ in range(tokens)] for _ in range(n)]


def greedy(url: str, ids: list[int], new_tokens: int, timeout: float) -> tuple[list[int], list[float]]:
    r = post_json(url, "/generate", {"input_ids": ids, "return_logprob": True,
                                     "sampling_params": {"max_new_tokens": new_tokens, "temperature": 0.0,
                                                         "ignore_eos": True}}, timeout=timeout)
    return r["output_ids"], [lp for lp, _tok, _txt in r["meta_info"]["output_token_logprobs"]]


def teacher_forced(url: str, prompt: list[int], cont: list[int], timeout: float) -> tuple[list[int], list[float]]:
    """Candidate's top-1 token and logprob of cont[j] at each position of the control's continuation."""
    r = post_json(url, "/generate", {"input_ids": prompt + cont, "return_logprob": True,
                                     "logprob_start_len": len(prompt), "top_logprobs_num": 1,
                                     "sampling_params": {"max_new_tokens": 1, "temperature": 0.0}}, timeout=timeout)
    m = r["meta_info"]
    lps = [e[0] for e in m["input_token_logprobs"][:len(cont)]]
    top = [e[0][1] for e in m["input_top_logprobs"][:len(cont)]]
    return top, lps


def compare(candidate_url: str, control_url: str | None, *, prompts: int = 8, prompt_tokens: int = 64,
            new_tokens: int = 16, seed: int = 0, min_top1_agreement: float = 0.95,
            max_mean_abs_logprob_diff: float = 0.05, timeout: float = 300.0,
            recorded_control: list[dict] | None = None) -> dict:
    """Returns {"passed", "reason", "top1_agreement", "mean_abs_logprob_diff", "max_abs_logprob_diff",
    "prompts": [...], "control_outputs": [...]} (control_outputs can be passed back as
    recorded_control when no live control group is left)."""
    if control_url is None and not recorded_control:
        raise ValueError("control_url is None and no recorded_control was given")
    if prompts < 1 or prompt_tokens < 1 or new_tokens < 1:
        raise ValueError(f"prompts, prompt_tokens, new_tokens must be >= 1, got {prompts}, {prompt_tokens}, {new_tokens}")
    per_prompt, agree, diffs, control_outputs = [], [], [], []
    for i, prompt in enumerate(make_prompts(prompts, prompt_tokens, seed)):
        if control_url is not None:
            ctrl_out, ctrl_lp = greedy(control_url, prompt, new_tokens, timeout)
        else:
            ctrl_out, ctrl_lp = recorded_control[i]["output_ids"], recorded_control[i]["logprobs"]
        control_outputs.append({"output_ids": ctrl_out, "logprobs": ctrl_lp})
        cand_out, _ = greedy(candidate_url, prompt, new_tokens, timeout)
        top, lps = teacher_forced(candidate_url, prompt, ctrl_out, timeout)
        a = [int(t == c) for t, c in zip(top, ctrl_out)]
        d = [abs(x - y) for x, y in zip(lps, ctrl_lp)]
        agree += a
        diffs += d
        div = next((j for j, (x, y) in enumerate(zip(cand_out, ctrl_out)) if x != y), None)
        per_prompt.append({"top1_agreement": sum(a) / len(a), "max_abs_logprob_diff": max(d),
                           "first_divergence": div, "exact": div is None and len(cand_out) == len(ctrl_out)})
    top1, mean_d = sum(agree) / len(agree), statistics.fmean(diffs)
    passed = top1 >= min_top1_agreement and mean_d <= max_mean_abs_logprob_diff
    reason = (f"top-1 agreement {top1:.3f} (min {min_top1_agreement}), mean |dlogprob| {mean_d:.4f} "
              f"(max {max_mean_abs_logprob_diff}); {'pass' if passed else 'FAIL'}")
    return {"passed": passed, "reason": reason, "top1_agreement": top1, "mean_abs_logprob_diff": mean_d,
            "max_abs_logprob_diff": max(diffs), "exact_prompts": sum(p["exact"] for p in per_prompt),
            "control_source": "live" if control_url else "recorded",
            "settings": {"prompts": prompts, "prompt_tokens": prompt_tokens, "new_tokens": new_tokens, "seed": seed,
                         "min_top1_agreement": min_top1_agreement,
                         "max_mean_abs_logprob_diff": max_mean_abs_logprob_diff},
            "prompts": per_prompt, "control_outputs": control_outputs}
