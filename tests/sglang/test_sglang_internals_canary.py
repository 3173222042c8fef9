"""Canaries: every SGLang internal the plugin relies on, asserted against the installed SGLang.

CI installs the SGLang of requirements/sglang-cpu.lock; a bump that changes any of these
fails here (as does a bump that is not added to kernel/sglang/version.py's TESTED list),
before a server could give wrong tokens (a changed mask layout or index meaning) or run
SGLang's kernel while claiming ours (a renamed field, a new path around the call site).
"""
import ast
import importlib.util
import inspect
import types
from pathlib import Path

import pytest
import sglang
import torch
from sglang.srt.layers.attention import triton_backend
from sglang.srt.layers.attention.triton_backend import TritonAttnBackend
from sglang.srt.layers.attention.verify_mask import maybe_create_verify_mask
from sglang.srt.model_executor.forward_batch_info import ForwardMode
from sglang.srt.models.deepseek_common import attention_backend_handler
from sglang.srt.models.deepseek_common.utils import FORWARD_ABSORB_CORE_ATTENTION_BACKENDS
from sglang.srt.server_args import ServerArgs
from sglang.srt.speculative.eagle_utils import TreeMaskMode, default_tree_mask_mode

from kernel.inputs import make_case
from kernel.sglang import plugin, version
from kernel.sglang.harness import Harness
from kernel.sglang.strict import StrictFlashError


def test_installed_sglang_is_a_tested_version():
    assert sglang.__version__ in version.TESTED, \
        f"SGLang {sglang.__version__}: run these canaries, then add it to kernel/sglang/version.py TESTED"


def test_untested_version_refuses_flash_unless_overridden(monkeypatch):
    monkeypatch.delenv(version.OVERRIDE_ENV, raising=False)
    with pytest.raises(StrictFlashError, match="SGLang 0.5.24 is not a version the plugin was tested with .*"
                                               "MLA_VERIFY_ALLOW_UNTESTED_SGLANG=1"):
        version.check_sglang_version("0.5.24")
    monkeypatch.setenv(version.OVERRIDE_ENV, "1")
    assert version.check_sglang_version("0.5.24") == "0.5.24"


def _forward_extend():
    src = inspect.getsource(inspect.unwrap(TritonAttnBackend.forward_extend))
    return ast.parse(inspect.cleandoc("\n" + src) if src.startswith(" ") else src).body[0]


def _verify_call_site(fn):
    """The `if` whose test calls verify_fwd(...), and that call."""
    for node in ast.walk(fn):
        if isinstance(node, ast.If):
            for call in ast.walk(node.test):
                if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "verify_fwd":
                    return node, call
    raise AssertionError("forward_extend has no `if ... verify_fwd(...)` call site")


def test_call_site_gates_target_verify_and_hands_over_these_arguments():
    site, call = _verify_call_site(_forward_extend())
    gate = ast.unparse(site.test)
    assert "verify_fwd is not None" in gate and "score_mod is None" in gate
    assert "forward_batch.forward_mode.is_target_verify()" in gate
    assert [ast.unparse(a) for a in call.args] == [
        "q.view(-1, layer.tp_q_head_num, layer.qk_head_dim)", "k.contiguous()", "v.contiguous()",
        "o.view(-1, layer.tp_q_head_num, layer.v_head_dim)",
        "self.token_to_kv_pool.get_key_buffer(layer.layer_id)",
        "self.token_to_kv_pool.get_value_buffer(layer.layer_id)", "self.forward_metadata.qo_indptr", "kv_indptr",
        "kv_indices", "self.forward_metadata.custom_mask", "causal", "self.forward_metadata.mask_indptr",
        "self.forward_metadata.max_extend_len", "k_descale", "v_descale", "layer.scaling"]
    assert {k.arg: ast.unparse(k.value) for k in call.keywords} == {
        "logit_cap": "logits_soft_cap", "sliding_window_size": "sliding_window_size", "sinks": "sinks",
        "window_kv_offsets": "window_kv_offsets", "xai_temperature_len": "layer.xai_temperature_len",
        "max_bs": "self.req_to_token_pool.size"}
    assert [ast.unparse(s) for s in site.body] == ["return o"]


