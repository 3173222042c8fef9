"""A real SGLang TritonAttnBackend fed TARGET_VERIFY batches built from kernel.inputs.make_case
through SGLang's own metadata builders, on the CPU (tests/sglang, Triton's interpreter) or on
CUDA (kernel/sglang/gpu_check.py, with real CUDA graphs).

Real: TritonAttnBackend (built through the class, so the plugin's hook runs), MLATokenToKVPool,
ReqToTokenPool, KVIndexTranslator, KVLocPlan, RadixAttention, ForwardMode, the published
ServerArgs context, and the metadata code (init_forward_metadata for eager;
init_cuda_graph_state + init_forward_metadata_out_graph for the CUDA-graph form, with the
capture-time metadata reused on replay and padded dummy requests as SGLang's runner pads).
Stand-ins: the ModelRunner, ModelConfig and ForwardBatch, as namespaces holding only the
fields those code paths read; the spec input of the algorithm under test (spec_inputs.py): the
real DFlashVerifyInput with its worker's KVLocPlan for DFLASH, DDTree's fields (pull request
#29907) on SGLang's SpecInput for DDTREE, a namespace for EAGLE.
"""
from __future__ import annotations

import contextlib
import os
import types
from dataclasses import dataclass, field

import torch

from ..checks import HEAD_DIM, V_DIM
from ..fp8 import FP8_MAX, FP8_NAN_BYTES, check_scale, quantize_mla_rows
from ..reference import verify_attention_reference
from .spec_inputs import ALGORITHMS, verify_input, worker_metadata

DRAFT = 8          # --speculative-num-draft-tokens of the published ServerArgs
CONTEXT = 1024     # model context length: bounds req_to_token rows and the mask buffer
MAX_BS = 4         # request pool size = max batch (eager and graph)
POOL_SLOTS = 8192  # token slots per layer pool; every case's pool is copied into the front
SWITCH = "MLA_VERIFY_BACKEND"


def speculative_settings(draft_tokens: int) -> dict:
    """EAGLE steps/topk/draft tokens that SGLang accepts for `draft_tokens` per request."""
    if draft_tokens < 2:
        raise ValueError(f"draft_tokens: a tree needs at least 2 tokens, got {draft_tokens}")
    steps = 3 if draft_tokens <= 8 else 5
    return dict(speculative_algorithm="EAGLE", speculative_num_steps=steps, speculative_eagle_topk=4,
                speculative_num_draft_tokens=draft_tokens)


def publish_server_args(model_dir, *, device: str, draft_tokens: int = DRAFT, page_size: int = 1, ranks=None,
                        **fields) -> None:
    """Publish the ServerArgs a TARGET_VERIFY scheduler of this deployment would have (what
    TritonAttnBackend reads through runtime_context): triton, EAGLE, `draft_tokens` per request;
    `fields` are further ServerArgs fields (tp_size, dcp_size), `ranks` this process's SpawnRanks."""
    from sglang.srt import runtime_context
    from sglang.srt.server_args import ServerArgs

    runtime_context.publish(ServerArgs(model_path=str(model_dir), device=device, attention_backend="triton",
                                       page_size=page_size, **speculative_settings(draft_tokens), **fields),
                            role="scheduler", ranks=ranks)


@contextlib.contextmanager
def switch(arm: str | None):
    """MLA_VERIFY_BACKEND=arm while a backend is built (None: leave the environment alone)."""
    if arm is None:
        yield
        return
    before = os.environ.get(SWITCH)
    os.environ[SWITCH] = arm
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(SWITCH, None)
        else:
            os.environ[SWITCH] = before


@dataclass
class _Graph:
    """One backend's captured TARGET_VERIFY: the fixed inputs a graph reads, its outputs."""
    bs: int
    fb: types.SimpleNamespace
    q: list[torch.Tensor]
    k: list[torch.Tensor]
    out: list[torch.Tensor] = field(default_factory=list)
    cuda_graph: object = None


