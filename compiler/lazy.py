"""Lazily loaded package names (PEP 562): a package lists which submodule defines each name it exports,
and the submodule is imported the first time the name is used, so importing the package costs nothing.

A leaf module (imports nothing from tilec), so any layer may use it: the package facade
(compiler/__init__.py), compiler/descriptors/ and the reference model compiler/sim/ do.
"""
from __future__ import annotations

import importlib
from typing import Any, Callable


def lazy_getattr(package: str, where: dict[str, str]) -> Callable[[str], Any]:
    """The module `__getattr__` of `package`: a name in `where` comes from the (relative) submodule it maps to."""
    def __getattr__(name: str) -> Any:
        if name in where:
            return getattr(importlib.import_module(where[name], package), name)
        raise AttributeError(f"module '{package}' has no attribute '{name}'")
    return __getattr__
