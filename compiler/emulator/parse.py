"""The one parser of the PTX subset tilec emits (every kernel writer in compiler/ptx).

A module is `.version` / `.target` / `.address_size`, module-scope `.global` tables (static metadata) and
`.visible .entry` kernels. A kernel is its parameter list (PTX ISA 5.1.6, `.param .u32 / .u64`), its
performance-tuning and cluster directives (11.4 `.reqntid`, 11.7 `.reqnctapercluster`), and a body of
`.reg` / `.shared` declarations (5.1.5, `.extern .shared` for dynamic shared memory), labels and
instruction statements (4.3.2): an optional guard `@p` / `@!p`, the opcode with its `.`-separated
qualifiers, and comma-separated operands where `{...}` (vectors) and `[...]` (addresses) nest.
Comments (`//` to the end of the line) are dropped. Anything else in a body is an error, so a new
construct in an emitter shows up here instead of being skipped.

Nothing here imports numpy: parsing is cheap and shared by every consumer.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field


class EmulationError(Exception):
    """The kernel did something the emulator refuses: a PTX rule broken, a protocol violation (deadlock,
    out-of-bounds access, a register read while an asynchronous operation owns it), or a construct the
    emulator does not model."""


@dataclass(frozen=True)
class Instr:
    pred: str | None           # guard predicate register, or None
    negate: bool               # `@!p`
    op: str                    # opcode with qualifiers, e.g. "ld.global.v4.b32"
    args: tuple[str, ...]      # operands as written (vectors `{..}` and addresses `[..]` kept whole)
    text: str                  # the statement as written (diagnostics)
    line: int                  # 1-based line in the module text

    @property
    def parts(self) -> list[str]:
        return self.op.split(".")


@dataclass(frozen=True)
class SharedDecl:
    name: str
    align: int
    size: int                  # bytes; 0 for `.extern` (dynamic shared memory)
    extern: bool = False


@dataclass
class Kernel:
    name: str
    params: list[tuple[str, str]]                     # (full parameter name, "u32" | "u64" | "f32" | "bytes")
    shared: list[SharedDecl]
    globals_: dict[str, list[int]]                    # module-scope `.global` / `.const` tables (u32 words)
    code: list[Instr]
    labels: dict[str, int]
    cluster: tuple[int, int, int] = (1, 1, 1)         # `.reqnctapercluster`
    reqntid: tuple[int, int, int] | None = None       # `.reqntid`
    maxntid: tuple[int, int, int] | None = None       # `.maxntid`
    maxnreg: int | None = None                        # `.maxnreg`: every warp's register count at launch
    target: str | None = None                         # the module's `.target` (shared memory limit)

    @property
    def cluster_size(self) -> int:
        x, y, z = self.cluster
        return x * y * z

    def param_short(self, full: str) -> str:
        """`<kernel>_param_A` -> `A` (the tcgen05 / mma.sp writers' naming); other names unchanged."""
        return full.removeprefix(f"{self.name}_param_")


@dataclass
class Module:
    version: str | None
    target: str | None
    kernels: dict[str, Kernel] = field(default_factory=dict)

    def kernel(self, entry: str | None = None) -> Kernel:
        if entry is None:
            if not self.kernels:
                raise EmulationError("the module has no .entry")
            return next(iter(self.kernels.values()))
        if entry not in self.kernels:
            raise EmulationError(f"no .entry {entry} (the module has {', '.join(self.kernels) or 'none'})")
        return self.kernels[entry]


_ENTRY = re.compile(r"\.visible\s+\.entry\s+([\w$]+)\s*\(")
_GLOBAL = re.compile(r"\.(?:global|const)\s+\.align\s+\d+\s+\.b32\s+([\w$]+)\[(\d+)\]\s*=\s*\{([^}]*)\};")
# a scalar parameter, or bytes passed by value (`.param .align A .b8 NAME[N]`: a kernel's tensor maps)
_PARAM = re.compile(r"\.param\s+(?:\.(u32|u64|b32|b64|f32)\s+([\w$]+)|\.align\s+\d+\s+\.b8\s+([\w$]+)\[\d+\])")
_SHARED = re.compile(r"(\.extern\s+)?\.shared\s+\.align\s+(\d+)\s+\.(b8|b16|b32|b64)\s+([\w$]+)(?:\[(\d*)\])?;")
_LABEL = re.compile(r"^([\w$]+):$")
_MAXNREG = re.compile(r"\.maxnreg\s+(\d+)")
_DIMS = re.compile(r"\.(reqnctapercluster|reqntid|maxntid)\s+(\d+)(?:\s*,\s*(\d+))?(?:\s*,\s*(\d+))?")
_ELEM_BYTES = {"b8": 1, "b16": 2, "b32": 4, "b64": 8}


def split_operands(text: str) -> tuple[str, ...]:
    """Comma-separated operands at nesting depth 0 (`{a, b}` and `[r+4]` stay whole)."""
    out, depth, cur = [], 0, []
    for ch in text:
        if ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
        if ch == "," and depth == 0:
            out.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    last = "".join(cur).strip()
    if last:
        out.append(last)
    return tuple(out)


def vector(operand: str) -> list[str]:
    """`{%r1, %r2}` -> ["%r1", "%r2"]; a plain operand -> [operand]."""
    operand = operand.strip()
    if operand.startswith("{"):
        return [x.strip() for x in operand[1:-1].split(",")]
    return [operand]


_ADDRESS = re.compile(r"\[\s*([^\]+\-\s]+)\s*(?:([+-])\s*(0x[0-9a-fA-F]+|\d+))?\s*\]")


def address(operand: str) -> tuple[str, int]:
    """`[base+imm]` / `[base]` -> (base, imm) (PTX ISA 6.4.1 addresses as operands)."""
    m = _ADDRESS.fullmatch(operand.strip())
    if m is None:
        raise EmulationError(f"not an address operand: {operand}")
    off = int(m.group(3), 0) if m.group(3) else 0
    return m.group(1), -off if m.group(2) == "-" else off


def _strip_comment(line: str) -> str:
    at = line.find("//")
    return (line if at < 0 else line[:at]).strip()


def parse_module(ptx: str) -> Module:
    """Every `.entry` of a module, in order."""
    version = re.search(r"^\s*\.version\s+(\S+)", ptx, re.M)
    target = re.search(r"^\s*\.target\s+(\S+)", ptx, re.M)
    module = Module(version.group(1) if version else None, target.group(1) if target else None)
    globals_ = {m.group(1): [int(v, 0) for v in m.group(3).split(",")] for m in _GLOBAL.finditer(ptx)}
    starts = [(m.start(), m.group(1)) for m in _ENTRY.finditer(ptx)]
    # module-scope shared variables (the mma.sp writers' `.extern .shared` window) belong to every kernel
    # (PTX 5.1.5: a module-scope variable is visible to every entry of the module); in a module of several
    # tiles each writer declares its own window just before its entry, i.e. after the previous entry's body
    module_shared = [_shared_decl(m) for m in _SHARED.finditer(ptx) if _brace_depth(ptx, m.start()) == 0]
    for i, (start, name) in enumerate(starts):
        end = starts[i + 1][0] if i + 1 < len(starts) else len(ptx)
        first_line = ptx.count("\n", 0, start) + 1
        kernel = _parse_entry(ptx[start:end], name, globals_, first_line)
        kernel.shared[:0] = module_shared
        kernel.target = module.target
        module.kernels[name] = kernel
    return module


def _brace_depth(ptx: str, at: int) -> int:
    """How many `{` blocks (comments skipped) are open at offset `at` of `ptx`."""
    depth = 0
    for line in ptx[:at].split("\n"):
        code = _strip_comment(line)
        depth += code.count("{") - code.count("}")
    return depth


def _shared_decl(m: re.Match) -> SharedDecl:
    extern = bool(m.group(1))
    count = int(m.group(5)) if m.group(5) else (0 if extern else 1)
    return SharedDecl(m.group(4), int(m.group(2)), _ELEM_BYTES[m.group(3)] * count, extern)


def parse_kernel(ptx: str, entry: str | None = None) -> Kernel:
    """The first (or the named) `.entry` of a module."""
    return parse_module(ptx).kernel(entry)


def _parse_entry(text: str, name: str, globals_: dict[str, list[int]], first_line: int) -> Kernel:
    brace = text.index("{")
    head, body = text[:brace], text[brace + 1:]
    params = [(m.group(2), {"b32": "u32", "b64": "u64"}.get(m.group(1), m.group(1))) if m.group(1) else
              (m.group(3), "bytes") for m in _PARAM.finditer(head)]
    kernel = Kernel(name, params, [], globals_, [], {})
    if (m := _MAXNREG.search(head)) is not None:
        kernel.maxnreg = int(m.group(1))
    for m in _DIMS.finditer(head):
        dims = tuple(int(g) if g else 1 for g in m.groups()[1:])
        if m.group(1) == "reqnctapercluster":
            kernel.cluster = dims
        elif m.group(1) == "reqntid":
            kernel.reqntid = dims
        else:
            kernel.maxntid = dims
    line_no = first_line + head.count("\n") - 1       # the loop counts the rest of the `{` line first
    depth = 1
    for raw in body.splitlines():
        line_no += 1
        line = _strip_comment(raw)
        if not line:
            continue
        if line == "{":
            depth += 1
            continue
        if line == "}":
            depth -= 1
            if depth == 0:
                break
            continue
        if line.startswith(".reg"):
            continue
        m = _SHARED.fullmatch(line)
        if m:
            kernel.shared.append(_shared_decl(m))
            continue
        m = _LABEL.match(line)
        if m:
            kernel.labels[m.group(1)] = len(kernel.code)
            continue
        if not line.endswith(";"):
            raise EmulationError(f"line {line_no}: not a PTX statement the emulator knows: {raw.strip()}")
        stmt = line[:-1].strip()
        pred, negate = None, False
        if stmt.startswith("@"):
            guard, _, stmt = stmt.partition(" ")
            negate = guard.startswith("@!")
            pred = guard.lstrip("@!")
            stmt = stmt.strip()
        op, _, rest = stmt.partition(" ")
        kernel.code.append(Instr(pred, negate, op, split_operands(rest), raw.strip(), line_no))
    return kernel
