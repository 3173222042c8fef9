"""Issue 26 on the real server: what a long-context user feels of EXTEND over a cached prefix, per
arm, with the speed gate's 185,000-token prompt (`measure.gate_prompt`) in both servers' prefix
caches. The canary step runs it once the canary passed (flash canary and triton control up, both
warm); the merged JSON carries it as "extend_over_prefix" (`record`).

  prefill    the prompt's own prefill: the wall time of the warm-up request that first put it into
             a freshly started server's cache. triton: the job's warm-up in step up on the group
             that is the canary's control (it ran alone; the canary's overlapped the control's start).
             flash: the rollout numerics gate's warm-up of the restarted canary, the first request
             with the prompt, timed by the arrival of the rollout CLI's progress lines that bracket
             it (`warm_from_progress`): nothing else runs in between. Per layer = time / target
             layers (the time also holds the draft model's extend, the first chunk and the server's
             own overhead, so it is an upper bound of the target layers' share).
  follow-up  TTFT of a turn after the cached prompt: a non-streaming /generate of prompt + n fresh
             random token ids with max_new_tokens 1, timed at the client from sending to the one
             token back (an EXTEND of n tokens over the prefix, then EAGLE's draft extend). n in
             FOLLOWUP_TOKENS, REPEATS each, median kept. Every request gets a fresh suffix whose
             first token no other suffix has, so none can reuse another's tokens from the radix
             cache; the same suffixes go to both arms (separate servers, separate caches), the arm
             order alternating. The follow-up hit the cached prompt (`prefix_hit`) when
             cached_tokens is the prompt's length less at most PROMPT_TAIL_UNCACHED: SGLang's radix
             cache keeps the prompt but its last token (H200, EAGLE: 184,999 of 185,000), and a
             suffix reused from the cache would show more than the prompt.
  greedy     one more fresh 16-token follow-up, GREEDY_TOKENS greedy tokens (temperature 0,
             ignore_eos) on each arm: equal or not, and where they first differ.
  counters   every mla_verify_*_total series on each arm's /metrics, before and after the
             follow-ups: which kernel served them (the plugin's EXTEND calls and fallbacks by mode).

Units: seconds for the prefill ("prefill_s"), milliseconds for everything per layer or per request
("*_ms"); token counts are token ids.
"""
from __future__ import annotations

import random
import re
import statistics
import time

from rollout.ab import TOKEN_HI, TOKEN_LO
from rollout.client import get_text, post_json

FOLLOWUP_TOKENS = (1, 16, 256)
REPEATS = 3
GREEDY_SUFFIX = 16
GREEDY_TOKENS = 16
SEED_OFFSET = 26          # suffixes come from Random(gate seed + this): reproducible, not the prompt's stream
WHAT = ("issue 26 on the real server: the prefill of the gates' long prompt (context_tokens) and the TTFT of "
        "follow-ups over it once cached, per arm")
UNITS = {
    "prefill_s": "s, client wall time of the warm-up request that prefilled the whole prompt (1 new token)",
    "prefill_ms_per_layer": "ms, prefill_s / target layers (includes the draft model's extend and overhead)",
    "ttft_ms": "ms, client wall time of a non-streaming /generate of prompt + n new tokens, max_new_tokens 1",
    "server_e2e_ms": "ms, SGLang's own meta_info.e2e_latency of the same request (null when not reported)",
}

# the rollout tool's progress line just before a warm-up request: the numerics gate's (by URL) and
# the speed gate's (by role; used when the inventory has no long numerics prompt)
NUMERICS_WARM = re.compile(r"warming the prefix cache of (?P<url>\S+) with the (?P<tokens>\d+)-token prompt")
SPEED_WARM = re.compile(r"warming the prefix cache on candidate \((?P<tokens>\d+) tokens\)")
GATE_LINE = re.compile(r"\]\s+gate \w+:")     # a gate's verdict: the warm-up failed, it did not answer
COUNTER = re.compile(r"^(mla_verify_[a-z_]+_total)(\{[^}]*\})?\s+(\S+)\s*$")


