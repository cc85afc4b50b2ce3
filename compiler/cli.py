"""Command line: `tilec compile | opt | passes | explain | draw | run | tune`.

Exit codes: 0 success; 1 bad input (located diagnostics on stderr) or an OS error on a file the user
named (the message names it); 2 usage error; 3 internal error (a bug); 130 interrupted (SIGINT).
Output files: compiler/files.py (atomic, umask and existing modes honoured, written through symbolic
links, never over the input file).
"""
from __future__ import annotations

import os
import re
import sys

from .usage import UsageError
from .usage import read_input as _read_input


def write_output(path: str | None, text: str | bytes, input_path: str | tuple | None = None) -> None:
    """Write `text` to `path` ('-' or None = stdout): atomically, keeping modes, through symbolic links
    (compiler/files.py)."""
    from .files import OverwritesInput
    from .files import write_output as write

    try:
        write(path, text, input_path)
    except OverwritesInput as e:
        raise UsageError(str(e)) from None


def _seed(text: str) -> int:
    """argparse type of --seed: a non-negative integer (numpy's generators take no other)."""
    import argparse

    try:
        value = int(text, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got '{text}'") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {value}")
    return value


def _arch(text: str) -> str:
    """argparse type of --arch: a target tilec knows (a usage error otherwise, like --ptx-version's)."""
    import argparse

    from .isa.targets import TARGETS

    if text not in TARGETS:
        raise argparse.ArgumentTypeError(f"unknown target '{text}' (one of: {', '.join(TARGETS)})")
    return text


_COMMANDS = ("compile", "opt", "passes", "explain", "draw", "run", "tune")
# `tilec run --emulate[=POLICY]`: the emulator's scheduling policies (compiler.emulate's `mode`)
EMULATE_POLICIES = ("eager", "adversarial", "random")


def _emulate_words(words: list[str]) -> list[str]:
    """`run`'s bare `--emulate` as `--emulate=eager`: its policy is optional and written with '=', so the
    word after a bare `--emulate` (the input file, in `tilec run --emulate FILE`) stays a word of its own
    (argparse would take it as the option's value). Words after `--` are left alone."""
    if next((w for w in words if not w.startswith("-")), None) != "run":
        return words
    out, literal = [], False
    for w in words:
        literal = literal or w == "--"
        out.append("--emulate=eager" if w == "--emulate" and not literal else w)
    return out


class _Unused:
    """Takes the arguments of a subcommand the command line does not name: they are not needed
    (making them all is a millisecond or two of every run's start-up)."""

    def add_argument(self, *args, **kwargs) -> None:
        pass


