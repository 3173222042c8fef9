"""Strict `flash`: refuse to start a server whose TARGET_VERIFY cannot reach the kernel.

SGLang reaches the plugin's kernel at one call site, the verify fast path in
`TritonAttnBackend.forward_extend` (../shared/reading/audit-2026-12-01/sglang-plugin.md,
item 2), and under `--dcp-size` > 1 through the plugin's DCP path (dcp_verify.py), which
replaces `_forward_extend_dcp` for TARGET_VERIFY. A server configured so that TARGET_VERIFY never gets there would log that the
kernel runs and still serve every verify with SGLang's kernel: an A/B of triton against
triton. Each such configuration is known before any weight is loaded, so with
MLA_VERIFY_BACKEND=flash the server stops instead, with one line that names the setting
and the fix. Checked twice: on the resolved ServerArgs (the launcher, before it spawns
anything, and every scheduler process), and on each target backend the hook installs into:
there also that the backend's class has the call site at all (`call_site_problem`: a fork,
or another version under MLA_VERIFY_ALLOW_UNTESTED_SGLANG=1, may not), before any arm is
published.

Not checkable from inside SGLang: an SGLANG_PLUGINS whitelist without `mla_verify` keeps
this code out of every process; `rollout.arm` then reads the arm as "unknown".
"""
from __future__ import annotations

import functools
import inspect

import torch

ENV = "MLA_VERIFY_BACKEND"
TRITON_TAIL = f"; or {ENV}=triton for SGLang's own path"
# --kv-cache-dtype values whose pool the kernel reads: bf16 (auto resolves to the model dtype,
# or to fp8_e4m3 for a checkpoint with kv_cache_quant_algo FP8: the pool dtype is checked again
# on the backend) and fp8_e4m3 (float8_e4m3fn, per-tensor k/v scales per layer).
SERVED_KV = ("auto", "bf16", "bfloat16", "fp8_e4m3")
SERVED_POOL_DTYPES = (torch.bfloat16, torch.float8_e4m3fn)
KV_FIX = "--kv-cache-dtype fp8_e4m3 (fp8) or auto (bf16)"
MAX_GATHERED_HEADS = 128   # kernel.ops.MAX_HEADS: the DCP prefix call runs all heads of the group


