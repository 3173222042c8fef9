"""A real SGLang TritonAttnBackend on the CPU, fed TARGET_VERIFY batches built from
kernel.inputs.make_case through SGLang's own metadata builders.

Real: TritonAttnBackend, MLATokenToKVPool, ReqToTokenPool, KVIndexTranslator, KVLocPlan,
RadixAttention, ForwardMode, the published ServerArgs context, and the metadata code
(init_forward_metadata for eager; init_cuda_graph_state + init_forward_metadata_out_graph
for the CUDA-graph form). Stand-ins: the ModelRunner, ModelConfig, ForwardBatch and spec
info, as namespaces holding only the fields those code paths read.
"""
from __future__ import annotations

import types

import torch
import transformers
from sglang.srt.configs.model_config import AttentionArch
from sglang.srt.layers.attention.triton_backend import TritonAttnBackend
from sglang.srt.layers.radix_attention import RadixAttention
from sglang.srt.mem_cache.kv_index_translator import KVIndexTranslator
from sglang.srt.mem_cache.kv_loc_plan import KVLocPlan
from sglang.srt.mem_cache.memory_pool import MLATokenToKVPool, ReqToTokenPool
from sglang.srt.model_executor.forward_batch_info import ForwardMode

from kernel.checks import HEAD_DIM, V_DIM
from kernel.reference import verify_attention_reference

DRAFT = 8         # --speculative-num-draft-tokens of the published ServerArgs (conftest)
CONTEXT = 1024    # model context length: bounds req_to_token rows and the mask buffer
MAX_BS = 4        # request pool size = max batch (eager and graph)
POOL_SLOTS = 8192  # token slots per pool; every case's pool is copied into the front