def _parser(argv: list[str] | None = None):
    """The command-line parser: every subcommand with its arguments, or, given an `argv` whose first
    word names a subcommand (with no top-level help asked for before it), that subcommand's arguments
    only (the others are listed, without theirs)."""
    import argparse

    from . import __version__

    class Formatter(argparse.HelpFormatter):
        # argparse builds a formatter for every add_argument and, without a width, imports shutil and
        # asks the terminal each time: a few ms of start-up on every run. Help text is rare; use $COLUMNS.
        def __init__(self, prog: str) -> None:
            cols = os.environ.get("COLUMNS", "")
            super().__init__(prog, width=(int(cols) if cols.isdigit() else 100) - 2)

    p = argparse.ArgumentParser(prog="tilec", description="GEMM tile DSL -> PTX for NVIDIA tensor cores",
                                formatter_class=Formatter)
    p.add_argument("--version", action="version", version=f"tilec {__version__}")
    sub = p.add_subparsers(dest="cmd", required=True)
    want = None
    for word in argv or ():
        if word in ("-h", "--help"):
            break
        if not word.startswith("-"):
            want = word if word in _COMMANDS else None
            break

    def add(name: str, **kwargs):
        parser = sub.add_parser(name, **kwargs)     # every name, for the usage line and its errors
        return parser if want in (None, name) else _Unused()

    c = add("compile", help="compile a tile file to PTX", formatter_class=Formatter)
    c.add_argument("file", help="input .tile file or IR text (as --emit ir prints it), or - for stdin")
    c.add_argument("-o", "--output", help="output file (default, or -: stdout)")
    c.add_argument("--arch", type=_arch, help="target, overriding the file's 'target' (e.g. sm_100a)")
    c.add_argument("--ptx-version", help="PTX ISA version X.Y, overriding the file's 'ptx'")
    c.add_argument("--emit", choices=("ptx", "ir", "json", "func", "header", "cubin", "plan"), default="ptx",
                   help="ir: the IR just before ptx-emission (compiling it gives the same PTX); plan: each tile's "
                        "resource plan and analytic bound as text (README 'Resource plan'); func: one .func "
                        "per tile performing its MMA sequence, for embedding (README 'Embedding'); header: the "
                        "C++ header for those fragments (extern \"C\" declarations, inline-asm variants, "
                        "register bundles, per-lane layout); cubin: the "
                        "kernel assembled by ptxas (PATH, $PTXAS or the nvidia-cuda-nvcc wheel) for the file's "
                        "target, to -o FILE or a redirected stdout")
    c.add_argument("--variant", choices=("kernel", "smem-dump"), default="kernel",
                   help="smem-dump: an sm_90a kernel without tcgen05 that dumps its shared-memory images "
                        "(for checking the copy code and descriptors on Hopper)")
    c.add_argument("--print-ir-after-all", action="store_true", help="dump the IR after every pass (stderr)")
    c.add_argument("--print-ir-after", action="append", default=[], metavar="PASS")
    c.add_argument("--tuning", metavar="FILE", help="use the schedules a `tilec tune` JSON FILE chose for this "
                                                    "file's tiles (refused unless it was made for them)")

    o = add("opt", help="run passes on DSL or IR input and print the IR", formatter_class=Formatter)
    o.add_argument("file", help="input .tile file or IR text, or - for stdin")
    o.add_argument("-o", "--output")
    o.add_argument("--passes", help="comma-separated pass names (default: none; the input is read, "
                                    "lowered when it is DSL, and printed)")
    o.add_argument("--arch", type=_arch)
    o.add_argument("--ptx-version")
    o.add_argument("--print-ir-after-all", action="store_true")
    o.add_argument("--print-ir-after", action="append", default=[], metavar="PASS")

    ps = add("passes", help="list the passes and the pass graph", formatter_class=Formatter)
    ps.add_argument("--graph", action="store_true", help="print the dependency edges")

    e = add("explain", help="decode a descriptor field by field", formatter_class=Formatter)
    e.add_argument("what", help="idesc | smem-desc | zcm")
    e.add_argument("value", help="the descriptor value (hex or decimal)")
    e.add_argument("--kind", help="MMA kind (idesc): f16, tf32, f8f6f4, i8, mxf8f6f4, mxf4, mxf4nvf4")
    e.add_argument("--m", type=int, help="M (zcm)")
    e.add_argument("--n", type=int, help="N (zcm)")
    e.add_argument("--json", action="store_true")

    d = add("draw", help="draw what a descriptor means, as SVG", formatter_class=Formatter)
    d.add_argument("what", help="smem-desc | idesc | zcm | tmem | sparse | tile")
    d.add_argument("value", nargs="?", help="the descriptor value (hex or decimal), or the tile FILE (tile)")
    d.add_argument("-o", "--output", help="output SVG file (default, or -: stdout)")
    d.add_argument("--kind", help="MMA kind (idesc)")
    d.add_argument("--dtype", default="f16", help="element type (smem-desc; default f16)")
    d.add_argument("--major", choices=("K", "MN"), default="K", help="operand major-ness (smem-desc)")
    d.add_argument("--mn", type=int, help="MN extent of the tile (smem-desc; default: two atoms)")
    d.add_argument("--k", type=int, help="K extent of the tile (smem-desc; default: two atoms)")
    d.add_argument("--m", type=int, help="M (zcm, tmem; default 128)")
    d.add_argument("--n", type=int, help="N (zcm, tmem; default 128)")
    d.add_argument("--cta-group", type=int, default=1, help="cta_group: 1 or 2 (idesc, tmem)")
    d.add_argument("--ws", action="store_true", help=".ws variant (idesc, tmem)")
    d.add_argument("--sparse", action="store_true", help=".sp variant (tmem)")
    d.add_argument("--shape", default="m16n8k16", help="mma.sp shape (sparse; default m16n8k16)")
    d.add_argument("--seed", type=_seed, default=0, help="sparsity pattern seed (sparse; default 0)")
    d.add_argument("--tile", help="which tile of FILE (tile; default: the only one)")
    d.add_argument("--operand", choices=("A", "B", "D"), default="A", help="which operand (tile; default A)")

    r = add("run", help="run a tile on the GPU (or the CPU emulator) with random data and check or time it",
                       formatter_class=Formatter,
                       description="Compile FILE and run each tile's kernel on random data: --check (the default) "
                                   "compares D with numpy + ml-dtypes, --bench times it; --emulate runs it on the "
                                   "CPU emulator instead of a GPU (any engine, any target).")
    r.add_argument("file", help="input .tile file, or - for stdin")
    r.add_argument("--tile", help="run only this tile (default: every tile of the file)")
    r.add_argument("--shape", metavar="M,N,K",
                   help="problem size (default: two kernel tiles along M and N, K = the tile's loop K). The "
                        "scheduled kernels (sparse wgmma, the pipelined mma.sp kernel, warp-specialised tcgen05 "
                        "tiles) take any M and N, and any K (tcgen05 sparsity and block_scale tiles: whole metadata "
                        "chunks, scale vectors); the other "
                        "kernels take multiples of their tile, K a multiple of their K step (tcgen05: its loop K). "
                        "The kernel's ABI says which (`requires`), and a size it does not take is an error")
    r.add_argument("--check", action="store_true", help="compare D with the numpy reference (the default)")
    r.add_argument("--bench", action="store_true", help="time the kernel: median of --iters launches after --warmup")
    r.add_argument("--emulate", nargs="?", const="eager", default=None, choices=EMULATE_POLICIES,
                   metavar="=POLICY",
                   help="run on the CPU emulator (no GPU needed); POLICY says when asynchronous work completes: "
                        "eager (the default: at issue), adversarial (as late as possible, warps interleaved in a "
                        "seeded order), random (at seeded random points); write it with '=' (--emulate=random)")
    r.add_argument("--iters", type=int, default=100, help="timed launches (--bench; default 100)")
    r.add_argument("--warmup", type=int, default=10, help="untimed launches first (--bench; default 10)")
    r.add_argument("--warm-ms", type=float, default=0.0, metavar="MS",
                   help="then MS milliseconds of untimed replays (--bench; default 0): a power-capped GPU runs "
                        "its first ~40 ms after idle faster than it sustains (tilec tune uses 150)")
    r.add_argument("--seed", type=_seed, default=0, metavar="N",
                   help="seed of the random data and of the emulator's scheduling policy (default 0)")
    r.add_argument("--batch", type=int, default=1, metavar="N",
                   help="problems per launch, for kernels that take a batch (the ABI's `batch`: the sparse wgmma "
                        "and pipelined mma.sp kernels, the warp-specialised tcgen05 kernel; on a GPU: the "
                        "warp-specialised tcgen05 kernel, its A, B, C, D and images batch-first; default 1)")
    r.add_argument("--arch", type=_arch, help="target, overriding the file's 'target'")

    t = add("tune", help="search a tile's legal schedules on the GPU for one problem size",
            formatter_class=Formatter,
            description="Compile every legal schedule of each whole-GEMM tile of FILE (best-estimated first), "
                        "check it against numpy and time it on the GPU; write the results as JSON.")
    t.add_argument("file", help="input .tile file")
    t.add_argument("--shape", metavar="M,N,K", required=True, help="the problem size to tune for")
    t.add_argument("--tile", help="tune only this tile (default: every tile with a whole-GEMM kernel)")
    t.add_argument("--out", default="tuning.json", help="the JSON results (default tuning.json; -: stdout)")
    t.add_argument("--budget", type=float, default=600.0, metavar="SECONDS",
                   help="start no candidate after this many seconds (default 600)")
    t.add_argument("--top", type=int, default=16, metavar="K",
                   help="run at most K candidates per tile, best-estimated first (default 16)")
    t.add_argument("--write", action="store_true", help="write the chosen schedule into FILE's tile")
    return p


