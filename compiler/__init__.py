"""tilec: a compiler from a small GEMM-tile DSL to PTX for NVIDIA tensor cores.

Public API (names load lazily, so `import compiler` stays cheap for the CLI; `__all__` is the stable
surface, frozen by tests/test_public_api.py):

  compile
    compile_source(text, filename="<string>", arch=None, ptx_version=None) -> CompileResult
    compile_file(path, **kw) -> CompileResult
    compile_spec(spec: FileSpec, ...) -> CompileResult
    compile_tile(spec: TileSpec, target, options=None, ptx_version=None) -> CompileResult
    parse_source(text, filename="<string>", arch=None) -> FileSpec
    CompileResult (.ptx, .module, .descriptors, .to_json()), CompileError (.diagnostics), Diagnostic,
    Loc, SpecError
  specs and the DSL
    FileSpec, TileSpec, OperandSpec, SparsitySpec, ZeroColumnsSpec, ScheduleSpec
    print_file(FileSpec) -> str, print_tile(TileSpec) -> str      (parse_source(print_file(s)) == s)
  embedding
    emit_fragment(spec: TileSpec, target, prefix=None) -> Fragment   (a PTX .func per tile)
    emit_fragments(spec: FileSpec, prefix=None) -> list[Fragment]
    link_fragments(fragments, *code) -> str                          (.version/.target + fragments + code)
    LinkError                                                        (link_fragments cannot build the module)
  passes
    run_passes(module_or_spec, passes=None, options=None, *, target=None) -> Op
    register_pass, unregister_pass, pass_names, Pass, PassContext, PassManager, PipelineError, Op
  emulation (CPU; numpy)
    emulate(result, tile=None, *, shape=None, seed=0, order="forward", mode="eager", ptx=None) -> Emulation
    (.d, .reference, .ok, .mismatches, .stats), EmulationError
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from .lazy import lazy_getattr

_WHERE = {
    "compile_source": ".driver",
    "compile_file": ".driver",
    "compile_spec": ".driver",
    "compile_tile": ".driver",
    "parse_source": ".driver",
    "run_passes": ".driver",
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
    "ScheduleSpec": ".spec",
    "print_file": ".spec_printer",
    "print_tile": ".spec_printer",
    "emit_fragment": ".api",
    "emit_fragments": ".api",
    "link_fragments": ".api",
    "LinkError": ".api",
    "Fragment": ".ptx.fragment",
    "Op": ".ir",
    "register_pass": ".passes",
    "unregister_pass": ".passes",
    "pass_names": ".passes",
    "Pass": ".passes",
    "PassContext": ".passes",
    "PassManager": ".passes.manager",
    "PipelineError": ".passes.manager",
    "emulate": ".emulator.api",
    "Emulation": ".emulator.api",
    "EmulationError": ".emulator.parse",
}

if TYPE_CHECKING:      # the same names, visible to type checkers (kept equal to _WHERE by a test)
    from .api import LinkError, emit_fragment, emit_fragments, link_fragments
    from .diagnostics import CompileError, Diagnostic, Loc, SpecError
    from .driver import (CompileResult, compile_file, compile_source, compile_spec, compile_tile, parse_source,
                         run_passes)
    from .emulator.api import Emulation, emulate
    from .emulator.parse import EmulationError
    from .ir import Op
    from .passes import Pass, PassContext, pass_names, register_pass, unregister_pass
    from .passes.manager import PassManager, PipelineError
    from .ptx.fragment import Fragment
    from .spec import FileSpec, OperandSpec, ScheduleSpec, SparsitySpec, TileSpec, ZeroColumnsSpec
    from .spec_printer import print_file, print_tile

__all__ = sorted(_WHERE)
__version__ = "0.1.0"


__getattr__ = lazy_getattr(__name__, _WHERE)


def __dir__() -> list[str]:
    return sorted(list(globals()) + __all__)
