"""The TARGET_VERIFY spec input of each speculative algorithm the harness drives, shaped as its
worker builds it (SGLang's triton backend reads only `custom_mask` and `num_tokens_per_req` of it,
triton_backend.py:586-590, 636-638, 1051, 1321-1328):

- EAGLE / EAGLE3 / NEXTN: a FULL_MASK tree of draft_tokens per request (the harness's original
  stand-in: a namespace with those two fields; EagleVerifyInput carries many more).
- DFLASH (SGLang 0.5.23, dflash_worker_v2.py:2820-2831): the real DFlashVerifyInput, custom_mask
  None (a causal block), draft_token_num = the block size, with the worker's KVLocPlan (planned
  over the block, read_extent = block, :2588-2597) and its host bound seq_lens_sum = prefix +
  block per request (:2620-2628, so kv_indices is over-allocated), as `worker_metadata` gives.
- DDTREE (SGLang pull request #29907, ddtree_worker.py `_build_flat_tree_mask`, ddtree_info.py):
  a flat bool mask of D x (prefix + D) per request, D = budget + 1 for every request, padding
  rows all False; topk 1 (spine) or 2 (full tree). 0.5.23 has no DDTreeVerifyInput, so
  `DDTreeVerifyShape` holds its fields on SGLang's SpecInput. Its num_tokens_per_req is D: the
  backend takes the verify width from it, and a port to 0.5.23 must set it (as DFlashVerifyInput
  does), since the server's speculative_num_draft_tokens stays the block size (the pull request's
  test: 16 drafted, 33 verified).
"""
from __future__ import annotations

import types
from dataclasses import dataclass

import torch

ALGORITHMS = ("EAGLE", "DFLASH", "DDTREE")


def _ddtree_class():
    from sglang.srt.speculative.spec_info import SpecInput, SpecInputType

    @dataclass
    class DDTreeVerifyShape(SpecInput):
        """DDTreeVerifyInput's verify-time fields (pull request #29907) on 0.5.23's SpecInput."""
        draft_token: torch.Tensor
        positions: torch.Tensor
        draft_token_num: int
        tree_budget: int
        custom_mask: torch.Tensor | None = None
        topk: int = 1
        actual_tree_sizes: torch.Tensor | None = None
        num_tokens_per_req: int = -1

        def __post_init__(self):
            # the pull request adds DDTREE_VERIFY; the backend never reads the type, and DDTree's
            # worker is DFLASH's (DDTreeWorker extends DFlashWorkerV2)
            super().__init__(spec_input_type=SpecInputType.DFLASH_VERIFY)
            if self.num_tokens_per_req == -1:
                self.num_tokens_per_req = int(self.draft_token_num)
    return DDTreeVerifyShape


_DDTREE = None


def ddtree_verify_shape(**fields):
    """A DDTreeVerifyShape (created on first use: SGLang is imported then, not at import)."""
    global _DDTREE
    if _DDTREE is None:
        _DDTREE = _ddtree_class()
    return _DDTREE(**fields)


def worker_metadata(algorithm: str, translator, *, req_pool_indices, seq_lens, seq_lens_cpu, write_virtual,
                    width: int):
    """(KVLocPlan, seq_lens_sum) as the algorithm's worker hands them to the verify forward: DFLASH
    plans over its block and bounds the host lengths by prefix + block; the others plan the prefix
    and sum it."""
    from sglang.srt.mem_cache.kv_loc_plan import KVLocPlan

    if algorithm == "DFLASH":
        plan = translator.plan(req_pool_indices=req_pool_indices, seq_lens=seq_lens, seq_lens_cpu=seq_lens_cpu,
                               write_virtual=write_virtual, read_extent=width)
        return plan, int((seq_lens_cpu + width).sum())
    plan = KVLocPlan(source=translator, req_pool_indices=req_pool_indices, seq_lens=seq_lens,
                     seq_lens_cpu=seq_lens_cpu, write_virtual=write_virtual)
    return plan, int(seq_lens_cpu.sum())


def verify_input(algorithm: str, case, *, width: int, seq_lens: torch.Tensor, mask, plan, device):
    """The spec input of one TARGET_VERIFY batch of `case` (a kernel.inputs case, every request
    `width` tokens; `seq_lens` may hold CUDA-graph dummies past the case's requests, `mask` the
    case's flat mask on `device` or None)."""
    if algorithm not in ALGORITHMS:
        raise ValueError(f"algorithm: {algorithm!r} is not one of {', '.join(ALGORITHMS)}")
    if algorithm == "EAGLE":
        return types.SimpleNamespace(custom_mask=mask, num_tokens_per_req=width)
    bs = seq_lens.shape[0]
    tokens = torch.zeros(bs * width, dtype=torch.int64, device=device)
    if algorithm == "DFLASH":
        from sglang.srt.speculative.dflash_info import DFlashVerifyInput

        if mask is not None:
            raise ValueError("DFLASH verifies a causal block: its worker passes custom_mask=None, the case has a mask")
        positions = (seq_lens[:, None] + torch.arange(width, device=device)[None]).flatten()
        return DFlashVerifyInput(draft_token=tokens, positions=positions, draft_token_num=width, custom_mask=None,
                                 kv_loc_plan=plan)
    if mask is None:
        raise ValueError("DDTREE verifies a tree: its worker always builds a custom_mask, the case has none")
    m = case.meta
    sizes = m.get("tree_sizes") or m["draft_lens"]
    depth = torch.zeros(bs, width, dtype=torch.int64)
    for b, parents in enumerate(m["parents"]):
        for i, p in enumerate(parents):
            depth[b, i] = 0 if p < 0 else depth[b, p] + 1
    positions = (seq_lens[:, None].cpu() + depth).flatten().to(device)
    return ddtree_verify_shape(draft_token=tokens, positions=positions, draft_token_num=width,
                               tree_budget=width - 1, custom_mask=mask.bool(), topk=m.get("topk", 2),
                               actual_tree_sizes=torch.tensor(list(sizes) + [1] * (bs - len(sizes)), device=device))