def _version(text: str | None):
    if text is None:
        return None
    from .isa.targets import parse_version, version_problem

    v = parse_version(text)
    if v is None:
        message, hint = version_problem(text)
        if message.startswith("PTX version must look like"):
            raise UsageError(f"--ptx-version must look like 8.6, got '{text}'")
        raise UsageError(f"--ptx-version: {message}; {hint}")
    return v


def _cmd_compile(args, opt_mode: bool) -> int:
    """compile: the whole pipeline, then PTX (or --emit ir: the IR just before ptx-emission, which
    `tilec compile X.ir` turns into the same PTX). opt: the named --passes only, then the IR; without
    --passes, opt only reads (DSL: lowers) and prints, as mlir-opt does. Input that starts with the
    `tilec.module` op is IR text (compiler/ir_parser.py), anything else the DSL."""
    from .ir import looks_like_ir   # not ir_parser: the reader is not needed to compile DSL text

    text, name = _read_input(args.file)
    is_ir = looks_like_ir(text)
    passes = None
    if opt_mode:
        passes = [p.strip() for p in args.passes.split(",") if p.strip()] if args.passes else []
    after = set(args.print_ir_after)
    if args.print_ir_after_all:
        after.add("*")
    if after and "*" not in after:
        from .passes import pass_names

        for n in after:
            if n not in pass_names():
                raise UsageError(f"--print-ir-after: unknown pass '{n}' (passes: {', '.join(pass_names())})")
    if not opt_mode and args.emit == "cubin" and args.output in (None, "-") and sys.stdout.isatty():
        raise UsageError("--emit cubin writes a binary file: give -o FILE (or redirect stdout)")
    options = {}
    if getattr(args, "variant", "kernel") != "kernel":
        options["variant"] = args.variant
    emit = "ir" if opt_mode else args.emit
    if is_ir and (args.arch or args.ptx_version):
        raise UsageError("--arch and --ptx-version apply to DSL input; IR text names its target and version")
    if getattr(args, "tuning", None):
        if is_ir:
            raise UsageError("--tuning applies to DSL input (it rewrites a tile's `schedule` statement)")
        from .driver import parse_source
        from .tuning import apply_tuning, read_tuning

        spec = parse_source(text, name, args.arch, _version(args.ptx_version))
        text = apply_tuning(text, spec, read_tuning(args.tuning), args.tuning)
    if emit in ("func", "header"):
        if is_ir:
            raise UsageError(f"--emit {emit} takes DSL input")
        return _emit_func(args, text, name, after, options)
    if emit == "ir" and passes is None:
        from .passes.manager import default_order

        order = list(default_order())
        passes = order[:order.index("ptx-emission")] if "ptx-emission" in order else order
    if is_ir:
        from .driver import compile_ir

        if passes is not None:
            from .ir_parser import parse_ir

            done = parse_ir(text, name).attrs.get("passes", ())
            passes = [n for n in passes if n not in done] if not opt_mode else passes
        result = compile_ir(text, name, passes=passes, print_ir_after=after, options=options)
    else:
        from .driver import compile_source

        from .diagnostics import CompileError

        try:
            result = compile_source(text, name, arch=args.arch, ptx_version=_version(args.ptx_version),
                                    passes=passes, print_ir_after=after, options=options)
        except CompileError as e:
            if getattr(args, "tuning", None):     # the source shown is the file with the tuned schedules
                for d in e.diagnostics:
                    d.notes.append(f"the `schedule` shown is {args.tuning}'s choice (--tuning), not the file's")
            raise
    for dump in result.ir_dumps:
        sys.stderr.write(dump)
    sys.stderr.write(result.warning_text(text))
    if emit == "ir":
        out = result.ir() + "\n"
    elif emit == "plan":
        out = result.plan_text()
    elif emit == "json":
        import json

        doc = result.to_json()
        if not is_ir:
            _add_fragments(doc, text, name, args, options)
        out = json.dumps(doc, indent=2, sort_keys=True) + "\n"
    else:
        if result.ptx is None:
            from .diagnostics import CompileError, Diagnostic

            raise CompileError([Diagnostic(f"{name}: this IR has been through ptx-emission; the PTX it produced "
                                           "is not part of the IR", hint="compile the IR that `tilec compile "
                                           "--emit ir` prints (the IR before ptx-emission)")])
        out = result.ptx
        if args.emit == "cubin":           # a PTX version this ptxas cannot take is an error there
            write_output(args.output, _assemble(out, name), (args.file, getattr(args, "tuning", None)))
            return 0
        _warn_if_ptxas_too_old(out)
    write_output(args.output, out, (args.file, getattr(args, "tuning", None)))
    return 0


