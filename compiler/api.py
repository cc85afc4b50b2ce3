"""Embedding tilec as a backend: fragments and their linking (the rest of the embedding API lives in
compiler/driver.py and compiler/spec_printer.py and is re-exported by `compiler`).

    import compiler
    frag = compiler.emit_fragment(tile_spec, "sm_100a")        # one .func for the tile's MMA sequence
    ptx = compiler.link_fragments([frag, other], my_entry_ptx)  # .version/.target + fragments + your code

The calling conventions of fragments are documented in compiler/ptx/fragment.py (and README
"Embedding").
"""
from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Union

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


CodeInput = Union[str, tuple[str, str]]


def link_fragments(fragments: Sequence[Fragment], *code: CodeInput,
                   ptx_version: tuple[int, int] | None = None) -> str:
    """One PTX module: the header every piece can live under, the fragments' definitions, then `code`
    (e.g. your `.entry` that calls them).

    `code` items are PTX text, or (name, text) pairs to name the text in errors. Each may be a whole module
    as nvcc, NVRTC or clang write it (`nvcc -rdc=true -ptx caller.cu`): its `.version`, `.target` and
    `.address_size` directives (PTX ISA 11.1 "PTX Module Directives") are merged into the one header (the
    newest version any piece needs; a target that holds every piece), and its `.extern .func`
    declarations of the fragments are checked against their definitions and dropped (a prototype that
    differs in a parameter or the result is an error naming both sides, as nvlink would refuse it).

    Raises LinkError when there is no fragment, the fragments want different targets or share a name,
    `ptx_version` is older than a piece needs, a code piece's target cannot hold the fragments (or theirs
    it), an `.address_size` is not 64, code defines a fragment's name, or a prototype differs."""
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
    need_by = f"fragment {max(fragments, key=lambda f: f.requires.ptx_version).name}"
    pieces = [_code_piece(i, c) for i, c in enumerate(code)]
    target = targets[0]
    by_name = {f.name: f for f in fragments}
    for piece in pieces:
        if piece.version is not None and piece.version > need:
            need, need_by = piece.version, piece.name
        if piece.target is not None:
            target = _common_target(target, piece.target, piece.name)
        for fname, (decl, proto) in piece.externs.items():
            if fname in by_name:
                _check_prototype(by_name[fname], piece.name, decl, proto)
        clash = sorted(set(piece.defines) & set(by_name))
        if clash:
            raise LinkError(f"{piece.name} defines '{clash[0]}', which is a fragment's name",
                            "emit the fragment with another prefix")
    if ptx_version is not None and ptx_version < need:
        raise LinkError(f"{need_by} needs PTX ISA {need[0]}.{need[1]}; {ptx_version[0]}.{ptx_version[1]} is "
                        "too old", f"omit ptx_version, or pass ({need[0]}, {need[1]}) or newer")
    header = FragmentRequirement(ptx_version or need, target).header()
    bodies = [piece.body(set(by_name)) for piece in pieces]
    return header + "\n".join([*(f.text for f in fragments), *bodies])


# ---- code pieces: PTX modules from nvcc / NVRTC / clang ---------------------------------------------------

_DIRECTIVE = re.compile(r"^[ \t]*\.(version|target|address_size)[ \t]+([^\n/]*?)[ \t]*(//[^\n]*)?$", re.M)
# `.extern .func [(RESULT)] NAME (PARAMS);` over several lines, as nvcc and clang print it (PTX ISA 11.3.1)
_EXTERN = re.compile(r"^[ \t]*\.extern[ \t]+\.func\s*(?:\((?P<ret>[^()]*)\))?\s*(?P<name>[\w$%]+)\s*"
                     r"\((?P<params>[^()]*)\)\s*;[ \t]*\n?", re.M)
_DEFINES = re.compile(r"^[ \t]*(?:\.(?:visible|weak)[ \t]+)?\.(?:func|entry)\s*(?:\([^()]*\))?\s*([\w$%]+)", re.M)
_PARAM = re.compile(r"\.param\s+(?:\.align\s+(\d+)\s+)?\.(\w+)\s+[\w$%]+(?:\[(\d+)\])?")


