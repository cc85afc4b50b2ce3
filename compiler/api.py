"""Embedding tilec as a backend: fragments and their linking (the rest of the embedding API lives in
compiler/driver.py and compiler/spec_printer.py and is re-exported by `compiler`).

    import compiler
    frag = compiler.emit_fragment(tile_spec, "sm_100a")        # one .func for the tile's MMA sequence
    ptx = compiler.link_fragments([frag, other], my_entry_ptx)  # .version/.target + fragments + your code

The calling conventions of fragments are documented in compiler/ptx/fragment.py (and README
"Embedding").
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .diagnostics import CompileError, Diagnostic, SpecError
from .ptx.fragment import FRAGMENT_PASSES, Fragment, FragmentRequirement, emit_fragment_for_tile
from .spec import FileSpec, TileSpec

__all__ = ["emit_fragment", "emit_fragments", "link_fragments", "Fragment", "FragmentRequirement", "LinkError"]


class LinkError(ValueError):
    """`link_fragments` cannot put these fragments into one module (no fragment, different targets, two
    with one name, a `ptx_version` older than one needs). Not a SpecError: no tile field is wrong, so there
    is nothing to locate; `hint` says what to do."""

    def __init__(self, message: str, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint


def emit_fragments(spec: FileSpec, prefix: str | None = None, *, source: str | None = None,
                   options: dict[str, Any] | None = None, print_ir_after: set[str] | None = None,
                   ir_sink: list[str] | None = None) -> list[Fragment]:
    """One fragment per tile of a file, in file order (`tilec compile --emit func`).

    Each tile runs the pipeline prefix its engine needs (FRAGMENT_PASSES) on its own, so each fragment
    requires only the `.version` its own forms need. Bad tiles raise CompileError, located when the spec
    came from text (`source` is that text)."""
    from dataclasses import replace

    from .driver import run_passes

    fragments = []
    for tile in spec.tiles:
        one = replace(spec, tiles=[tile])
        passes = FRAGMENT_PASSES.get(tile.engine, ("verify",))     # verify explains an unknown engine
        module = run_passes(one, passes, {**(options or {}), "fragment": True}, source=source, print_ir_after=print_ir_after, ir_sink=ir_sink)
        try:
            fragments.append(emit_fragment_for_tile(module.ops("tilec.tile")[0], module, prefix))
        except SpecError as e:
            raise CompileError([Diagnostic(e.message, tile.loc(e.field), e.hint)], source) from None
    return fragments


def emit_fragment(spec: TileSpec, target: str, prefix: str | None = None, *,
                  ptx_version: tuple[int, int] | str | None = None,
                  options: dict[str, Any] | None = None) -> Fragment:
    """The `.func` fragment of one tile built in code, named `<prefix><tile>_mma` (prefix "tilec_")."""
    from .driver import tile_file_spec

    return emit_fragments(tile_file_spec(spec, target, ptx_version), prefix, options=options)[0]


def link_fragments(fragments: Sequence[Fragment], *code: str, ptx_version: tuple[int, int] | None = None) -> str:
    """One PTX module: the header every fragment can live under (the newest `.version` any of them needs,
    their common `.target`), the fragments' definitions, then `code` (e.g. your `.entry` that calls them).

    Raises LinkError when there is no fragment, the fragments want different targets or share a name, or
    `ptx_version` is older than one of them needs."""
    if not fragments:
        raise LinkError("link_fragments needs at least one fragment")
    targets = sorted({f.requires.target for f in fragments})
    if len(targets) > 1:
        raise LinkError(f"fragments for different targets cannot share a module: {', '.join(targets)}",
                        "emit every fragment for the same target")
    names = [f.name for f in fragments]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise LinkError(f"two fragments are named '{dup[0]}'", "emit one of them with another prefix")
    need = max(f.requires.ptx_version for f in fragments)
    if ptx_version is not None and ptx_version < need:
        raise LinkError(f"a fragment needs PTX ISA {need[0]}.{need[1]}; {ptx_version[0]}.{ptx_version[1]} is "
                        "too old", f"omit ptx_version, or pass ({need[0]}, {need[1]}) or newer")
    header = FragmentRequirement(ptx_version or need, targets[0]).header()
    return header + "\n".join([*(f.text for f in fragments), *code])
