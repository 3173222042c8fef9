"""The real TritonAttnBackend of harness.py fed EXTEND batches (issue 26): causal cases of
kernel.inputs.make_case (prefix lengths, new-token lengths) through SGLang's own EXTEND metadata
(init_forward_metadata) and forward_extend per layer, which writes the new tokens' KV rows into
the pool as SGLang does (save_kv_cache) before the attention runs. Eager only: SGLang 0.5.23 runs
prefill attention outside its CUDA graphs. Stand-ins as in harness.py (ForwardBatch fields the
EXTEND path reads).
"""
from __future__ import annotations

import types

import torch

from .harness import Harness


class ExtendHarness(Harness):
    """Harness whose batches are EXTENDs: `run_extend(case, mode="EXTEND")` per layer, the new
    tokens' slots at the end of the pool (`new_slots`), each layer's q and k as for TARGET_VERIFY."""

    def load_extend(self, case, mode: str = "EXTEND", seed: int = 0, new: torch.Tensor | None = None,
                    fill: bool = True):
        """Copy the case's pool (every layer) and request rows in; the EXTEND ForwardBatch stand-in.
        Request b's row of req_to_token holds its prefix slots, then its new tokens' slots: `new`,
        or the end of the pool. fill=False leaves the pools as they are: a later chunk of a
        chunked prefill reads the rows the earlier chunks' forward_extend wrote."""
        from sglang.srt.mem_cache.kv_loc_plan import KVLocPlan
        from sglang.srt.model_executor.forward_batch_info import ForwardMode

        if case.custom_mask is not None:
            raise ValueError("case: an EXTEND is causal (make_case(..., causal=True))")
        S, T = case.meta["prefix_lens"], case.meta["draft_lens"]
        bs, N, dev = len(S), sum(T), self.device
        if bs > self.max_bs:
            raise ValueError(f"case: {bs} requests exceed the request pool of {self.max_bs}")
        if fill:
            self._fill_pools(case, N, seed)
        new = self.new_slots(N) if new is None else new.to(dev)
        r2t = self.req_to_token_pool.req_to_token
        r2t.zero_()
        owned, kvp, qop = case.kv_indices.to(dev), case.kv_indptr.tolist(), case.qo_indptr.tolist()
        for b in range(bs):
            r2t[b + 1, :S[b]] = owned[kvp[b]:kvp[b + 1]].to(torch.int32)
            r2t[b + 1, S[b]:S[b] + T[b]] = new[qop[b]:qop[b + 1]].to(torch.int32)
        req_pool_indices = torch.arange(1, bs + 1, dtype=torch.int64, device=dev)
        prefix_cpu = torch.tensor(S, dtype=torch.int64)
        plan = KVLocPlan(source=self.translator, req_pool_indices=req_pool_indices, seq_lens=prefix_cpu.to(dev),
                         seq_lens_cpu=prefix_cpu, write_virtual=new)
        seq_cpu = prefix_cpu + torch.tensor(T, dtype=torch.int64)
        return types.SimpleNamespace(
            forward_mode=getattr(ForwardMode, mode), batch_size=bs, req_pool_indices=req_pool_indices,
            seq_lens=seq_cpu.to(dev), seq_lens_cpu=seq_cpu, seq_lens_sum=int(seq_cpu.sum()), kv_loc_plan=plan,
            extend_prefix_lens=prefix_cpu.to(dev), extend_prefix_lens_cpu=list(S),
            extend_seq_lens=torch.tensor(T, dtype=torch.int64, device=dev), extend_seq_lens_cpu=list(T),
            spec_info=None, out_cache_loc=new, out_cache_loc_is_physical=False, encoder_lens=None,
            mha_one_shot=False, attn_attend_prefix_cache=False, mha_return_lse=False, positions=None)

    def new_slots(self, n: int) -> torch.Tensor:
        """The pool slots the n new tokens are written to (the end of the pool, as the draft's)."""
        return self._draft_slots(n)

    def run_extend(self, case, backend=None, mode: str = "EXTEND", seed: int = 0, new: torch.Tensor | None = None,
                   fill: bool = True):
        """SGLang's eager EXTEND: init_forward_metadata, then forward_extend per layer (load_extend's
        mode, new, fill). Returns layer 0's output [N, H, 512] for one layer, else the list per layer."""
        backend = backend or self.backend
        fb = self.load_extend(case, mode, seed, new, fill)
        backend.init_forward_metadata(fb)
        qs, ks = self.layer_inputs(case, seed)
        outs = self._forward(backend, fb, [q.to(self.device) for q in qs], [k.to(self.device) for k in ks])
        return outs[0] if self.layers == 1 else outs
