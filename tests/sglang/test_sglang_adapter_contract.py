"""The adapter fits SGLang's call site and stays CUDA-graph safe: same signature as
verify_shared_kv_fwd, and no device work of its own (no host sync, no allocation)."""
import inspect
import types

from sglang.kernels.ops.attention.verify_mla import verify_shared_kv_fwd
from torch.utils._python_dispatch import TorchDispatchMode

from kernel.sglang import adapter as sglang_adapter
from test_sglang_adapter_fallbacks import _sglang_args


def test_signature_is_verify_shared_kv_fwd():
    ours, theirs = inspect.signature(sglang_adapter.verify_fwd), inspect.signature(verify_shared_kv_fwd)
    assert [(p.name, p.kind, p.default) for p in ours.parameters.values()] == \
        [(p.name, p.kind, p.default) for p in theirs.parameters.values()]


class _RecordOps(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


class _NoComputeOps:
    """A kernel stand-in that does nothing, so only the adapter's own tensor ops remain."""
    def __init__(self):
        self.ran = 0

    def get_workspace(self, device):
        return types.SimpleNamespace(max_bs=4096)

    def verify_attention(self, *args, **kwargs):
        self.ran += 1


def test_adapter_issues_no_tensor_ops_itself(cpu_ops):
    # .item()/.tolist() (a host sync) and torch.empty (an allocation) would both dispatch; the
    # call asks the kernel for no LSE, so not even a view of a scratch buffer is left.
    stand_in = _NoComputeOps()
    sglang_adapter.use_ops(stand_in)
    a = _sglang_args()
    a["qo_indptr"] = a["qo_indptr"].long()  # the graph form's int64 buffer
    with _RecordOps() as rec:
        assert sglang_adapter.verify_fwd(**a) is True
        assert sglang_adapter.verify_fwd(**dict(a, logit_cap=30.0)) is False
    assert stand_in.ran == 1
    assert rec.ops == [], rec.ops
