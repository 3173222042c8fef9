"""The numerics gate without logprobs (mode "tokens"): greedy token agreement of the candidate's
speculative output with the control's, for servers that cannot return logprobs (DDTree's worker
raises a RuntimeError on return_logprob, SGLang pull request #29907, ddtree_worker.py).

Both arms decode each prompt greedily (temperature 0, ignore_eos, no logprobs). Position j of the
candidate's output is compared with the control's greedy token after the same context, prompt +
candidate[:j]: the control's own output up to its first difference from the candidate's; after
one, the control continues from the candidate's context (one more request per difference). So
every position stays comparable, and a near-tie that flips once costs one position, not the rest
of the prompt. Positions 1.. of the candidate come from its TARGET_VERIFY (our kernel), as in
mode "logprobs"; its position 0, a prefill on both arms, is reported apart
(first_token_agreement). The control's reference tokens come from its own speculative decode
(TARGET_VERIFY on SGLang's kernel), or from its prefill at the first token of a continuation.

Verdict: pass when the agreement over positions 1.. is >= min_token_agreement and the prefill
tokens (position 0) agree at that rate too; fail when the agreement is below it while the prefill
tokens agree (the verify path, not the shared prefill, disagrees); inconclusive when the prefill
tokens disagree (not the kernel under test) or too few positions could be compared (a recorded
reference that the continuation leaves early).

Threshold: min_token_agreement = 0.95 by default, the logprob mode's top-1 threshold: the same
question (is the candidate's verify-path token the reference's argmax at the same context). Its
separation is measured on the emulator (tests/rollout/test_rollout_numerics_tokens.py, DDTree-
shaped arms, 8 prompts of 64 tokens and one of 3,000, 16 tokens each, seeds 0-3): agreeing arms,
whose verify paths differ in logprob by at most 1e-3 as two bf16 kernels do, 1.000 at every
seed; a verify path that flips a quarter of the argmaxes (fault corrupt_verify), 0.733-0.756
overall and 0.733-0.867 on the long prompt alone; the test holds seeds 0 and 1 to that. How often the real bf16 spread (ours against SGLang's kernel:
2.0e-3 relative, rollout.kernel_spread) flips a near-tie greedy token of a 61-layer model is not
measured here: it needs the model on GPUs; each run's per-prompt first_divergence shows it.
"""
from __future__ import annotations

import statistics

from rollout.ab import make_input_ids
from rollout.sglang_logprobs import LayoutError, warm_body


def greedy_body(prompt: list[int], new_tokens: int) -> dict:
    """Greedy generation, no logprobs: what any speculative server answers."""
    return {"input_ids": prompt, "sampling_params": {"max_new_tokens": new_tokens, "temperature": 0.0,
                                                      "ignore_eos": True}}


def greedy_tokens(answer, new_tokens: int, what: str) -> list[int]:
    """The output ids of a greedy_body answer (SGLang's /generate layout)."""
    if not isinstance(answer, dict) or not isinstance(answer.get("meta_info"), dict):
        raise LayoutError(f"{what}: no meta_info in the answer: {str(answer)[:200]}")
    fr = answer["meta_info"].get("finish_reason")
    if isinstance(fr, dict) and fr.get("type") == "abort":
        raise LayoutError(f"{what}: the server aborted the request: {fr.get('message', fr)}")
    ids = answer.get("output_ids")
    if not isinstance(ids, list) or len(ids) != new_tokens or not all(isinstance(t, int) for t in ids):
        raise LayoutError(f"{what}: asked for {new_tokens} tokens (ignore_eos), got output_ids {str(ids)[:200]}")
    return ids


def reference(ctrl, prompt: list[int], cand_out: list[int], ctrl_out: list[int], ask) -> tuple[list[int], list[str]]:
    """The control's greedy token at each position of the candidate's context, and whether it
    came from the control's verify path or its prefill (the first token of a request)."""
    n = len(cand_out)
    ref, paths, seg, at = [], [], ctrl_out, 0
    while at < n:
        for k, t in enumerate(seg):
            ref.append(t)
            paths.append("prefill" if k == 0 else "verify")
            if t != cand_out[at + k]:
                break
        at = len(ref)
        if at < n:   # continue from the candidate's context, past the difference
            seg = greedy_tokens(ask(ctrl, greedy_body(prompt + cand_out[:at], n - at), "control continuation"),
                                n - at, "control continuation")
    return ref, paths


def _stats(cand: list[int], ref: list[int]) -> dict:
    agree = [int(a == b) for a, b in zip(cand, ref)]
    return {"positions": len(agree), "top1_agreement": statistics.fmean(agree) if agree else None,
            "mean_abs_logprob_diff": None, "max_abs_logprob_diff": None}


def prompt_cases(candidate_url: str, control_url: str | None, *, prompts: int, prompt_tokens: int,
                 long_context_tokens: int, seed: int, ask, make_prompts, say) -> list[tuple[str, list[int]]]:
    """[(context, input_ids)] that both numerics modes send: `prompts` short prompts, then the speed
    gate's long prompt when long_context_tokens, each endpoint's prefix cache warmed with it first."""
    cases = [("short", p) for p in make_prompts(prompts, prompt_tokens, seed)]
    if long_context_tokens:
        long_prompt = make_input_ids(long_context_tokens, seed)  # the speed gate's prompt
        for url in filter(None, (candidate_url, control_url)):
            say(f"warming the prefix cache of {url} with the {long_context_tokens}-token prompt")
            ask(url, warm_body(long_prompt), "warm")
        cases.append(("long", long_prompt))
    return cases


