"""SGLang EXTEND over a cached prefix -> our kernel, or SGLang's extend_attention_fwd.

On the triton backend an MLA model's EXTEND runs the absorbed path whenever the batch has a
cached prefix (`models/deepseek_common/attention_backend_handler.py: handle_attention_triton`),
and always under SGLang's prefill CUDA graph (breakable, the default on CUDA, pins MLA). That path
ends in `TritonAttnBackend.forward_extend`, which first writes the new tokens' latent rows into
the pool (save_kv_cache, SGLang's code), routes DCP, deterministic and dense-MHA batches to their
own kernels, and then calls `self._forward_extend_kernel(layer, *extend_attention_fwd's
arguments)`: this kernel's computation with a causal block of new tokens (custom_mask None),
qo_indptr over the new tokens, kv_indptr / kv_indices over the cached prefix only, and the new
tokens' K (= V's 512 columns) in k_extend, which SGLang's kernel reads from there too, not from
the pool. SGLang has no slot for EXTEND (TARGET_VERIFY's is use_verify_shared_kv), so
`install` wraps two methods of a flash target backend instance:
- forward_extend: notes the batch's forward mode for the call; everything SGLang does in it
  (the KV write, the routing, the output buffer) runs unchanged;
- _forward_extend_kernel: EXTEND and MIXED batches of an absorbed MLA layer (qk 576, v 512) go to
  our kernel, which writes SGLang's o in place; anything else goes to SGLang's call as before.

What is not ours is never counted: TARGET_VERIFY (the adapter's), and the MHA layers SGLang
uses for a prefix-less EXTEND without a prefill graph (192/128 heads, not the latent
computation). Every absorbed EXTEND call the kernel does not serve is a fallback: counted
(metrics.count_extend_fallback, by forward mode and reason kind) and logged once per (mode,
kind) with the first occurrence's details; sizes never make a new kind. That includes the
batches SGLang routes away before the kernel call: under --dcp-size > 1 (its DCP extend), kind
"dcp". A flash server whose prefill runs on another attention backend never brings an EXTEND
here: `install` logs that once.

The call reads no device memory: SGLang's max_extend_len (max(extend_seq_lens_cpu), a Python int)
picks the row tier, as the draft length does for TARGET_VERIFY. The kernel's split workspace does
not grow with the new tokens (more row tiles than CTAs take one split each); the LSE the kernel
writes and SGLang ignores goes to per-device scratch sized at install from SGLang's prefill token
bound and grown outside graph capture when a longer extend comes (an EXTEND under capture falls
back: SGLang 0.5.23 runs prefill attention eagerly, between its graph segments).

EAGLE's draft model (`install_draft`, from plugin.install for the draft runner's extend backend:
a TritonAttnBackend with is_draft_runner and not skip_prefill, speculative/draft_utils.py
_create_triton_prefill_backend): after each verify, EAGLEWorkerV2 (the only EAGLE worker of
0.5.23) runs the draft model over the verify window, forward mode DRAFT_EXTEND_V2: every request
extends num_draft_tokens new tokens (the accepted ones first) causally over its committed prefix,
through the same forward_extend and call site, so the same kernel call serves it. SGLang captures
it in EAGLEDraftExtendCudaGraphRunner's graphs (one per padded batch size, num_draft_tokens per
request; replayed with new lengths, padded requests on row 0 with no prefix), so DRAFT_EXTEND(_V2)
calls are graph-safe: no LSE (nothing reads one: with_lse=False), the tier from max_extend_len
(the static num_draft_tokens in the graph form), the workspace sized at install, nothing
allocated or read back; a call under capture counts once in
mla_verify_extend_graph_captures_total{mode} (its replays run without Python). The draft
runner's EXTEND and MIXED (the draft model's prefill) are served as the target's; its draft
decode backends (skip_prefill) stay SGLang's; a draft that is not MLA (EAGLE3's external draft)
is left to SGLang, logged once.
"""
from __future__ import annotations

import logging

import torch

from ..checks import HEAD_DIM, V_DIM, VerifyInputError
from ..fp8 import FP8
from . import adapter, draft_switch, metrics, strict
from .strict import StrictFlashError

logger = logging.getLogger(__name__)