def warm_from_progress(lines: list[tuple[float, str]], url: str) -> dict:
    """The wall time of the rollout gates' first warm-up request to the candidate at `url`, from
    the rollout CLI's output `lines` as (monotonic arrival time s, line): from the line announcing
    it to the next line, which the gate prints only once the answer came. Returns {"prefill_s",
    "prompt_tokens", "from_line", "to_line"} or {"error": why}."""
    for i, (t, line) in enumerate(lines):
        m = NUMERICS_WARM.search(line)
        if m and m.group("url").rstrip("/") != url.rstrip("/"):
            continue
        m = m or SPEED_WARM.search(line)
        if not m:
            continue
        if i + 1 >= len(lines):
            return {"error": f"no line after {line.strip()!r}: the rollout command ended inside the warm-up"}
        t1, nxt = lines[i + 1]
        if "transient error" in nxt or GATE_LINE.search(nxt):
            return {"error": f"the warm-up did not answer cleanly: {nxt.strip()[:300]!r}"}
        return {"prefill_s": t1 - t, "prompt_tokens": int(m.group("tokens")), "from_line": line.strip(),
                "to_line": nxt.strip()}
    return {"error": f"no warm-up of {url} in the rollout output ({len(lines)} lines)"}


def suffixes(count: int, sizes: list[int], seed: int) -> list[list[int]]:
    """`count` lists of fresh token ids, one per entry of `sizes` (cycled), each with a first token
    no other has (so no two follow-ups share a radix-tree branch after the prompt)."""
    rng = random.Random(seed + SEED_OFFSET)
    firsts = rng.sample(range(TOKEN_LO, TOKEN_HI), count)
    return [[firsts[i]] + [rng.randrange(TOKEN_LO, TOKEN_HI) for _ in range(sizes[i % len(sizes)] - 1)]
            for i in range(count)]


def plugin_counters(url: str, timeout: float = 30.0) -> dict:
    """{series with labels: value} of every mla_verify_*_total counter on url's /metrics ({} when
    the server has none; {"error": ...} when /metrics does not answer)."""
    try:
        text = get_text(url, "/metrics", timeout=timeout)
    except Exception as e:  # noqa: BLE001 -- a missing counter never stops a measurement
        return {"error": f"{type(e).__name__}: {e}"}
    out = {}
    for line in text.splitlines():
        m = COUNTER.match(line.strip())
        if m:
            key = m.group(1) + (m.group(2) or "")
            out[key] = out.get(key, 0.0) + float(m.group(3))
    return out


def counter_delta(before: dict, after: dict) -> dict:
    if "error" in before or "error" in after:
        return {"error": before.get("error") or after.get("error")}
    return {k: after[k] - before.get(k, 0.0) for k in sorted(after) if after[k] != before.get(k, 0.0)}


# Tokens at the prompt's end the radix cache may not hold after the prompt was served once:
# its last one (its KV is written, but the tree keeps the prompt less one); one more spare.
PROMPT_TAIL_UNCACHED = 2


def prefix_hit(cached_tokens, prompt_len: int) -> bool:
    """A follow-up of prompt + fresh suffix reused the cached prompt, and nothing of its suffix."""
    return cached_tokens is not None and prompt_len - PROMPT_TAIL_UNCACHED <= cached_tokens <= prompt_len


def followup(url: str, ids: list[int], timeout: float) -> dict:
    """One turn after the cached prompt: {"ttft_ms", "prompt_tokens", "cached_tokens",
    "server_e2e_ms", "output_ids"}."""
    body = {"input_ids": ids, "sampling_params": {"max_new_tokens": 1, "temperature": 0.0}}
    t0 = time.monotonic()
    r = post_json(url, "/generate", body, timeout=timeout)
    wall = time.monotonic() - t0
    meta = (r or {}).get("meta_info", {}) if isinstance(r, dict) else {}
    e2e = meta.get("e2e_latency")
    return {"ttft_ms": 1000.0 * wall, "prompt_tokens": meta.get("prompt_tokens"),
            "cached_tokens": meta.get("cached_tokens"),
            "server_e2e_ms": 1000.0 * e2e if isinstance(e2e, (int, float)) else None,
            "output_ids": (r or {}).get("output_ids") if isinstance(r, dict) else None}


def greedy(url: str, ids: list[int], new_tokens: int, timeout: float) -> dict:
    body = {"input_ids": ids, "sampling_params": {"max_new_tokens": new_tokens, "temperature": 0.0,
                                                  "ignore_eos": True}}
    t0 = time.monotonic()
    r = post_json(url, "/generate", body, timeout=timeout)
    meta = (r or {}).get("meta_info", {}) if isinstance(r, dict) else {}
    return {"output_ids": list((r or {}).get("output_ids") or []), "cached_tokens": meta.get("cached_tokens"),
            "e2e_ms": 1000.0 * (time.monotonic() - t0)}