def compare_tokens(candidate_url: str, control_url: str | None, *, prompts: int, prompt_tokens: int,
                   new_tokens: int, long_context_tokens: int, seed: int, min_token_agreement: float, ask,
                   make_prompts, recorded_control: list[dict] | None = None, say=lambda m: None) -> dict:
    """The "tokens" mode of rollout.numerics.compare (its arguments; ask(url, body, what) posts to
    /generate). Returns the same keys as the logprob mode where they mean the same, plus
    "token_agreement" (= top1_agreement); logprob differences are None."""
    cases = prompt_cases(candidate_url, control_url, prompts=prompts, prompt_tokens=prompt_tokens,
                         long_context_tokens=long_context_tokens, seed=seed, ask=ask, make_prompts=make_prompts,
                         say=say)
    gated_c, gated_r, first, per_prompt, outputs, requests = [], [], [], [], [], 0
    by_context: dict[str, tuple[list, list]] = {c: ([], []) for c, _ in cases}
    for i, (context, prompt) in enumerate(cases):
        say(f"numerics (tokens) {context} prompt {i + 1}/{len(cases)} ({len(prompt)} tokens)")
        cand_out = greedy_tokens(ask(candidate_url, greedy_body(prompt, new_tokens), "candidate decode"),
                                 new_tokens, "candidate decode")
        if control_url is not None:
            ctrl_out = greedy_tokens(ask(control_url, greedy_body(prompt, new_tokens), "control decode"),
                                     new_tokens, "control decode")
            ref, paths = reference(control_url, prompt, cand_out, ctrl_out, ask)
            requests += 2 + sum(p == "prefill" for p in paths[1:])
            usable = new_tokens
        else:
            rec = recorded_control[i]
            ctrl_out, ref, paths = rec["control_out"], rec["ref_tokens"], rec["ref_paths"]
            # the recorded reference holds up to (and at) this group's first difference from the
            # canary's continuation: the contexts are the same until there
            n = next((j for j, (a, b) in enumerate(zip(cand_out, rec["continuation"])) if a != b), new_tokens)
            usable = min(n + 1, new_tokens)
        first.append(int(cand_out[0] == ref[0]))
        c, r = cand_out[1:usable], ref[1:usable]
        gated_c += c
        gated_r += r
        by_context[context][0].extend(c)
        by_context[context][1].extend(r)
        div = next((j for j, (x, y) in enumerate(zip(cand_out, ctrl_out)) if x != y), None)
        st = _stats(c, r)
        per_prompt.append({"context": context, "prompt_tokens": len(prompt), "compared_positions": len(c),
                           **{k: v for k, v in st.items() if k != "positions"},
                           "first_divergence": div, "exact": div is None})
        outputs.append({"continuation": cand_out, "ref_tokens": ref, "ref_paths": paths, "control_out": ctrl_out})
    g = _stats(gated_c, gated_r)
    first_rate = statistics.fmean(first) if first else None
    expected = len(cases) * (new_tokens - 1)
    limits = f"(needs token agreement >= {min_token_agreement} at positions 1.. and at the prefill's first token)"
    if g["positions"] < expected / 2:
        verdict = "inconclusive"
        why = (f"only {g['positions']} of {expected} positions could be compared with the recorded reference "
               f"(this group's continuation differs from the canary's early)")
    elif first_rate < min_token_agreement:
        verdict = "inconclusive"
        why = (f"the first tokens, a prefill on SGLang's kernel on both arms, agree at {first_rate:.3f} only: not "
               f"the kernel under test; a person decides")
    elif g["top1_agreement"] >= min_token_agreement:
        verdict = "pass"
        why = (f"the candidate's verify-path tokens are the control's greedy tokens at {g['top1_agreement']:.3f} of "
               f"{g['positions']} positions")
    else:
        verdict = "fail"
        why = (f"the candidate's verify-path tokens are the control's greedy tokens at {g['top1_agreement']:.3f} of "
               f"{g['positions']} positions only, while the prefill tokens agree ({first_rate:.3f})")
    return {"passed": verdict == "pass", "verdict": verdict, "reason": f"{verdict.upper()}: {why} {limits}",
            "mode": "tokens", "token_agreement": g["top1_agreement"], "top1_agreement": g["top1_agreement"],
            "mean_abs_logprob_diff": None, "max_abs_logprob_diff": None,
            "gated_quantity": "candidate greedy speculative output tokens[1:] (TARGET_VERIFY) vs the control's "
                              "greedy token after the same context (its speculative decode, or its prefill after "
                              "a difference); no logprobs asked",
            "gated": g, "control_self": None, "candidate_prefill": None,
            "contexts": {k: {"gated": _stats(c, r)} for k, (c, r) in by_context.items()},
            "first_token_agreement": first_rate, "exact_prompts": sum(x["exact"] for x in per_prompt),
            "control_requests": requests, "control_source": "live" if control_url else "recorded",
            "settings": {"mode": "tokens", "prompts": prompts, "prompt_tokens": prompt_tokens, "new_tokens": new_tokens,
                         "long_context_tokens": long_context_tokens, "seed": seed,
                         "min_token_agreement": min_token_agreement},
            "prompts": per_prompt, "control_outputs": outputs}
