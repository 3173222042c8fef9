"""Canaries for the plugin's DCP verify path (kernel/sglang/dcp_verify.py): the SGLang 0.5.23
internals it hooks or calls, asserted against the installed SGLang, so a bump that moves any
of them fails here instead of in a DCP server.
"""
import ast
import inspect

from sglang.srt.layers.attention.triton_backend import TritonAttnBackend
from sglang.srt.layers.dcp import comm
from sglang.srt.mem_cache.memory_pool import MLATokenToKVPool
from sglang.srt.models.deepseek_common.attention_forward_methods import forward_mla

from kernel.sglang import plugin


def _fn(obj):
    src = inspect.cleandoc("\n" + inspect.getsource(inspect.unwrap(obj)))
    return ast.parse(src).body[0]


def _calls(fn, name):
    return [n for n in ast.walk(fn) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
            and n.func.attr == name]


def _params(obj):
    return list(inspect.signature(inspect.unwrap(obj)).parameters)


def test_forward_extend_hands_every_dcp_extend_to_the_hooked_method_with_these_arguments():
    fn = _fn(TritonAttnBackend.forward_extend)
    (call,) = _calls(fn, "_forward_extend_dcp")
    assert [ast.unparse(a) for a in call.args] == ["q", "k", "v", "layer", "forward_batch", "causal",
                                                  "logits_soft_cap", "sinks"]
    assert _params(TritonAttnBackend._forward_extend_dcp) == ["self", "q", "k", "v", "layer", "forward_batch",
                                                              "causal", "logits_soft_cap", "sinks"]
    # the KV write comes first, through the method the plugin replaces for MLA pools
    writes = _calls(fn, "_set_kv_buffer")
    assert writes and all(ast.unparse(w.args[0]) == "forward_batch" for w in writes)
    assert _params(TritonAttnBackend._set_kv_buffer) == ["self", "forward_batch", "layer", "loc_info", "k", "v",
                                                         "k_scale", "v_scale"]


def test_the_mla_pool_has_no_dcp_write_but_a_dcp_aware_latent_door():
    # why the plugin's _set_kv_buffer goes through set_mla_kv_buffer under DCP
    assert "dcp_kv_mask" not in _params(MLATokenToKVPool.set_kv_buffer)
    assert _params(MLATokenToKVPool.set_mla_kv_buffer)[:5] == ["self", "layer", "loc_info", "cache_k_nope",
                                                               "cache_k_rope"]
    assert "set_mla_kv_buffer_dcp_sharded_triton" in inspect.getsource(MLATokenToKVPool._scatter_mla_rows)


def test_sglang_shards_a_prefix_with_this_helper_and_merges_with_this_collective():
    assert _params(TritonAttnBackend._dcp_kv_indices) == ["self", "req_pool_indices", "lens", "kv_indptr",
                                                          "kv_indices", "kv_start_idx"]
    src = inspect.getsource(TritonAttnBackend._dcp_kv_indices)
    assert "create_triton_kv_indices_for_dcp_triton" in src and "self._dcp_lens(lens, kv_start_idx)" in src
    assert _params(comm.cp_lse_ag_out_rs_mha) == ["cp_attn_out", "cp_attn_lse", "cp_group", "return_lse"]
    # SGLang's own DCP extend merges the two parts as dcp_merge.merge_into does
    src = inspect.getsource(TritonAttnBackend._forward_extend_dcp)
    assert "final_lse = torch.logaddexp(prefix_lse, current_lse)" in src
    assert "cp_lse_ag_out_rs_mha(\n            prefix_out, prefix_lse, group, return_lse=True\n        )" in src


def test_the_model_gates_its_dcp_gather_and_merge_on_the_hooked_method():
    assert plugin.DCP_PHASE_TARGET.endswith("DeepseekMLAForwardMixin.is_dcp_mla_decode_phase")
    core = _fn(forward_mla.DeepseekMLAForwardMixin.forward_absorb_core)
    prepare = _fn(forward_mla.DeepseekMLAForwardMixin.forward_absorb_prepare)
    for fn in (core, prepare):
        assert _calls(fn, "is_dcp_mla_decode_phase"), fn.name
    # `lse` is bound only by the absorb-backend branch's attn_mqa_for_dcp_decode call
    bound = [n for n in ast.walk(core) if isinstance(n, ast.Assign)
             and any(isinstance(t, ast.Tuple) and any(getattr(e, "id", None) == "lse" for e in t.elts)
                     for t in n.targets)]
    assert len(bound) == 1 and "attn_mqa_for_dcp_decode" in ast.unparse(bound[0].value)


def test_target_verify_metadata_is_not_sharded_by_sglang():
    # why the plugin builds the shard itself: SGLang's TARGET_VERIFY branch and graph buffers
    # list the whole prefix (widened ids) even under DCP
    src = inspect.getsource(TritonAttnBackend._update_target_verify_buffers)
    assert "_dcp_kv_indices" not in src and "_fill_kv_indptr_and_indices" in src


def test_the_accept_path_moves_widened_ids_through_the_pool_s_move():
    from sglang.srt.speculative import spec_utils

    src = inspect.getsource(spec_utils.move_accept_tokens_to_target_kvcache)
    assert "token_to_kv_pool_allocator.get_kvcache().move_kv_cache(\n        tgt_cache_loc, accept_out_cache_loc\n    )" \
        in src
    # the pool's own move uses the ids as row numbers (dcp_kv_move.py replaces it under DCP)
    assert "kv_cache[tgt_loc_flat] = kv_cache[src_loc_flat]" in inspect.getsource(MLATokenToKVPool.move_kv_cache)
