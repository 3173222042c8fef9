"""TARGET_VERIFY under decode context parallelism (`--dcp-size N`), with the tree mask.

SGLang 0.5.23 shards the latent cache over the N ranks of a DCP group (token position p lives
on rank p % N, at row `req_to_token[p] // N` of that rank's pool) and cannot verify a tree
there: `TritonAttnBackend._forward_extend_dcp` raises NotImplementedError for a custom mask.
For a flash target backend with dcp_size > 1 the plugin replaces, on that backend instance:
- `_forward_extend_dcp` in TARGET_VERIFY, following SGLang's own DCP flow (the same function's
  chain path): the draft block with the tree mask on this rank's own heads (our kernel with
  zero-length prefixes, the tree compacted to T x T); this rank's shard of the prefix for the
  heads all-gathered over the group (our kernel with the draft keys masked out); the merge of
  the shards by `cp_lse_ag_out_rs_mha` (SGLang's collectives), then of the two parts by LSE
  (dcp_merge.merge_into). The result equals the single-rank attention;
- `_set_kv_buffer`, whose DCP branch hands MLATokenToKVPool.set_kv_buffer a `dcp_kv_mask` it
  does not take (a TypeError on every MLA extend): the write goes through the pool's DCP-aware
  door `set_mla_kv_buffer` (widened loc, owner rule in the kernel), as SGLang's MHA prefill does;
- `init_forward_metadata` / `init_forward_metadata_out_graph`: after SGLang's own, in
  TARGET_VERIFY, this rank's shard of each prefix is built with SGLang's `_dcp_kv_indices`
  (the sharding its DCP decode uses; TARGET_VERIFY metadata itself is not sharded) and the tree
  compacted, into buffers sized once: eager and CUDA-graph replay refill them in place,
  outside the graph, so the captured layers read fixed addresses.
The model side (`DeepseekMLAForwardMixin.is_dcp_mla_decode_phase`, hooked by the plugin) must
then hand the backend the rank's own heads: see `keeps_local_heads`. After the verify, the
accepted path's KV is moved with the DCP-aware `dcp_kv_move.move_widened` (the pool's own move
ignores the sharding).

Nothing in the per-layer call allocates or syncs with the host except SGLang's collectives,
which allocate their outputs as they do in SGLang's own DCP graphs.
"""
from __future__ import annotations

import types

import torch

from ..checks import HEAD_DIM, V_DIM
from . import adapter, dcp_kv_move, metrics
from .dcp_merge import merge_into

# Set when a target backend in this process runs the DCP verify path (read by the model hook).
_installed = False


class DcpVerifyError(ValueError):
    """A TARGET_VERIFY call the DCP path cannot serve; SGLang's own DCP path has no tree
    support and reads unsharded TARGET_VERIFY metadata, so there is nothing to fall back to."""


def keeps_local_heads(attn_module, forward_batch) -> bool:
    """Whether the DeepSeek MLA layer should skip SGLang's DCP decode-phase handling for this
    batch: TARGET_VERIFY on the triton backend of a process whose target backend runs this
    path. SGLang's handling all-gathers q before attention and merges afterwards with an LSE the
    triton branch never binds (forward_mla.py: `lse` is assigned only for the
    FORWARD_ABSORB_CORE_ATTENTION_BACKENDS), an UnboundLocalError; the backend does both here."""
    return (_installed and forward_batch.forward_mode.is_target_verify()
            and getattr(attn_module, "current_attention_backend", None) == "triton")


class _Scratch:
    """Per-device buffers of the per-layer call, for `tokens` x (own `heads`, gathered `heads_all`)."""

    def __init__(self, device, tokens: int, heads: int, heads_all: int):
        f32, bf16 = dict(dtype=torch.float32, device=device), dict(dtype=torch.bfloat16, device=device)
        self.tokens, self.heads, self.heads_all = tokens, heads, heads_all
        self.draft_out = torch.empty(tokens, heads, V_DIM, **bf16)
        self.draft_lse = torch.empty(tokens, heads, **f32)
        self.prefix_out = torch.empty(tokens, heads_all, V_DIM, **bf16)
        self.prefix_f32 = torch.empty(tokens, heads_all, V_DIM, **f32)
        self.prefix_lse = torch.empty(tokens, heads_all, **f32)
        self.tmp = torch.empty(3, tokens, heads, **f32)
        self.acc = torch.empty(tokens, heads, V_DIM, **f32)
        self.out = torch.empty(tokens, heads * V_DIM, **bf16)

    def fits(self, tokens: int, heads: int, heads_all: int) -> bool:
        return tokens <= self.tokens and heads == self.heads and heads_all == self.heads_all

    def views(self, n: int):
        return types.SimpleNamespace(
            draft_out=self.draft_out[:n], draft_lse=self.draft_lse[:n], prefix_out=self.prefix_out[:n],
            prefix_f32=self.prefix_f32[:n], prefix_lse=self.prefix_lse[:n], tmp=self.tmp[:, :n], acc=self.acc[:n],
            out=self.out[:n])


