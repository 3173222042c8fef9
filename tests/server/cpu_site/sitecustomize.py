"""Test-only: run by every Python process whose PYTHONPATH holds tests/server/cpu_site (the real
SGLang server of tests/server/ and its children). Defines torchvision's two CUDA-build operator
schemas right before torchvision is first imported, so `import sglang` works with PyPI's
torchvision on a CPU torch (../../../../shared/reading/sglang-cpu-import.md; tests/conftest.py
does the same for the test process). Imports nothing until torchvision is asked for, so the
rollout CLI, which shares the environment, stays stdlib-only."""
import importlib.abc
import sys


class _TorchvisionShim(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        if fullname == "torchvision":
            sys.meta_path.remove(self)
            import torch

            lib = torch.library.Library("torchvision", "FRAGMENT")
            for op in ("nms", "qnms"):
                try:
                    lib.define(f"{op}(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
                except RuntimeError:   # a torchvision build that defines them
                    pass
            globals()["_TV_LIB"] = lib
        return None


sys.meta_path.insert(0, _TorchvisionShim())
