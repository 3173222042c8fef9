"""The README's launch commands are the rollout template (rollout/launch.py) rendered, and
each one starts in SGLang 0.5.23 for the checkpoint kind it is documented for.

"Starts" is checked as far as a CPU can take it, with SGLang's own code: `sglang serve`'s
argument handling (its --model-type override, then the same argv to prepare_server_args, as
sglang/cli/serve.py does), the full ServerArgs resolution (speculative hook, context-length
check against config.json included), the draft's ModelConfig as the draft worker builds it,
the draft architecture's model class, and the weight loader's NextN-layer check; then the
plugin's strict-flash checks. The checkpoints are Kimi-K2-shaped config.json folders with and
without a NextN layer, an EAGLE3 draft and a DFLASH draft (a one-layer DFlashDraftModel with a
block of 16).
"""
import importlib
import re
import shlex
import types
from pathlib import Path

import pytest
from sglang.srt.arg_groups.overrides import resolving_view
from sglang.srt.configs.model_config import ModelConfig
from sglang.srt.models.deepseek_common.deepseek_weight_loader import DeepseekV2WeightLoaderMixin
from sglang.srt.server_args import prepare_server_args

from kernel.sglang import strict
from kernel.sglang.model_configs import write_eagle3_draft, write_kimi_k2
from rollout.launch import group_env, launch_argv, shell_line

README = Path(__file__).resolve().parents[2] / "README.md"
GPUS = list(range(8))
# The placeholders the README's commands use, per checkpoint kind.
KINDS = {
    "eagle3": {"model_path": "/models/kimi-k2", "draft_model_path": "/models/kimi-k2-eagle3",
               "bind_host": "0.0.0.0"},
    "nextn": {"model_path": "/models/mla-model-with-nextn", "speculative_algorithm": "EAGLE",
              "bind_host": "0.0.0.0"},
    "dflash": {"model_path": "/models/kimi-k2", "draft_model_path": "/models/kimi-k2-dflash",
               "speculative_algorithm": "DFLASH", "speculative_dflash_block_size": 16, "bind_host": "0.0.0.0"},
}
# The model class module of each draft architecture these commands load.
DRAFT_MODULES = {"DeepseekV3ForCausalLMNextN": "sglang.srt.models.deepseek_nextn",
                 "LlamaForCausalLMEagle3": "sglang.srt.models.llama_eagle3",
                 "DFlashDraftModel": "sglang.srt.models.dflash"}


def write_dflash_draft(path, block_size=16):
    """A one-layer DFLASH drafter for a Kimi-K2 target (SGLang's DFlashDraftModel, Qwen3-shaped)."""
    import transformers

    cfg = transformers.Qwen3Config(architectures=["DFlashDraftModel"], hidden_size=7168, intermediate_size=18432,
                                   num_hidden_layers=1, num_attention_heads=64, num_key_value_heads=8,
                                   head_dim=128, vocab_size=163840, max_position_embeddings=262144,
                                   torch_dtype="bfloat16")
    cfg.block_size = block_size
    cfg.dflash_config = {"block_size": block_size, "target_layer_ids": [1, 30, 58], "mask_token_id": 163839}
    cfg.save_pretrained(path)
    return Path(path)


def _rendered(kind, arm):
    return shell_line(launch_argv(KINDS[kind], host="0.0.0.0", port=30000, gpus=GPUS, arm=arm),
                      group_env(GPUS, arm))