class StrictFlashError(SystemExit):
    """MLA_VERIFY_BACKEND=flash, but TARGET_VERIFY could not reach the kernel: refuse to start.

    A SystemExit, so SGLang's `except Exception` around plugins and hooks cannot swallow
    it and the process exits printing this one line (no traceback)."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


def _msg(setting: str, why: str, fix: str) -> str:
    return f"mla-verify: {ENV}=flash, but {setting}: {why}; fix: {fix}{TRITON_TAIL}"


def server_args_problem(server_args) -> str | None:
    """The one-line refusal for a resolved ServerArgs whose TARGET_VERIFY would not reach
    the kernel, or None when it would."""
    from sglang.srt.arg_groups.model_override_base import attention_backends_of
    from sglang.srt.arg_groups.overrides import resolving_view

    cfg = resolving_view(server_args)
    if str(cfg.model_path).lower() in ("none", "dummy"):
        return None   # SGLang's own placeholder records (override_server_args), not a server
    if cfg.use_ray:
        return _msg("--use-ray", "SGLang's Ray scheduler actors never load plugins, so no rank installs the "
                    "kernel", "launch without --use-ray (sglang serve)")
    if not cfg.speculative_algorithm:
        return _msg("no --speculative-algorithm", "without speculative decoding there is no TARGET_VERIFY "
                    "for the kernel to serve", "add the speculative flags of the README's launch command")
    if cfg.device not in (None, "cuda"):
        return _msg(f"--device {cfg.device}", "the kernel runs on CUDA GPUs only", "--device cuda")
    dcp = _dcp_problem(cfg)
    if dcp:
        return dcp
    if cfg.enable_deterministic_inference:
        return _msg("--enable-deterministic-inference", "deterministic mode sends TARGET_VERIFY to SGLang's "
                    "unified extend kernel before the verify call site", "drop --enable-deterministic-inference")
    prefill, decode = attention_backends_of(cfg)
    mode = cfg.speculative_attention_mode
    verify = decode if mode == "decode" else prefill
    if verify != "triton":
        flag = ("--decode-attention-backend" if mode == "decode" and cfg.decode_attention_backend else
                "--prefill-attention-backend" if mode != "decode" and cfg.prefill_attention_backend else
                "--attention-backend")
        return _msg(f"TARGET_VERIFY runs on the {verify!r} attention backend ({flag}, "
                    f"--speculative-attention-mode {mode})", "the kernel is installed only into SGLang's triton "
                    "backend", f"{flag} triton")
    if str(cfg.kv_cache_dtype).lower() not in SERVED_KV:
        return _msg(f"--kv-cache-dtype {cfg.kv_cache_dtype}", "the kernel reads a bf16 or an fp8_e4m3 KV cache "
                    "only, so every TARGET_VERIFY would fall back to SGLang's kernel", KV_FIX)
    return None


def _dcp_problem(cfg) -> str | None:
    """Under --dcp-size > 1 the plugin's DCP path (dcp_verify.py) serves TARGET_VERIFY; these
    settings still cannot work with it."""
    if (cfg.dcp_size or 1) <= 1:
        return None
    if str(cfg.kv_cache_dtype).lower() not in ("auto", "bf16", "bfloat16"):
        return _msg(f"--kv-cache-dtype {cfg.kv_cache_dtype} with --dcp-size {cfg.dcp_size}", "the plugin's DCP path "
                    "reads a bf16 KV cache only (and SGLang's own scaled fp8 MLA write asserts under DCP)",
                    "--kv-cache-dtype auto (bf16), or --dcp-size 1 for fp8_e4m3")
    if cfg.dcp_replicate_q_proj:
        return _msg("--dcp-replicate-q-proj", "the model then projects every head's query for TARGET_VERIFY, "
                    "while the plugin's DCP path takes each rank's own heads and gathers them itself",
                    "drop --dcp-replicate-q-proj")
    from sglang.srt.arg_groups.model_override_base import attention_backends_of

    draft_backend = cfg.speculative_draft_attention_backend or attention_backends_of(cfg)[1]
    if cfg.speculative_draft_model_path in (None, cfg.model_path) and draft_backend == "triton" \
            and str(cfg.speculative_algorithm).upper() in ("EAGLE", "NEXTN"):
        return _msg(f"--dcp-size {cfg.dcp_size} with the model's own NextN layer as the draft on the triton "
                    "backend", "SGLang's DeepSeek MLA layer under DCP merges every draft decode with an LSE its "
                    "triton branch never binds (forward_mla.py forward_absorb_core: UnboundLocalError)",
                    "EAGLE3 with an external draft "
                    "(--speculative-algorithm EAGLE3 --speculative-draft-model-path ...)")
    return None


# What the plugin installs into, by name: the verify branch of forward_extend reads the flag and
# calls the slot (SGLang 0.5.23, triton_backend.py:1851-1889); under DCP, forward_extend hands
# every extend to _forward_extend_dcp, which dcp_verify.py wraps, and sizes its buffers from
# target_verify_num_tokens_per_req. A fork may lack any of them (DDTree's pull request #29907 is
# based on an SGLang whose forward_extend reads only use_verify_splitkv).
CALL_SITE_NAMES = ("use_verify_shared_kv", "verify_shared_kv_fwd")
DCP_NAMES = ("_forward_extend_dcp",)
DCP_ATTRS = ("target_verify_num_tokens_per_req", "_forward_extend_dcp", "_set_kv_buffer", "_dcp_kv_indices")


@functools.lru_cache(maxsize=None)
def _source(fn) -> str | None:
    try:
        return inspect.getsource(inspect.unwrap(fn))
    except (OSError, TypeError):
        return None


def call_site_problem(backend) -> str | None:
    """The one-line refusal for a backend whose class has no verify call site the plugin can
    install into (a fork, or another SGLang version run with the version override), or None.
    Without it, `flash` would publish an arm that never runs: TARGET_VERIFY on SGLang's kernel."""
    cls = type(backend)
    fwd = getattr(cls, "forward_extend", None)
    src = _source(fwd) if fwd is not None else None
    where = f"{cls.__module__}.{cls.__qualname__}.forward_extend"
    if src is None:
        return _msg(f"the source of {where} cannot be read", "the plugin checks there that TARGET_VERIFY reaches "
                    "its verify call site (use_verify_shared_kv / verify_shared_kv_fwd) before it says flash",
                    "install SGLang from source files (not bytecode only)")
    dcp = getattr(backend, "dcp_size", 1) > 1
    missing = [f"{where} never reads {n}" for n in CALL_SITE_NAMES + (DCP_NAMES if dcp else ()) if n not in src]
    attrs = ("verify_shared_kv_fwd",) + (DCP_ATTRS if dcp else ())
    missing += [f"the backend has no attribute {a}" for a in attrs if not hasattr(backend, a)]
    if not missing:
        return None
    return _msg(f"this SGLang's triton backend has no verify call site for the plugin ({'; '.join(missing)})",
                "the kernel is reached only there, so every TARGET_VERIFY would run SGLang's kernel while the "
                "server says flash", "SGLang 0.5.23 (its triton_backend.py), or a fork that keeps forward_extend's "
                "verify branch (`if self.use_verify_shared_kv: ... self.verify_shared_kv_fwd(...)`)")