def _param_types(text: str) -> list[str]:
    """Each `.param` of a parameter list as its type: `.b32`, or `.align 16 .b8[16]` for a byte array."""
    out = []
    for align, ty, size in _PARAM.findall(text):
        out.append(f".align {align} .{ty}[{size}]" if size else (f".align {align} .{ty}" if align else f".{ty}"))
    return out


class _CodePiece:
    def __init__(self, name: str, text: str):
        self.name, self.text = name, text
        self.version: tuple[int, int] | None = None
        self.target: str | None = None
        for m in _DIRECTIVE.finditer(text):
            kind, value = m.group(1), m.group(2).strip()
            if kind == "version":
                from .isa.targets import parse_version

                v = parse_version(value)
                if v is None:
                    raise LinkError(f"{name}: '.version {value}' is not a PTX ISA version")
                self.version = max(self.version or v, v)
            elif kind == "target":
                arch = value.split(",")[0].strip()
                if self.target not in (None, arch):
                    raise LinkError(f"{name} names two targets: {self.target}, {arch}")
                self.target = arch
            elif value != "64":
                raise LinkError(f"{name}: '.address_size {value}'; fragments use 64-bit addresses",
                                "compile the code for a 64-bit host (nvcc's default)")
        self.externs = {m.group("name"): (" ".join(m.group(0).split()),
                                          (_param_types(m.group("ret") or ""), _param_types(m.group("params"))))
                        for m in _EXTERN.finditer(text)}
        self.defines = _DEFINES.findall(text)

    def body(self, fragment_names: set[str]) -> str:
        """The text without its module directives and without its `.extern` declarations of fragments."""
        text = _DIRECTIVE.sub("", self.text)
        return _EXTERN.sub(lambda m: "" if m.group("name") in fragment_names else m.group(0), text)


def _code_piece(i: int, item: CodeInput) -> _CodePiece:
    if isinstance(item, tuple):
        return _CodePiece(item[0], item[1])
    return _CodePiece(f"code[{i}]", item)


def _common_target(a: str, b: str, b_name: str) -> str:
    """The one of two targets whose module holds code for both: equal targets; a plain target inside any
    later architecture; a family target (`f`) inside a later member of its family; an arch-specific target
    (`a`) only in itself (PTX ISA 11.1.2 `.target`: "sm_90a ... not forward compatible")."""
    from .isa.targets import TARGETS

    def holds(outer: str, inner: str) -> bool:
        o, i = TARGETS.get(outer), TARGETS.get(inner)
        if outer == inner:
            return True
        if o is None or i is None:
            return False
        if i.suffix == "":
            return o.sm >= i.sm
        return i.suffix == "f" and o.family == i.family and o.sm >= i.sm
    if holds(a, b):
        return a
    if holds(b, a):
        return b
    raise LinkError(f"{b_name} is PTX for {b}, the fragments for {a}: no target holds both",
                    f"emit the fragments with --arch {b} (or compile the code for {a})")


def _check_prototype(f: Fragment, piece: str, decl: str, proto: tuple[list[str], list[str]]) -> None:
    ret, params = proto
    want_ret = [] if f.result is None else [f".align {f.result.align} .b8[{f.result.bytes}]"]
    want = [f".{p.type}" for p in f.params]
    if (ret, params) == (want_ret, want):
        return
    if len(params) != len(want):
        why = f"{len(params)} parameters declared, {len(want)} defined"
    elif params != want:
        i = next(i for i, (x, y) in enumerate(zip(params, want)) if x != y)
        why = f"parameter {i} ({f.params[i].name}) is {params[i]} there, {want[i]} in the fragment"
    else:
        why = f"result {' '.join(ret) or 'none'} there, {' '.join(want_ret) or 'none'} in the fragment"
    raise LinkError(f"prototype of '{f.name}' differs between {piece} and fragment {f.name} (tile {f.tile}): {why}\n"
                    f"  {piece}: {decl}\n  fragment: {f.declaration(extern=True).strip()}",
                    f"declare it as Fragment.cpp_declaration() prints it: {f.cpp_declaration().strip()}")