def measure_followups(urls: dict[str, str], prompt: list[int], *, seed: int, timeout: float,
                      sizes=FOLLOWUP_TOKENS, repeats: int = REPEATS, greedy_suffix: int = GREEDY_SUFFIX,
                      greedy_tokens: int = GREEDY_TOKENS, say=None) -> dict:
    """Follow-up TTFTs and the greedy comparison on each arm of `urls` ({arm: url}, the prompt cached
    on each). Returns {"followup": {arm: {str(n): {...}}}, "ratio_triton_over_flash": {str(n): x},
    "greedy": {...}, "counters": {arm: {"before", "after", "delta"}}, "all_prefix_hit", "wall_s"}."""
    say = say or (lambda msg: None)
    t0 = time.monotonic()
    arms = list(urls)
    plan = [n for n in sizes for _ in range(repeats)]
    sfx = suffixes(len(plan) + 1, plan + [greedy_suffix], seed)
    before = {arm: plugin_counters(url) for arm, url in urls.items()}
    samples: dict[str, dict[str, list]] = {arm: {str(n): [] for n in sizes} for arm in arms}
    for i, (n, s) in enumerate(zip(plan, sfx)):
        order = arms if i % 2 == 0 else arms[::-1]
        for arm in order:
            try:
                r = followup(urls[arm], prompt + s, timeout)
            except Exception as e:  # noqa: BLE001 -- one failed request is recorded, the rest still run
                r = {"ttft_ms": None, "prompt_tokens": None, "cached_tokens": None, "server_e2e_ms": None,
                     "error": f"{type(e).__name__}: {e}"}
            r.update(new_tokens=n, prefix_hit=prefix_hit(r["cached_tokens"], len(prompt)), first_token=s[0])
            r.pop("output_ids", None)
            samples[arm][str(n)].append(r)
        say(f"follow-up of {n} token(s) #{len(samples[arms[0]][str(n)])}: " + ", ".join(
            f"{arm} " + (f"{r['ttft_ms']:.1f} ms (cached {r['cached_tokens']})" if r["ttft_ms"] is not None
                         else f"FAILED: {r['error'][:200]}")
            for arm in arms for r in samples[arm][str(n)][-1:]))
    g = {}
    for arm in arms:
        try:
            g[arm] = greedy(urls[arm], prompt + sfx[-1], greedy_tokens, timeout)
        except Exception as e:  # noqa: BLE001
            g[arm] = {"output_ids": [], "cached_tokens": None, "e2e_ms": None, "error": f"{type(e).__name__}: {e}"}
    after = {arm: plugin_counters(url) for arm, url in urls.items()}
    followups = {}
    for arm in arms:
        followups[arm] = {}
        for n, rows in samples[arm].items():
            ttft = [r["ttft_ms"] for r in rows]
            ok = [t for t in ttft if t is not None]
            followups[arm][n] = {"new_tokens": int(n), "median_ttft_ms": statistics.median(ok) if ok else None,
                                 "ttft_ms": ttft, "cached_tokens": [r["cached_tokens"] for r in rows],
                                 "prompt_tokens": [r["prompt_tokens"] for r in rows],
                                 "server_e2e_ms": [r["server_e2e_ms"] for r in rows],
                                 "prefix_hit": all(r["prefix_hit"] for r in rows),
                                 "errors": [r["error"] for r in rows if "error" in r]}
    ratio = {}
    if {"triton", "flash"} <= set(arms):
        for n in followups["flash"]:
            f, t = followups["flash"][n]["median_ttft_ms"], followups["triton"][n]["median_ttft_ms"]
            ratio[n] = t / f if f and t else None
    outs = [g[arm]["output_ids"] for arm in arms]
    div = next((j for j, xs in enumerate(zip(*outs)) if len(set(xs)) > 1), None)
    if div is None and len({len(o) for o in outs}) > 1:
        div = min(len(o) for o in outs)
    return {
        "followup": followups, "ratio_triton_over_flash": ratio,
        "all_prefix_hit": all(v["prefix_hit"] for a in followups.values() for v in a.values()),
        "greedy": {"suffix_tokens": greedy_suffix, "max_new_tokens": greedy_tokens, "temperature": 0.0,
                   "prompt_tokens": len(prompt) + greedy_suffix,
                   "tokens": {arm: g[arm]["output_ids"] for arm in arms},
                   "cached_tokens": {arm: g[arm]["cached_tokens"] for arm in arms},
                   "e2e_ms": {arm: g[arm]["e2e_ms"] for arm in arms},
                   "equal": div is None and all(len(o) == greedy_tokens for o in outs),
                   "first_divergence": div,
                   "errors": {arm: g[arm]["error"] for arm in arms if "error" in g[arm]}},
        "counters": {arm: {"before": before[arm], "after": after[arm], "delta": counter_delta(before[arm], after[arm])}
                     for arm in arms},
        "wall_s": time.monotonic() - t0,
    }