_scratch: dict[tuple, _Scratch] = {}
# Replaced scratch stays alive: a CUDA graph captured earlier still writes to it (adapter.py).
_retired: list[_Scratch] = []


def reserve_scratch(device, tokens: int, heads: int, heads_all: int) -> _Scratch:
    """Scratch for `tokens` query tokens on `device` (grows, never frees). Outside capture."""
    if tokens < 1 or heads < 1 or heads_all < heads:
        raise ValueError(f"reserve_scratch: tokens={tokens}, heads={heads}, heads_all={heads_all}")
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:   # tensors report cuda:N; key the same way
        device = torch.device("cuda", torch.cuda.current_device())
    key = (device, heads, heads_all)
    have = _scratch.get(key)
    if have is None or not have.fits(tokens, heads, heads_all):
        if have is not None:
            _retired.append(have)
        have = _scratch[key] = _Scratch(device, tokens, heads, heads_all)
    return have


class DcpVerify:
    """One target TritonAttnBackend's DCP verify: fixed metadata buffers and the layer call.

    Buffers (bs = the request pool size, T = draft tokens per request, shard = ceil(context / N)):
      kv_indptr [bs + 1] int32, kv_indices [bs * shard] int64: this rank's prefix rows
      zero_indptr [bs + 1] int32: no prefix (the draft-only call)
      tree [bs * T * T] uint8 with tree_indptr [bs + 1] int64: the T x T tree blocks of
        SGLang's FULL_MASK (a prefix of length 0 makes the kernel read T x T blocks)
      no_draft [T * (shard + T)] uint8 zeros with no_draft_indptr [bs + 1] zeros: one
        all-zero FULL_MASK block every request of the prefix-only call reads (the kernel reads
        only the draft columns, at mask_indptr[b] + i * (S + T) + S + j)
    """

    def __init__(self, backend, group):
        self.backend, self.group = backend, group
        self.size, self.rank = backend.dcp_size, backend.dcp_rank
        if group.world_size != self.size or group.rank_in_group != self.rank:
            raise ValueError(f"dcp group: rank {group.rank_in_group} of {group.world_size}, but the backend says "
                             f"rank {self.rank} of {self.size}")
        dev = torch.device(backend.device)
        self.max_bs = backend.kv_indptr.shape[0] - 1          # SGLang sizes it by the request pool
        self.T = backend.target_verify_num_tokens_per_req
        self.shard = -(-backend.max_context_len // self.size)
        i32, i64, u8 = (dict(dtype=d, device=dev) for d in (torch.int32, torch.int64, torch.uint8))
        self.kv_indptr = torch.zeros(self.max_bs + 1, **i32)
        self.kv_indices = torch.zeros(self.max_bs * self.shard, **i64)
        self.zero_indptr = torch.zeros(self.max_bs + 1, **i32)
        self.tree = torch.zeros(self.max_bs * self.T * self.T, **u8)
        self._reqs = torch.arange(self.max_bs + 1, **i64)
        self.tree_indptr = self._reqs * (self.T * self.T)
        self.no_draft = torch.zeros(self.T * (self.shard + self.T), **u8)
        self.no_draft_indptr = torch.zeros(self.max_bs + 1, **i64)
        self.has_tree = False
        self.bs = None

    # -- once per batch, outside any graph ---------------------------------------------------
    def refresh(self, forward_batch) -> None:
        """This rank's prefix shard and the compact tree of the batch SGLang just prepared."""
        md = self.backend.forward_metadata
        bs = forward_batch.req_pool_indices.shape[0]
        T = md.max_extend_len
        if bs > self.max_bs or not isinstance(T, int) or T > self.T:
            raise DcpVerifyError(f"TARGET_VERIFY batch of {bs} requests x {T} draft tokens exceeds the DCP buffers "
                                 f"({self.max_bs} x {self.T})")
        self.backend._dcp_kv_indices(forward_batch.req_pool_indices, forward_batch.seq_lens, self.kv_indptr,
                                     self.kv_indices)
        self.has_tree = md.custom_mask is not None
        if self.has_tree:
            compact_tree(md.custom_mask, md.mask_indptr, forward_batch.seq_lens, bs, T, self.tree)
            torch.mul(self._reqs, T * T, out=self.tree_indptr)
        self.bs, self.t = bs, T

    # -- once per layer, possibly inside a CUDA graph ----------------------------------------
    def forward(self, q, k, v, layer, forward_batch, causal, logits_soft_cap, sinks):
        """This layer's TARGET_VERIFY attention for the rank's own heads: [N, H * 512] in q's dtype."""
        b, md = self.backend, self.backend.forward_metadata
        n, heads = q.shape[0], layer.tp_q_head_num
        heads_all = heads * self.size
        reason = _unsupported(q, k, layer, logits_soft_cap, sinks, b.token_to_kv_pool.get_key_buffer(layer.layer_id),
                              heads_all, causal)
        if reason:
            raise DcpVerifyError(f"mla-verify DCP TARGET_VERIFY cannot serve layer {layer.layer_id}: {reason}")
        bs = md.qo_indptr.shape[0] - 1
        if self.bs != bs:
            raise DcpVerifyError(f"DCP buffers hold a batch of {self.bs} requests, this call has {bs} (the metadata "
                                 "hook did not run for this batch)")
        key = (torch.device(q.device), heads, heads_all)
        scratch = _scratch.get(key)
        if scratch is None or scratch.tokens < n:
            raise DcpVerifyError(f"no DCP scratch for {n} tokens x {heads}/{heads_all} heads on {q.device} "
                                 "(reserved at backend init)")
        s = scratch.views(n)
        k_buffer = b.token_to_kv_pool.get_key_buffer(layer.layer_id)
        m = adapter.ops()
        ws = m.get_workspace(q.device)
        q_local = q.view(n, heads, HEAD_DIM)
        k_extend = k.view(n, 1, HEAD_DIM)
        T, scale = self.t, float(layer.scaling)
        # 1. the draft block, tree-masked, for the rank's own heads: prefixes of length 0
        m.verify_attention(q_local, k_buffer, self.zero_indptr[:bs + 1], self.kv_indices, k_extend,
                           self.tree if self.has_tree else None, self.tree_indptr[:bs + 1] if self.has_tree else None,
                           md.qo_indptr, scale, out=s.draft_out, lse_out=s.draft_lse, workspace=ws, max_draft_len=T)
        # 2. this rank's prefix shard for every head of the group (the draft keys masked out)
        q_all = self.group.all_gather(q_local, dim=1)
        if not q_all.is_contiguous():
            q_all = q_all.contiguous()
        m.verify_attention(q_all, k_buffer, self.kv_indptr[:bs + 1], self.kv_indices, k_extend, self.no_draft,
                           self.no_draft_indptr[:bs + 1], md.qo_indptr, scale, out=s.prefix_out, lse_out=s.prefix_lse,
                           workspace=ws, max_draft_len=T)
        # 3. the shards merged by SGLang's collective, then the two parts by LSE
        from sglang.srt.layers.dcp import cp_lse_ag_out_rs_mha

        s.prefix_f32.copy_(s.prefix_out)
        p_out, p_lse = cp_lse_ag_out_rs_mha(s.prefix_f32, s.prefix_lse, self.group, return_lse=True)
        # one output buffer for every layer, as SGLang's own `_attn_output` reuse: the model reads
        # it (w_vc, o_proj) before the next layer's attention writes it again
        out = getattr(forward_batch, "_attn_output", None)
        out = s.out if out is None else out
        merge_into(out.view(n, heads, V_DIM), p_out, p_lse, s.draft_out, s.draft_lse, s.tmp[0], s.tmp[1], s.tmp[2],
                   s.acc)
        adapter.calls["flash"] += 1
        if q.is_cuda and torch.cuda.is_current_stream_capturing():
            metrics.count_capture("flash")
        else:
            metrics.count_kernel_call()
        return out

    # -- the KV write --------------------------------------------------------------------------
    def set_kv_buffer(self, original, forward_batch, layer, loc_info, k, v, k_scale=None, v_scale=None):
        """SGLang's `_set_kv_buffer` with the MLA write through the pool's DCP-aware door."""
        pool = self.backend.token_to_kv_pool
        if k_scale is None and v_scale is None and k.shape[-1] == HEAD_DIM and hasattr(pool, "set_mla_kv_buffer"):
            pool.set_mla_kv_buffer(layer, loc_info, k[..., :V_DIM], k[..., V_DIM:])
            return
        original(forward_batch, layer, loc_info, k, v, k_scale, v_scale)


def compact_tree(custom_mask, mask_indptr, seq_lens, bs: int, T: int, out: torch.Tensor) -> torch.Tensor:
    """The T x T draft blocks of a FULL_MASK (request b: row-major [T, S_b + T] at
    mask_indptr[b], S_b = seq_lens[b]) into out[:bs * T * T] (uint8), request-major; on the device."""
    mask = custom_mask.view(torch.uint8) if custom_mask.dtype == torch.bool else custom_mask
    S = seq_lens[:bs].to(torch.int64).view(bs, 1, 1)
    r = torch.arange(T, dtype=torch.int64, device=mask.device)
    # row i of request b's draft block starts at mask_indptr[b] + i * (S_b + T) + S_b
    idx = mask_indptr[:bs].view(bs, 1, 1) + S + (S + T) * r.view(1, T, 1) + r.view(1, 1, T)
    return torch.index_select(mask, 0, idx.view(-1), out=out[:bs * T * T])


def _unsupported(q, k, layer, logits_soft_cap, sinks, k_buffer, heads_all, causal) -> str | None:
    if sinks is not None:
        return "attention sinks"
    if logits_soft_cap:
        return f"logit cap {logits_soft_cap}"
    if layer.sliding_window_size is not None and layer.sliding_window_size > -1:
        return f"sliding window {layer.sliding_window_size}"
    if not causal:
        return "non-causal extend"
    if layer.k_scale is not None:
        return "k/v descale (fp8 KV cache)"
    if q.dtype != torch.bfloat16 or k_buffer.dtype != torch.bfloat16 or k.dtype != torch.bfloat16:
        return f"dtypes q {q.dtype}, k {k.dtype}, KV cache {k_buffer.dtype} (the kernel takes bf16)"
    if layer.qk_head_dim != HEAD_DIM or layer.v_head_dim != V_DIM:
        return f"head dims {layer.qk_head_dim}/{layer.v_head_dim} (absorbed MLA is {HEAD_DIM}/{V_DIM})"
    if q.dim() != 2 or q.shape[1] != layer.tp_q_head_num * HEAD_DIM or not q.is_contiguous():
        return f"q {tuple(q.shape)} is not a contiguous [N, {layer.tp_q_head_num} * {HEAD_DIM}]"
    if tuple(k.shape) != (q.shape[0], 1, HEAD_DIM) or not k.is_contiguous():
        return f"k {tuple(k.shape)} is not a contiguous [N, 1, {HEAD_DIM}]"
    if heads_all > adapter.MAX_HEADS:
        return f"{heads_all} gathered heads exceed the kernel's {adapter.MAX_HEADS}"
    return None


def install(backend) -> DcpVerify:
    """Route a flash target backend's DCP TARGET_VERIFY to our kernel (hooks on the instance).
    Call once, at backend init, before any CUDA-graph capture."""
    global _installed
    from sglang.srt.runtime_context import get_parallel

    group = get_parallel().dcp_group
    state = DcpVerify(backend, group)
    heads_all = backend.num_head                       # SGLang's num_head already counts the gathered heads
    heads = heads_all // backend.dcp_size
    reserve_scratch(backend.device, state.max_bs * state.T, heads, heads_all)
    forward_dcp = backend._forward_extend_dcp
    set_kv = backend._set_kv_buffer
    init_eager = backend.init_forward_metadata
    init_graph = backend.init_forward_metadata_out_graph

    def _forward_extend_dcp(q, k, v, layer, forward_batch, causal, logits_soft_cap, sinks):
        if forward_batch.forward_mode.is_target_verify():
            return state.forward(q, k, v, layer, forward_batch, causal, logits_soft_cap, sinks)
        return forward_dcp(q, k, v, layer, forward_batch, causal, logits_soft_cap, sinks)

    def _set_kv_buffer(forward_batch, layer, loc_info, k, v, k_scale=None, v_scale=None):
        state.set_kv_buffer(set_kv, forward_batch, layer, loc_info, k, v, k_scale, v_scale)

    def init_forward_metadata(forward_batch):
        init_eager(forward_batch)
        if forward_batch.forward_mode.is_target_verify():
            state.refresh(forward_batch)

    def init_forward_metadata_out_graph(forward_batch, in_capture=False):
        init_graph(forward_batch, in_capture)
        if forward_batch.forward_mode.is_target_verify():
            state.refresh(forward_batch)

    backend._forward_extend_dcp = torch.compiler.disable(_forward_extend_dcp)
    backend._set_kv_buffer = _set_kv_buffer
    backend.init_forward_metadata = init_forward_metadata
    backend.init_forward_metadata_out_graph = init_forward_metadata_out_graph
    # the accepted tree path's KV moves between widened slots, often across ranks (dcp_kv_move.py)
    dcp_kv_move.install(backend.token_to_kv_pool, group)
    backend.mla_verify_dcp = state
    _installed = True
    return state
