"""The emulator's stand-in for a model: greedy tokens and logprobs as a function of the
context, computed on one of two paths, as in an SGLang server with EAGLE:

  prefill  scoring of the prompt (input_token_logprobs, input_top_logprobs) and the first
           output token: SGLang's own extend kernel on both arms, so the same numbers on both
  verify   every later output token and its output_token_logprobs: TARGET_VERIFY, the path
           the candidate kernel replaces, so each arm has its own rounding

Each path adds its own deterministic bf16-sized wobble (at most 1e-3 in logprob, never
enough to flip the argmax), so two arms agree on tokens and differ slightly in logprobs, and
one server's decode logprobs differ slightly from its own prefill scoring, like real kernels
with different reduction orders. A corrupted path (fault) moves logprobs by tenths and flips
the argmax at a quarter of the positions.
"""
from __future__ import annotations

MASK = (1 << 64) - 1
VOCAB_LO, VOCAB_N = 1000, 30000
PATHS = ("prefill", "verify")
WOBBLE = 1e-3


def mix(*xs: int) -> int:
    h = 0xCBF29CE484222325
    for x in xs:
        h = ((h ^ (x & MASK)) * 0x100000001B3) & MASK
        h ^= h >> 29
    return h


def _salt(name: str) -> int:
    return mix(*name.encode())


class Model:
    """top1(ctx, path) -> (token, logprob); logprob(ctx, token, path) -> float.

    corrupt: the set of paths this server gets wrong (faults corrupt_verify, corrupt_prefill).
    salt: a different model altogether (fault different_tokens).
    """

    def __init__(self, arm: str, salt: int = 0, corrupt: frozenset = frozenset()):
        self.arm, self.salt, self.corrupt = arm, salt, frozenset(corrupt)
        # prefill is SGLang's kernel on both arms: one rounding; verify rounds per arm
        self._wobble = {"prefill": _salt("prefill"), "verify": _salt("verify-" + arm)}

    def _true(self, ctx: list[int]) -> tuple[int, float, int]:
        h = mix(self.salt, len(ctx), *ctx[-3:])
        return VOCAB_LO + h % VOCAB_N, -((h >> 20) % 1000) / 1000 * 0.7, h

    def top1(self, ctx: list[int], path: str) -> tuple[int, float]:
        tok, lp, h = self._true(ctx)
        lp += ((mix(self._wobble[path], h) % 201) - 100) / 100 * WOBBLE
        if path in self.corrupt:
            lp -= 0.3 + (h >> 50) % 100 / 250
            if (h >> 8) % 4 == 0:
                tok = VOCAB_LO + (tok - VOCAB_LO + 1 + (h >> 12) % 97) % VOCAB_N
        return tok, min(lp, 0.0)

    def logprob(self, ctx: list[int], token: int, path: str) -> float:
        top, lp = self.top1(ctx, path)
        return lp if token == top else -6.0 - (mix(token, len(ctx)) % 100) / 100


def tokenize(text: str) -> list[int]:
    return [VOCAB_LO + b for b in text.encode()]


def detokenize(ids: list[int]) -> str:
    return "".join(chr(97 + i % 26) for i in ids)


def input_logprobs(model: Model, ids: list[int], start: int, top_n: int) -> dict:
    """meta_info's input logprobs in SGLang 0.5.23's layout (logprob_result_processor.py):
    entries for ids[start:], and entry 0 is always null because its logprob would need the
    logits before `start`, which were never computed. Entry k >= 1 is the prefill logprob of
    ids[start + k] given ids[:start + k] (and the top-1 of that distribution)."""
    out = {"input_token_logprobs": [[None if k == 0 else model.logprob(ids[:p], ids[p], "prefill"), ids[p], None]
                                    for k, p in enumerate(range(start, len(ids)))]}
    if top_n:
        def top(ctx):
            t, lp = model.top1(ctx, "prefill")
            return [[lp, t, None]]
        out["input_top_logprobs"] = [None if k == 0 else top(ids[:p]) for k, p in enumerate(range(start, len(ids)))]
    return out