# The forward modes served, by SGLang's ForwardMode name; the label in the metrics is its lower case
SERVED_MODES = ("EXTEND", "MIXED")
# ... and on the draft runner's extend backend besides those: EAGLE's draft extend after each verify
# (DRAFT_EXTEND_V2 in 0.5.23; DRAFT_EXTEND, the v1 worker's, where an SGLang has it). SGLang captures
# these in CUDA graphs, so their calls are graph-safe (`serve`).
DRAFT_MODES = ("DRAFT_EXTEND", "DRAFT_EXTEND_V2")
GRAPH_LABELS = frozenset(m.lower() for m in DRAFT_MODES)
# extend_attention_fwd's keywords beyond verify_shared_kv_fwd's, at the values forward_extend
# passes for a plain EXTEND; any other value is a computation the kernel does not do
PLAIN = dict(lse_extend=None, skip_prefix=False, skip_extend=False, score_mod=None, aux_tensors=None,
             identity_kv_indices=False)
DEFAULT_TOKENS = 16384   # SGLang's default --max-prefill-tokens, when no bound can be read

_logged: set[tuple[str, str]] = set()

# The draft model's extend through the kernel (EAGLE's DRAFT_EXTEND_V2, in SGLang's draft-extend
# CUDA graph) is on with MLA_VERIFY_BACKEND=flash unless MLA_VERIFY_DRAFT_EXTEND=0: the rule lives
# in draft_switch.py, which the real-server job reads too.
DRAFT_ENV = draft_switch.DRAFT_ENV


def draft_enabled() -> bool:
    """MLA_VERIFY_DRAFT_EXTEND: unset, '' or '1' serves the draft model's extend; '0' leaves it to
    SGLang; anything else is refused, naming the variable."""
    try:
        return draft_switch.draft_extend_on()
    except ValueError as e:
        raise StrictFlashError(f"mla-verify: {e}") from None
_lse: dict[torch.device, torch.Tensor] = {}


class _Mode:
    """The forward mode of the forward_extend call in progress on one backend, else None."""
    __slots__ = ("mode",)

    def __init__(self):
        self.mode = None


def _label(mode) -> str:
    return mode.name.lower()


def _absorbed(layer) -> bool:
    return getattr(layer, "qk_head_dim", None) == HEAD_DIM and getattr(layer, "v_head_dim", None) == V_DIM


def _fallback(mode: str, kind: str, detail: str) -> None:
    metrics.count_extend_fallback(mode, kind)
    if (mode, kind) not in _logged:
        _logged.add((mode, kind))
        logger.warning("mla-verify: %s falls back to SGLang's extend_attention_fwd: %s: %s (logged once per "
                       "reason kind)", mode.upper(), kind, detail)


def token_bound() -> int:
    """The most new tokens one EXTEND batch carries as SGLang is configured: its prefill buffer
    ceiling or --max-prefill-tokens (--chunked-prefill-size when larger), plus the running
    requests' decode tokens a mixed chunk adds. A sizing hint only: a larger batch grows the
    scratch."""
    try:
        from sglang.srt.runtime_context import get_schedule, max_prefill_buffer_tokens

        s = get_schedule()
        n = max(max_prefill_buffer_tokens() or 0, s.max_prefill_tokens or 0, s.chunked_prefill_size or 0)
        if getattr(s, "enable_mixed_chunk", False):
            n += s.max_running_requests or 0
    except Exception as e:   # an unpublished schedule (tools, tests): the default
        logger.debug("mla-verify: no prefill token bound (%r), EXTEND scratch sized for %d", e, DEFAULT_TOKENS)
        n = 0
    return n if n > 0 else DEFAULT_TOKENS


def reserve_lse(device, values: int) -> torch.Tensor:
    """fp32 LSE scratch of at least `values` on `device` (grows, never shrinks). EXTEND runs
    eagerly, so a replaced buffer may go: no CUDA graph holds it."""
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    have = _lse.get(device)
    if have is None or have.numel() < values:
        have = _lse[device] = torch.empty(values, dtype=torch.float32, device=device)
    return have


