"""One rank of a decode-context-parallel group running SGLang's real TritonAttnBackend on a
CPU (tests/sglang/test_sglang_dcp_*.py spawn 2 or 4 of them over gloo).

SGLang's DCP layout, reproduced from a `kernel.inputs.make_case` batch built with pages of
page_size * N slots (SGLang's DCP allocator pages the widened id space at page_size * dcp_size,
so slot % N == position % N): the case's slot ids are SGLang's widened ids, the case's pool
the unsharded cache; rank r holds the rows of the slots s with s % N == r, at row s // N of
its own pool (what `set_mla_kv_buffer` and `create_triton_kv_indices_for_dcp_triton` assume).

Real: ServerArgs publication with tp_size = dcp_size = N and this process's SpawnRanks,
`init_distributed_environment` (gloo), the DCP GroupCoordinator (`init_model_parallel_group`,
as `initialize_model_parallel` builds it; that function itself refuses DCP off CUDA), and
everything Harness builds. Stand-ins: as in Harness.
"""
from __future__ import annotations

import torch

from ..checks import HEAD_DIM
from .harness import Harness, publish_server_args


def init_rank(rank: int, world: int, init_method: str, model_dir, *, draft_tokens: int, page_size: int = 1):
    """This process as DCP rank `rank` of `world`: published ServerArgs, WORLD and the DCP group."""
    from sglang.srt import runtime_context
    from sglang.srt.distributed import parallel_state as ps

    publish_server_args(model_dir, device="cpu", draft_tokens=draft_tokens, page_size=page_size, tp_size=world,
                        dcp_size=world, ranks=runtime_context.SpawnRanks(world_rank=rank))
    ps.init_distributed_environment(world_size=world, rank=rank, distributed_init_method=init_method,
                                    local_rank=rank, backend="gloo", timeout=120)
    group = ps.init_model_parallel_group([list(range(world))], rank, "gloo", use_pynccl=False,
                                         use_custom_allreduce=False, use_mscclpp=False,
                                         use_torch_symm_mem_allreduce=False, group_name="dcp")
    runtime_context.get_parallel().override_permanently(dcp_group=group)
    return group


def depths(parents: list[int]) -> list[int]:
    """Depth of every node of a draft tree (parents precede children; root -1)."""
    out = []
    for p in parents:
        out.append(0 if p < 0 else out[p] + 1)
    return out


class DcpHarness(Harness):
    """Harness for rank `rank` of `world`: `heads` query heads per rank (the layer's
    tp_q_head_num), heads * world in the model (attention TP = world). Cases are the unsharded
    batches (widened ids); `rank_heads` slices this rank's heads of a [N, H_all, ...] tensor."""

    def __init__(self, *, rank: int, world: int, heads: int = 2, **kw):
        self.rank, self.world = rank, world
        super().__init__(heads=heads, total_heads=heads * world, **kw)

    def rank_heads(self, t: torch.Tensor) -> torch.Tensor:
        return t[:, self.rank * self.heads:(self.rank + 1) * self.heads]

    def layer_inputs(self, case, seed: int = 0):
        qs, ks = super().layer_inputs(case, seed)
        return [self.rank_heads(q).contiguous() for q in qs], ks

    def _fill_pools(self, case, draft_tokens: int, seed: int) -> None:
        dev, n, r = self.device, self.world, self.rank
        if -(-case.kv_cache.shape[0] // n) + -(-draft_tokens // n) + self.page_size > self.pool_slots:
            raise ValueError(f"case pool of {case.kv_cache.shape[0]} widened slots does not fit {n} ranks of "
                             f"pool_slots={self.pool_slots}")
        owned = case.kv_indices.to(dev)
        mine = owned[owned % n == r]
        g = torch.Generator(device=dev).manual_seed(2000 + seed)
        for layer in range(self.layers):
            buf = self.layer_pool(layer)
            buf.fill_(float("nan"))
            if layer == 0:
                rows = case.kv_cache.to(device=dev, dtype=buf.dtype)[mine]
            else:   # the same seeded rows on every rank, this rank's share kept
                full = torch.randn(owned.numel(), 1, HEAD_DIM, generator=g, device=dev).to(buf.dtype)
                rows = full[owned % n == r]
            buf[mine // n] = rows

    def _draft_slots(self, n: int) -> torch.Tensor:
        widened = self.pool_slots * self.world
        return torch.arange(widened - n, widened, dtype=torch.int64, device=self.device)

    def _load(self, case, pad_to: int | None = None, seed: int = 0):
        fb = super()._load(case, pad_to, seed)
        # tree positions (prefix length + depth), which SGLang's own DCP KV write keys on
        pos = [S + d for S, parents in zip(case.meta["prefix_lens"], case.meta["parents"]) for d in depths(parents)]
        fb.positions = torch.tensor(pos + [0] * (fb.out_cache_loc.numel() - len(pos)), dtype=torch.int64,
                                    device=self.device)
        return fb

    def load_extend(self, case, seed: int = 0):
        """The case's draft tokens as a plain causal EXTEND after their prefixes (what a chain
        verify computes): SGLang's EXTEND metadata, which its DCP path shards."""
        from sglang.srt.model_executor.forward_batch_info import ForwardMode

        fb = self._load(case, seed=seed)
        S, T = case.meta["prefix_lens"], case.meta["draft_lens"]
        dev = self.device
        fb.forward_mode = ForwardMode.EXTEND
        fb.extend_prefix_lens = torch.tensor(S, dtype=torch.int32, device=dev)
        fb.extend_seq_lens = torch.tensor(T, dtype=torch.int32, device=dev)
        fb.extend_prefix_lens_cpu, fb.extend_seq_lens_cpu = list(S), list(T)
        fb.seq_lens_cpu = torch.tensor([s + t for s, t in zip(S, T)], dtype=torch.int64)
        fb.seq_lens, fb.seq_lens_sum = fb.seq_lens_cpu.to(dev), int(fb.seq_lens_cpu.sum())
        fb.spec_info = None
        fb.positions = torch.tensor([s + i for s, t in zip(S, T) for i in range(t)], dtype=torch.int64, device=dev)
        return fb

    def run_extend(self, case, backend=None, seed: int = 0, save_kv_cache: bool = False):
        """SGLang's EXTEND forward of the case's draft tokens, layer 0: [N, heads, 512]."""
        backend = backend or self.backend
        fb = self.load_extend(case, seed)
        backend.init_forward_metadata(fb)
        q, k = (x[0].to(self.device) for x in self.layer_inputs(case, seed))
        o = backend.forward_extend(q.reshape(q.shape[0], self.heads * HEAD_DIM), k, k[..., :512].contiguous(),
                                   self.layer, fb, save_kv_cache=save_kv_cache)
        return o.view(-1, self.heads, 512)

