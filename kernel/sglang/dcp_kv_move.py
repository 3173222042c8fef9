"""Moving KV rows between widened slots of a DCP-sharded MLA pool (`--dcp-size N`).

After a tree verify (topk > 1) SGLang moves each accepted node's KV row to the front of its
request's draft window: `move_accept_tokens_to_target_kvcache` (srt/speculative/spec_utils.py)
calls `pool.move_kv_cache(tgt_loc, src_loc)` with DCP-widened slot ids. MLATokenToKVPool's
move indexes its rows with those ids as they are (`kv_cache[tgt] = kv_cache[src]`,
srt/mem_cache/memory_pool.py), but under DCP slot s lives on rank s % N at row s // N: the
move reads and writes other slots' rows, or runs past the pool. And the row a target needs
is often on another rank (an accepted node and its front slot rarely share an owner).

`move_widened` is the DCP-aware move: each rank contributes the source rows it owns (zeros
elsewhere), one all-reduce over the DCP group for all layers (exact: one owner per row),
and each rank writes the target rows it owns. Every rank of the group must call it with the
same ids, which SGLang's scheduler does (the ranks run the same batch). Eager code, outside
any CUDA graph, as SGLang's accept path is.
"""
from __future__ import annotations

import torch


def move_widened(kv_buffers: list[torch.Tensor], group, tgt_loc: torch.Tensor, src_loc: torch.Tensor) -> None:
    """For every i, slot tgt_loc[i] gets slot src_loc[i]'s row, in every layer.

    kv_buffers: this rank's per-layer pools [rows, 1, 576] (bf16); tgt_loc, src_loc: widened slot
    ids (any int dtype, same numel); group: the DCP GroupCoordinator (world_size N, rank_in_group r)."""
    n, r = group.world_size, group.rank_in_group
    tgt, src = tgt_loc.reshape(-1).long(), src_loc.reshape(-1).long()
    if tgt.shape != src.shape:
        raise ValueError(f"tgt_loc / src_loc: {tgt.numel()} and {src.numel()} ids")
    if tgt.numel() == 0:
        return
    own_src, own_tgt = src % n == r, tgt % n == r
    zero = torch.zeros((), dtype=torch.long, device=tgt.device)
    src_row, tgt_row = torch.where(own_src, src // n, zero), torch.where(own_tgt, tgt // n, zero)
    rows = torch.stack([buf[src_row] for buf in kv_buffers])                     # [L, m, 1, D]
    rows = torch.where(own_src.view(1, -1, 1, 1), rows, torch.zeros((), dtype=rows.dtype, device=rows.device))
    # summed as int32 bit patterns: exact, and a dtype NCCL and gloo both reduce
    words = group.all_reduce(rows.contiguous().view(torch.int32))
    rows = words.view(rows.dtype)
    for layer, buf in enumerate(kv_buffers):
        # rows this rank does not own write row 0 (the padding page) with its own value
        buf[tgt_row] = torch.where(own_tgt.view(-1, 1, 1), rows[layer], buf[tgt_row])


def install(pool, group) -> bool:
    """Make `pool.move_kv_cache` (an MLATokenToKVPool of a DCP rank) the DCP-aware move; once
    per pool. Returns whether it was installed now."""
    if getattr(pool, "mla_verify_dcp_move", False):
        return False

    def move_kv_cache(tgt_loc, src_loc):
        move_widened(pool.kv_buffer, group, tgt_loc, src_loc)

    pool.move_kv_cache = move_kv_cache
    pool.mla_verify_dcp_move = True
    return True
