"""A stand-in SGLang scheduler rank for test_sglang_metrics.py, run as its own process.

It does what a scheduler process does before serving, with SGLang's own code: the
torchvision shim (CPU torch), load_plugins() (the plugin's register() through the entry
point), the published ServerArgs, one target TritonAttnBackend (the plugin's hook installs
the arm and publishes it), then a few TARGET_VERIFY layer calls: one eager, one captured, one
replayed, one that falls back. The kernel is the CPU stand-in. It prints "ready", then
waits for "exit" on stdin, so the test reads /metrics while it lives.

    python metrics_rank.py flash|triton
"""
import os
import sys
import tempfile

import torch

lib = torch.library.Library("torchvision", "DEF")
for op in ("nms", "qnms"):
    lib.define(op + "(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")

from sglang.srt.plugins import load_plugins  # noqa: E402

from kernel.inputs import make_case  # noqa: E402
from kernel.sglang import adapter  # noqa: E402
from kernel.sglang.harness import Harness, publish_server_args  # noqa: E402
from kernel.sglang.model_configs import write_kimi_k2  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cpu_ops import CpuOps  # noqa: E402
from test_sglang_adapter_fallbacks import _sglang_args  # noqa: E402

arm = sys.argv[1]
os.environ["MLA_VERIFY_BACKEND"] = arm
load_plugins()
# a real rank's ServerArgs say cuda (strict flash refuses anything else); the backend here runs on the CPU
publish_server_args(write_kimi_k2(tempfile.mkdtemp()), device="cuda")
adapter.use_ops(CpuOps())
h = Harness()
case = make_case([30, 7], [8, 8], 8, tree="random", seed=1)
h.run_eager(case)
if arm == "flash":
    # As inside torch.cuda.graph on a GPU: the adapter sees a capturing stream and counts a capture.
    real = adapter._capturing
    adapter._capturing = lambda t: True
    h.capture(case, graph_bs=4)
    adapter._capturing = real
    h.replay(make_case([12, 40], [8, 8], 8, tree="star", seed=2))
    adapter.verify_fwd(**dict(_sglang_args(), logit_cap=30.0))
print("ready", flush=True)
sys.stdin.readline()
