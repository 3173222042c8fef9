"""SGLang 0.5.23's logprob layout: the request bodies that ask for logprobs and the readers
of its answers. Nothing else in the tool indexes these arrays.

Decode (`output_token_logprobs`): one `(logprob, token_id, text)` per output token
(tokenizer_manager.py detokenize_logprob_tokens; text is null without
return_text_in_logprobs). Under EAGLE, entry 0 comes from the prefill forward and entries 1..
from the TARGET_VERIFY logits (speculative/eagle_worker_common.py -> compute_spec_logprobs).

Scoring (`input_token_logprobs`, `input_top_logprobs`): entries for input_ids[start:], where
start = logprob_start_len, and **entry 0 is always null** (logprob_result_processor.py:
`[None] + input_token_logprobs[:-1]`, and `[None]` ... `.pop()` for the top logprobs): its
logprob would need the logits before `start`, which SGLang never computes. So to score a
continuation `cont` after `prompt`, ask from start = len(prompt) - 1: entry 0 is the null of
the prompt's last token, entries 1..len(cont) are cont's. The default logprob_start_len (-1)
returns no input entries at all.
"""
from __future__ import annotations


class LayoutError(ValueError):
    """An answer that does not have SGLang's layout for the request that was sent."""


def decode_body(prompt: list[int], new_tokens: int) -> dict:
    """Greedy generation with logprobs: under EAGLE, its logprobs come from the verify path."""
    return {"input_ids": prompt, "return_logprob": True,
            "sampling_params": {"max_new_tokens": new_tokens, "temperature": 0.0, "ignore_eos": True}}


def score_body(prompt: list[int], cont: list[int]) -> dict:
    """Teacher forcing: a prefill of prompt + cont that returns each cont token's logprob and
    the top-1 token at its position (max_new_tokens 1: SGLang samples one token anyway)."""
    if not prompt or not cont:
        raise ValueError(f"score_body needs a prompt and a continuation, got {len(prompt)} and {len(cont)} tokens")
    return {"input_ids": prompt + cont, "return_logprob": True, "logprob_start_len": len(prompt) - 1,
            "top_logprobs_num": 1, "sampling_params": {"max_new_tokens": 1, "temperature": 0.0}}


def warm_body(prompt: list[int]) -> dict:
    """One token, no logprobs: puts the prompt into the server's prefix cache."""
    return {"input_ids": prompt, "sampling_params": {"max_new_tokens": 1, "temperature": 0.0}}


def _meta(answer, what: str) -> dict:
    if not isinstance(answer, dict) or not isinstance(answer.get("meta_info"), dict):
        raise LayoutError(f"{what}: no meta_info in the answer: {str(answer)[:200]}")
    fr = answer["meta_info"].get("finish_reason")
    if isinstance(fr, dict) and fr.get("type") == "abort":
        raise LayoutError(f"{what}: the server aborted the request: {fr.get('message', fr)}")
    return answer["meta_info"]


def decoded(answer, new_tokens: int, what: str = "decode") -> tuple[list[int], list[float]]:
    """(output token ids, their logprobs) of a decode_body answer."""
    meta = _meta(answer, what)
    ids, lps = answer.get("output_ids"), meta.get("output_token_logprobs")
    if not isinstance(ids, list) or not isinstance(lps, list):
        raise LayoutError(f"{what}: answer lacks output_ids or meta_info.output_token_logprobs")
    if len(ids) != new_tokens or len(lps) != len(ids):
        raise LayoutError(f"{what}: asked for {new_tokens} tokens (ignore_eos), got {len(ids)} ids and "
                          f"{len(lps)} logprobs")
    for j, (e, t) in enumerate(zip(lps, ids)):
        if not isinstance(e, (list, tuple)) or len(e) < 2 or e[1] != t or not isinstance(e[0], (int, float)):
            raise LayoutError(f"{what}: output_token_logprobs[{j}] = {e!r} does not score output token {t}")
    return list(ids), [float(e[0]) for e in lps]


def scored(answer, prompt: list[int], cont: list[int], what: str = "score") -> tuple[list[float], list[int]]:
    """(logprob of cont[j], the top-1 token at cont[j]'s position) for j = 0..len(cont)-1, from a
    score_body answer. Entry 0 (always null in SGLang) is the prompt's last token and is skipped;
    every other entry must be a number for the token that was asked about."""
    meta = _meta(answer, what)
    tl, top = meta.get("input_token_logprobs"), meta.get("input_top_logprobs")
    n = len(cont) + 1
    if not isinstance(tl, list) or not isinstance(top, list):
        raise LayoutError(f"{what}: answer lacks input_token_logprobs or input_top_logprobs "
                          f"(return_logprob and top_logprobs_num were sent)")
    if len(tl) != n or len(top) != n:
        raise LayoutError(f"{what}: expected {n} input entries (logprob_start_len {len(prompt) - 1}), got "
                          f"{len(tl)} token and {len(top)} top entries")
    want = [prompt[-1]] + cont
    got = [e[1] if isinstance(e, (list, tuple)) and len(e) >= 2 else None for e in tl]
    if got != want:
        j = next(i for i, (a, b) in enumerate(zip(got, want)) if a != b)
        raise LayoutError(f"{what}: input_token_logprobs[{j}] is for token {got[j]}, asked about {want[j]}")
    lps, top1 = [], []
    for j in range(1, n):
        lp, row = tl[j][0], top[j]
        if not isinstance(lp, (int, float)):
            raise LayoutError(f"{what}: input_token_logprobs[{j}] has logprob {lp!r}; only entry 0 may be null")
        if not (isinstance(row, list) and row and isinstance(row[0], (list, tuple)) and len(row[0]) >= 2):
            raise LayoutError(f"{what}: input_top_logprobs[{j}] = {row!r} is not a list of (logprob, token_id, text)")
        lps.append(float(lp))
        top1.append(row[0][1])
    return lps, top1
