"""Requests the real-server job sends itself (the gates' own requests are the rollout tool's):
warming a server's prefix cache with the speed gate's exact prompt, a timed streaming decode
(TTFT, decode tokens/s, per-step time), the server's arguments, and a profiled decode through
SGLang's /start_profile and /stop_profile."""
from __future__ import annotations

import time
from pathlib import Path

from rollout.ab import make_input_ids
from rollout.client import EndpointError, get_json, post_json, request, stream_generate

# /server_info keys worth recording (SGLang returns every server arg, the API key among them)
SERVER_ARG_KEYS = ("version", "model_path", "attention_backend", "page_size", "tp_size", "dtype", "kv_cache_dtype",
                   "load_format", "skip_tokenizer_init", "sampling_backend", "context_length", "mem_fraction_static",
                   "max_total_num_tokens", "max_running_requests", "chunked_prefill_size", "cuda_graph_max_bs_decode",
                   "cuda_graph_backend_prefill", "disable_cuda_graph", "speculative_algorithm",
                   "speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens",
                   "speculative_draft_model_path", "speculative_dflash_block_size", "speculative_draft_kv_cache_dtype",
                   "enable_metrics", "emulator", "emulated_arm", "time_scale")


def gate_prompt(gates: dict) -> list[int]:
    """The token ids of the speed gate's (and the long numerics prompt's) request, so a warm-up
    here fills the radix cache those requests then hit."""
    return make_input_ids(gates["context_tokens"], gates["seed"])


def warm(url: str, ids: list[int], timeout: float) -> dict:
    """One 1-token request with `ids` (what rollout.ab warms with); its wall time is the
    prefill time when nothing was cached."""
    t0 = time.monotonic()
    r = post_json(url, "/generate", {"input_ids": ids, "sampling_params": {"max_new_tokens": 1, "temperature": 0.0}},
                  timeout=timeout)
    meta = (r or {}).get("meta_info", {}) if isinstance(r, dict) else {}
    return {"seconds": time.monotonic() - t0, "prompt_tokens": meta.get("prompt_tokens", len(ids)),
            "cached_tokens": meta.get("cached_tokens")}


def timed_decode(url: str, ids: list[int], max_new_tokens: int, timeout: float) -> dict:
    """A greedy streaming request: TTFT (s, request to first chunk), decode tokens/s (after the
    first chunk, as the speed gate counts), accept length, and the step time it implies."""
    body = {"input_ids": ids, "sampling_params": {"max_new_tokens": max_new_tokens, "temperature": 0.0,
                                                  "ignore_eos": True}}
    t0 = time.monotonic()
    chunks = list(stream_generate(url, body, timeout=timeout))
    marks = [(t, c["meta_info"]["completion_tokens"]) for t, c in chunks if "meta_info" in c]
    marks = [m for i, m in enumerate(marks) if i == 0 or m[1] > marks[i - 1][1]]
    if len(marks) < 2 or marks[-1][0] <= marks[0][0]:
        raise EndpointError(f"{url}/generate: {len(marks)} token chunk(s); cannot time decode", url)
    meta = chunks[-1][1]["meta_info"]
    tok_s = (marks[-1][1] - marks[0][1]) / (marks[-1][0] - marks[0][0])
    accept = meta.get("spec_accept_length")
    return {"ttft_s": marks[0][0] - t0, "tok_s": tok_s, "completion_tokens": meta.get("completion_tokens"),
            "cached_tokens": meta.get("cached_tokens"), "accept_length": accept,
            "step_ms": 1000.0 * (accept or 1.0) / tok_s, "e2e_s": time.monotonic() - t0}


def server_args(url: str, timeout: float = 30.0) -> dict:
    info = get_json(url, "/server_info", timeout=timeout)
    return {k: info[k] for k in SERVER_ARG_KEYS if isinstance(info, dict) and k in info}


def profiled_decode(url: str, ids: list[int], max_new_tokens: int, out_dir: Path, profile_id: str,
                    timeout: float) -> tuple[Path, dict]:
    """One timed decode between /start_profile and /stop_profile (CPU and GPU activity, no
    stacks or shapes: a small trace); returns the trace SGLang wrote and the timing."""
    out_dir.mkdir(parents=True, exist_ok=True)
    body = {"output_dir": str(out_dir), "activities": ["CPU", "GPU"], "with_stack": False, "record_shapes": False,
            "profile_id": profile_id}
    status, _, text = request(url, "POST", "/start_profile", body, timeout=60)
    if status != 200:
        raise EndpointError(f"{url}/start_profile: HTTP {status}: {str(text)[:300]}", url, transient=False)
    try:
        timing = timed_decode(url, ids, max_new_tokens, timeout)
    finally:
        status, _, text = request(url, "POST", "/stop_profile", timeout=600)
    if status != 200:
        raise EndpointError(f"{url}/stop_profile: HTTP {status}: {str(text)[:300]}", url, transient=False)
    traces = sorted(out_dir.glob(f"{profile_id}*.trace.json*"))
    if not traces:
        raise EndpointError(f"{url}: /stop_profile answered but no {profile_id}*.trace.json* in {out_dir}", url,
                            transient=False)
    return traces[0], timing