class Harness:
    """One model runner (pools, request table) and its target backends; `layers` MLA layers,
    each with its own latent pool, as the model has. `run_eager` / `capture` / `replay` feed
    a VerifyCase (layer 0's inputs; other layers get seeded random rows at the same slots).

    algorithm: whose spec input the batches carry (spec_inputs.ALGORITHMS). draft: the server's
    draft tokens per request (the runner's decode_num_tokens_per_req, what the backend sizes its
    graph state and its own defaults by); verify_width: the tokens each request verifies, when
    the algorithm's spec input says otherwise (DDTree: D = budget + 1 against a block of draft)."""

    def __init__(self, *, heads=8, page_size=1, dtype=torch.bfloat16, kv_dtype=None, draft_worker=False,
                 arch=None, sliding_window_size=None, layers=1, draft=DRAFT, max_bs=MAX_BS, context=CONTEXT,
                 pool_slots=POOL_SLOTS, device="cpu", arm=None, total_heads=None, algorithm="EAGLE",
                 verify_width=None):
        import transformers
        from sglang.srt.configs.model_config import AttentionArch
        from sglang.srt.layers.radix_attention import RadixAttention
        from sglang.srt.mem_cache.kv_index_translator import KVIndexTranslator
        from sglang.srt.mem_cache.memory_pool import MLATokenToKVPool, ReqToTokenPool

        if algorithm not in ALGORITHMS:
            raise ValueError(f"algorithm: {algorithm!r} is not one of {', '.join(ALGORITHMS)}")
        self.heads, self.page_size, self.dtype, self.layers = heads, page_size, dtype, layers
        self.draft, self.max_bs, self.pool_slots, self.device = draft, max_bs, pool_slots, torch.device(device)
        self.algorithm, self.width = algorithm, verify_width or draft
        kv_dtype = kv_dtype or dtype
        model_config = types.SimpleNamespace(
            attention_arch=AttentionArch.MLA if arch is None else arch,
            get_max_num_attention_heads=lambda: total_heads or heads,  # the model's, before attention TP
            get_num_kv_heads=lambda tp, dcp=1: 1, qk_nope_head_dim=128, qk_rope_head_dim=64,
            v_head_dim=V_DIM, swa_v_head_dim=None, context_len=context, head_dim=HEAD_DIM,
            is_encoder_decoder=False, kv_lora_rank=V_DIM, linear_attn_registry_result=None,
            hf_config=transformers.DeepseekV3Config(num_hidden_layers=layers))
        self.req_to_token_pool = ReqToTokenPool(size=max_bs, max_context_len=context, device=str(self.device),
                                                enable_memory_saver=False)
        self.pool = MLATokenToKVPool(size=pool_slots, page_size=page_size, dtype=kv_dtype, kv_lora_rank=V_DIM,
                                     qk_rope_head_dim=HEAD_DIM - V_DIM, layer_num=layers, device=str(self.device),
                                     enable_memory_saver=False)
        self.translator = KVIndexTranslator(req_to_token=self.req_to_token_pool.req_to_token,
                                            token_to_kv_pool_allocator=None, token_to_kv_pool=self.pool,
                                            page_size=page_size, device=str(self.device))
        self.runner = types.SimpleNamespace(
            req_to_token_pool=self.req_to_token_pool, token_to_kv_pool=self.pool, token_to_kv_pool_allocator=None,
            sliding_window_size=sliding_window_size, page_size=page_size, kv_index_translator=self.translator,
            decode_num_tokens_per_req=lambda: draft, model_config=model_config, is_draft_worker=draft_worker,
            spec_algorithm=None, device=str(self.device), gpu_id=self.device.index or 0, kv_cache_dtype=kv_dtype)
        self.radix = [RadixAttention(heads, HEAD_DIM, 192 ** -0.5, num_kv_heads=1, layer_id=i, v_head_dim=V_DIM)
                      for i in range(layers)]
        self.layer = self.radix[0]
        self._graphs: dict[int, _Graph] = {}
        self._graph_state: set[int] = set()
        self.backend = self.build_backend(arm)

    def build_backend(self, arm: str | None = None):
        """Another TritonAttnBackend over the same pools, built under MLA_VERIFY_BACKEND=arm
        (None: as the environment says); the plugin's hook decides its verify path."""
        from sglang.srt.layers.attention.triton_backend import TritonAttnBackend

        with switch(arm):
            return TritonAttnBackend(self.runner)

    # -- inputs ------------------------------------------------------------------------
    def layer_inputs(self, case, seed: int = 0):
        """Per layer (q [N, H, 576], k [N, 1, 576]): layer 0 is the case's, the others seeded
        random tensors of the same shapes (the pools get matching rows in `_load`)."""
        qs, ks = [case.q.to(self.dtype)], [case.k_extend.to(self.dtype)]
        g = torch.Generator(device=case.q.device).manual_seed(1000 + seed)
        for layer in range(1, self.layers):
            qs.append(torch.randn(case.q.shape, generator=g, device=case.q.device).to(self.dtype))
            k = torch.randn(case.k_extend.shape, generator=g, device=case.q.device)
            ks.append(self._in_fp8_range(k, layer).to(self.dtype))
        return qs, ks

    def _in_fp8_range(self, rows: torch.Tensor, layer: int) -> torch.Tensor:
        """Seeded filler rows of a layer past 0, clamped where an fp8 pool's k_scale cannot hold
        them: SGLang's cast to e4m3fn does not saturate, so a 5-sigma draw past the case's own
        largest row (k_scale = max |row| / 448 of layer 0) would store NaN, on both arms alike."""
        scale = self.radix[layer].k_scale_float if self._as_bytes else None
        return rows if scale is None else rows.clamp(-FP8_MAX * scale, FP8_MAX * scale)

    def layer_pool(self, layer: int) -> torch.Tensor:
        """Layer `layer`'s latent pool [slots + page, 1, 576] (V = its first 512 columns)."""
        return self.pool.kv_buffer[layer]

    def _load(self, case, pad_to: int | None = None, seed: int = 0):
        """Copy the case's pool (every layer) and request rows in; return the ForwardBatch stand-in."""
        from sglang.srt.model_executor.forward_batch_info import ForwardMode

        S, T = case.meta["prefix_lens"], case.meta["draft_lens"]
        W = self.width
        if any(t != W for t in T):
            raise ValueError(f"draft_lens: SGLang verifies {W} tokens per request, got {T}")
        bs, N = len(S), sum(T)
        if bs > self.max_bs or (pad_to or 0) > self.max_bs:
            raise ValueError(f"case: {bs} requests (padded to {pad_to}) exceed the request pool of {self.max_bs}")
        dev = self.device
        owned = case.kv_indices.to(dev)
        self._fill_pools(case, (pad_to or bs) * W, seed)
        draft_slots = self._draft_slots((pad_to or bs) * W)
        r2t = self.req_to_token_pool.req_to_token
        r2t.zero_()
        kvp = case.kv_indptr.tolist()
        for b in range(bs):
            r2t[b + 1, :S[b]] = owned[kvp[b]:kvp[b + 1]].to(torch.int32)
            r2t[b + 1, S[b]:S[b] + T[b]] = draft_slots[b * W:(b + 1) * W].to(torch.int32)
        req_pool_indices = torch.arange(1, bs + 1, dtype=torch.int64, device=dev)
        seq_lens_cpu = torch.tensor(S, dtype=torch.int64)
        out_cache_loc = draft_slots[:N]
        if pad_to is not None and pad_to > bs:
            # CUDA-graph padding as SGLang's runner does it: dummy requests on row 0 with
            # seq_len = get_cuda_graph_seq_len_fill_value(), writing to the padding slot.
            extra = pad_to - bs
            fill = self.backend.get_cuda_graph_seq_len_fill_value()
            req_pool_indices = torch.cat([req_pool_indices, torch.zeros(extra, dtype=torch.int64, device=dev)])
            seq_lens_cpu = torch.cat([seq_lens_cpu, torch.full((extra,), fill, dtype=torch.int64)])
            out_cache_loc = torch.cat([out_cache_loc, torch.zeros(extra * W, dtype=torch.int64, device=dev)])
            bs = pad_to
        seq_lens = seq_lens_cpu.to(dev)
        mask = None if case.custom_mask is None else case.custom_mask.to(dev)
        plan, seq_lens_sum = worker_metadata(self.algorithm, self.translator, req_pool_indices=req_pool_indices,
                                             seq_lens=seq_lens, seq_lens_cpu=seq_lens_cpu,
                                             write_virtual=out_cache_loc, width=W)
        spec_info = verify_input(self.algorithm, case, width=W, seq_lens=seq_lens, mask=mask, plan=plan, device=dev)
        return types.SimpleNamespace(
            forward_mode=ForwardMode.TARGET_VERIFY, batch_size=bs, req_pool_indices=req_pool_indices,
            seq_lens=seq_lens, seq_lens_sum=seq_lens_sum, seq_lens_cpu=seq_lens_cpu, kv_loc_plan=plan,
            spec_info=spec_info, out_cache_loc=out_cache_loc, out_cache_loc_is_physical=False, encoder_lens=None,
            mha_one_shot=False, attn_attend_prefix_cache=False, extend_seq_lens_cpu=[W] * bs,
            mha_return_lse=False, positions=None)

    def _fill_pools(self, case, draft_tokens: int, seed: int) -> None:
        """Every layer's pool: the case's rows (layer 0) or seeded random rows at its slots."""
        slots, dev = case.kv_cache.shape[0], self.device
        if slots + draft_tokens + self.page_size > self.pool_slots:
            raise ValueError(f"case pool of {slots} slots does not fit pool_slots={self.pool_slots}")
        owned = case.kv_indices.to(dev)
        g = torch.Generator(device=dev).manual_seed(2000 + seed)
        for layer in range(self.layers):
            buf = self.layer_pool(layer)
            buf.fill_(FP8_NAN_BYTES[0] if self._as_bytes else float("nan"))  # unowned slots poison stray reads
            if layer == 0:
                buf[:slots] = self._as_stored(case.kv_cache.to(dev))
            elif owned.numel():
                rows = self._in_fp8_range(torch.randn(owned.numel(), 1, HEAD_DIM, generator=g, device=dev), layer)
                scale = self.radix[layer].k_scale_float
                if self._as_bytes and self.radix[layer].k_scale is not None:
                    # as SGLang writes a scaled fp8 layer: the model-dtype row / k_scale, then e4m3
                    rows = quantize_mla_rows(rows.to(self.dtype), scale)
                buf[owned] = self._as_stored(rows)

    def set_kv_scales(self, k_scale: float, v_scale: float) -> None:
        """Every layer's KV scales as SGLang's Fp8 KV-cache method leaves them after loading
        (kv_cache.py process_weights_after_loading): fp32 0-dim tensors on the device (the write
        path divides by k_scale) and Python floats (the descales the attention kernels get).
        Layer 0's pool rows are the case's own: draw the case with the same k_scale."""
        k_scale, v_scale = check_scale("k_scale", k_scale), check_scale("v_scale", v_scale)
        for layer in self.radix:
            layer.k_scale = torch.tensor(k_scale, dtype=torch.float32, device=self.device)
            layer.v_scale = torch.tensor(v_scale, dtype=torch.float32, device=self.device)
            layer.k_scale_float, layer.v_scale_float = k_scale, v_scale

    @property
    def _as_bytes(self) -> bool:
        # SGLang keeps an fp8 pool as uint8 bytes (store_dtype) and views them as e4m3fn
        return self.pool.store_dtype != self.pool.dtype

    def _as_stored(self, rows: torch.Tensor) -> torch.Tensor:
        """Rows in the pool's storage dtype: an fp8 pool takes their e4m3 bytes."""
        if self._as_bytes:
            return rows.to(self.pool.dtype).view(self.pool.store_dtype)
        return rows.to(self.pool.store_dtype)

    def _draft_slots(self, n: int) -> torch.Tensor:
        """Free slots at the end of the pool for n draft tokens, as the spec worker allocates them."""
        return torch.arange(self.pool_slots - n, self.pool_slots, dtype=torch.int64, device=self.device)

    def _forward(self, backend, fb, qs, ks):
        """Every layer's forward_extend, as RadixAttention hands it over; [N, H, 512] each."""
        outs = []
        for layer, q, k in zip(self.radix, qs, ks):
            v = k[..., :V_DIM].contiguous()  # MLA: v = k_nope, the latent part of k
            o = backend.forward_extend(q.reshape(q.shape[0], self.heads * HEAD_DIM), k, v, layer, fb)
            outs.append(o.view(-1, self.heads, V_DIM))
        return outs

    def _padded(self, t: torch.Tensor, rows: int) -> torch.Tensor:
        if t.shape[0] == rows:
            return t.to(self.device).contiguous()
        pad = torch.zeros((rows - t.shape[0], *t.shape[1:]), dtype=t.dtype, device=self.device)
        return torch.cat([t.to(self.device), pad])

    # -- the two forms SGLang runs ------------------------------------------------------
    def run_eager(self, case, backend=None, seed: int = 0):
        """SGLang's eager TARGET_VERIFY: init_forward_metadata, then forward_extend per layer.
        Returns layer 0's output [N, H, 512] for one layer, else the list per layer."""
        backend = backend or self.backend
        fb = self._load(case, seed=seed)
        backend.init_forward_metadata(fb)
        qs, ks = self.layer_inputs(case, seed)
        outs = self._forward(backend, fb, [q.to(self.device) for q in qs], [k.to(self.device) for k in ks])
        return outs[0] if self.layers == 1 else outs

    def capture(self, case, graph_bs: int, backend=None, cuda_graph: bool = False, seed: int = 0):
        """The CUDA-graph form at batch `graph_bs` (padded with dummy requests): SGLang's fixed
        buffers, metadata built for capture, then the layers run once (cuda_graph=False) or
        captured into a torch.cuda.CUDAGraph after a warm-up run. Returns the outputs as for
        run_eager, real rows only."""
        backend = backend or self.backend
        if id(backend) not in self._graph_state:
            backend.init_cuda_graph_state(self.max_bs, self.max_bs * self.width)
            self._graph_state.add(id(backend))
        fb = self._load(case, pad_to=graph_bs, seed=seed)
        rows = graph_bs * self.width
        qs, ks = self.layer_inputs(case, seed)
        g = _Graph(graph_bs, fb, [self._padded(q, rows) for q in qs], [self._padded(k, rows) for k in ks])
        backend.init_forward_metadata_out_graph(fb, in_capture=True)
        if cuda_graph:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):   # warm-up: Triton compiles, nothing allocates later
                self._forward(backend, fb, g.q, g.k)
            torch.cuda.current_stream().wait_stream(side)
            g.cuda_graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g.cuda_graph):
                g.out = self._forward(backend, fb, g.q, g.k)
        else:
            g.out = self._forward(backend, fb, g.q, g.k)
        self._graphs[id(backend)] = g
        return self._real(g.out, case)

    def replay(self, case, backend=None, seed: int = 0):
        """Replay with a new batch of at most the captured size: its rows go into the captured
        inputs (q, k, write slots), SGLang refills its buffers in place (in_capture=False), and
        the capture-time metadata and batch are reused, as in SGLang's graph runner."""
        backend = backend or self.backend
        g = self._graphs[id(backend)]
        fb = self._load(case, pad_to=g.bs, seed=seed)
        rows = g.bs * self.width
        qs, ks = self.layer_inputs(case, seed)
        for dst, src in zip(g.q + g.k, qs + ks):
            dst.copy_(self._padded(src, rows))
        g.fb.out_cache_loc.copy_(fb.out_cache_loc)
        backend.init_forward_metadata_out_graph(fb, in_capture=False)
        if g.cuda_graph is not None:
            g.cuda_graph.replay()
            out = g.out
        else:
            out = self._forward(backend, g.fb, g.q, g.k)
        return self._real(out, case)

    def replay_graph(self, backend=None) -> None:
        """Replay `backend`'s captured graph on the inputs it holds (for timing; CUDA only)."""
        g = self._graphs[id(backend or self.backend)]
        if g.cuda_graph is None:
            raise ValueError("replay_graph: this capture ran without a CUDA graph (cuda_graph=False)")
        g.cuda_graph.replay()

    def _real(self, outs, case):
        n = case.q.shape[0]
        outs = [o[:n] for o in outs]
        return outs[0] if self.layers == 1 else outs

    def oracle(self, case, layer: int = 0, seed: int = 0) -> torch.Tensor:
        """Float64 oracle [N, H, 512] of `layer` for the case as last loaded (its pool rows; an
        fp8 pool read through its e4m3 view with the layer's k_scale_float / v_scale_float, or
        1.0 for a layer without scales, as TritonAttnBackend.forward_extend passes them)."""
        qs, ks = self.layer_inputs(case, seed)
        pool = self.layer_pool(layer)
        pool = pool.view(self.pool.dtype) if self._as_bytes else pool
        radix = self.radix[layer]
        scales = {} if radix.k_scale_float is None else dict(k_scale=radix.k_scale_float, v_scale=radix.v_scale_float)
        if self._as_bytes and (radix.k_scale is None or radix.v_scale is None):
            scales = dict(k_scale=1.0, v_scale=1.0)   # triton_backend.py: descales only with both scales
        return verify_attention_reference(qs[layer].to(self.device), pool, case.kv_indptr.to(self.device),
                                          case.kv_indices.to(self.device), ks[layer].to(self.device),
                                          None if case.custom_mask is None else case.custom_mask.to(self.device),
                                          None if case.mask_indptr is None else case.mask_indptr.to(self.device),
                                          case.qo_indptr.to(self.device), self.layer.scaling, **scales)[0]


def oracle(case):
    """Float64 oracle output [N, H, 512] of a case's own tensors (an fp8 case with its scales)."""
    return verify_attention_reference(*case.args(), **case.kwargs())[0]


def rel_err(a, b) -> float:
    """Frobenius relative error of a against b, computed in float64."""
    a, b = a.double(), b.double()
    return float((a - b).norm() / b.norm())
