"""Placeholders for the names of a GPU-only package: importable, usable as an annotation or a
base class, raising NotImplementedError (naming themselves) when called, and recorded
(_record.called) when something calls them. `install(package)` makes every submodule of the
package that has no file here a placeholder module."""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types

from . import _record


class _Placeholder(type):
    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return placeholder(f"{cls.__qualname__}.{name}")

    def __call__(cls, *args, **kwargs):
        _record.note("called", cls.__qualname__)
        package = cls.__qualname__.split(".", 1)[0]
        raise NotImplementedError(f"{cls.__qualname__} is a stand-in: {package} is not installed on this machine "
                                  f"(kernel/sglang/standins/{package})")


def placeholder(qualname: str) -> type:
    """A placeholder class for the object `qualname` (e.g. 'sgl_kernel.gemma_rmsnorm')."""
    return _Placeholder(qualname.rsplit(".", 1)[-1], (), {"__qualname__": qualname,
                                                          "__module__": qualname.split(".", 1)[0]})


class PlaceholderModule(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        value = placeholder(f"{self.__name__}.{name}")
        setattr(self, name, value)
        return value


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Makes any `<package>.<name>` submodule that has no file a placeholder module (it is last
    on sys.meta_path, so a real file is always found first)."""

    def __init__(self, package: str):
        self.package = package

    def find_spec(self, fullname, path, target=None):
        if fullname.startswith(self.package + "."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        module = PlaceholderModule(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module):
        pass


def install(package: str) -> None:
    if not any(isinstance(f, _Finder) and f.package == package for f in sys.meta_path):
        sys.meta_path.append(_Finder(package))


def module_getattr(package: str):
    """A module-level __getattr__ for `package`: any unknown name is a placeholder."""
    def __getattr__(name):
        if name.startswith("__"):
            raise AttributeError(name)
        return placeholder(f"{package}.{name}")
    return __getattr__
