"""Argument checks shared by the float64 oracle and the CUDA wrapper.

Two levels, because the CUDA path must never synchronise with the host:
- `check_shapes` looks only at shapes, dtypes and devices (no device reads); the
  kernel wrapper runs it on every call.
- `check_values` reads index and mask values (a host sync); the oracle runs it on
  every call, and the kernel wrapper runs it when asked (`validate=True`).

Every failure raises `VerifyInputError` naming the argument and the offending value.
"""
from __future__ import annotations

import torch

HEAD_DIM = 576  # 512 latent (c_KV, also V) + 64 rope
V_DIM = 512
ROW_BYTES = HEAD_DIM * 2  # one bf16 row of the MLA pool (or of k_extend)
FP8_ROW_BYTES = HEAD_DIM  # one row of SGLang's fp8_e4m3 MLA pool

_FLOATS = (torch.bfloat16, torch.float16, torch.float32, torch.float64)
_INTS = (torch.int32, torch.int64)
_MASKS = (torch.bool, torch.uint8)
FP8_DTYPES = (torch.float8_e4m3fn, torch.float8_e5m2, torch.float8_e4m3fnuz, torch.float8_e5m2fnuz)


class VerifyInputError(ValueError):
    """A verify-attention argument is malformed; the message names it and its value."""


def _fail(name: str, msg: str) -> None:
    raise VerifyInputError(f"{name}: {msg}")


def _rank(name: str, t: torch.Tensor, rank: int, layout: str) -> None:
    if not isinstance(t, torch.Tensor):
        _fail(name, f"expected a torch.Tensor {layout}, got {type(t).__name__}")
    if t.dim() != rank:
        _fail(name, f"expected rank {rank} {layout}, got shape {tuple(t.shape)}")


def _dtype(name: str, t: torch.Tensor, allowed: tuple) -> None:
    if t.dtype not in allowed:
        names = ", ".join(str(d).replace("torch.", "") for d in allowed)
        _fail(name, f"dtype {str(t.dtype).replace('torch.', '')} not supported (expected one of {names})")


def check_shapes(q, kv_cache, kv_indptr, kv_indices, k_extend, custom_mask, mask_indptr,
                 qo_indptr, sm_scale, *, float_dtypes=_FLOATS, kv_dtypes=None) -> tuple[int, int]:
    """Shape/dtype/device checks that need no device read. Returns (batch size, H).

    float_dtypes: allowed for q and k_extend, and for kv_cache unless kv_dtypes is given
    (the oracle and the CUDA kernel add float8_e4m3fn there, SGLang's fp8 pool). An fp8
    kv_cache outside kv_dtypes is refused with a message naming its dtype.
    """
    _rank("q", q, 3, "[num_tokens, H, 576]")
    _rank("kv_cache", kv_cache, 3, "[num_slots, 1, 576]")
    _rank("k_extend", k_extend, 3, "[num_tokens, 1, 576]")
    _rank("kv_indptr", kv_indptr, 1, "[bs + 1]")
    _rank("kv_indices", kv_indices, 1, "[>= kv_indptr[-1]]")
    _rank("qo_indptr", qo_indptr, 1, "[bs + 1]")
    kv_dtypes = float_dtypes if kv_dtypes is None else kv_dtypes
    if kv_cache.dtype in FP8_DTYPES and not any(d in FP8_DTYPES for d in kv_dtypes):
        _fail("kv_cache", f"dtype {str(kv_cache.dtype).replace('torch.', '')} (an fp8 KV cache) is not supported "
              "here; SGLang's fp8_e4m3 pool (float8_e4m3fn) is, with k_scale / v_scale")
    for name, t, allowed in (("q", q, float_dtypes), ("kv_cache", kv_cache, kv_dtypes),
                             ("k_extend", k_extend, float_dtypes)):
        _dtype(name, t, allowed)
    for name, t in (("kv_indptr", kv_indptr), ("kv_indices", kv_indices), ("qo_indptr", qo_indptr)):
        _dtype(name, t, _INTS)
    if q.shape[2] != HEAD_DIM:
        _fail("q", f"head dim {q.shape[2]} != {HEAD_DIM} (absorbed MLA: 512 latent + 64 rope)")
    if kv_cache.shape[1] != 1 or kv_cache.shape[2] != HEAD_DIM:
        _fail("kv_cache", f"shape {tuple(kv_cache.shape)} is not [num_slots, 1, {HEAD_DIM}] (V = first {V_DIM} columns)")
    if k_extend.shape[1] != 1 or k_extend.shape[2] != HEAD_DIM:
        _fail("k_extend", f"shape {tuple(k_extend.shape)} is not [num_tokens, 1, {HEAD_DIM}]")
    if k_extend.shape[0] != q.shape[0]:
        _fail("k_extend", f"has {k_extend.shape[0]} rows but q has {q.shape[0]} tokens")
    if q.shape[1] < 1:
        _fail("q", f"has {q.shape[1]} heads")
    if kv_indptr.shape[0] != qo_indptr.shape[0]:
        _fail("kv_indptr", f"length {kv_indptr.shape[0]} != qo_indptr length {qo_indptr.shape[0]} (both are [bs + 1])")
    if kv_indptr.shape[0] < 2:
        _fail("kv_indptr", f"length {kv_indptr.shape[0]}: need at least one request ([bs + 1])")
    if custom_mask is not None:
        _rank("custom_mask", custom_mask, 1, "(flattened FULL_MASK layout)")
        _dtype("custom_mask", custom_mask, _MASKS)
        if mask_indptr is None:
            _fail("mask_indptr", "is None but custom_mask is given")
        _rank("mask_indptr", mask_indptr, 1, "[bs + 1]")
        _dtype("mask_indptr", mask_indptr, _INTS)
        if mask_indptr.shape[0] != qo_indptr.shape[0]:
            _fail("mask_indptr", f"length {mask_indptr.shape[0]} != qo_indptr length {qo_indptr.shape[0]}")
    if not isinstance(sm_scale, (float, int)) or not (sm_scale > 0):
        _fail("sm_scale", f"{sm_scale!r} is not a positive number (use layer.scaling)")
    dev = q.device
    for name, t in (("kv_cache", kv_cache), ("kv_indptr", kv_indptr), ("kv_indices", kv_indices),
                    ("k_extend", k_extend), ("qo_indptr", qo_indptr), ("custom_mask", custom_mask),
                    ("mask_indptr", mask_indptr)):
        if t is not None and t.device != dev:
            _fail(name, f"is on {t.device} but q is on {dev}")
    return kv_indptr.shape[0] - 1, q.shape[1]