def backend_problem(backend) -> str | None:
    """The one-line refusal for a target TritonAttnBackend (not a draft runner) that the
    kernel cannot serve, or None. Reads the fields its verify call site depends on."""
    site = call_site_problem(backend)
    if site:
        return site
    if not getattr(backend, "use_mla", False):
        return _msg("the target model's attention is not MLA", "the kernel serves absorbed MLA (576/512) only",
                    "serve a DeepSeek-V3 / Kimi-K2 class model")
    if getattr(backend, "dcp_size", 1) > 1:
        if backend.num_head > MAX_GATHERED_HEADS:
            return _msg(f"--dcp-size {backend.dcp_size} gathers {backend.num_head} query heads per rank",
                        f"the kernel takes at most {MAX_GATHERED_HEADS}", "a smaller --dcp-size")
        if not hasattr(backend.token_to_kv_pool, "set_mla_kv_buffer"):
            return _msg(f"--dcp-size {backend.dcp_size} with a {type(backend.token_to_kv_pool).__name__} KV pool",
                        "the DCP path writes the latent rows through the MLA pool's set_mla_kv_buffer",
                        "--dcp-size 1")
    if getattr(backend, "enable_deterministic", False):
        return _msg("the backend runs deterministic inference", "TARGET_VERIFY takes SGLang's unified kernel",
                    "drop --enable-deterministic-inference")
    if getattr(backend, "dllm_attention", None) is not None:
        return _msg("the backend serves a diffusion LLM", "its extend path never reaches the verify call site",
                    "serve an autoregressive MLA model")
    pool = backend.token_to_kv_pool
    dtype = getattr(pool, "dtype", None)
    name = str(dtype).replace("torch.", "")
    if dtype is not None and dtype not in SERVED_POOL_DTYPES:
        return _msg(f"the KV cache is {name}", "the kernel reads a bfloat16 or a float8_e4m3fn KV cache only, so "
                    "every TARGET_VERIFY would fall back to SGLang's kernel", KV_FIX)
    if dtype is not None and dtype != torch.bfloat16 and getattr(backend, "dcp_size", 1) > 1:
        return _msg(f"the KV cache is {name} with --dcp-size {backend.dcp_size}", "the plugin's DCP path reads a "
                    "bf16 KV cache only", "--kv-cache-dtype auto (bf16), or --dcp-size 1 for fp8_e4m3")
    return None


def check_server_args(server_args) -> None:
    problem = server_args_problem(server_args)
    if problem:
        raise StrictFlashError(problem)


def check_backend(backend) -> None:
    problem = backend_problem(backend)
    if problem:
        raise StrictFlashError(problem)
