"""Torch versions of `flashinfer.sampling.top_k_renorm_probs` and `top_p_renorm_probs`, recorded
like sgl_kernel's (sgl_kernel._record) so a real-server run says that they ran."""
from __future__ import annotations

import torch
from sgl_kernel._record import recorded


def _per_row(value, probs: torch.Tensor, dtype) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        return value.reshape(-1, 1).to(device=probs.device, dtype=dtype).expand(probs.shape[0], 1)
    return torch.full((probs.shape[0], 1), value, device=probs.device, dtype=dtype)


@recorded("flashinfer.sampling.top_p_renorm_probs")
def top_p_renorm_probs(probs: torch.Tensor, top_p) -> torch.Tensor:
    """probs [batch, vocab] float32 (rows sum to 1); top_p float or [batch]. Keeps, per row, the
    most probable tokens until their mass reaches top_p (the token that crosses it included) and
    renormalizes; the others become 0. Same shape and dtype."""
    p = _per_row(top_p, probs, probs.dtype)
    ordered, order = probs.sort(dim=-1, descending=True)
    before = ordered.cumsum(dim=-1) - ordered          # mass of the more probable tokens
    ordered = ordered.masked_fill(before >= p, 0.0)
    kept = torch.zeros_like(probs).scatter_(-1, order, ordered)
    return kept / kept.sum(dim=-1, keepdim=True)


@recorded("flashinfer.sampling.top_k_renorm_probs")
def top_k_renorm_probs(probs: torch.Tensor, top_k) -> torch.Tensor:
    """probs [batch, vocab] float32; top_k int or [batch] (values <= 0 or >= vocab keep every
    token). Keeps each row's top_k most probable tokens and renormalizes; the others become 0."""
    vocab = probs.shape[-1]
    k = _per_row(top_k, probs, torch.int64)
    k = torch.where((k <= 0) | (k > vocab), torch.full_like(k, vocab), k)
    ordered, order = probs.sort(dim=-1, descending=True)
    rank = torch.arange(vocab, device=probs.device).expand_as(ordered)
    ordered = ordered.masked_fill(rank >= k, 0.0)
    kept = torch.zeros_like(probs).scatter_(-1, order, ordered)
    return kept / kept.sum(dim=-1, keepdim=True)