def prefill_entry(group: str, warm: dict | None, layers: int, source: str) -> dict:
    """One arm's prefill record from a warm-up's {"seconds" or "prefill_s", "prompt_tokens",
    "cached_tokens"}; "measured" False (with "why") when it was no full prefill."""
    warm = warm or {}
    seconds = warm.get("prefill_s", warm.get("seconds"))
    out = {"group": group, "source": source, "prompt_tokens": warm.get("prompt_tokens"),
           "cached_tokens": warm.get("cached_tokens"), "prefill_s": seconds,
           "prefill_ms_per_layer": 1000.0 * seconds / layers if isinstance(seconds, (int, float)) else None,
           "measured": isinstance(seconds, (int, float))}
    for k in ("from_line", "to_line"):
        if k in warm:
            out[k] = warm[k]
    if "error" in warm:
        out.update(measured=False, prefill_s=None, prefill_ms_per_layer=None, why=warm["error"])
    elif not out["measured"]:
        out["why"] = "no warm-up was recorded"
    elif (warm.get("cached_tokens") or 0) > 1:
        # SGLang recomputes at least the last token; more cached means this was no full prefill
        out.update(measured=False, why=f"the prompt was cached already ({warm['cached_tokens']} tokens): not a prefill")
    return out


def record(steps: dict) -> dict | None:
    """The merged JSON's "extend_over_prefix": the canary step's block, or (when the canary has not
    run) the triton prefill of step up alone; None when neither exists."""
    c = (steps.get("canary") or {}).get("extend_over_prefix")
    if c:
        return c
    up = steps.get("up") or {}
    groups = up.get("groups") or {}
    if not groups:
        return None
    layers = up.get("layers")
    return {"what": WHAT, "layers": layers, "units": UNITS, "prefill": {"triton": [
        prefill_entry(n, g.get("warm"), layers, "step up: the job's warm-up request") for n, g in groups.items()]},
        "note": "the canary step has not run: no flash prefill, no follow-ups"}


def table_lines(rec: dict | None) -> list[str]:
    """The job table's lines for the record (none when there is none)."""
    if not rec:
        return []
    ctx = rec.get("context_tokens")
    lines = [f"EXTEND over the cached prompt (issue 26), L={rec.get('layers')}"
             + (f", {ctx:,} tokens" if ctx else "") + ":"]
    pre = rec.get("prefill") or {}
    bits = []
    for arm in ("triton", "flash"):
        p = pre.get(arm)
        for e in (p if isinstance(p, list) else [p] if p else []):
            bits.append(f"{arm} " + (f"{e['prefill_s']:.2f} s = {e['prefill_ms_per_layer'] / 1000:.3f} s/layer "
                                     f"({e['group']})" if e["measured"] else
                                     f"not measured ({e.get('why', '')[:120]})"))
    if bits:
        r = rec.get("prefill_ratio_triton_over_flash")
        lines.append("  prefill of the prompt: " + "; ".join(bits) + (f"  triton/flash x{r:.2f}" if r else ""))
    fu = rec.get("followup") or {}
    if fu:
        ratio = rec.get("ratio_triton_over_flash") or {}
        sizes = sorted({n for a in fu.values() for n in a}, key=int)
        for n in sizes:
            parts = [f"{arm} " + (f"{fu[arm][n]['median_ttft_ms']:.1f}" if fu[arm][n]["median_ttft_ms"] is not None
                                  else "FAILED") for arm in ("triton", "flash") if n in fu.get(arm, {})]
            r = ratio.get(n)
            reps = len(next(iter(fu.values()))[n]["ttft_ms"])
            lines.append(f"  follow-up of {int(n):>3} token(s), TTFT median of {reps} (ms): {', '.join(parts)}"
                         + (f"  triton/flash x{r:.1f}" if r else ""))
        if not rec.get("all_prefix_hit"):
            lines.append("  NOT every follow-up hit the cached prompt (cached_tokens off the prompt length): see the JSON")
    g = rec.get("greedy")
    if g:
        lines.append(f"  greedy {g['max_new_tokens']} tokens after a {g['suffix_tokens']}-token follow-up: "
                     + ("equal on both arms" if g["equal"] else
                        f"FAILED: {g['errors']}" if g.get("errors") else f"DIFFER from token {g['first_divergence']}"))
    if rec.get("error"):
        lines.append(f"  measurement error: {rec['error'][:300]}")
    if rec.get("wall_s") is not None:
        lines.append(f"  (follow-ups and greedy took {rec['wall_s']:.1f} s)")
    return lines
