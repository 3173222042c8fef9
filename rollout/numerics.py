"""Numerics gate: does the candidate's verify kernel give the control's numbers?

Two modes, named in every result ("mode"): "logprobs" (below) for servers that return
decode-time logprobs from the verify logits (EAGLE, EAGLE3, NEXTN and DFLASH in SGLang 0.5.23),
"tokens" (rollout/numerics_tokens.py: greedy token agreement, no logprobs asked) for those that
cannot (DDTree's worker raises on return_logprob). The inventory's `numerics_mode = "auto"`
picks by [launch] speculative_algorithm (rollout.launch.LOGPROB_ALGORITHMS); a group started by
its own `command` should name the mode.

Mode "logprobs":
Our kernel runs only in TARGET_VERIFY, i.e. while the server decodes with EAGLE; a prompt
scored by teacher forcing is a prefill (EXTEND) and runs SGLang's own kernel on both arms.
So the gated quantity is the candidate's own decode-time `output_token_logprobs`: under
EAGLE, SGLang computes entries 1.. of them from the verify logits (compute_spec_logprobs),
entry 0 from the prefill. Its reference is the control scoring the candidate's continuation
by teacher forcing (a prefill on SGLang's kernel, with the candidate's tokens as input):

  gated            candidate decode logprobs (positions 1..n-1)  vs  control prefill scoring
                   top-1 agreement: the control's argmax at each position is the candidate's token
  control_self     control decode logprobs (its verify on SGLang's kernel) vs its own prefill
                   scoring: the same bf16 spread with our kernel absent, measured live
  candidate_prefill candidate prefill scoring vs control prefill scoring of the same tokens:
                   SGLang's kernel on both sides, so it should agree; not our kernel if not

Verdict: pass when gated and candidate_prefill are within the thresholds; FAIL when gated is
outside while control_self is within (the candidate's verify path disagrees with a reference
the control's own verify path agrees with); inconclusive, naming what was seen, when the
reference itself is off (control_self outside too) or only the candidate's prefill is off
(not the kernel under test; a person decides). Prompts: `prompts` short ones of
`prompt_tokens`, and one of `long_context_tokens` (the rollout uses the speed gate's 185,000,
the same token ids, prefix cache warmed on both arms first), so the split-KV path that matters
at long context is checked too.

Thresholds (min_top1_agreement 0.95, max_mean_abs_logprob_diff 0.05 nats) and what they rest
on: the kernel's validation (reports/data/validation-*.json, rollout.kernel_spread) measures
the attention output's relative error against a float64 oracle at 1.4e-3..1.9e-3 over 509
cases up to 185,000 tokens; on the 80 of them also run through SGLang's own Triton kernel,
SGLang's error is 1.9e-3 median, 2.0e-3 max, and kernel vs SGLang 1.7e-3 median, 2.0e-3 max. That is bf16 output rounding (half an ulp
is 2^-9 = 1.95e-3): the two kernels differ from each other by as much as each differs from
the exact answer. How that becomes a logprob difference after 61 layers is neither measured
here nor modelled (it needs the model on GPUs); control_self measures it live on every run
and is reported beside the gated number. The thresholds are a budget wide of a bf16 spread,
not derived from it; a corrupted verify path (the emulator's fault) is off by tenths of a nat
and flips a quarter of the argmaxes, far outside them.
"""
from __future__ import annotations

import random
import statistics

from rollout.client import EndpointError, post_json
from rollout.numerics_tokens import compare_tokens, prompt_cases
from rollout.sglang_logprobs import LayoutError, decode_body, decoded, score_body, scored


MODES = ("logprobs", "tokens")


def make_prompts(n: int, tokens: int, seed: int) -> list[list[int]]:
    rng = random.Random(f"numerics-{seed}")
    return [[rng.randrange(1000, 31000) for _ in range(tokens)] for _ in range(n)]