def test_verify_slot_is_chosen_from_the_instance_fields_at_call_time():
    src = ast.unparse(_forward_extend())
    assert "if self.use_verify_shared_kv:\n        verify_fwd = self.verify_shared_kv_fwd" in src
    # the fields the plugin overwrites after __init__ are read nowhere else in the module
    module = inspect.getsource(triton_backend)
    assert module.count("self.use_verify_shared_kv") == 2      # assigned in __init__, read at the call site
    assert module.count("self.verify_shared_kv_fwd") == 2


def test_paths_around_the_call_site_are_the_known_ones():
    # Every early return before the call site is a way for TARGET_VERIFY to miss the kernel;
    # strict.py refuses each one that a CUDA server can take. A new one must be added there.
    fn = _forward_extend()
    site, _ = _verify_call_site(fn)
    guards = []
    for stmt in fn.body:
        if stmt is site:
            break
        if isinstance(stmt, ast.If) and any(isinstance(n, ast.Return) for n in ast.walk(stmt)):
            guards.append(ast.unparse(stmt.test).split("\n")[0])
    assert guards == [
        "k is not None and v is not None and (sinks is None) and (score_mod is None) and (aux_tensors is None) "
        "and self._can_run_dense_fp8_chunked_mha(q, k, v, layer, forward_batch)",   # gfx95 fp8 192/128 only
        "forward_batch.mha_one_shot and (not forward_batch.attn_attend_prefix_cache) and (k is not None) "
        "and (k.shape[0] != q.shape[0])",                                         # MHA prefill only
        "self.dcp_size > 1",                                                      # dcp_verify.py
        "self.enable_deterministic",                                              # strict: deterministic
    ], guards


def test_tree_mask_is_full_mask_on_gpus():
    assert default_tree_mask_mode() == TreeMaskMode.FULL_MASK
    vm = maybe_create_verify_mask(is_draft_runner=False, skip_prefill=False, max_bs=2, max_context_len=16,
                                  num_draft_tokens=4, device="cpu", is_read=True, dtype=torch.uint8)
    assert vm.mode == TreeMaskMode.FULL_MASK and vm.buffer.numel() >= 2 * 4 * (16 + 4)


@pytest.mark.parametrize("graph", [False, True])
@pytest.mark.parametrize("page_size", [1, 64])
def test_mask_is_t_times_s_plus_t_and_indices_are_per_token(flash, graph, page_size):
    h = Harness(page_size=page_size)
    case = make_case([70, 5, 130], [8, 8, 8], 8, tree="random", page_size=page_size, seed=9)
    h.capture(case, graph_bs=4) if graph else h.run_eager(case)
    c = flash.calls[-1]
    S, T = [70, 5, 130], 8
    mask_len = (c["mask_indptr"][1:4] - c["mask_indptr"][:3]).tolist()
    assert mask_len == [T * (s + T) for s in S]
    assert (c["kv_indptr"][1:4] - c["kv_indptr"][:3]).tolist() == S    # one index per prefix token
    assert torch.equal(c["kv_indices"][:sum(S)], case.kv_indices)      # the pool's own slot ids, any page size


def test_triton_is_not_an_absorb_core_backend_and_verify_takes_the_mla_path():
    assert "triton" not in FORWARD_ABSORB_CORE_ATTENTION_BACKENDS   # so q arrives as cat(q_nope_out, q_pe): 576
    fb = types.SimpleNamespace(forward_mode=ForwardMode.TARGET_VERIFY, extend_prefix_lens_cpu=[100])
    attn = types.SimpleNamespace()
    got = attention_backend_handler.handle_attention_triton(attn, fb)
    assert got == attention_backend_handler.AttnForwardMethod.MLA


