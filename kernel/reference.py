"""The float64 oracle: MLA tree-verify attention on SGLang's TARGET_VERIFY tensors.

Every number this project reports is checked against this function. It is written for
clarity, not speed: per request it gathers the prefix rows through `kv_indices`, appends
the draft rows from `k_extend`, and applies the tree mask to the draft block only
(SGLang's `skip_prefix_custom_mask=True`: every draft token sees the whole prefix).
A draft row that sees no draft node (a DDTree padding node) attends to the prefix alone; a row
that sees no key at all (such a row over an empty prefix) gives o = 0 and lse = -inf, as
SGLang's extend_attention_fwd and the CUDA kernel do (1 / l taken as 0 for l = 0).
An fp8 pool is dequantized first, exactly as SGLang's kernels read it (kernel/fp8.py):
prefix K = row * k_scale, prefix V = row[:512] * v_scale; the draft rows are used as given.
"""
from __future__ import annotations

import torch

from .checks import _FLOATS, V_DIM, VerifyInputError, check_shapes, check_values
from .fp8 import FP8, check_scale, dequantize_keys, dequantize_values, is_fp8


def draft_tree(custom_mask, mask_indptr, b: int, T: int, S: int, device) -> torch.Tensor:
    """[T, T] bool: which of request b's T draft tokens each of its draft rows sees (the last T
    columns of its FULL_MASK block; every prefix key is seen). custom_mask None: causal."""
    if custom_mask is None:
        return torch.ones(T, T, dtype=torch.bool, device=device).tril()
    m0 = int(mask_indptr[b])
    return custom_mask[m0: m0 + T * (S + T)].view(T, S + T)[:, S:].bool()


def verify_attention_reference(q, kv_cache, kv_indptr, kv_indices, k_extend, custom_mask,
                               mask_indptr, qo_indptr, sm_scale, *, k_scale=None, v_scale=None):
    """Float64 MLA tree-verify attention.

    Args (SGLang's names and layouts; bs requests, request b has S_b prefix tokens and
    T_b draft tokens, N = sum T_b):
      q:           [N, H, 576] float (absorbed: 512 latent + 64 rope)
      kv_cache:    [num_slots, 1, 576] float, the MLA pool; V is the first 512 columns
      kv_indptr:   [bs + 1] int32/int64, prefix offsets into kv_indices (S_b = diff)
      kv_indices:  [>= kv_indptr[-1]] int32/int64, one pool slot per prefix token
      k_extend:    [N, 1, 576] float, the draft tokens' own latent rows
      custom_mask: [>= mask_indptr[-1]] bool/uint8, FULL_MASK layout: request b is a
                   row-major [T_b, S_b + T_b] block at mask_indptr[b]; only its last T_b
                   columns (the tree, ancestor-or-self; a row with no True there is a
                   padding node, checks.tree_violation) are read. None means causal
                   (a chain: draft token i sees draft tokens 0..i).
      mask_indptr: [bs + 1] int32/int64 (None when custom_mask is None)
      qo_indptr:   [bs + 1] int32/int64, draft-token offsets (T_b = diff)
      sm_scale:    float, softmax scale on q.k (SGLang's layer.scaling)
    Keyword args (SGLang's k_descale / v_descale, layer.k_scale_float / v_scale_float):
      k_scale:     float > 0, multiplies the prefix keys (all 576 columns of kv_cache rows);
                   required when kv_cache is float8_e4m3fn, optional (default: none) otherwise
      v_scale:     float > 0, multiplies the prefix values (the first 512 columns); required
                   with an fp8 kv_cache. Neither touches k_extend (SGLang reads the draft
                   rows unscaled, from the model's own k).
    Returns:
      o:   [N, H, 512] float64 (0 for a row that sees no key)
      lse: [N, H] float64, natural-log log-sum-exp of the scaled logits (-inf: no key)
    Raises VerifyInputError naming the argument and value on malformed input.
    """
    check_shapes(q, kv_cache, kv_indptr, kv_indices, k_extend, custom_mask, mask_indptr, qo_indptr, sm_scale,
                 kv_dtypes=_FLOATS + (FP8,))
    if is_fp8(kv_cache):
        for name, value in (("k_scale", k_scale), ("v_scale", v_scale)):
            if value is None:
                raise VerifyInputError(f"{name}: required with an fp8 kv_cache ({str(kv_cache.dtype)[6:]}): "
                                       "pass the layer's scale (SGLang's layer.k_scale_float / v_scale_float; 1.0 "
                                       "when the checkpoint has none)")
    k_scale = None if k_scale is None else check_scale("k_scale", k_scale)
    v_scale = None if v_scale is None else check_scale("v_scale", v_scale)
    check_values(q, kv_cache, kv_indptr, kv_indices, k_extend, custom_mask, mask_indptr, qo_indptr)
    kvp, qop = kv_indptr.tolist(), qo_indptr.tolist()
    N, H, D = q.shape
    o = torch.empty(N, H, V_DIM, dtype=torch.float64, device=q.device)
    lse = torch.empty(N, H, dtype=torch.float64, device=q.device)
    for b in range(len(qop) - 1):
        q0, q1, k0, k1 = qop[b], qop[b + 1], kvp[b], kvp[b + 1]
        T, S = q1 - q0, k1 - k0
        if T == 0:
            continue
        rows = kv_cache[kv_indices[k0:k1].long(), 0]                                              # [S, 576]
        draft = k_extend[q0:q1, 0].double()                                                        # [T, 576]
        prefix_k = rows.double() if k_scale is None else dequantize_keys(rows, k_scale)
        keys = torch.cat([prefix_k, draft])                                                        # [S+T, 576]
        if v_scale == k_scale:          # one scale (or none): V is a view of K, as in the pool
            values = keys[:, :V_DIM]
        else:
            prefix_v = rows[:, :V_DIM].double() if v_scale is None else dequantize_values(rows, v_scale)
            values = torch.cat([prefix_v, draft[:, :V_DIM]])                                       # [S+T, 512]
        logits = torch.einsum("thd,kd->thk", q[q0:q1].double(), keys) * sm_scale                # [T, H, S+T]
        tree = draft_tree(custom_mask, mask_indptr, b, T, S, q.device)
        allowed = torch.cat([torch.ones(T, S, dtype=torch.bool, device=q.device), tree], 1)
        logits = logits.masked_fill(~allowed[:, None, :], float("-inf"))
        lse_b = torch.logsumexp(logits, -1)                                                        # [T, H]
        probs = torch.softmax(logits, -1)                                                          # NaN where no key
        probs = torch.where(torch.isneginf(lse_b)[..., None], torch.zeros((), dtype=probs.dtype), probs)
        lse[q0:q1] = lse_b
        o[q0:q1] = probs @ values
    return o, lse
