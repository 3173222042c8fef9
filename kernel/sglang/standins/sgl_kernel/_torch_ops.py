"""Torch versions of the sgl_kernel functions SGLang 0.5.23's server calls on a CUDA machine for
a DeepSeek-V3-architecture model with EAGLE's NextN draft (measured on an H200, see
../shared/reading/audit-2026-12-02/real-server.md): dense-layer norms and activation, and the
NextN layer's MoE bookkeeping. Same signatures and in-place contracts as sgl_kernel.

Each is captured into CUDA graphs by SGLang, so none reads a device value on the host (no
.item(), no data-dependent shapes, no allocation whose size depends on data), and each records
itself (_record.ran / MLA_VERIFY_STANDIN_LOG) so a run can say which stand-ins it used. Math is
fp32, rounded once to the output dtype, as the CUDA kernels do.
"""
from __future__ import annotations

import torch

from ._record import recorded


def _normalize(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """x (fp32) / RMS(x) * weight, in fp32, over the last dim."""
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight.float()


@recorded("sgl_kernel.rmsnorm")
def rmsnorm(input: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6, out: torch.Tensor | None = None,
            enable_pdl=None) -> torch.Tensor:
    """out[i] = input[i] / RMS(input[i]) * weight; input [tokens, hidden], weight [hidden]."""
    y = _normalize(input.float(), weight, eps)
    if out is None:
        return y.to(input.dtype)
    out.copy_(y)
    return out


@recorded("sgl_kernel.fused_add_rmsnorm")
def fused_add_rmsnorm(input: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6,
                      enable_pdl=None) -> None:
    """In place: residual <- input + residual; input <- rmsnorm(input + residual) * weight (the
    norm of the fp32 sum, before it is rounded into residual)."""
    x = input.float() + residual.float()
    residual.copy_(x)
    input.copy_(_normalize(x, weight, eps))


@recorded("sgl_kernel.silu_and_mul")
def silu_and_mul(input: torch.Tensor, out: torch.Tensor | None = None, enable_pdl=None) -> torch.Tensor:
    """out = silu(input[..., :d]) * input[..., d:], d = input.shape[-1] // 2."""
    d = input.shape[-1] // 2
    y = torch.nn.functional.silu(input[..., :d].float()) * input[..., d:].float()
    if out is None:
        out = torch.empty(input.shape[:-1] + (d,), dtype=input.dtype, device=input.device)
    out.copy_(y)
    return out


@recorded("sgl_kernel.moe_sum_reduce")
def moe_sum_reduce(input: torch.Tensor, output: torch.Tensor, routed_scaling_factor: float) -> None:
    """output [tokens, hidden] <- sum over top-k of input [tokens, topk, hidden], times the factor."""
    output.copy_(input.float().sum(1) * routed_scaling_factor)


@recorded("sgl_kernel.moe_align_block_size")
def moe_align_block_size(topk_ids: torch.Tensor, num_experts: int, block_size: int, sorted_token_ids: torch.Tensor,
                         experts_ids: torch.Tensor, num_tokens_post_pad: torch.Tensor, cumsum_buffer: torch.Tensor,
                         pad_sorted_token_ids: bool = False, ignore_invalid_expert: bool = False) -> None:
    """Sort the flattened top-k slots by expert into blocks of `block_size`, as sgl_kernel does.

    SGLang's +1 convention: `num_experts` counts buckets (real experts + 1); slot i goes to bucket
    topk_ids[i] + 1 (an expert filtered out by EP, id -1, to bucket 0). Each bucket is padded to
    a multiple of block_size. Writes: sorted_token_ids (slot indices bucket by bucket, in slot
    order within a bucket; padding = numel when pad_sorted_token_ids), experts_ids (per block
    up to the padded total: its bucket - 1; later entries untouched), num_tokens_post_pad[0]
    (the padded total), cumsum_buffer[:num_experts + 1] (each bucket's start, then the total).
    ignore_invalid_expert: ids outside [-1, num_experts - 2] take no slot."""
    device = topk_ids.device
    bucket = topk_ids.reshape(-1).long() + 1
    numel = bucket.numel()
    member = bucket[:, None] == torch.arange(num_experts, device=device)[None, :]   # [slots, buckets]
    if not ignore_invalid_expert:
        valid = torch.ones_like(bucket, dtype=torch.bool)
    else:
        valid = member.any(1)
    counts = member.sum(0)
    padded = (counts + block_size - 1) // block_size * block_size
    ends = torch.cumsum(padded, 0)
    starts = ends - padded
    safe = bucket.clamp(0, num_experts - 1)
    rank = (torch.cumsum(member.long(), 0) - 1).gather(1, safe[:, None]).squeeze(1)
    pos = starts.gather(0, safe) + rank
    if pad_sorted_token_ids:
        sorted_token_ids.fill_(numel)
    # an ignored slot writes to one spare entry past the end (shapes stay independent of the data)
    spare = sorted_token_ids.numel()
    buf = torch.cat([sorted_token_ids, sorted_token_ids.new_zeros(1)])
    buf.scatter_(0, torch.where(valid, pos, torch.full_like(pos, spare)),
                 torch.arange(numel, device=device, dtype=sorted_token_ids.dtype))
    sorted_token_ids.copy_(buf[:spare])
    block_start = torch.arange(experts_ids.numel(), device=device) * block_size
    bucket_of_block = (starts[None, :] <= block_start[:, None]).sum(1) - 1
    total = ends[-1:]
    experts_ids.copy_(torch.where(block_start < total, bucket_of_block - 1, experts_ids.long()))
    num_tokens_post_pad[:1].copy_(total)
    cumsum_buffer[:num_experts].copy_(starts)
    cumsum_buffer[num_experts:num_experts + 1].copy_(total)


@recorded("sgl_kernel.weak_ref_tensor")
def weak_ref_tensor(tensor: torch.Tensor) -> torch.Tensor:
    """A tensor on the same storage. sgl_kernel's holds no reference, so a CUDA graph's memory
    pool can reuse its outputs' blocks; this one keeps the storage alive: more graph memory,
    the same values (each captured graph then owns its outputs)."""
    return tensor.detach()
