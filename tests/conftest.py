"""Process-wide test setup: SGLang's Triton kernels run in Triton's CPU interpreter, and
SGLang imports without a GPU (../shared/reading/sglang-cpu-import.md)."""
import os

# must precede any triton import: SGLang's kernels then run on the CPU, in float32
os.environ.setdefault("TRITON_INTERPRET", "1")

import torch  # noqa: E402


def _torchvision_shim() -> None:
    # PyPI's torchvision registers fake kernels for ops that only its CUDA build defines;
    # defining the two schemas first lets `import sglang` (via transformers) succeed on CPU.
    lib = torch.library.Library("torchvision", "FRAGMENT")
    for op in ("nms", "qnms"):
        try:
            lib.define(f"{op}(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        except RuntimeError:      # already defined (a real torchvision build, or a second call)
            pass
    globals()["_TV_LIB"] = lib    # keep the registration alive


_torchvision_shim()


import pytest  # noqa: E402

from kernel import build  # noqa: E402


@pytest.fixture(scope="session")
def lib_dir():
    """The suite's one kernel build for every arch (cached by source hash); nvcc is on CI's machine,
    so a missing nvcc fails here."""
    return build.build(build.ARCHS)
