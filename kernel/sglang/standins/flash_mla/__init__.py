"""Placeholder for `flash_mla` (FlashMLA's CUDA package), which SGLang 0.5.23 imports on a CUDA
machine even with the Triton backend: speculative/eagle_worker_v2.py lists FlashMLABackend
among the graph-capable backends, and that module imports flash_mla. Every name and
submodule is a placeholder (sgl_kernel._placeholders): importable, raising when called, and
recorded as called."""
from __future__ import annotations

from sgl_kernel import _placeholders

_placeholders.install(__name__)
__getattr__ = _placeholders.module_getattr(__name__)