def _warn_if_ptxas_too_old(ptx: str) -> None:
    """A warning (not an error: the PTX may be assembled elsewhere) when the ptxas in use cannot take the
    `.version` written; cached per ptxas, so a warm run costs a stat and a small read (ptxas_version.py)."""
    from .ptxas_version import warn_if_ptxas_too_old

    warning = warn_if_ptxas_too_old(ptx)
    if warning:
        sys.stderr.write(warning + "\n")


def _assemble(ptx: str, name: str) -> bytes:
    """--emit cubin: ptxas's failure (none found, PTX too new for it, a rejected line) is a diagnostic."""
    from .diagnostics import CompileError, Diagnostic
    from .ptxas import PtxasError, assemble_cubin

    stem = os.path.splitext(os.path.basename(name))[0] if name != "<stdin>" else "stdin"
    try:
        return assemble_cubin(ptx, name=f"{stem}.ptx")
    except PtxasError as e:
        hint = f"`tilec compile --emit ptx` writes the {stem}.ptx that ptxas's line numbers refer to" \
            if "rejected" in str(e) else None
        raise CompileError([Diagnostic(str(e), hint=hint)]) from None


def _add_fragments(doc: dict, text: str, name: str, args, options: dict) -> None:
    """--emit json: beside each tile's `kernel` object, its `fragment` (Fragment.to_json(): what `--emit
    func` / `--emit header` give for it), or null and `fragment_error` when the tile has no fragment."""
    from dataclasses import replace

    from .api import emit_fragments
    from .diagnostics import CompileError
    from .driver import parse_source

    spec = parse_source(text, name, args.arch, _version(args.ptx_version))
    for tile in spec.tiles:
        entry = doc["tiles"].get(tile.name)
        if entry is None:
            continue
        try:
            (fragment,) = emit_fragments(replace(spec, tiles=[tile]), source=text, options=options)
        except CompileError as e:
            entry["fragment"], entry["fragment_error"] = None, e.diagnostics[0].message
            continue
        entry["fragment"] = fragment.to_json()


