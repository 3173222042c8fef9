"""The LSE arithmetic of SGLang's decode-context-parallel attention, on tensors.

Two merges, both exactly as SGLang 0.5.23 writes them (natural-log LSE, as our kernel returns):
- `merge_into`: the end of `TritonAttnBackend._forward_extend_dcp`
  (srt/layers/attention/triton_backend.py): this rank's draft-block result (own heads) with
  the cross-rank prefix result (own heads), into the layer's output, writing only into buffers
  the caller holds (the plugin's DCP path calls it once per layer, inside CUDA graphs);
- `simulated_ranks_merge`: what `cp_lse_ag_out_rs_mha` (srt/layers/dcp/comm.py) hands each of
  N ranks (all-gather of the LSEs, all-reduce of the LSE-scaled outputs, this rank's slice of
  heads), computed for all N simulated ranks in one process: the single-GPU simulation
  (kernel/sglang/dcp_sim.py) has no process group. tests/sglang check it against SGLang's
  own function on a gloo group.
"""
from __future__ import annotations

import torch


def merge_into(out: torch.Tensor, prefix_out: torch.Tensor, prefix_lse: torch.Tensor, draft_out: torch.Tensor,
               draft_lse: torch.Tensor, tmp_lse: torch.Tensor, tmp_a: torch.Tensor, tmp_b: torch.Tensor,
               acc: torch.Tensor) -> torch.Tensor:
    """out = prefix_out * exp(prefix_lse - L) + draft_out * exp(draft_lse - L), L = logaddexp.

    Shapes: out [N, H, D] (any float dtype, written), prefix_out / draft_out [N, H, D],
    prefix_lse / draft_lse [N, H] fp32 natural log (-inf: the part saw no key);
    tmp_lse, tmp_a, tmp_b [N, H] fp32 and acc [N, H, D] fp32 are scratch. A weight that is
    NaN (both parts -inf) becomes 0, so a row that sees nothing comes out 0, as in SGLang.
    Returns out."""
    torch.logaddexp(prefix_lse, draft_lse, out=tmp_lse)
    for lse, w in ((prefix_lse, tmp_a), (draft_lse, tmp_b)):
        torch.sub(lse, tmp_lse, out=w)
        w.exp_()
        w.nan_to_num_(nan=0.0, posinf=0.0, neginf=0.0)
    torch.mul(prefix_out, tmp_a.unsqueeze(-1), out=acc)
    acc.addcmul_(draft_out, tmp_b.unsqueeze(-1))
    out.copy_(acc)
    return out


def simulated_ranks_merge(outs: list[torch.Tensor], lses: list[torch.Tensor]) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """cp_lse_ag_out_rs_mha(outs[r], lses[r], group, return_lse=True) for every rank r of a
    simulated group of len(outs) ranks.

    outs[r]: [N, H_all, D] fp32, rank r's partial over its prefix shard for all gathered heads;
    lses[r]: [N, H_all] fp32 natural-log LSE. Returns per rank (out [N, H_all / n, D],
    lse [N, H_all / n]): the merged result for rank r's own heads (block r of the gathered
    heads, SGLang's all_gather order)."""
    n = len(outs)
    if n < 1 or len(lses) != n:
        raise ValueError(f"outs/lses: need the same number (>= 1) of ranks, got {len(outs)} and {len(lses)}")
    H = lses[0].shape[1]
    if H % n:
        raise ValueError(f"lses: {H} gathered heads do not split over {n} ranks")
    stacked = torch.stack([lse.contiguous() for lse in lses])          # the all_gather
    global_lse = torch.logsumexp(stacked, dim=0)
    total = torch.zeros_like(outs[0])
    for out, lse in zip(outs, lses):
        scale = torch.exp(lse - global_lse).unsqueeze(-1).nan_to_num(nan=0.0, posinf=0.0, neginf=0.0)
        total += out.nan_to_num(nan=0.0, posinf=0.0, neginf=0.0) * scale   # the all_reduce
    h = H // n
    return [(total[:, r * h:(r + 1) * h].contiguous(), global_lse[:, r * h:(r + 1) * h].contiguous())
            for r in range(n)]