def serve(mode: str, q_extend, k_extend, v_extend, o_extend, k_buffer, v_buffer, qo_indptr, kv_indptr,
          kv_indices, custom_mask, is_causal, mask_indptr, max_len_extend, k_scale, v_scale, sm_scale=None,
          logit_cap=0.0, skip_prefix_custom_mask=True, sliding_window_size=-1, sinks=None, window_kv_offsets=None,
          xai_temperature_len=-1, page_size=1, extend_seq_lens_cpu=None, **options) -> bool:
    """Our kernel for one layer's EXTEND (extend_attention_fwd's arguments as forward_extend
    passes them; page_size and extend_seq_lens_cpu are not needed: the kernel reads per-token
    slots and the lengths from the indptrs). True when o_extend was written; False, counted and
    logged once per reason kind, for anything it cannot serve exactly."""
    unknown = sorted(set(options) - set(PLAIN))
    if unknown:
        _fallback(mode, "extend_options", f"extend_attention_fwd keywords the plugin does not know: {unknown}")
        return False
    # identity: the plain values are None / False singletons, and a tensor must not meet ==
    odd = sorted(k for k, v in options.items() if v is not PLAIN[k])
    if odd:
        _fallback(mode, "extend_options", f"extend_attention_fwd called with {odd} (a score mod, an LSE "
                  "output or a partial prefix/extend pass: not a plain EXTEND)")
        return False
    reason = adapter.unsupported_reason(q_extend, k_extend, v_extend, o_extend, k_buffer, v_buffer, qo_indptr,
                                        kv_indptr, kv_indices, custom_mask, is_causal, mask_indptr, k_scale,
                                        v_scale, sm_scale, logit_cap, skip_prefix_custom_mask, sliding_window_size,
                                        sinks, window_kv_offsets, xai_temperature_len)
    if reason is not None:
        _fallback(mode, *reason)
        return False
    capturing, graph_safe = adapter._capturing(q_extend), mode in GRAPH_LABELS
    if capturing and not graph_safe:
        _fallback(mode, "graph_capture", "EXTEND attention under CUDA-graph capture (SGLang 0.5.23 runs it eagerly; "
                  "the plugin sizes its scratch for eager calls)")
        return False
    m = adapter.ops()
    workspace = m.get_workspace(q_extend.device)   # sized at install: a lookup, also under capture
    bs = qo_indptr.shape[0] - 1
    if bs > workspace.max_bs:
        _fallback(mode, "batch_size", f"batch of {bs} requests exceeds the workspace's max_bs {workspace.max_bs}")
        return False
    N, H = q_extend.shape[0], q_extend.shape[1]
    if graph_safe:
        # EAGLE's draft-extend graph replays this call with new lengths: nothing sized per call, and
        # no LSE, which nothing reads (as at the verify call site)
        lse = dict(with_lse=False)
    else:
        lse = dict(lse_out=reserve_lse(q_extend.device, N * H)[:N * H].view(N, H))
    scales = dict(k_scale=float(k_scale), v_scale=float(v_scale)) if k_buffer.dtype == FP8 else {}
    try:
        m.verify_attention(q_extend, k_buffer, kv_indptr, kv_indices, k_extend, custom_mask, mask_indptr, qo_indptr,
                           float(sm_scale), **scales, out=o_extend, **lse, workspace=workspace,
                           max_draft_len=adapter._draft_len(max_len_extend))
    except VerifyInputError as e:   # its shape checks, before anything is launched or written
        _fallback(mode, "kernel_rejected", f"kernel.ops rejected the call: {e}")
        return False
    if capturing:
        metrics.count_extend_capture(mode)   # replays run this kernel without Python: count the capture
    else:
        metrics.count_extend_call(mode)
    return True