def _emit_func(args, text: str, name: str, after: set[str], options: dict) -> int:
    """--emit func: the tiles as PTX fragments (compiler/ptx/fragment.py) under one module header;
    --emit header: their C++ header (compiler/ptx/fragment_header.py)."""
    from .api import emit_fragments, link_fragments
    from .driver import parse_source

    spec = parse_source(text, name, args.arch, _version(args.ptx_version))
    dumps: list[str] = []
    fragments = emit_fragments(spec, source=text, options=options, print_ir_after=after, ir_sink=dumps)
    for dump in dumps:
        sys.stderr.write(dump)
    if args.emit == "header":
        from .ptx.fragment_header import fragment_header

        out = fragment_header(fragments, os.path.basename(name))
    else:
        out = link_fragments(fragments)
        _warn_if_ptxas_too_old(out)
    write_output(args.output, out, args.file)
    return 0


def _cmd_passes(args) -> int:
    from .passes import get_pass_class, pass_names
    from .passes.manager import default_order

    lines = []
    for n in default_order():
        c = get_pass_class(n)
        lines.append(f"{n:28} requires: {', '.join(c.requires) or '-':24} provides: {', '.join(c.provides)}")
        if c.description:
            lines.append(f"{'':28} {c.description}")
    if args.graph:
        from .passes.manager import build_graph

        g = build_graph(pass_names())
        lines.append("")
        lines.append("digraph passes {")
        for a, b, data in sorted(g.edges(data=True)):
            lines.append(f'  "{a}" -> "{b}" [label="{data["fact"]}"];')
        lines.append("}")
    write_output(None, "\n".join(lines) + "\n")
    return 0


def _cmd_explain(args) -> int:
    from .explain import EXPLAINERS

    if args.what not in EXPLAINERS:
        raise UsageError(f"explain: unknown descriptor '{args.what}' (one of: {', '.join(sorted(EXPLAINERS))})")
    value, opts = _descriptor_value("explain", args.what, args)
    try:
        ex = EXPLAINERS[args.what](value, **opts)
    except TypeError as e:
        extra = re.search(r"unexpected keyword argument '(\w+)'", str(e))
        if extra:
            raise UsageError(f"explain {args.what} takes no --{extra.group(1).replace('_', '-')}") from None
        raise UsageError(f"explain {args.what}: {e}") from None
    if args.json:
        import json

        write_output(None, json.dumps(ex.to_json(), indent=2, sort_keys=True) + "\n")
    else:
        write_output(None, ex.text().rstrip("\n") + "\n")
    for v in ex.violations:               # the decode above shows them in place; stderr says it failed
        sys.stderr.write(f"tilec: error: {ex.title}: {v}\n")
    return 1 if ex.violations else 0


