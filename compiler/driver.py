"""The compile entry points used by the CLI and the Python API."""
from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from .diagnostics import CompileError, Diagnostic
from .ir import Op, print_op
from .spec import FileSpec, TileSpec


class CompileResult:
    """What a compile produced: the IR module after the passes, the PTX text (None when the pipeline
    stopped before ptx-emission), the file's spec and the IR dumps asked for. (A plain class: a
    dataclass costs every tilec process about half a millisecond to create.)"""

    def __init__(self, module: Op, ptx: str | None, spec: FileSpec, ir_dumps: list[str] | None = None):
        self.module, self.ptx, self.spec = module, ptx, spec
        self.ir_dumps: list[str] = ir_dumps if ir_dumps is not None else []

    def __repr__(self) -> str:
        return f"CompileResult(module={self.module.name}, ptx={'None' if self.ptx is None else '...'})"

    @property
    def tiles(self) -> dict[str, Any]:
        """Per tile name: the tile op as a view (compiler/passes/derive.py TileView): its attributes and
        ops, and `payload` (the TileSpec) and `facts` (form, layouts, plans) rebuilt from them."""
        from .passes.derive import tile_view

        return {o.sym: tile_view(o) for o in self.module.ops("tilec.tile") if o.sym is not None}

    @property
    def descriptors(self) -> dict[str, dict]:
        """Per tile: the instruction descriptor and the per-K-step smem descriptors, as integers."""
        out = {}
        for tile in self.module.ops("tilec.tile"):
            d: dict = {}
            idesc = tile.op("tilec.instr_desc")
            if idesc:
                d["idesc"] = int(idesc.attrs["value"])
            for sd in tile.ops("tilec.smem_desc"):
                d[f"{sd.sym}_desc"] = [int(v) for v in sd.attrs["values"]]
            z = tile.op("tilec.zero_column_mask")
            if z:
                d["zero_column_mask"] = int(z.attrs["value"])
            out[tile.sym or ""] = d
        return out

    @property
    def warnings(self) -> list:
        """The passes' warning diagnostics (compiler.diagnostics.Diagnostic, severity "warning")."""
        return list(self.module.outputs.get("warnings", []))

    def warning_text(self, source: str | None = None) -> str:
        """The warnings rendered as the CLI prints them to stderr (empty when there are none)."""
        return "".join(w.render(source) + "\n" for w in self.warnings)

    def ir(self) -> str:
        return print_op(self.module)

    def resources(self) -> dict[str, dict | None]:
        """Per tile: its resource plan (`tilec.resources`, compiler/ptx/resource_planning.py) with `bound`,
        the analytic estimate of its kernel (compiler/perf_model.py) on the problem `problem` names (the
        default: about 8192^3, whole tiles; a tcgen05 single-stage kernel's K is its loop K), null where no
        GPU figures are known for the target. None for a tile the pipeline did not plan."""
        from .perf_model import default_problem, estimate

        out: dict[str, dict | None] = {}
        target = self.module.attrs.get("target", "")
        for tile in self.module.ops("tilec.tile"):
            op = tile.op("tilec.resources")
            if op is None:
                out[tile.sym or ""] = None
                continue
            plan = {k: ([dict(r) for r in v] if k == "roles" else v) for k, v in op.attrs.items()}
            problem = default_problem(plan, target)
            if plan["kernel"] == "tcgen05":                # one tile's K: the loop K
                problem = (problem[0], problem[1], int(tile.attrs["k_total"]))
            est = estimate(plan, target, problem)
            out[tile.sym or ""] = {**plan, "bound": est.to_json() if est is not None else None}
        return out

    def plan_text(self) -> str:
        """`--emit plan`: each tile's resource plan and bound as text."""
        from .perf_model import estimate

        target = self.module.attrs.get("target", "")
        parts = []
        for name, r in self.resources().items():
            if r is None:
                parts.append(f"tile {name}: no resource plan (the pipeline stopped before resource-planning)\n")
                continue
            smem = ("no shared memory" if r["smem_space"] == "none" else
                    f"shared memory {r['smem_bytes']} B {r['smem_space']} of {r['smem_limit']} B "
                    f"({r['stages']} x {r['stage_bytes']} B ring + "
                    + (f"{r['d_staging_bytes']} B D staging + " if r.get("d_staging") else "") + "barriers/slack)")
            roles = ", ".join(f"{x['name']} {x['warps']} warps ({x['registers']} regs, {x['live']} live)"
                              for x in r["roles"])
            lines = [f"tile {name}: {r['kernel']} kernel, {r['threads']} threads"
                     + (f", clusters of {r['cluster']}" if r["cluster"] > 1 else ""),
                     f"  {smem}",
                     f"  TMEM {r['tmem_columns']} columns; {r['mbarriers']} mbarriers; {r['ctas_per_sm']} CTAs per SM",
                     f"  roles: {roles}",
                     *([f"  setmaxnreg: {r['setmaxnreg']}"] if r.get("setmaxnreg") else []),
                     *([f"  spills: {r['spill_note']}"] if r.get("spill_note") else []),
                     *([f"  D staging: {r['d_staging']}"] if r.get("d_staging") else []),
                     *([f"  form: {r['ws']}"] if r.get("ws") else []),
                     *([f"  TMEM operands: {r['tmem_operands']}"] if r.get("tmem_operands") else []),
                     *([f"  A: {r['a_tmem']}"] if r.get("a_tmem") else []),
                     f"  per CTA: D {r['cta_m']} x {r['cta_n']}, K block {r['k_block']}, {r['tx_bytes']} B copied "
                     f"per K block; {r['mma']}{' sparse' if r['sparse'] else ''}; copies "
                     f"{'overlap' if r['overlap'] else 'do not overlap'} the MMAs; "
                     f"{'persistent' if r['persistent'] else 'one tile per CTA'}"
                     f"{' (cluster launch control: a CTA per tile, tiles taken from canceled CTAs)' if r.get('scheduler') == 'clc' else ''}"]
            b = r["bound"]
            plan = {k: v for k, v in r.items() if k != "bound"}
            est = estimate(plan, target, tuple(b["problem"])) if b is not None else None
            if est is None:
                lines.append(f"  bound: no GPU figures for {target} (compiler/perf_model.py knows sm_90 and sm_100)")
            else:
                lines.append("  " + est.text().replace("\n", "\n  "))
            parts.append("\n".join(lines) + "\n")
        return "".join(parts)

    def to_json(self) -> dict:
        """`--emit json`: per tile its engine, its MMA `kind` (what `tilec explain idesc --kind` takes; null
        for an mma.sp form without a .kind qualifier), the descriptors as hex zero-padded to their width,
        the kernel ABI and the resource plan with its bound (`resources()`)."""
        kernels = {}
        abis = self.module.outputs.get("abi", {})
        for k in self.module.ops("ptx.kernel"):
            kernels[k.sym] = {"entry": k.attrs["entry"], **abis.get(k.sym, {})}
        tiles = self.tiles
        resources = self.resources()

        def kind(name: str) -> str | None:
            k = tiles[name].attrs.get("kind")
            return None if k in (None, "none") else str(k)

        return {
            "target": self.module.attrs.get("target"),
            "ptx_version": self.module.attrs.get("ptx_version"),
            "tiles": {n: {"engine": str(tiles[n].attrs["engine"]),
                          "kind": kind(n),
                          "descriptors": {k: (_hex(v, _DESC_BITS.get(k, 64)) if isinstance(v, int)
                                              else [_hex(x, _DESC_BITS.get(k, 64)) for x in v])
                                          for k, v in d.items()},
                          "kernel": kernels.get(n),
                          "resources": resources.get(n)}
                      for n, d in self.descriptors.items()},
        }


