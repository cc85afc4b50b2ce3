"""Pass registry.

Each pass lives in its own module as a small frozen dataclass with a kebab-case `name`, the facts it
`requires` and `provides`, and one `apply(module, ctx)`. The registry maps names to "module:Class" so
that listing or ordering passes does not import the pass modules' heavier dependencies.

Order is resolved from requires/provides as a graph (networkx). Importing networkx costs 120-160 ms,
which every lit RUN line would pay, so the default order is baked below together with the key of the
registry it was computed from; `tests/test_pass_manager.py` recomputes it with networkx and fails if
the two disagree. A registry changed at run time (`register_pass`) gets a different key, and its order
is resolved with networkx then.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import ClassVar

from ..diagnostics import CompileError, Diagnostic, SpecError


@dataclass
class PassContext:
    source: str | None = None
    filename: str = "<string>"
    options: dict | None = None
    # warnings the passes report (the input compiles, but not as its author probably meant); the
    # driver hands them to CompileResult.warnings and the CLI prints them to stderr
    warnings: list[Diagnostic] = field(default_factory=list)

    def warn(self, message: str, loc=None, hint: str | None = None) -> None:
        self.warnings.append(Diagnostic(message, loc, hint, severity="warning"))

    def fail(self, message: str, loc=None, hint: str | None = None):
        raise CompileError([Diagnostic(message, loc, hint)], self.source)

    def each_tile(self, module, engine: str, fn) -> None:
        """Run `fn(tile)` on every tile of `engine`; a SpecError becomes a diagnostic on that tile."""
        for tile in module.ops("tilec.tile"):
            if tile.attrs["engine"] == engine:
                try:
                    fn(tile)
                except SpecError as e:
                    self.spec_error(e, tile)

    def spec_error(self, err: SpecError, tile, default_field: str | None = None):
        """Turn a SpecError from a pure module into a located diagnostic on `tile`'s field (`tile`: a
        tile op, whose named locations are its fields', or a TileSpec)."""
        if tile is None:
            loc = None
        elif hasattr(tile, "locs") and hasattr(tile, "attrs"):
            from .derive import tile_loc

            loc = tile_loc(tile, err.field or default_field)
        else:
            loc = tile.loc(err.field or default_field)
        raise CompileError([Diagnostic(err.message, loc, err.hint)], self.source)


@dataclass(frozen=True)
class Pass:
    name: ClassVar[str]
    requires: ClassVar[tuple[str, ...]] = ()
    provides: ClassVar[tuple[str, ...]] = ()
    description: ClassVar[str] = ""

    def apply(self, module, ctx: PassContext) -> None:  # pragma: no cover - abstract
        raise NotImplementedError


# name -> "module:Class" (relative to this package). Kept in pipeline order for readability only;
# the order used is resolved from requires/provides.
_BUILTIN = {
    "verify": ".verify:Verify",
    "layout-selection": ".layout_selection:LayoutSelection",
    "sparse-metadata-packing": ".sparse_metadata_packing:SparseMetadataPacking",
    "descriptor-materialization": ".descriptor_materialization:DescriptorMaterialization",
    # codegen passes: they build the PTX layer's kernels, so they live there (compiler/ptx/emission.py)
    "kernel-selection": "..ptx.emission:KernelSelection",
    "ptx-emission": "..ptx.emission:PtxEmission",
}

_EXTERNAL: dict[str, type] = {}
_LOADED: dict[str, type] = {}


def pass_names() -> list[str]:
    return list(_BUILTIN) + list(_EXTERNAL)


def get_pass_class(name: str) -> type:
    if name in _EXTERNAL:
        return _EXTERNAL[name]
    if name not in _LOADED:
        if name not in _BUILTIN:
            raise KeyError(name)
        mod, _, cls = _BUILTIN[name].partition(":")
        _LOADED[name] = getattr(importlib.import_module(mod, __name__), cls)
    return _LOADED[name]


def register_pass(cls: type) -> type:
    """Register a pass class from outside the package (usable as a decorator)."""
    if not getattr(cls, "name", None):
        raise ValueError("a pass class needs a 'name'")
    if cls.name in _BUILTIN or cls.name in _EXTERNAL:
        raise ValueError(f"a pass named '{cls.name}' is already registered")
    _EXTERNAL[cls.name] = cls
    return cls


def unregister_pass(name: str) -> None:
    _EXTERNAL.pop(name, None)
