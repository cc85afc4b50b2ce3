"""tilec: a compiler from a small GEMM-tile DSL to PTX for NVIDIA tensor cores.

Public API (names load lazily, so `import compiler` stays cheap for the CLI):
    compile_source(text, filename="<string>", arch=None, ptx_version=None) -> CompileResult
    compile_file(path, **kw) -> CompileResult
    compile_spec(spec: FileSpec, ...) -> CompileResult
    parse_source(text, filename="<string>", arch=None) -> FileSpec
    CompileError (carries .diagnostics), Diagnostic, Loc
    FileSpec, TileSpec, OperandSpec, SparsitySpec, ZeroColumnsSpec
    register_pass, PassManager
"""
from __future__ import annotations

import importlib

_WHERE = {
    "compile_source": ".driver",
    "compile_file": ".driver",
    "compile_spec": ".driver",
    "parse_source": ".driver",
    "CompileResult": ".driver",
    "CompileError": ".diagnostics",
    "Diagnostic": ".diagnostics",
    "Loc": ".diagnostics",
    "SpecError": ".diagnostics",
    "FileSpec": ".spec",
    "TileSpec": ".spec",
    "OperandSpec": ".spec",
    "SparsitySpec": ".spec",
    "ZeroColumnsSpec": ".spec",
    "register_pass": ".passes",
    "Pass": ".passes",
    "PassManager": ".passes.manager",
}

__all__ = sorted(_WHERE)
__version__ = "0.1.0"


def __getattr__(name: str):
    if name in _WHERE:
        return getattr(importlib.import_module(_WHERE[name], __name__), name)
    raise AttributeError(f"module 'compiler' has no attribute '{name}'")


def __dir__():
    return sorted(list(globals()) + __all__)
