"""The real TritonAttnBackend of harness.py fed EXTEND batches (issue 26): causal cases of
kernel.inputs.make_case (prefix lengths, new-token lengths) through SGLang's own EXTEND metadata
(init_forward_metadata) and forward_extend per layer, which writes the new tokens' KV rows into
the pool as SGLang does (save_kv_cache) before the attention runs. EXTEND is eager only: SGLang
0.5.23 runs prefill attention outside its CUDA graphs. Stand-ins as in harness.py (ForwardBatch
fields the EXTEND path reads).

EAGLE's draft extend (DRAFT_EXTEND_V2, on a Harness(draft_worker=True) backend: the draft runner's
extend backend) runs eagerly through `run_extend(case, mode="DRAFT_EXTEND_V2")`, and in its graph
form as SGLang's EAGLEDraftExtendCudaGraphRunner drives it: `capture_draft_extend` captures at one
batch size on the runner's dummy batch (fixed buffers, seq_lens at SGLang's fill value, no real
request: what SGLang captures at server start), `replay_draft_extend` copies a real batch into
those buffers as the runner's execute() does (padding requests on row 0), refills the backend's
metadata (init_forward_metadata_out_graph, in_capture=False) and replays.
"""
from __future__ import annotations

import types
from dataclasses import dataclass, field

import torch

from ..checks import HEAD_DIM
from .harness import Harness


@dataclass
class _DraftGraph:
    """One backend's captured DRAFT_EXTEND_V2 at batch `bs`: the runner's fixed buffers (max_bs
    requests), the capture batch over them, the layers' fixed q/k inputs and their outputs."""
    bs: int
    width: int
    fill: int
    buffers: types.SimpleNamespace
    fb: types.SimpleNamespace
    q: list[torch.Tensor]
    k: list[torch.Tensor]
    out: list[torch.Tensor] = field(default_factory=list)
    cuda_graph: object = None
    metadata: object = None   # the backend's capture-time ForwardMetadata (over its graph buffers)