def _readme_commands():
    text = README.read_text()
    section = re.search(r"^## Serving with SGLang\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    assert section, "README has no '## Serving with SGLang' section"
    return [line for line in section.group(1).splitlines() if line.startswith("CUDA_VISIBLE_DEVICES=")]


def test_readme_shows_exactly_the_rendered_template():
    assert _readme_commands() == [_rendered(k, arm) for k in KINDS for arm in ("triton", "flash")]


def test_control_and_candidate_differ_only_in_the_switch():
    for kind in KINDS:
        a, b = _rendered(kind, "triton"), _rendered(kind, "flash")
        assert a.replace("MLA_VERIFY_BACKEND=triton", "MLA_VERIFY_BACKEND=flash") == b


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    root = tmp_path_factory.mktemp("checkpoints")
    return {
        "no-nextn": write_kimi_k2(root / "kimi-k2", nextn_layers=0),
        "nextn": write_kimi_k2(root / "with-nextn", nextn_layers=1),
        "128k": write_kimi_k2(root / "kimi-k2-128k", nextn_layers=0, max_position_embeddings=131072),
        "eagle3-draft": write_eagle3_draft(root / "kimi-k2-eagle3"),
        "dflash-draft": write_dflash_draft(root / "kimi-k2-dflash"),
    }


def _start(kind, target, draft=None):
    """Resolve the documented command of `kind` with its model paths pointed at local config
    folders, as far as SGLang gets before loading weights; returns the resolved ServerArgs.
    Raises what SGLang raises where it would refuse to start."""
    from sglang.cli.serve import _extract_model_type_override, _normalize_positional_model_path

    words = shlex.split(_rendered(kind, "flash"))
    assert words[words.index("sglang"):words.index("sglang") + 2] == ["sglang", "serve"]
    backend, argv = _extract_model_type_override(words[words.index("serve") + 1:])
    argv, _ = _normalize_positional_model_path(argv)
    assert backend == "llm"   # serve's LLM server (sglang/cli/serve.py _run_llm), no diffusion detection
    paths = {KINDS[kind]["model_path"]: str(target)}
    if "draft_model_path" in KINDS[kind]:
        paths[KINDS[kind]["draft_model_path"]] = str(draft)
    argv = [paths.get(w, w) for w in argv]
    server_args = prepare_server_args(argv)
    server_args.device = "cuda"   # what get_device() resolves on the GPU host; this CPU has none
    server_args.resolve_once()
    cfg = resolving_view(server_args)
    draft_config = ModelConfig.from_server_args(server_args, model_path=cfg.speculative_draft_model_path,
                                                model_revision=cfg.speculative_draft_model_revision,
                                                is_draft_model=True)
    arch = draft_config.hf_config.architectures[0]
    module = importlib.import_module(DRAFT_MODULES[arch])
    cls = next(c for c in module.EntryClass if c.__name__ == arch)
    if issubclass(cls, DeepseekV2WeightLoaderMixin):   # the draft is the checkpoint's own NextN layer
        DeepseekV2WeightLoaderMixin._initialize_nextn_conf(types.SimpleNamespace(config=draft_config.hf_config),
                                                           is_nextn=True)
    return server_args


def test_eagle3_command_starts_for_a_checkpoint_without_nextn(checkpoints, monkeypatch):
    sa = _start("eagle3", checkpoints["no-nextn"], checkpoints["eagle3-draft"])
    cfg = resolving_view(sa)
    assert (cfg.speculative_algorithm, cfg.speculative_num_draft_tokens, cfg.context_length) == ("EAGLE3", 8, 200_000)
    assert cfg.speculative_draft_model_path == str(checkpoints["eagle3-draft"]) and cfg.enable_metrics
    monkeypatch.setenv("MLA_VERIFY_BACKEND", "flash")
    assert strict.server_args_problem(sa) is None


def test_nextn_command_starts_for_a_checkpoint_with_one_nextn_layer(checkpoints, monkeypatch):
    sa = _start("nextn", checkpoints["nextn"])
    cfg = resolving_view(sa)
    assert cfg.speculative_algorithm == "EAGLE" and cfg.speculative_draft_model_path == str(checkpoints["nextn"])
    monkeypatch.setenv("MLA_VERIFY_BACKEND", "flash")
    assert strict.server_args_problem(sa) is None


def test_nextn_command_is_refused_for_a_checkpoint_without_nextn(checkpoints):
    # What the README's old command did with Kimi-K2: SGLang's weight loader refuses the draft.
    with pytest.raises(AssertionError, match="Only 1 nextn layer is supported"):
        _start("nextn", checkpoints["no-nextn"])


def test_200k_context_is_refused_for_a_128k_checkpoint(checkpoints):
    with pytest.raises(ValueError, match="context"):
        _start("eagle3", checkpoints["128k"], checkpoints["eagle3-draft"])


def test_dflash_command_starts_for_a_dflash_drafter(checkpoints, monkeypatch):
    sa = _start("dflash", checkpoints["no-nextn"], checkpoints["dflash-draft"])
    cfg = resolving_view(sa)
    assert cfg.speculative_algorithm == "DFLASH" and cfg.speculative_num_draft_tokens == 16
    assert (cfg.speculative_num_steps, cfg.speculative_eagle_topk) == (1, 1)     # SGLang's own, no warning
    assert cfg.attention_backend == "triton" and cfg.page_size == 1 and cfg.enable_metrics
    monkeypatch.setenv("MLA_VERIFY_BACKEND", "flash")
    assert strict.server_args_problem(sa) is None


def test_the_serve_entrypoint_loads_the_plugins_first():
    """What `sglang serve` runs (sglang/cli/serve.py): load_plugins() before any backend, so the
    plugin's strict checks and hooks are in place as with `python -m sglang.launch_server`."""
    import inspect

    from sglang.cli import serve

    src = inspect.getsource(serve.serve)
    assert src.index("load_plugins()") < src.index("registered.backend.run(request)")
    assert "prepare_server_args(list(request.argv))" in inspect.getsource(serve._run_llm)
