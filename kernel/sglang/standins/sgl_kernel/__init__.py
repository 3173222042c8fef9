"""Stand-in for `sgl_kernel` (SGLang's CUDA kernel package) on a machine that lacks it.

SGLang imports names from sgl_kernel at module level whenever CUDA is available, in many
modules. Two kinds of names here:
- torch versions (_torch_ops) of the functions SGLang 0.5.23's real server calls for a
  DeepSeek-V3-architecture model with the NextN draft: rmsnorm, fused_add_rmsnorm,
  silu_and_mul, moe_sum_reduce, moe_align_block_size, weak_ref_tensor;
- every other name is a placeholder class: importable, usable as an annotation or a base
  class, raising NotImplementedError (naming itself) when called.
Both are recorded (_record: `ran`, `called`, and the file MLA_VERIFY_STANDIN_LOG names), so the
device bundle's probe can refuse a path that calls a placeholder, and a real-server run can
say which stand-ins served it. Submodules (`sgl_kernel.x.y`) without a file here are
placeholder modules; `utils` is real code.
"""
from __future__ import annotations

from . import _placeholders
from ._placeholders import placeholder
from ._record import called, ran
from ._torch_ops import (fused_add_rmsnorm, moe_align_block_size, moe_sum_reduce, rmsnorm, silu_and_mul,
                         weak_ref_tensor)

TORCH_VERSIONS = ("rmsnorm", "fused_add_rmsnorm", "silu_and_mul", "moe_sum_reduce", "moe_align_block_size",
                  "weak_ref_tensor")

_placeholders.install(__name__)
__getattr__ = _placeholders.module_getattr(__name__)

__all__ = ["called", "ran", "placeholder", *TORCH_VERSIONS]