# Descriptor widths: the instruction descriptor is 32 bits (PTX ISA 9.7.16.4.2, Tables 42-44); the
# shared-memory descriptors (9.7.16.4.1, Table 40: A_desc, B_desc) and the zero-column mask (9.7.16.4.3,
# Table 45) are 64 bits.
_DESC_BITS = {"idesc": 32, "zero_column_mask": 64}


def _hex(value: int, bits: int) -> str:
    """0x and every hex digit of a `bits`-wide field (8 for 32 bits, 16 for 64), so values line up and
    read like `tilec explain` prints them."""
    return f"0x{value:0{bits // 4}x}"


def parse_source(text: str, filename: str = "<string>", arch: str | None = None,
                 ptx_version: tuple[int, int] | None = None) -> FileSpec:
    from .frontend.build import parse_spec
    from .isa.targets import TARGETS

    if arch is not None and arch not in TARGETS:
        raise CompileError([Diagnostic(f"unknown target '{arch}' given with --arch",
                                       hint="one of: " + ", ".join(TARGETS))], text)
    if text.startswith("\ufeff"):      # a UTF-8 byte-order mark: not part of the program
        text = text[1:]
    spec = parse_spec(text, filename, arch)
    if ptx_version is not None:
        spec = replace(spec, ptx_version=ptx_version)
    return spec


def compile_spec(spec: FileSpec, source: str | None = None, passes: list[str] | None = None,
                 print_ir_after: set[str] | None = None, options: dict | None = None) -> CompileResult:
    """Run the pipeline (default order, or `passes`) on a spec. `options` reach every pass through
    PassContext.options, e.g. {"variant": "smem-dump"} (the sm_90a verification variant)."""
    from .lowering import lower

    return compile_module(lower(spec), source, passes, print_ir_after, options, spec=spec)


