"""Pass registry.

Each pass lives in its own module as a small frozen dataclass (a subclass of `Pass`, which is one; a
pass has no fields, so the built-in ones need no decorator of their own) with a kebab-case `name`, the
facts it `requires` and `provides`, and one `apply(module, ctx)`. The registry maps names to "module:Class" so
that listing or ordering passes does not import the pass modules' heavier dependencies.

Order is resolved from requires/provides as a graph (networkx). Importing networkx costs 120-160 ms,
which every lit RUN line would pay, so the default order is baked below together with the key of the
registry it was computed from; `tests/test_pass_manager.py` recomputes it with networkx and fails if
the two disagree. A registry changed at run time (`register_pass`) gets a different key, and its order
is resolved with networkx then.
"""
from __future__ import annotations

import importlib
from dataclasses import FrozenInstanceError, dataclass
from typing import ClassVar

from ..diagnostics import CompileError, Diagnostic, SpecError


class PassContext:
    """What every pass is given besides the module: the source text (for diagnostics), the file name,
    the options (e.g. {"variant": "smem-dump"}) and the warnings reported so far (the input compiles,
    but not as its author probably meant; the driver hands them to CompileResult.warnings and the CLI
    prints them to stderr). A plain class: a dataclass costs every `tilec` process half a millisecond."""

    def __init__(self, source: str | None = None, filename: str = "<string>", options: dict | None = None,
                 warnings: list[Diagnostic] | None = None):
        self.source, self.filename, self.options = source, filename, options
        self.warnings: list[Diagnostic] = warnings if warnings is not None else []

    def __repr__(self) -> str:
        return f"PassContext(filename={self.filename!r}, options={self.options!r}, warnings={self.warnings!r})"

    def warn(self, message: str, loc=None, hint: str | None = None) -> None:
        self.warnings.append(Diagnostic(message, loc, hint, severity="warning"))

    def fail(self, message: str, loc=None, hint: str | None = None):
        raise CompileError([Diagnostic(message, loc, hint)], self.source)

    def each_tile(self, module, fn, *, engine: str | None = None, having: str | None = None,
                  field: str | None = None) -> None:
        """Run `fn(tile)` on every tile of `engine` (any engine when None) that holds an op named `having`
        (when given); a SpecError becomes a diagnostic on that tile (on `field` when the error names none)."""
        for tile in module.ops("tilec.tile"):
            if (engine is None or tile.attrs["engine"] == engine) and (having is None or tile.op(having) is not None):
                try:
                    fn(tile)
                except SpecError as e:
                    self.spec_error(e, tile, field)

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

    def __init_subclass__(cls, *, name: str | None = None, requires: tuple[str, ...] | None = None,
                          provides: tuple[str, ...] | None = None, description: str | None = None, **kw) -> None:
        """A pass declares itself in its class line, `class P(Pass, name="p", requires=(...), ...)`, or
        with class attributes of the same names."""
        super().__init_subclass__(**kw)
        for attr, value in (("name", name), ("requires", requires), ("provides", provides),
                            ("description", description)):
            if value is not None:
                setattr(cls, attr, value)

    def apply(self, module, ctx: PassContext) -> None:  # pragma: no cover - abstract
        raise NotImplementedError


def _frozen(self, name: str, value=None) -> None:
    raise FrozenInstanceError(f"cannot assign to field {name!r}")


# Every pass instance is frozen, a subclass without a @dataclass of its own too (the built-in passes:
# each dataclass costs about half a millisecond to create, paid by every `tilec` process, and a pass
# has no fields). A subclass declared with @dataclass(frozen=True) gets the same methods.
Pass.__setattr__ = _frozen          # type: ignore[method-assign]
Pass.__delattr__ = _frozen          # type: ignore[method-assign]


# name -> "module:Class" (relative to this package). Kept in pipeline order for readability only;
# the order used is resolved from requires/provides.
_BUILTIN = {
    "verify": ".verify:Verify",
    "layout-selection": ".layout_selection:LayoutSelection",
    "sparse-metadata-packing": ".sparse_metadata_packing:SparseMetadataPacking",
    "descriptor-materialization": ".descriptor_materialization:DescriptorMaterialization",
    "epilogue-lowering": ".epilogue_lowering:EpilogueLowering",
    "warp-specialization": ".warp_specialization:WarpSpecialization",
    # codegen passes: they build (or read) the PTX layer's kernels, so they live there (compiler/ptx/)
    "kernel-selection": "..ptx.emission:KernelSelection",
    "pipeline-planning": "..ptx.pipeline_planning:PipelinePlanning",
    "resource-planning": "..ptx.resource_planning:ResourcePlanning",
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