def _stats(diffs: list[float], agree: list[int]) -> dict:
    if not diffs:
        return {"positions": 0, "top1_agreement": None, "mean_abs_logprob_diff": None, "max_abs_logprob_diff": None}
    return {"positions": len(diffs), "top1_agreement": sum(agree) / len(agree),
            "mean_abs_logprob_diff": statistics.fmean(diffs), "max_abs_logprob_diff": max(diffs)}


def _within(st: dict, min_top1: float, max_mean: float) -> bool:
    return st["positions"] > 0 and st["top1_agreement"] >= min_top1 and st["mean_abs_logprob_diff"] <= max_mean


def _describe(st: dict, top1: bool = True) -> str:
    if not st["positions"]:
        return "no positions"
    return ((f"top-1 {st['top1_agreement']:.3f}, " if top1 else "") +
            f"mean |dlogprob| {st['mean_abs_logprob_diff']:.4f} "
            f"(max {st['max_abs_logprob_diff']:.3f}) over {st['positions']} positions")


class _Pair:
    """Per-position differences of one comparison, collected over prompts."""

    def __init__(self):
        self.diffs, self.agree = [], []

    def add(self, lps, ref_lps, tokens, ref_top1):
        self.diffs += [abs(a - b) for a, b in zip(lps, ref_lps)]
        self.agree += [int(t == r) for t, r in zip(tokens, ref_top1)]

    def stats(self) -> dict:
        return _stats(self.diffs, self.agree)


def _one_prompt(cand, ctrl, prompt, new_tokens, ask, recorded=None) -> dict:
    """Requests for one prompt; returns the per-position data. ask(url, body, what) posts."""
    cand_out, cand_lp = decoded(ask(cand, decode_body(prompt, new_tokens), "candidate decode"), new_tokens,
                                "candidate decode")
    cand_score_lp, _ = scored(ask(cand, score_body(prompt, cand_out), "candidate scoring"), prompt, cand_out,
                              "candidate scoring")
    if ctrl is None:
        # no control left (the last group): the canary's recorded reference holds for the
        # positions where this group's continuation is the canary's
        n = next((j for j, (a, b) in enumerate(zip(cand_out, recorded["continuation"])) if a != b), len(cand_out))
        return {"cand_out": cand_out, "cand_lp": cand_lp, "cand_score_lp": cand_score_lp, "usable": n,
                "ref_lp": recorded["ref_lp"][:n], "ref_top1": recorded["ref_top1"][:n],
                "ctrl_out": recorded["control_out"], "ctrl_lp": recorded["control_lp"],
                "ctrl_self_lp": recorded["control_self_lp"], "ctrl_self_top1": recorded["control_self_top1"]}
    ref_lp, ref_top1 = scored(ask(ctrl, score_body(prompt, cand_out), "control scoring"), prompt, cand_out,
                              "control scoring")
    ctrl_out, ctrl_lp = decoded(ask(ctrl, decode_body(prompt, new_tokens), "control decode"), new_tokens,
                                "control decode")
    if ctrl_out == cand_out:
        self_lp, self_top1 = ref_lp, ref_top1
    else:
        self_lp, self_top1 = scored(ask(ctrl, score_body(prompt, ctrl_out), "control self-scoring"), prompt,
                                    ctrl_out, "control self-scoring")
    return {"cand_out": cand_out, "cand_lp": cand_lp, "cand_score_lp": cand_score_lp, "usable": len(cand_out),
            "ref_lp": ref_lp, "ref_top1": ref_top1, "ctrl_out": ctrl_out, "ctrl_lp": ctrl_lp,
            "ctrl_self_lp": self_lp, "ctrl_self_top1": self_top1}