def compile_module(module: Op, source: str | None = None, passes: list[str] | None = None,
                   print_ir_after: set[str] | None = None, options: dict | None = None,
                   spec: FileSpec | None = None) -> CompileResult:
    """Run `passes` (default: the rest of the default pipeline after the module's `passes`) on a module."""
    from .passes.derive import file_spec

    dumps: list[str] = []
    module = run_passes(module, passes, options, source=source, print_ir_after=print_ir_after, ir_sink=dumps)
    return CompileResult(module, module.outputs.get("ptx"), spec or file_spec(module), dumps)


def compile_ir(text: str, filename: str = "<string>", passes: list[str] | None = None,
               print_ir_after: set[str] | None = None, options: dict | None = None) -> CompileResult:
    """Compile IR text (as `tilec compile --emit ir` or `tilec opt` print it): parse it and run the
    passes it has not been through (or `passes`). Diagnostics point at the IR when the text is bad and
    at the original .tile (its `loc(...)`) when the program is."""
    from .ir_parser import parse_ir

    from .diagnostics import SpecError
    from .passes.manager import PipelineError

    module = parse_ir(text, filename)
    try:
        return compile_module(module, None, passes, print_ir_after, options)
    except CompileError as e:
        e.source = _located_source(e, filename, text)
        raise
    except PipelineError:
        raise
    except (SpecError, LookupError, ValueError, TypeError, AttributeError, ArithmeticError) as e:
        # The reader checks syntax and types, not that results recorded as done (`passes`) still agree
        # with the rest of the text: an edit made after a pass ran can reach a later pass unchecked.
        raise CompileError([Diagnostic(
            f"{filename}: the IR is inconsistent with the passes it records as run ({type(e).__name__}: {e})",
            hint="compile the .tile, or IR from before the edited results' passes")]) from None


def _located_source(err: CompileError, filename: str, text: str) -> str | None:
    """The text the diagnostics' locations refer to: the IR itself, or the .tile file it came from."""
    files = {d.loc.file for d in err.diagnostics if d.loc is not None}
    if files == {filename}:
        return text
    if len(files) == 1:
        (path,) = files
        import stat

        from .frontend.source import MAX_INPUT_BYTES

        try:
            # a regular file of at most the input limit: a `loc` may name a FIFO (open would wait for a
            # writer) or /dev/zero (read would not end)
            st = os.stat(path)
            if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_INPUT_BYTES:
                return None
            with open(path, encoding="utf-8", errors="surrogateescape") as f:
                return f.read(MAX_INPUT_BYTES)
        except (OSError, ValueError):
            return None
    return None


def compile_source(text: str, filename: str = "<string>", arch: str | None = None,
                   ptx_version: tuple[int, int] | None = None, passes: list[str] | None = None,
                   print_ir_after: set[str] | None = None, options: dict | None = None) -> CompileResult:
    """Compile DSL text. Raises CompileError (with located diagnostics) on bad input."""
    if text.startswith("\ufeff"):      # a UTF-8 byte-order mark: not part of the program
        text = text[1:]
    spec = parse_source(text, filename, arch, ptx_version)
    return compile_spec(spec, text, passes, print_ir_after, options)


def compile_file(path: str | os.PathLike[str], **kw: Any) -> CompileResult:
    """Compile a tile file. Anything wrong with the file itself (missing, unreadable, not UTF-8) is a
    CompileError naming it, like any other bad input: no raw OSError or UnicodeDecodeError leaks out."""
    # os rather than pathlib: pathlib (and the urllib/ipaddress it pulls in) costs ~4 ms of CLI start-up
    from .frontend.source import read_source

    name = os.fspath(path)
    try:
        text, name = read_source(name, stdin_dash=False)     # bounded, UTF-8 (else located), BOM dropped
    except OSError as e:
        raise CompileError([Diagnostic(f"cannot read '{name}': {e.strerror or e}")]) from None
    return compile_source(text, name, **kw)


# ---- specs built in code ---------------------------------------------------------------------------