# Widths of the descriptors `explain` decodes (idesc: PTX 9.7.16.4.2 Tables 42-44, 32 bits; shared-memory
# descriptor: 9.7.16.4.1 Table 40, 64 bits; zero-column mask: 9.7.16.4.3 Table 45, 64 bits).
_EXPLAIN_BITS = {"idesc": 32, "smem-desc": 64, "zcm": 64}


def _descriptor_value(command: str, what: str, args) -> tuple[int, dict]:
    """The descriptor value `explain` and `draw` take, and its --kind/--m/--n, checked (_check_explain_usage);
    usage errors name `command`."""
    try:
        value = int(args.value, 0)
    except ValueError:
        raise UsageError(f"{command}: '{args.value}' is not a number (write 0x... or decimal)") from None
    opts = {k: getattr(args, k) for k in ("kind", "m", "n") if getattr(args, k) is not None}
    try:
        _check_explain_usage(what, value, opts)
    except UsageError as e:
        raise UsageError(str(e).replace("explain", command, 1)) from None
    return value, opts


def _check_explain_usage(what: str, value: int, opts: dict) -> None:
    """Mistakes in the command line, not in the descriptor: a missing or unknown --kind, a value wider
    than the descriptor, an M or N no mask has. The explainers report these as violations (their API
    never raises); here they are usage errors (status 2), so status 1 means 'the descriptor is illegal'."""
    bits = _EXPLAIN_BITS.get(what)
    if bits is not None and not 0 <= value < 1 << bits:
        raise UsageError(f"explain {what}: {_shown(value)} does not fit the {bits}-bit descriptor")
    if what == "idesc":
        from .isa.descriptors import LAYOUTS

        kind = opts.get("kind")
        if kind not in LAYOUTS:
            what_is = "needs --kind" if kind is None else f"--kind {kind} is not a tcgen05 kind"
            raise UsageError(f"explain idesc {what_is}: the descriptor's format depends on it "
                             f"(one of: {', '.join(LAYOUTS)})")
    if what == "zcm":
        from .descriptors.zero_column_mask import MAX_N, SUB_MASKS

        m, n = opts.get("m"), opts.get("n")
        if m is not None and m not in SUB_MASKS:
            raise UsageError(f"explain zcm: --m {m}: a zero-column mask exists for M = "
                             f"{', '.join(map(str, sorted(SUB_MASKS)))}")
        if n is not None and not (0 < n <= MAX_N and (m is None or n % SUB_MASKS[m] == 0)):
            parts = f" in {SUB_MASKS[m]} equal sub-masks" if m is not None else ""
            raise UsageError(f"explain zcm: --n {n} is not 1..{MAX_N}{parts}")


def _cmd_draw(args) -> int:
    """Usage mistakes raise UsageError (status 2); a descriptor `tilec explain` would call illegal is
    reported with explain's own messages (status 1); otherwise one SVG goes to -o or stdout."""
    from .diagnostics import SpecError
    from .draw import (DRAWERS, draw_idesc, draw_smem_desc, draw_sparse, draw_tile, draw_tmem,
                       draw_zcm)

    what = args.what
    if what not in DRAWERS:
        raise UsageError(f"draw: unknown picture '{what}' (one of: {', '.join(DRAWERS)})")
    if what == "tile":
        if args.value is None:
            raise UsageError("draw tile needs a tile file (or - for stdin)")
        text, name = _read_input(args.value)
        try:
            svg = draw_tile(text, name, args.tile, args.operand)
        except ValueError as e:
            raise UsageError(f"draw tile: {e}") from None
        write_output(args.output, svg, args.value)
        return 0
    if what in ("tmem", "sparse"):
        if args.value is not None:
            raise UsageError(f"draw {what} takes no value: give " + ("--m, --n, --cta-group, --ws, --sparse"
                             if what == "tmem" else "--dtype, --shape, --seed"))
        value = None
    else:
        if args.value is None:
            raise UsageError(f"draw {what} needs the descriptor value")
        value, opts = _descriptor_value("draw", what, args)
        from .explain import EXPLAINERS

        explained = EXPLAINERS[what](value, **{k: v for k, v in opts.items()
                                              if (what == "idesc") == (k == "kind")})
        if explained.violations:
            for v in explained.violations:
                sys.stderr.write(f"tilec: error: {explained.title}: {v}\n")
            return 1
    m = 128 if args.m is None else args.m
    n = 128 if args.n is None else args.n
    try:
        if what == "smem-desc":
            svg = draw_smem_desc(value, args.dtype, args.major, args.mn, args.k)
        elif what == "idesc":
            svg = draw_idesc(value, args.kind, args.cta_group, args.ws)
        elif what == "zcm":
            svg = draw_zcm(value, m, n)
        elif what == "sparse":
            svg = draw_sparse(args.dtype, args.shape, args.seed)
        else:
            from .isa.tcgen05_kinds import check_shape

            try:
                check_shape("f16", m, n, args.cta_group, args.sparse, args.ws)     # Table 39's N
            except SpecError as e:
                if e.field == "shape.N":
                    raise
            svg = draw_tmem(m, n, args.cta_group, args.ws, args.sparse)      # says which M has no layout
    except SpecError as e:
        raise UsageError(f"draw {what}: {e.message}") from None
    write_output(args.output, svg)
    return 0