def compare(candidate_url: str, control_url: str | None, *, prompts: int = 8, prompt_tokens: int = 64,
            new_tokens: int = 16, long_context_tokens: int = 0, seed: int = 0, min_top1_agreement: float = 0.95,
            max_mean_abs_logprob_diff: float = 0.05, timeout: float = 300.0, api_key: str | None = None,
            recorded_control: list[dict] | None = None, progress=None, mode: str = "logprobs",
            min_token_agreement: float = 0.95) -> dict:
    """mode "logprobs" (below) or "tokens" (numerics_tokens.compare_tokens, with
    min_token_agreement; the other thresholds unused). Both results say their "mode".

    Returns {"passed", "verdict" (pass | fail | inconclusive), "reason", "mode", "top1_agreement",
    "mean_abs_logprob_diff", "max_abs_logprob_diff" (all three of the gated comparison),
    "gated", "control_self", "candidate_prefill" (stats dicts), "contexts" (per context),
    "prompts": [...], "control_outputs": [...]}. control_outputs can be passed back as
    recorded_control when no live control group is left. Raises EndpointError (with .url) for
    an endpoint that fails and LayoutError for an answer not in SGLang's layout."""
    if mode not in MODES:
        raise ValueError(f"mode: {mode!r} is not one of {', '.join(MODES)}")
    if control_url is None and not recorded_control:
        raise ValueError("control_url is None and no recorded_control was given")
    if prompts < 1 or prompt_tokens < 2 or new_tokens < 2:
        raise ValueError(f"prompts >= 1, prompt_tokens >= 2, new_tokens >= 2 needed, got {prompts}, "
                         f"{prompt_tokens}, {new_tokens}")
    if long_context_tokens < 0 or long_context_tokens == 1:
        raise ValueError(f"long_context_tokens must be 0 (none) or >= 2, got {long_context_tokens}")
    say = progress or (lambda msg: None)

    def ask(url, body, what):
        return post_json(url, "/generate", body, timeout=timeout, api_key=api_key)

    if mode == "tokens":
        if recorded_control and "ref_tokens" not in recorded_control[0]:
            raise ValueError("recorded_control: recorded by mode 'logprobs'; mode 'tokens' needs its own")
        return compare_tokens(candidate_url, control_url, prompts=prompts, prompt_tokens=prompt_tokens,
                              new_tokens=new_tokens, long_context_tokens=long_context_tokens, seed=seed,
                              min_token_agreement=min_token_agreement, ask=ask, make_prompts=make_prompts,
                              recorded_control=recorded_control, say=say)

    cases = prompt_cases(candidate_url, control_url, prompts=prompts, prompt_tokens=prompt_tokens,
                         long_context_tokens=long_context_tokens, seed=seed, ask=ask, make_prompts=make_prompts,
                         say=say)
    gated, ctrl_self, cand_prefill = _Pair(), _Pair(), _Pair()
    by_context = {c: (_Pair(), _Pair(), _Pair()) for c, _ in cases}
    per_prompt, control_outputs = [], []
    first_token_agree = []
    for i, (context, prompt) in enumerate(cases):
        say(f"numerics {context} prompt {i + 1}/{len(cases)} ({len(prompt)} tokens)")
        rec = recorded_control[i] if recorded_control is not None else None
        d = _one_prompt(candidate_url, control_url, prompt, new_tokens, ask, rec)
        n = d["usable"]
        # positions 1.. of a decode come from the verify logits; position 0 from prefill
        g = (d["cand_lp"][1:n], d["ref_lp"][1:n], d["cand_out"][1:n], d["ref_top1"][1:n])
        s = (d["ctrl_lp"][1:], d["ctrl_self_lp"][1:], d["ctrl_out"][1:], d["ctrl_self_top1"][1:])
        p = (d["cand_score_lp"][:n], d["ref_lp"][:n], [0] * n, [0] * n)  # same tokens scored: top-1 moot
        for pair, args in ((gated, g), (ctrl_self, s), (cand_prefill, p)):
            pair.add(*args)
        for pair, args in zip(by_context[context], (g, s, p)):
            pair.add(*args)
        if n:
            first_token_agree.append(int(d["cand_out"][0] == d["ref_top1"][0]))
        div = next((j for j, (x, y) in enumerate(zip(d["cand_out"], d["ctrl_out"])) if x != y), None)
        one = _Pair()
        one.add(*g)
        per_prompt.append({"context": context, "prompt_tokens": len(prompt), "compared_positions": max(n - 1, 0),
                           **{k: v for k, v in one.stats().items() if k != "positions"},
                           "first_divergence": div, "exact": div is None})
        control_outputs.append({"continuation": d["cand_out"], "ref_lp": d["ref_lp"], "ref_top1": d["ref_top1"],
                                "control_out": d["ctrl_out"], "control_lp": d["ctrl_lp"],
                                "control_self_lp": d["ctrl_self_lp"], "control_self_top1": d["ctrl_self_top1"]})
    g, s, p = gated.stats(), ctrl_self.stats(), cand_prefill.stats()
    ok = lambda st: _within(st, min_top1_agreement, max_mean_abs_logprob_diff)  # noqa: E731
    p_ok = p["positions"] > 0 and p["mean_abs_logprob_diff"] <= max_mean_abs_logprob_diff
    expected = len(cases) * (new_tokens - 1)
    if g["positions"] < expected / 2:
        verdict = "inconclusive"
        why = (f"only {g['positions']} of {expected} positions could be compared with the recorded reference "
               f"(this group's continuation differs from the canary's early)")
    elif ok(g) and p_ok:
        verdict, why = "pass", f"verify path agrees with the control's prefill: {_describe(g)}"
    elif ok(g):
        verdict = "inconclusive"
        why = (f"the verify path agrees ({_describe(g)}), but the candidate's prefill scoring disagrees with the "
               f"control's ({_describe(p, top1=False)}); prefill runs SGLang's own kernel on both arms, so this is not the "
               f"kernel under test: a person decides")
    elif ok(s):
        verdict = "fail"
        why = (f"the candidate's verify path disagrees with the control's prefill ({_describe(g)}) while the "
               f"control's own verify path agrees with it ({_describe(s)})")
    else:
        verdict = "inconclusive"
        why = (f"the reference is off: the control's prefill disagrees with the candidate's decode "
               f"({_describe(g)}) and with the control's own decode too ({_describe(s)}); the control's "
               f"prefill path is suspect, not the candidate")
    limits = f"(needs top-1 >= {min_top1_agreement}, mean |dlogprob| <= {max_mean_abs_logprob_diff})"
    contexts = {c: {"gated": a.stats(), "control_self": b.stats(), "candidate_prefill": x.stats()}
                for c, (a, b, x) in by_context.items()}
    return {"passed": verdict == "pass", "verdict": verdict, "reason": f"{verdict.upper()}: {why} {limits}",
            "mode": "logprobs", "top1_agreement": g["top1_agreement"], "mean_abs_logprob_diff": g["mean_abs_logprob_diff"],
            "max_abs_logprob_diff": g["max_abs_logprob_diff"],
            "gated_quantity": "candidate decode-time output_token_logprobs[1:] (TARGET_VERIFY logits under EAGLE) "
                              "vs the control's prefill scoring of the same tokens",
            "gated": g, "control_self": s, "candidate_prefill": p, "contexts": contexts,
            "first_token_agreement": statistics.fmean(first_token_agree) if first_token_agree else None,
            "exact_prompts": sum(x["exact"] for x in per_prompt),
            "control_source": "live" if control_url else "recorded",
            "settings": {"mode": "logprobs", "prompts": prompts, "prompt_tokens": prompt_tokens, "new_tokens": new_tokens,
                         "long_context_tokens": long_context_tokens, "seed": seed,
                         "min_top1_agreement": min_top1_agreement,
                         "max_mean_abs_logprob_diff": max_mean_abs_logprob_diff},
            "prompts": per_prompt, "control_outputs": control_outputs}


__all__ = ["compare", "make_prompts", "MODES", "EndpointError", "LayoutError"]