def test_eagles_draft_extend_reaches_a_hooked_backend_as_draft_extend_v2():
    # extend.install_draft: EAGLE's worker (EAGLEWorkerV2, the only one of 0.5.23) builds its
    # draft-extend backend as a TritonAttnBackend of the draft runner that prefills (hooked), its draft
    # decode steps as skip_prefill ones (left alone), and runs the extend after each verify as
    # DRAFT_EXTEND_V2 down the absorbed MLA path, captured at the static width num_draft_tokens
    from sglang.srt.speculative import draft_utils, eagle_worker_common, spec_info
    from sglang.srt.speculative import eagle_draft_extend_cuda_graph_runner as graph_runner

    src = inspect.getsource
    assert "TritonAttnBackend(self.draft_model_runner, skip_prefill=False)" in \
        src(draft_utils.DraftBackendFactory._create_triton_prefill_backend)
    assert "skip_prefill=True" in src(triton_backend.TritonMultiStepDraftBackend.__init__)
    assert "EAGLEWorkerV2" in src(spec_info) and "EAGLEWorker(" not in src(spec_info)
    assert "ForwardMode.DRAFT_EXTEND_V2" in src(eagle_worker_common.prepare_for_draft_extend)
    assert "self.forward_mode = ForwardMode.DRAFT_EXTEND_V2" in src(graph_runner.EAGLEDraftExtendCudaGraphRunner)
    assert "self.num_draft_tokens" in src(TritonAttnBackend._build_cuda_graph_forward_metadata)
    fb = types.SimpleNamespace(forward_mode=ForwardMode.DRAFT_EXTEND_V2, extend_prefix_lens_cpu=[100])
    got = attention_backend_handler.handle_attention_triton(types.SimpleNamespace(), fb)
    assert got == attention_backend_handler.AttnForwardMethod.MLA


def _select_backend():
    """HybridAttnBackend._select_backend compiled from the installed source on its own (its
    module imports the model runner, whose server dependencies the CPU lock leaves out)."""
    path = Path(importlib.util.find_spec("sglang.srt.layers.attention").submodule_search_locations[0])
    tree = ast.parse((path / "hybrid_attn_backend.py").read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "HybridAttnBackend")
    fn = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "_select_backend")
    fn.returns = None
    for a in fn.args.args:
        a.annotation = None
    scope = {}
    exec(compile(ast.Module([fn], []), "hybrid_attn_backend.py", "exec"), scope)
    return scope["_select_backend"]


def test_target_verify_follows_the_speculative_attention_mode():
    # strict.py's hybrid check: verify runs on the prefill backend unless the mode is decode
    pick = _select_backend()
    for is_decode, want in ((False, "prefill"), (True, "decode")):
        me = types.SimpleNamespace(decode_backend="decode", prefill_backend="prefill", spec_attn_is_decode=is_decode)
        assert pick(me, ForwardMode.TARGET_VERIFY) == want


def test_fields_the_plugin_reads_exist():
    fields = set(ServerArgs.__struct_fields__)
    assert {"model_path", "use_ray", "speculative_algorithm", "device", "dcp_size", "enable_deterministic_inference",
            "attention_backend", "prefill_attention_backend", "decode_attention_backend",
            "speculative_attention_mode", "kv_cache_dtype", "enable_metrics", "dcp_replicate_q_proj",
            "speculative_draft_attention_backend", "speculative_draft_model_path"} <= fields
    b = Harness(arm="triton").backend
    for name in ("use_mla", "is_draft_runner", "skip_prefill", "dcp_size", "enable_deterministic", "dllm_attention",
                 "req_to_token_pool", "target_verify_num_tokens_per_req", "num_head", "device", "token_to_kv_pool",
                 "use_verify_shared_kv", "verify_shared_kv_fwd", "dcp_rank", "kv_indptr", "max_context_len",
                 "forward_metadata"):
        assert hasattr(b, name), name


def test_hook_targets_resolve():
    import pkgutil
    for target in (plugin.HOOK_TARGET, plugin.RESOLVE_TARGET, plugin.DCP_PHASE_TARGET):
        owner, attr = target.rsplit(".", 1)
        assert callable(getattr(pkgutil.resolve_name(owner), attr)), target


def test_load_plugins_lets_the_strict_refusal_through(monkeypatch):
    # SGLang logs and swallows an Exception from a plugin; a StrictFlashError must stop the process.
    import sglang.srt.plugins as plugins

    def refuse():
        raise StrictFlashError("mla-verify: MLA_VERIFY_BACKEND=flash, but test")
    monkeypatch.setattr(plugins, "_plugins_loaded", False)
    monkeypatch.setattr(plugins, "load_plugins_by_group", lambda group, excluded_dists=None: {"mla_verify": (refuse, None)})
    with pytest.raises(StrictFlashError):
        plugins.load_plugins()
    monkeypatch.setattr(plugins, "load_plugins_by_group",
                        lambda group, excluded_dists=None: {"mla_verify": (lambda: 1 / 0, None)})
    monkeypatch.setattr(plugins, "_plugins_loaded", False)
    plugins.load_plugins()   # an ordinary exception is only logged: why register() raises StrictFlashError