class Harness:
    """One backend over one MLA pool; `run` feeds it a VerifyCase, eager or graph form."""

    def __init__(self, *, heads=8, page_size=1, dtype=torch.bfloat16, kv_dtype=None, draft_worker=False,
                 arch=AttentionArch.MLA, sliding_window_size=None):
        self.heads, self.page_size, self.dtype = heads, page_size, dtype
        kv_dtype = kv_dtype or dtype
        model_config = types.SimpleNamespace(
            attention_arch=arch, get_max_num_attention_heads=lambda: heads,
            get_num_kv_heads=lambda tp, dcp=1: 1, qk_nope_head_dim=128, qk_rope_head_dim=64,
            v_head_dim=V_DIM, swa_v_head_dim=None, context_len=CONTEXT, head_dim=HEAD_DIM,
            is_encoder_decoder=False, kv_lora_rank=V_DIM, linear_attn_registry_result=None,
            hf_config=transformers.DeepseekV3Config(num_hidden_layers=1))
        self.req_to_token_pool = ReqToTokenPool(size=MAX_BS, max_context_len=CONTEXT, device="cpu",
                                                enable_memory_saver=False)
        self.pool = MLATokenToKVPool(size=POOL_SLOTS, page_size=page_size, dtype=kv_dtype, kv_lora_rank=V_DIM,
                                     qk_rope_head_dim=HEAD_DIM - V_DIM, layer_num=1, device="cpu",
                                     enable_memory_saver=False)
        translator = KVIndexTranslator(req_to_token=self.req_to_token_pool.req_to_token,
                                       token_to_kv_pool_allocator=None, token_to_kv_pool=self.pool,
                                       page_size=page_size, device="cpu")
        self.runner = types.SimpleNamespace(
            req_to_token_pool=self.req_to_token_pool, token_to_kv_pool=self.pool, token_to_kv_pool_allocator=None,
            sliding_window_size=sliding_window_size, page_size=page_size, kv_index_translator=translator,
            decode_num_tokens_per_req=lambda: DRAFT, model_config=model_config, is_draft_worker=draft_worker,
            spec_algorithm=None, device="cpu", gpu_id=0, kv_cache_dtype=kv_dtype)
        self.translator = translator
        self.backend = TritonAttnBackend(self.runner)
        self.layer = RadixAttention(heads, HEAD_DIM, 192 ** -0.5, num_kv_heads=1, layer_id=0, v_head_dim=V_DIM)
        self._graph_bs = None

    # -- one TARGET_VERIFY batch ------------------------------------------------------
    def _load(self, case, pad_to: int | None = None):
        """Copy the case's pool and request rows in; return the ForwardBatch stand-in."""
        S, T = case.meta["prefix_lens"], case.meta["draft_lens"]
        if any(t != T[0] for t in T) or T[0] != DRAFT:
            raise ValueError(f"draft_lens: SGLang verifies {DRAFT} tokens per request, got {T}")
        bs, N, P = len(S), sum(T), self.page_size
        slots = case.kv_cache.shape[0]
        if slots + N + P > POOL_SLOTS:
            raise ValueError(f"case pool of {slots} slots does not fit POOL_SLOTS={POOL_SLOTS}")
        buf = self.pool.kv_buffer[0]
        buf.fill_(float("nan"))  # unowned slots poison any stray read
        buf[:slots] = case.kv_cache.to(buf.dtype)
        # Draft tokens get free slots past the case's pool, as the spec worker allocates them.
        draft_slots = torch.arange(POOL_SLOTS - N, POOL_SLOTS, dtype=torch.int64)
        r2t = self.req_to_token_pool.req_to_token
        r2t.zero_()
        kvp = case.kv_indptr.tolist()
        for b in range(bs):
            r2t[b + 1, :S[b]] = case.kv_indices[kvp[b]:kvp[b + 1]].to(torch.int32)
            r2t[b + 1, S[b]:S[b] + T[b]] = draft_slots[b * DRAFT:(b + 1) * DRAFT].to(torch.int32)
        req_pool_indices = torch.arange(1, bs + 1, dtype=torch.int64)
        seq_lens = torch.tensor(S, dtype=torch.int64)
        out_cache_loc = draft_slots
        if pad_to is not None and pad_to > bs:
            # CUDA-graph padding as SGLang's runner does it: dummy requests on row 0 with
            # seq_len = get_cuda_graph_seq_len_fill_value(), writing to the padding slot.
            extra = pad_to - bs
            fill = self.backend.get_cuda_graph_seq_len_fill_value()
            req_pool_indices = torch.cat([req_pool_indices, torch.zeros(extra, dtype=torch.int64)])
            seq_lens = torch.cat([seq_lens, torch.full((extra,), fill, dtype=torch.int64)])
            out_cache_loc = torch.cat([out_cache_loc, torch.zeros(extra * DRAFT, dtype=torch.int64)])
            bs = pad_to
        spec_info = types.SimpleNamespace(custom_mask=case.custom_mask, num_tokens_per_req=DRAFT)
        plan = KVLocPlan(source=self.translator, req_pool_indices=req_pool_indices, seq_lens=seq_lens,
                         seq_lens_cpu=seq_lens, write_virtual=out_cache_loc)
        return types.SimpleNamespace(
            forward_mode=ForwardMode.TARGET_VERIFY, batch_size=bs, req_pool_indices=req_pool_indices,
            seq_lens=seq_lens, seq_lens_sum=int(seq_lens.sum()), seq_lens_cpu=seq_lens, kv_loc_plan=plan,
            spec_info=spec_info, out_cache_loc=out_cache_loc, out_cache_loc_is_physical=False, encoder_lens=None,
            mha_one_shot=False, attn_attend_prefix_cache=False, extend_seq_lens_cpu=[DRAFT] * bs,
            mha_return_lse=False, positions=None)

    def _forward(self, case, fb, pad_rows=0):
        H = self.heads
        q = case.q.to(self.dtype)
        k = case.k_extend.to(self.dtype)
        if pad_rows:
            q = torch.cat([q, torch.zeros(pad_rows, H, HEAD_DIM, dtype=self.dtype)])
            k = torch.cat([k, torch.zeros(pad_rows, 1, HEAD_DIM, dtype=self.dtype)])
        v = k[..., :V_DIM].contiguous()  # MLA: v = k_nope, the latent part of k
        o = self.backend.forward_extend(q.reshape(q.shape[0], H * HEAD_DIM), k, v, self.layer, fb)
        return o.view(-1, H, V_DIM)[:case.q.shape[0]]

    def run_eager(self, case):
        """SGLang's eager TARGET_VERIFY: init_forward_metadata, then forward_extend."""
        fb = self._load(case)
        self.backend.init_forward_metadata(fb)
        return self._forward(case, fb)

    def capture(self, case, graph_bs: int):
        """The CUDA-graph form at batch `graph_bs`: fixed buffers, metadata built in capture."""
        if self._graph_bs is None:
            self.backend.init_cuda_graph_state(MAX_BS, MAX_BS * DRAFT)
        self._graph_bs = graph_bs
        fb = self._load(case, pad_to=graph_bs)
        self.backend.init_forward_metadata_out_graph(fb, in_capture=True)
        return self._forward(case, fb, pad_rows=(graph_bs - len(case.meta["prefix_lens"])) * DRAFT)

    def replay(self, case):
        """Replay: refill the same buffers for new lengths; the captured metadata is reused."""
        fb = self._load(case, pad_to=self._graph_bs)
        self.backend.init_forward_metadata_out_graph(fb, in_capture=False)
        return self._forward(case, fb, pad_rows=(self._graph_bs - len(case.meta["prefix_lens"])) * DRAFT)


def oracle(case):
    """Float64 oracle output [N, H, 512] for a case."""
    return verify_attention_reference(*case.args())[0]


def rel_err(a, b) -> float:
    """Frobenius relative error of a against b, computed in float64."""
    a, b = a.double(), b.double()
    return float((a - b).norm() / b.norm())
