"""Test-only stand-in for `sgl_kernel` in SGLang's CPU engine (SGLANG_USE_CPU_ENGINE=1).

SGLang 0.5.23 imports these names from sgl_kernel on the CPU path (`kernels/ops/speculative/*`,
`srt/mem_cache/allocation.py`, `kernels/ops/kvcache/cache_move.py`); sgl_kernel's CPU build is not
on PyPI for this torch, so the real-server test (tests/server/) puts this folder on the server's
PYTHONPATH, and nothing else ever does. Six are a few lines of torch (one of ctypes) with the
semantics of SGLang's own Triton kernels of the same name; the two tree functions call SGLang's own Triton
twins (its XPU path), which run in Triton's interpreter here. Only the names SGLang's CPU path
imports are defined: a name that is missing still raises ImportError, as without sgl_kernel.

Each stand-in records its first call in every process (one line `<pid> <name>` appended to
$MLA_VERIFY_STANDIN_LOG), so the test knows which of them the server ran: a real server that
reached EAGLE's verify called verify_tree_greedy_cpu.
"""
from __future__ import annotations

import os

import torch

_seen: set[str] = set()


def _record(name: str) -> None:
    if name in _seen:
        return
    _seen.add(name)
    path = os.environ.get("MLA_VERIFY_STANDIN_LOG")
    if path:
        with open(path, "a") as f:
            f.write(f"{os.getpid()} {name}\n")


def _segments(start_offset, end_offset):
    """(request, start, end, flat offset) per request: SGLang packs each request's slots one
    after the other (the Triton kernels' `out_offset = sum(end - start)` of the requests before)."""
    starts, ends = start_offset.tolist(), end_offset.tolist()
    offset = 0
    for i, (s, e) in enumerate(zip(starts, ends)):
        yield i, s, e, offset
        offset += e - s


def assign_req_to_token_pool_cpu(req_pool_indices, req_to_token, start_offset, end_offset, out_cache_loc,
                                 pool_len):
    """req_to_token[req, start:end] = the request's slots from out_cache_loc (int32 <- int64)."""
    _record("assign_req_to_token_pool_cpu")
    rows = req_pool_indices.tolist()
    for i, s, e, o in _segments(start_offset, end_offset):
        req_to_token[rows[i], s:e] = out_cache_loc[o:o + e - s].to(req_to_token.dtype)


def assign_extend_cache_locs_cpu(req_pool_indices, req_to_token, start_offset, end_offset, out_cache_loc,
                                 pool_len):
    """out_cache_loc (packed) = req_to_token[req, start:end] per request."""
    _record("assign_extend_cache_locs_cpu")
    rows = req_pool_indices.tolist()
    for i, s, e, o in _segments(start_offset, end_offset):
        out_cache_loc[o:o + e - s] = req_to_token[rows[i], s:e].to(out_cache_loc.dtype)


def assign_draft_cache_locs_contiguous_cpu(req_pool_indices, req_to_token, seq_lens, out_cache_loc, pool_len,
                                           topk, num_steps):
    """out_cache_loc[b] = req_to_token[req_b, seq_len_b : seq_len_b + topk * num_steps]."""
    _record("assign_draft_cache_locs_contiguous_cpu")
    n, flat = topk * num_steps, out_cache_loc.view(-1)
    for b, (row, start) in enumerate(zip(req_pool_indices.tolist(), seq_lens.tolist())):
        flat[b * n:(b + 1) * n] = req_to_token[row, start:start + n].to(flat.dtype)


def fill_bonus_tokens_cpu(accept_tokens, accept_lens, bonus_tokens, accept_stride):
    """bonus_tokens[b] = the last accepted token of request b (accept_lens counts the bonus)."""
    _record("fill_bonus_tokens_cpu")
    bs = accept_lens.shape[0]
    idx = torch.arange(bs, device=accept_lens.device) * accept_stride + accept_lens.long() - 1
    bonus_tokens[:bs] = accept_tokens.reshape(-1)[idx].to(bonus_tokens.dtype)


def fill_accept_out_cache_loc_cpu(accept_index, out_cache_loc, accept_out_cache_loc):
    """The slots of the accepted positions (accept_index != -1), packed in order."""
    _record("fill_accept_out_cache_loc_cpu")
    flat = accept_index.reshape(-1)
    picked = out_cache_loc[flat[flat != -1].long()]
    accept_out_cache_loc[:picked.numel()] = picked.to(accept_out_cache_loc.dtype)


def build_tree_kernel_efficient_cpu(*args):
    """SGLang's Triton twin (spec_tree.sgl_build_tree_kernel_triton), same arguments."""
    _record("build_tree_kernel_efficient_cpu")
    from sglang.kernels.ops.speculative.spec_tree import sgl_build_tree_kernel_triton

    sgl_build_tree_kernel_triton(*args)


def verify_tree_greedy_cpu(*, predicts, accept_index, accept_token_num, candidates, retrive_index,
                           retrive_next_token, retrive_next_sibling, target_predict):
    """SGLang's Triton twin (spec_tree.verify_tree_greedy_triton); the CUDA op's `retrive_*` names."""
    _record("verify_tree_greedy_cpu")
    from sglang.kernels.ops.speculative.spec_tree import verify_tree_greedy_triton

    verify_tree_greedy_triton(predicts, accept_index, accept_token_num, candidates, retrive_index,
                              retrive_next_token, retrive_next_sibling, target_predict)


def copy_all_layer_kv_cache_cpu(data_ptrs, strides, tgt_loc, src_loc):
    """For every KV buffer b (base address data_ptrs[b], row stride strides[b] bytes): row
    tgt_loc[i] = row src_loc[i] (cache_move.copy_all_layer_kv_cache_tiled: every source row is
    read before any is written, so an in-place permutation is safe). An MHA pool's warm-up
    calls it once (memory_pool.py _init_kv_copy_and_warmup: DFLASH's GQA draft cache)."""
    import ctypes

    _record("copy_all_layer_kv_cache_cpu")
    src, tgt = src_loc.tolist(), tgt_loc.tolist()
    for base, stride in zip(data_ptrs.tolist(), strides.tolist()):
        rows = [ctypes.string_at(base + s * stride, stride) for s in src]
        for t, row in zip(tgt, rows):
            ctypes.memmove(base + t * stride, row, stride)
