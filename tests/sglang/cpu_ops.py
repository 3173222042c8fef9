"""CPU stand-in for kernel.ops: the float64 oracle behind kernel.ops' API, cast to bf16.

It records every call so tests can check what the adapter handed the kernel. It reads
lengths on the host (the real kernel must not); requests whose slice the oracle rejects
(CUDA-graph padding: dummy requests with stale tree masks) get NaN rows.
"""
from __future__ import annotations

import types

import torch

from kernel.checks import VerifyInputError
from kernel.reference import verify_attention_reference


class CpuOps:
    def __init__(self):
        self.calls: list[dict] = []
        self.workspaces: dict = {}

    def get_workspace(self, device):
        """One workspace per device, as kernel.ops caches it (max_bs as its default)."""
        return self.workspaces.setdefault(torch.device(device), types.SimpleNamespace(max_bs=4096))

    def verify_attention(self, q, kv_cache, kv_indptr, kv_indices, k_extend, custom_mask, mask_indptr,
                         qo_indptr, sm_scale, *, out=None, lse_out=None, workspace=None, max_draft_len=None):
        self.calls.append(dict(q=q, kv_cache=kv_cache, kv_indptr=kv_indptr, kv_indices=kv_indices,
                               k_extend=k_extend, custom_mask=custom_mask, mask_indptr=mask_indptr,
                               qo_indptr=qo_indptr, sm_scale=sm_scale, out=out, lse_out=lse_out,
                               workspace=workspace, max_draft_len=max_draft_len))
        N, H, _ = q.shape
        out = torch.empty(N, H, 512, dtype=q.dtype) if out is None else out
        lse = torch.empty(N, H, dtype=torch.float32) if lse_out is None else lse_out
        qop, kvp = qo_indptr.tolist(), kv_indptr.tolist()
        for b in range(len(qop) - 1):
            q0, q1, k0, k1 = qop[b], qop[b + 1], kvp[b], kvp[b + 1]
            mask = mptr = None
            if custom_mask is not None:
                m0, m1 = int(mask_indptr[b]), int(mask_indptr[b + 1])
                mask, mptr = custom_mask[m0:m1], torch.tensor([0, m1 - m0])
            try:
                o_b, lse_b = verify_attention_reference(
                    q[q0:q1], kv_cache, torch.tensor([0, k1 - k0]), kv_indices[k0:k1], k_extend[q0:q1], mask, mptr,
                    torch.tensor([0, q1 - q0]), sm_scale)
            except VerifyInputError:
                out[q0:q1], lse[q0:q1] = float("nan"), float("nan")
                continue
            out[q0:q1], lse[q0:q1] = o_b.to(out.dtype), lse_b.float()
        return out, lse