def install(backend, *, draft: bool = False) -> None:
    """Route a flash TritonAttnBackend's EXTEND to the kernel (hooks on the instance): a target
    backend's (from plugin.install, after its strict checks), or with `draft` the draft runner's
    extend backend, which also serves DRAFT_MODES (`install_draft`). Call once per backend. Raises
    StrictFlashError when SGLang's methods are not there to hook (EXTEND would silently stay on
    SGLang's kernel)."""
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    if getattr(backend, "mla_verify_extend", False):
        return   # hooked already (a second install on the same backend would only wrap the wrappers)
    for name in ("forward_extend", "_forward_extend_kernel"):
        if not callable(getattr(backend, name, None)):
            raise StrictFlashError(strict._msg(f"this SGLang's TritonAttnBackend has no {name}", "the plugin "
                                               "routes EXTEND through it, so EXTEND would stay on SGLang's kernel",
                                               "SGLang 0.5.23 (kernel/sglang/version.py)"))
    names = [n for n in SERVED_MODES + (DRAFT_MODES if draft else ()) if hasattr(ForwardMode, n)]
    served = {getattr(ForwardMode, name) for name in names}
    state = _Mode()
    forward_extend, forward_kernel = backend.forward_extend, backend._forward_extend_kernel

    def _forward_extend(q, k, v, layer, forward_batch, *args, **kwargs):
        mode = forward_batch.forward_mode
        if getattr(backend, "dcp_size", 1) > 1 and mode in served and _absorbed(layer):
            _fallback(_label(mode), "dcp", f"--dcp-size {backend.dcp_size}: SGLang's forward_extend sends every "
                      "extend to its DCP kernel (the plugin's DCP path serves TARGET_VERIFY only)")
        state.mode = mode
        try:
            return forward_extend(q, k, v, layer, forward_batch, *args, **kwargs)
        finally:
            state.mode = None

    def _forward_extend_kernel(layer, *args, **kwargs):
        mode = state.mode
        if mode is None or mode.is_target_verify() or not _absorbed(layer):
            return forward_kernel(layer, *args, **kwargs)
        if mode not in served:
            _fallback(_label(mode), "forward_mode", f"forward mode {mode.name} (the plugin serves {', '.join(names)} "
                      f"on this {'draft' if draft else 'target'} backend)")
        elif getattr(backend, "dllm_attention", None) is None and serve(_label(mode), *args, **kwargs):
            return None
        return forward_kernel(layer, *args, **kwargs)

    backend.forward_extend = _forward_extend
    backend._forward_extend_kernel = torch.compiler.disable(_forward_extend_kernel)
    device = torch.device(backend.device)
    reserve_lse(device, token_bound() * backend.num_head)
    backend.mla_verify_extend = True
    if draft:
        logger.info("mla-verify: the draft model's %s over a cached prefix on %s run the mla-verify kernel",
                    ", ".join(names), device)
        return
    prefill = _prefill_backend()
    if prefill not in (None, "triton"):
        logger.warning("mla-verify: EXTEND runs on the %r attention backend (--prefill-attention-backend), not on "
                       "the triton backend the plugin hooks: only TARGET_VERIFY runs the kernel", prefill)
    else:
        logger.info("mla-verify: EXTEND over a cached prefix on %s runs the mla-verify kernel", device)
    draft_backend = _draft_extend_backend()
    if draft_backend not in (None, "triton"):
        logger.warning("mla-verify: the draft model's extend runs on the %r attention backend "
                       "(--speculative-draft-attention-backend or the prefill backend), not on the triton backend the "
                       "plugin hooks: it stays on that backend's kernel", draft_backend)


def install_draft(backend) -> bool:
    """The draft runner's extend backend on flash (EAGLE's draft_extend_attn_backend): its MLA
    EXTEND, MIXED and DRAFT_MODES through the kernel; True when hooked. The kernel's workspace is
    sized here, before SGLang captures the draft-extend graphs. A draft whose attention is not
    MLA (EAGLE3's external draft model) is left to SGLang: logged once, not refused, since the
    arm's promise is the target's verify and that draft has no latent computation to serve."""
    if not getattr(backend, "use_mla", False):
        if ("draft", "not_mla") not in _logged:
            _logged.add(("draft", "not_mla"))
            logger.info("mla-verify: the draft model's attention is not MLA: its extend stays on SGLang's kernel")
        return False
    device = torch.device(backend.device)
    if device.type == "cuda":
        adapter.ops().get_workspace(device)
    install(backend, draft=True)
    return True


def _prefill_backend() -> str | None:
    """The attention backend SGLang's published ServerArgs give prefill (EXTEND), or None."""
    try:
        from sglang.srt.arg_groups.model_override_base import attention_backends_of
        from sglang.srt.runtime_context import get_server_args

        return attention_backends_of(get_server_args())[0]
    except Exception:
        return None


def _draft_extend_backend() -> str | None:
    """The attention backend SGLang builds the draft model's extend on (draft_utils.py
    create_draft_extend_backend), from the published ServerArgs; None without a draft or a bound."""
    try:
        from sglang.srt.arg_groups.model_override_base import attention_backends_of
        from sglang.srt.runtime_context import get_server_args

        args = get_server_args()
        if not args.speculative_algorithm:
            return None
        prefill, decode = attention_backends_of(args)
        return args.speculative_draft_attention_backend or (
            decode if args.speculative_attention_mode == "decode" else prefill)
    except Exception:
        return None
