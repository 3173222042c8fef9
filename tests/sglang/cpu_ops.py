"""CPU stand-in for kernel.ops: the float64 oracle behind kernel.ops' API, cast to bf16.

It records every call so tests can check what the adapter handed the kernel. It reads
lengths on the host (the real kernel must not); requests whose slice the oracle rejects
(CUDA-graph padding: dummy requests with stale tree masks) get NaN rows. As the kernel does,
it reads request b's mask block from mask_indptr[b] only (T_b * (S_b + T_b) cells; the
plugin's DCP path points every request at one shared all-zero block). Rows that see no draft
node (DDTree's padding nodes, the DCP path's prefix-only call) attend to the prefix alone, and
a row that sees no key gets lse = -inf and o = 0, as the oracle gives them (kernel/csrc:
1 / l = 0 for l = 0).

with_lse=False (what the plugin's verify call site passes) returns (out, None), as kernel.ops does.

KV scales as kernel.ops takes them: with a float8_e4m3fn kv_cache, k_scale and v_scale are
required positive finite floats and go to the oracle (prefix K = e4m3 * k_scale, V =
e4m3[:512] * v_scale); with bf16 they must be None or 1.0. A violation raises
VerifyInputError, as kernel.ops does before launching, so an adapter that drops or invents a
scale shows up as a fallback, not as a silent pass.
"""
from __future__ import annotations

import types

import torch

from kernel.checks import VerifyInputError
from kernel.fp8 import FP8
from kernel.ops import kernel_scales
from kernel.reference import verify_attention_reference


class CpuOps:
    def __init__(self):
        self.calls: list[dict] = []
        self.workspaces: dict = {}

    def record_pool_rows(self, slots) -> list:
        """From now on each call also records the pool's rows at `slots` as the kernel saw them (did
        SGLang's KV write run first?); the list returned grows by one tensor a call."""
        seen, call = [], self.verify_attention

        def verify_attention(q, kv_cache, *args, **kwargs):
            seen.append(kv_cache[slots].clone())
            return call(q, kv_cache, *args, **kwargs)
        self.verify_attention = verify_attention
        return seen

    def scale_outputs(self, factor: float) -> None:
        """From now on every output is multiplied by `factor`: a kernel that is wrong by that much
        (this instance is the test's own, so nothing needs restoring)."""
        call = self.verify_attention

        def verify_attention(*args, **kwargs):
            out, lse = call(*args, **kwargs)
            out.mul_(factor)
            return out, lse
        self.verify_attention = verify_attention

    def get_workspace(self, device):
        """One workspace per device, as kernel.ops caches it (max_bs as its default)."""
        return self.workspaces.setdefault(torch.device(device), types.SimpleNamespace(max_bs=4096))

    def verify_attention(self, q, kv_cache, kv_indptr, kv_indices, k_extend, custom_mask, mask_indptr,
                         qo_indptr, sm_scale, *, k_scale=None, v_scale=None, out=None, lse_out=None,
                         workspace=None, max_draft_len=None, with_lse=True):
        scales = _scales(kv_cache, k_scale, v_scale)
        if not with_lse and lse_out is not None:
            raise VerifyInputError("lse_out: given with with_lse=False (the kernel writes no LSE then)")
        self.calls.append(dict(q=q, kv_cache=kv_cache, kv_indptr=kv_indptr, kv_indices=kv_indices,
                               k_extend=k_extend, custom_mask=custom_mask, mask_indptr=mask_indptr,
                               qo_indptr=qo_indptr, sm_scale=sm_scale, k_scale=k_scale, v_scale=v_scale,
                               out=out, lse_out=lse_out, workspace=workspace, max_draft_len=max_draft_len,
                               with_lse=with_lse))
        N, H, _ = q.shape
        out = torch.empty(N, H, 512, dtype=q.dtype) if out is None else out
        lse = torch.empty(N, H, dtype=torch.float32) if lse_out is None else lse_out
        qop, kvp = qo_indptr.tolist(), kv_indptr.tolist()
        for b in range(len(qop) - 1):
            q0, q1, k0, k1 = qop[b], qop[b + 1], kvp[b], kvp[b + 1]
            mask = mptr = None
            if custom_mask is not None:
                m0, cells = int(mask_indptr[b]), (q1 - q0) * (k1 - k0 + q1 - q0)
                mask, mptr = custom_mask[m0:m0 + cells], torch.tensor([0, cells])
            try:
                o_b, lse_b = verify_attention_reference(
                    q[q0:q1], kv_cache, torch.tensor([0, k1 - k0]), kv_indices[k0:k1], k_extend[q0:q1], mask,
                    mptr, torch.tensor([0, q1 - q0]), sm_scale, **scales)
            except VerifyInputError:
                out[q0:q1], lse[q0:q1] = float("nan"), float("nan")
                continue
            out[q0:q1], lse[q0:q1] = o_b.to(out.dtype), lse_b.float()
        return out, (lse if with_lse else None)


def _scales(kv_cache, k_scale, v_scale) -> dict:
    """The oracle's scale keywords for this pool, checked by kernel.ops' own check."""
    k, v = kernel_scales(kv_cache.dtype == FP8, k_scale, v_scale)
    return dict(k_scale=k, v_scale=v) if kv_cache.dtype == FP8 else {}