def tile_file_spec(spec: TileSpec, target: str,
                   ptx_version: tuple[int, int] | str | None = None) -> FileSpec:
    """The one-tile FileSpec of a tile built in code, checked as the DSL front end would check text.

    The spec must be one the DSL can express (compiler/spec_printer.py: vocabulary, non-negative
    integers, single-word names); anything else is a CompileError naming the field, never a KeyError
    deep in a pass. `ptx_version` may be (8, 6) or "8.6"."""
    from .diagnostics import SpecError
    from .spec_printer import print_tile
    from .isa.targets import TARGETS, parse_version, version_problem

    if target not in TARGETS:
        raise CompileError([Diagnostic(f"unknown target '{target}'", hint="one of: " + ", ".join(TARGETS))])
    version = parse_version(ptx_version) if isinstance(ptx_version, str) else ptx_version
    if ptx_version is not None and version is None:
        message, hint = version_problem(str(ptx_version))
        raise CompileError([Diagnostic(message, hint=hint)])
    try:
        print_tile(spec)
    except SpecError as e:
        where = f"tile '{getattr(spec, 'name', '?')}'" + (f", {e.field}" if e.field else "")
        raise CompileError([Diagnostic(f"{where}: {e.message}", spec.loc(e.field) if isinstance(spec, TileSpec)
                                       else None, e.hint)]) from None
    return FileSpec(target, [spec], version, filename=f"<tile {spec.name}>")


def compile_tile(spec: TileSpec, target: str, options: dict[str, Any] | None = None,
                 ptx_version: tuple[int, int] | str | None = None) -> CompileResult:
    """Compile one tile built in code (no DSL text) for `target` through the whole pipeline.

    Equivalent to compiling `print_tile(spec)` in a file with `target TARGET;`; diagnostics carry no
    source location (there is no source) but name the tile and the field."""
    return compile_spec(tile_file_spec(spec, target, ptx_version), options=options)


# ---- passes as a library -----------------------------------------------------------------------------

def run_passes(module_or_spec: Op | FileSpec | TileSpec, passes: Sequence[str] | None = None,
               options: dict[str, Any] | None = None, *, target: str | None = None,
               source: str | None = None, print_ir_after: set[str] | None = None,
               ir_sink: list[str] | None = None) -> Op:
    """Run a pipeline prefix (or any valid pass list) and return the IR module.

    `module_or_spec`: a FileSpec (lowered here; `target=` overrides its target), a TileSpec (needs
    `target=`; checked like compile_tile's), or a module (returned by an earlier call, or parsed from
    text by compiler.ir_parser.parse_ir), which continues where it stopped: its attribute `passes`
    records the passes run so far (running one again is rejected; requirements already provided are
    satisfied). `passes=None` runs the rest of the default pipeline. Registered external passes
    (`register_pass`) may be named like built-in ones.

    Every result is a printed attribute or op of the IR (README "Embedding"; derive.tile_view rebuilds
    the objects, e.g. the CanonicalLayout of a tilec.smem_layout):
      verify                      module.attrs["ptx_version"]; tile.attrs["kind"]; tilec.mma_form {opcode, key}
      layout-selection            tilec.smem_layout @A/@B {major, swizzle, lbo, sbo, offset, size, k_block};
                                  tilec.pipeline {k_block, stages, smem_bytes}; tilec.tmem_plan {d, ..., allocated}
      sparse-metadata-packing     tilec.metadata {source, period, words, words_per_row}
      descriptor-materialization  tilec.instr_desc {kind, value}; tilec.smem_desc @A/@B {k_step, values};
                                  tilec.zero_column_mask {value}
      kernel-selection            tilec.kernel {kernel, config}
      ptx-emission                ptx.kernel @tile {entry, lines}; module.outputs["ptx"], ["abi"]
    """
    from .lowering import lower
    from .passes import PassContext
    from .passes.manager import PassManager, PipelineError, check_pipeline, default_order

    if isinstance(module_or_spec, Op):
        module = module_or_spec
        if module.name != "tilec.module":
            raise PipelineError(f"run_passes takes a 'tilec.module', not '{module.name}'")
    else:
        if isinstance(module_or_spec, TileSpec):
            if target is None:
                raise PipelineError("run_passes on a TileSpec needs target=")
            module_or_spec = tile_file_spec(module_or_spec, target)
        elif target is not None:
            module_or_spec = replace(module_or_spec, target=target)
        module = lower(module_or_spec)
    done = list(module.attrs.get("passes", ()))
    names = list(passes) if passes is not None else [n for n in default_order() if n not in done]
    again = [n for n in names if n in done] or [n for i, n in enumerate(names) if n in names[:i]]
    if again:
        raise PipelineError(f"pass '{again[0]}' already ran on this module")
    check_pipeline(done + names)        # names exist; each pass comes after what it requires
    ctx = PassContext(source=source, filename=module.loc.file if module.loc else "<string>",
                      options=dict(options or {}))
    PassManager(tuple(names), print_ir_after or set(), ir_sink).run(module, ctx)
    if ctx.warnings:
        module.outputs["warnings"] = module.outputs.get("warnings", []) + ctx.warnings
    return module
