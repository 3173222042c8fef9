"""Stand-in for `sgl_kernel` (SGLang's CUDA kernel package) on a machine that lacks it.

SGLang imports names from sgl_kernel at module level whenever CUDA is available, in many
modules the attention backend's import chain reaches, but TARGET_VERIFY through the Triton
backend calls none of them (the device bundle's probe checks that: `called`). So every name
is a placeholder class: importable, usable as an annotation or a base class, and raising
NotImplementedError, naming itself, when called. Submodules (`sgl_kernel.x.y`) are made on
import; `utils` is real code.
"""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types

# Qualified names of placeholders that something tried to call (the probe reads it).
called: list[str] = []


class _Placeholder(type):
    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return placeholder(f"{cls.__qualname__}.{name}")

    def __call__(cls, *args, **kwargs):
        called.append(cls.__qualname__)
        raise NotImplementedError(f"{cls.__qualname__} is a stand-in: sgl_kernel is not installed on this machine "
                                  "(kernel/sglang/standins/sgl_kernel)")


def placeholder(qualname: str) -> type:
    """A placeholder class for the sgl_kernel object `qualname`."""
    return _Placeholder(qualname.rsplit(".", 1)[-1], (), {"__qualname__": qualname, "__module__": "sgl_kernel"})


class _Module(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        value = placeholder(f"{self.__name__}.{name}")
        setattr(self, name, value)
        return value


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Makes any `sgl_kernel.<name>` submodule that has no file here a placeholder module."""

    def find_spec(self, fullname, path, target=None):
        if fullname.startswith(__name__ + "."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        module = _Module(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module):
        pass


sys.meta_path.append(_Finder())


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    return placeholder(f"{__name__}.{name}")
