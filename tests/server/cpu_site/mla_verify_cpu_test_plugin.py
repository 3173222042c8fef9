"""Test-only SGLang plugin (entry point written into a temp dist-info by tests/server/): what
SGLang 0.5.23 needs to run the project's tiny models on the CPU engine beyond sgl_kernel's
names. Each stand-in is recorded like the sgl_kernel ones when it runs.

- `DeepseekV2ForCausalLM.set_embed_and_head` (models/deepseek_v2.py, the EAGLE draft sharing the
  target's embedding and head) ends with `torch.cuda.synchronize()`, which raises without CUDA:
  it runs here with that call a no-op.
- `_handle_dflash` (arg_groups/speculative_hook.py:287-300) refuses DFLASH unless the device is
  cuda, npu or xpu, or an out-of-tree platform says it supports DFLASH. It runs here with the
  module's `current_platform` seen as such a platform for DFLASH (the draft attention backend
  must still be one of SGLang's own choices): every later check of the DFLASH path is SGLang's.
- `DFlashWorkerV2.forward_batch_generation` (speculative/dflash_worker_v2.py:2481) calls
  `batch.seq_lens.record_stream(<the device's current stream>)`, which raises "unknown parameter
  type" for a CPU tensor and torch.cpu's stream: it runs here with record_stream a no-op on CPU
  tensors (a CPU tensor's memory is never reused across streams).
- `ModelRunner._extend_forward_kwargs` (model_executor/model_runner.py:1772) hands every model
  its input_embeds as bfloat16, whatever --dtype says; DFLASH's draft gets its block's embeddings
  that way, and a float32 draft (--dtype float32: Triton's interpreter runs bf16 `tl.dot` wrong)
  then fails in its first linear layer ("expected m1 and m2 to have the same dtype"). It runs
  here with `DFlashDraftModel.forward` casting them back to its own weights' dtype (the values
  keep the bfloat16 rounding, as on a bf16 GPU server)."""
TARGET = "sglang.srt.models.deepseek_v2.DeepseekV2ForCausalLM.set_embed_and_head"
DFLASH_TARGET = "sglang.srt.arg_groups.speculative_hook._handle_dflash"
DFLASH_STEP = "sglang.srt.speculative.dflash_worker_v2.DFlashWorkerV2.forward_batch_generation"
DFLASH_DRAFT = "sglang.srt.models.dflash.DFlashDraftModel.forward"


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


class _DflashOnCpu:
    """The CPU platform, answering as an out-of-tree platform that supports DFLASH."""

    def __init__(self, platform):
        self._platform = platform

    def __getattr__(self, name):
        return getattr(self._platform, name)

    def is_out_of_tree(self) -> bool:
        return True

    def supports_speculative_algorithm(self, algorithm: str) -> bool:
        return algorithm == "DFLASH"

    def supports_speculative_draft_attention_backend(self, algorithm: str, backend: str) -> bool:
        from sglang.srt.arg_groups.choices import DRAFT_ATTENTION_BACKEND_CHOICES

        return algorithm == "DFLASH" and backend in DRAFT_ATTENTION_BACKEND_CHOICES

    def get_default_speculative_draft_attention_backend(self, algorithm: str) -> str:
        return "triton"


def _dflash_on_cpu(original, *args, **kwargs):
    import sys

    from sgl_kernel import _record

    _record("cpu-platform@_handle_dflash")
    module = sys.modules["sglang.srt.arg_groups.speculative_hook"]
    platform = module.current_platform
    module.current_platform = _DflashOnCpu(platform)
    try:
        return original(*args, **kwargs)
    finally:
        module.current_platform = platform


def _cpu_record_stream(original, *args, **kwargs):
    import torch
    from sgl_kernel import _record

    record = torch.Tensor.record_stream

    def record_stream(tensor, stream):
        if tensor.device.type != "cpu":
            return record(tensor, stream)
        _record("Tensor.record_stream@DFlashWorkerV2.forward_batch_generation")

    torch.Tensor.record_stream = record_stream
    try:
        return original(*args, **kwargs)
    finally:
        torch.Tensor.record_stream = record


def _embeds_in_weight_dtype(original, self, input_ids, positions, forward_batch, input_embeds=None, **kwargs):
    dtype = self.fc.weight.dtype
    if input_embeds is not None and input_embeds.dtype != dtype:
        from sgl_kernel import _record

        _record("input_embeds.to(weight dtype)@DFlashDraftModel.forward")
        input_embeds = input_embeds.to(dtype)
    return original(self, input_ids, positions, forward_batch, input_embeds=input_embeds, **kwargs)


def register() -> None:
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    HookRegistry.register(TARGET, _without_cuda_sync, HookType.AROUND)
    HookRegistry.register(DFLASH_TARGET, _dflash_on_cpu, HookType.AROUND)
    HookRegistry.register(DFLASH_STEP, _cpu_record_stream, HookType.AROUND)
    HookRegistry.register(DFLASH_DRAFT, _embeds_in_weight_dtype, HookType.AROUND)
