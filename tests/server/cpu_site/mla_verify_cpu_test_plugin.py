"""Test-only SGLang plugin (entry point written into a temp dist-info by tests/server/): what
SGLang 0.5.23's DeepSeek model needs to run on the CPU engine beyond sgl_kernel's names.

`DeepseekV2ForCausalLM.set_embed_and_head` (models/deepseek_v2.py, the EAGLE draft sharing the
target's embedding and head) ends with `torch.cuda.synchronize()`, which raises without CUDA:
it runs here with that call a no-op, recorded like the sgl_kernel stand-ins."""
TARGET = "sglang.srt.models.deepseek_v2.DeepseekV2ForCausalLM.set_embed_and_head"


def _without_cuda_sync(original, *args, **kwargs):
    import torch
    from sgl_kernel import _record

    _record("torch.cuda.synchronize@set_embed_and_head")
    sync = torch.cuda.synchronize
    torch.cuda.synchronize = lambda *a, **k: None
    try:
        return original(*args, **kwargs)
    finally:
        torch.cuda.synchronize = sync


def register() -> None:
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    HookRegistry.register(TARGET, _without_cuda_sync, HookType.AROUND)