def _shown(value: int) -> str:
    return hex(value) if value >= 0 else str(value)


def main(argv: list[str] | None = None) -> int:
    from .diagnostics import CompileError
    from .files import FileError

    try:
        words = _emulate_words(sys.argv[1:] if argv is None else list(argv))
        args = _parser(words).parse_args(words)
    except SystemExit as e:          # argparse already printed the usage message
        return 2 if e.code else 0
    try:
        if args.cmd in ("compile", "opt"):
            return _cmd_compile(args, args.cmd == "opt")
        if args.cmd == "passes":
            return _cmd_passes(args)
        if args.cmd == "explain":
            return _cmd_explain(args)
        if args.cmd == "draw":
            return _cmd_draw(args)
        if args.cmd == "run":
            from .run import cmd_run

            return cmd_run(args)
        if args.cmd == "tune":
            from .tune import cmd_tune

            return cmd_tune(args)
    except CompileError as e:
        sys.stderr.write(e.render() + "\n")
        return 1
    except UsageError as e:
        sys.stderr.write(f"tilec: error: {e}\n")
        return 2
    except FileError as e:            # an OS error on a file the user named: status 1
        sys.stderr.write(f"tilec: error: {e}\n")
        return 1
    except OSError as e:              # one no path above turned into a FileError: still status 1
        from .files import file_error

        sys.stderr.write(f"tilec: error: {file_error('access', e.filename or '<unknown file>', e)}\n")
        return 1
    except ModuleNotFoundError as e:  # an optional host library of run / tune / emulate is not installed
        top = (e.name or "").split(".")[0]
        if top not in OPTIONAL_MODULES:
            _report_internal_error(e)
            return 3
        sys.stderr.write(f"tilec: error: `tilec {getattr(args, 'cmd', '')}` needs the Python package '{OPTIONAL_MODULES[top]}', "
                         f"which is not installed in {sys.executable}\n  hint: pip install '{OPTIONAL_MODULES[top]}' there "
                         f"(tilec's dependencies bring numpy and ml-dtypes; 'tilec[gpu]' brings cuda-core)\n")
        return 1
    except KeyboardInterrupt:         # SIGINT: the output's temporary (if any) is already removed
        sys.stderr.write("tilec: interrupted\n")
        return 130
    except Exception as e:            # a bug in tilec: say so plainly
        from .passes.manager import PipelineError

        if isinstance(e, PipelineError):
            sys.stderr.write(f"tilec: error: {e}\n")
            return 2
        _report_internal_error(e)
        return 3
    return 0


# the libraries `run`, `tune` and `--emulate` import on demand (module -> its PyPI name): dependencies
# that an install with --no-deps, or a `tilec` script of another Python, may lack
OPTIONAL_MODULES = {"numpy": "numpy", "ml_dtypes": "ml-dtypes", "cuda": "cuda-core"}


def _report_internal_error(e: Exception) -> None:
    """A bug in tilec (main then exits 3): say so plainly; TILEC_DEBUG=1 re-raises for the traceback."""
    if os.environ.get("TILEC_DEBUG"):
        raise e
    sys.stderr.write(f"tilec: internal error: {type(e).__name__}: {e}\n"
                     "This is a bug in tilec; rerun with TILEC_DEBUG=1 for a traceback.\n")


if __name__ == "__main__":
    sys.exit(main())