class ExtendHarness(Harness):
    """Harness whose batches are EXTENDs: `run_extend(case, mode="EXTEND")` per layer, the new
    tokens' slots at the end of the pool (`new_slots`), each layer's q and k as for TARGET_VERIFY."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._draft_captures: dict[int, _DraftGraph] = {}

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

    # -- EAGLE's draft-extend CUDA graph (EAGLEDraftExtendCudaGraphRunner) -------------------
    def capture_draft_extend(self, graph_bs: int, backend=None, cuda_graph: bool = False, seed: int = 0):
        """Capture DRAFT_EXTEND_V2 at `graph_bs` requests as SGLang's runner does at start: its fixed
        buffers at their initial values (seq_lens = the fill value, row 0, writes to slot 1), the
        capture batch bound to them (bind_runner_slots), the backend's graph state and capture-time
        metadata, then every layer once (cuda_graph=False) or captured after a warm-up run.
        Requests carry the backend's num_draft_tokens new tokens each, as the runner's width."""
        from sglang.srt.model_executor.forward_batch_info import ForwardMode
        from sglang.srt.speculative.eagle_draft_extend_cuda_graph_runner import (
            resolve_draft_extend_seq_len_fill_value)

        backend = backend or self.backend
        if graph_bs > self.max_bs:
            raise ValueError(f"graph_bs: {graph_bs} exceeds the request pool of {self.max_bs}")
        W, m, dev = backend.num_draft_tokens, self.max_bs, self.device
        if id(backend) not in self._graph_state:
            backend.init_cuda_graph_state(m, m * W)
            self._graph_state.add(id(backend))
        fill = resolve_draft_extend_seq_len_fill_value(backend, W)
        buf = types.SimpleNamespace(
            req_pool_indices=torch.zeros(m, dtype=torch.int64, device=dev),
            seq_lens=torch.full((m,), fill, dtype=torch.int64, device=dev),
            seq_lens_cpu=torch.full((m,), fill, dtype=torch.int64),
            extend_seq_lens=torch.full((m,), W, dtype=torch.int32, device=dev),
            out_cache_loc=torch.ones(m * W, dtype=torch.int64, device=dev),
            accepted=torch.full((m,), W, dtype=torch.int32, device=dev))
        bs, n = graph_bs, graph_bs * W
        fb = types.SimpleNamespace(
            forward_mode=ForwardMode.DRAFT_EXTEND_V2, batch_size=bs, req_pool_indices=buf.req_pool_indices[:bs],
            seq_lens=buf.seq_lens[:bs], seq_lens_cpu=buf.seq_lens_cpu[:bs],
            seq_lens_sum=int(buf.seq_lens_cpu[:bs].sum()),
            extend_seq_lens=buf.extend_seq_lens[:bs], extend_seq_lens_cpu=[W] * bs, out_cache_loc=buf.out_cache_loc[:n],
            spec_info=self._draft_extend_input(W, buf.accepted[:bs]), encoder_lens=None, mha_one_shot=False,
            attn_attend_prefix_cache=False, mha_return_lse=False, positions=None)
        self.translator.bind_runner_slots(fb)
        g = torch.Generator(device=dev).manual_seed(3000 + seed)
        qs = [torch.randn(n, self.heads, HEAD_DIM, generator=g, device=dev).to(self.dtype) for _ in self.radix]
        ks = [torch.randn(n, 1, HEAD_DIM, generator=g, device=dev).to(self.dtype) for _ in self.radix]
        graph = _DraftGraph(bs, W, fill, buf, fb, qs, ks)
        backend.init_forward_metadata_out_graph(fb, in_capture=True)
        graph.metadata = backend.forward_metadata
        if cuda_graph:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):   # warm-up: Triton compiles, nothing allocates later
                self._forward(backend, fb, qs, ks)
            torch.cuda.current_stream().wait_stream(side)
            graph.cuda_graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph.cuda_graph):
                graph.out = self._forward(backend, fb, qs, ks)
        else:
            graph.out = self._forward(backend, fb, qs, ks)
        self._draft_captures[id(backend)] = graph
        return graph

    def replay_draft_extend(self, case, backend=None, seed: int = 0):
        """Replay the captured DRAFT_EXTEND_V2 with a real batch (`case`: causal, every request
        the runner's width of new tokens, at most the captured batch), as the runner's execute():
        the live batch (load_extend: pools, request rows, new slots) copied into the fixed
        buffers, the rest padded (row 0, the fill length, slot 0), the backend's buffers refilled
        in place (init_forward_metadata_out_graph, in_capture=False), then the graph (or, without
        one, the layers on the capture batch). Returns the real rows as run_extend does."""
        from sglang.srt.model_executor.forward_batch_info import ForwardMode

        backend = backend or self.backend
        graph = self._draft_captures[id(backend)]
        W, bs, buf = graph.width, graph.bs, graph.buffers
        S, T = case.meta["prefix_lens"], case.meta["draft_lens"]
        if any(t != W for t in T) or len(S) > bs:
            raise ValueError(f"case: EAGLE's draft extend runs {W} tokens for each of at most {bs} requests, "
                             f"got {T}")
        raw_bs, N = len(S), sum(T)
        live = self.load_extend(case, "DRAFT_EXTEND_V2", seed)
        if bs * W != N:
            buf.seq_lens.fill_(graph.fill)
            buf.out_cache_loc.zero_()
            buf.req_pool_indices.zero_()
            buf.extend_seq_lens.fill_(W)
            buf.seq_lens_cpu.fill_(graph.fill)
        buf.seq_lens[:raw_bs].copy_(live.seq_lens)            # prefix + W: the length after the write
        buf.seq_lens_cpu[:raw_bs].copy_(live.seq_lens_cpu)
        buf.out_cache_loc[:N].copy_(live.out_cache_loc)
        buf.req_pool_indices[:raw_bs].copy_(live.req_pool_indices)
        buf.extend_seq_lens[:raw_bs].copy_(live.extend_seq_lens)
        spec = self._draft_extend_input(W, buf.accepted[:bs])
        spec.extend_seq_lens_cpu, spec.extend_seq_lens_tensor = [W] * bs, buf.extend_seq_lens[:bs]
        view = types.SimpleNamespace(
            batch_size=bs, forward_mode=ForwardMode.DRAFT_EXTEND_V2, input_ids=None,
            req_pool_indices=buf.req_pool_indices, seq_lens=buf.seq_lens,
            seq_lens_sum=live.seq_lens_sum + (bs - raw_bs) * graph.fill, seq_lens_cpu=buf.seq_lens_cpu,
            max_seq_len_host=None, encoder_lens=None, out_cache_loc=buf.out_cache_loc[:N], out_cache_loc_virtual=None,
            kv_loc_plan=live.kv_loc_plan, kv_loc_cols=None, out_cache_loc_dsv4=None, mamba_track_indices=None,
            spec_info=spec)
        backend.init_forward_metadata_out_graph(view)
        qs, ks = self.layer_inputs(case, seed)
        for dst, src in zip(graph.q + graph.k, qs + ks):
            dst.copy_(self._padded(src, bs * W))
        if graph.cuda_graph is not None:
            graph.cuda_graph.replay()
            out = graph.out
        else:
            # what a replay reads: the capture-time metadata's buffers (an eager forward in between
            # left its own metadata on the backend)
            backend.forward_metadata = graph.metadata
            out = self._forward(backend, graph.fb, graph.q, graph.k)
        return self._real(out, case)

    def replay_draft_graph(self, backend=None) -> None:
        """Replay `backend`'s captured draft-extend graph on the inputs it holds (timing; CUDA only)."""
        graph = self._draft_captures[id(backend or self.backend)]
        if graph.cuda_graph is None:
            raise ValueError("replay_draft_graph: this capture ran without a CUDA graph (cuda_graph=False)")
        graph.cuda_graph.replay()

    @staticmethod
    def _draft_extend_input(width: int, accepted: torch.Tensor):
        """SGLang's EagleDraftExtendInput as the draft-extend runner builds it (no hidden states:
        attention reads none of it but the widths)."""
        from sglang.srt.speculative.eagle_info import EagleDraftExtendInput

        return EagleDraftExtendInput(hidden_states=None, num_correct_drafts=accepted - 1, num_accept_tokens=accepted,
                                     num_tokens_per_req=width, num_tokens_for_logprob_per_req=1)