def _indptr(name: str, p: torch.Tensor) -> list[int]:
    v = p.tolist()
    if v[0] != 0:
        _fail(name, f"must start at 0, starts at {v[0]}")
    for i in range(1, len(v)):
        if v[i] < v[i - 1]:
            _fail(name, f"not monotone: {name}[{i}] = {v[i]} < {name}[{i - 1}] = {v[i - 1]}")
    return v


def tree_violation(block: torch.Tensor) -> tuple[int, int, str] | None:
    """First violation of ancestor-or-self structure in a [T, T] bool mask, else None.

    Row i lists the nodes draft token i may see. It is a tree when every node sees
    itself and what it sees besides itself is exactly what its deepest visible node
    (its parent) sees: then the visible set is the path to a root.
    A row that sees nothing, its own diagonal included, is a padding node: DDTree (SGLang
    pull request #29907) pads every request's tree to D = budget + 1 nodes with such rows,
    and SGLang's kernel gives them attention over the prefix alone. They are valid; a node
    that sees a padding node is not (a padding node is no one's ancestor).
    """
    T = block.shape[0]
    diag = torch.diagonal(block)
    padding = ~block.any(1)
    if not bool((diag | padding).all()):
        i = int((~(diag | padding)).nonzero()[0])
        return i, i, "does not see itself"
    sees_padding = block & padding.unsqueeze(0)
    if bool(sees_padding.any()):
        i, j = (int(x) for x in sees_padding.nonzero()[0])
        return i, j, "sees a padding node, a row that sees nothing"
    depth = block.sum(1)
    others = block.clone()
    others.fill_diagonal_(False)
    # parent = the visible node (other than i) that sees the most nodes, i.e. the deepest
    score = torch.where(others, depth.unsqueeze(0).expand(T, T), torch.full_like(depth, -1).unsqueeze(0).expand(T, T))
    best, parent = score.max(1)
    has_parent = best >= 0
    expect = torch.zeros_like(block)
    idx = has_parent.nonzero().flatten()
    expect[idx] = block[parent[idx]]
    bad = (others != expect)
    if bool(bad.any()):
        i, j = (int(x) for x in bad.nonzero()[0])
        if bool(others[i, j]):
            return i, j, "sees a node that is not its ancestor"
        return i, j, "does not see an ancestor of its parent"
    return None


def check_values(q, kv_cache, kv_indptr, kv_indices, k_extend, custom_mask, mask_indptr, qo_indptr) -> None:
    """Index and mask value checks (reads device memory: a host synchronisation)."""
    kvp = _indptr("kv_indptr", kv_indptr)
    qop = _indptr("qo_indptr", qo_indptr)
    if kvp[-1] > kv_indices.shape[0]:
        _fail("kv_indptr", f"last value {kvp[-1]} exceeds len(kv_indices) = {kv_indices.shape[0]}")
    if qop[-1] != q.shape[0]:
        _fail("qo_indptr", f"last value {qop[-1]} != num_tokens {q.shape[0]} in q")
    used = kv_indices[: kvp[-1]]
    if used.numel():
        lo, hi = int(used.min()), int(used.max())
        n = kv_cache.shape[0]
        if lo < 0 or hi >= n:
            pos = int(((used < 0) | (used >= n)).nonzero()[0])
            _fail("kv_indices", f"slot {int(used[pos])} at position {pos} is outside the pool [0, {n})")
    if custom_mask is None:
        return
    mp = mask_indptr.tolist()
    for b in range(len(qop) - 1):
        S, T = kvp[b + 1] - kvp[b], qop[b + 1] - qop[b]
        if mp[b + 1] - mp[b] != T * (S + T):
            _fail("mask_indptr", f"request {b}: {mp[b + 1] - mp[b]} mask entries, but qo_indptr gives T = {T} "
                  f"draft tokens and kv_indptr S = {S}, so T * (S + T) = {T * (S + T)}")
        if mp[b + 1] > custom_mask.shape[0]:
            _fail("custom_mask", f"has {custom_mask.shape[0]} entries, mask_indptr needs {mp[b + 1]}")
        if T == 0:
            continue
        block = custom_mask[mp[b]: mp[b + 1]].view(T, S + T)[:, S:].bool().cpu()
        v = tree_violation(block)
        if v is not None:
            i, j, what = v
            _fail("custom_mask", f"request {b}: draft node {i} {what} (node {j}); the draft block must be "
                  "ancestor-or-self (a tree), a row that sees nothing being a padding node")
