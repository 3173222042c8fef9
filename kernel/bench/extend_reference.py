"""References for a causal EXTEND at sizes where the float64 oracle cannot hold the logits.

`kernel.reference.verify_attention_reference` keeps a request's [T, H, S + T] logits in float64:
98 GB for 8,192 new tokens x 8 heads over a 180k prefix. These compute the same attention (the
oracle's semantics with custom_mask=None: new token t sees the whole prefix and new tokens
0..t; an fp8 pool dequantized as kernel.fp8 reads it for the oracle; k_extend unscaled) a block
of query tokens at a time, each block against only the keys its last token sees:
- `reference_rows`: float64, chosen query tokens of one request;
- `reference_fp32`: fp32 matmuls (TF32 off), every query token of one request.
tests/test_extend_reference.py holds both against the oracle on the CPU.
"""
from __future__ import annotations

import torch

from ..checks import V_DIM
from ..fp8 import FP8, dequantize_keys, dequantize_values

# fp32 logits per block of query tokens, at most (bytes); softmax and masking add about two
# more arrays of this size
BLOCK_BYTES = 1 << 30


def request_span(case, b: int) -> tuple[int, int, int, int]:
    """(q0, T, k0, S) of request b: its new tokens q[q0 : q0 + T], its prefix kv_indices[k0 : k0 + S]."""
    qo, kv = case.qo_indptr, case.kv_indptr
    q0, k0 = int(qo[b]), int(kv[b])
    return q0, int(qo[b + 1]) - q0, k0, int(kv[b + 1]) - k0


def request_keys(case, b: int, dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Request b's keys [S + T, 576] and values [S + T, 512] in `dtype`: its prefix rows from
    the pool (an fp8 pool: K = e4m3 * k_scale, V = e4m3[:512] * v_scale), then its new tokens'
    rows of k_extend (V = their first 512 columns)."""
    q0, T, k0, S = request_span(case, b)
    rows = case.kv_cache[case.kv_indices[k0:k0 + S].long(), 0]
    new = case.k_extend[q0:q0 + T, 0]
    if case.kv_cache.dtype == FP8:
        pk, pv = dequantize_keys(rows, case.k_scale), dequantize_values(rows, case.v_scale)
    else:
        pk, pv = rows.double(), rows[:, :V_DIM].double()
    keys = torch.cat([pk.to(dtype), new.to(dtype)])
    values = torch.cat([pv.to(dtype), new[:, :V_DIM].to(dtype)])
    return keys, values


def _attend(q: torch.Tensor, tokens: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, S: int,
            sm_scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """q [n, H, 576] of new tokens `tokens` [n] (in keys' dtype): (o [n, H, 512], lse [n, H]),
    keys past S + max(tokens) left out (every one of them is masked for these rows)."""
    end = S + int(tokens.max()) + 1
    n, H, D = q.shape
    logits = (q.reshape(n * H, D) @ keys[:end].T).view(n, H, end) * sm_scale
    visible = torch.arange(end, device=q.device)[None, :] <= (S + tokens)[:, None]       # [n, end]
    logits.masked_fill_(~visible[:, None, :], float("-inf"))
    lse = torch.logsumexp(logits, -1)
    p = torch.softmax(logits, -1)
    del logits
    return (p.view(n * H, end) @ values[:end]).view(n, H, V_DIM), lse


def reference_rows(case, b: int, tokens) -> tuple[torch.Tensor, torch.Tensor]:
    """Float64 (o [n, H, 512], lse [n, H]) of request b's new tokens `tokens` (indices 0..T-1
    within the request, any order), blocks of them at a time."""
    if case.custom_mask is not None:
        raise ValueError("case: the EXTEND references take a causal case (custom_mask None)")
    q0, T, _, S = request_span(case, b)
    tokens = torch.as_tensor(tokens, dtype=torch.long, device=case.q.device)
    if tokens.numel() and (int(tokens.min()) < 0 or int(tokens.max()) >= T):
        raise ValueError(f"tokens: request {b} has new tokens 0..{T - 1}, got {tokens.min()}..{tokens.max()}")
    keys, values = request_keys(case, b, torch.float64)
    return _blocks(case.q[q0 + tokens].double(), tokens, keys, values, S, case.sm_scale)


def reference_fp32(case, b: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Request b's (o [T, H, 512], lse [T, H]) in fp32 (TF32 off for the call), every new token."""
    if case.custom_mask is not None:
        raise ValueError("case: the EXTEND references take a causal case (custom_mask None)")
    q0, T, _, S = request_span(case, b)
    keys, values = request_keys(case, b, torch.float32)
    tokens = torch.arange(T, device=case.q.device)
    before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        return _blocks(case.q[q0:q0 + T].float(), tokens, keys, values, S, case.sm_scale)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before


def _blocks(q, tokens, keys, values, S, sm_scale):
    n, H, _ = q.shape
    o = torch.empty(n, H, V_DIM, dtype=q.dtype, device=q.device)
    lse = torch.empty(n, H, dtype=q.dtype, device=q.device)
    per = max(1, BLOCK_BYTES // (H * keys.shape[0] * q.element_size()))
    for i in range(0, n, per):
        o[i:i + per], lse[i:i + per] = _attend(q[i:i + per], tokens[i:i + per], keys, values, S, sm_scale)
    return o, lse


def sample_tokens(T: int, n: int, seed: int) -> list[int]:
    """About n of the new tokens 0..T-1, sorted: the edges of the block and of row tiles (tokens
    0-2, 7-9, 15-16, 31-32, 63-64, 127-128: 8 heads fill a 64-row tile with 8 tokens), the middle,
    the last two, and seeded random ones for the rest; all T when T <= n."""
    if T <= n:
        return list(range(T))
    fixed = {t for t in (0, 1, 2, 7, 8, 9, 15, 16, 31, 32, 63, 64, 127, 128, T // 2, T - 2, T - 1) if t < T}
    g = torch.Generator().manual_seed(seed)
    rest = [t for t in torch.randperm(T, generator=g).tolist() if t not in fixed][: max(0, n - len(fixed))]
    return sorted(fixed | set(rest))
