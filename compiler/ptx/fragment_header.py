"""`tilec compile --emit header`: a C++ header for the fragments `--emit func` writes, for CUDA C++ callers.

Per fragment NAME (compiler/ptx/fragment.py):
  - `extern "C" __device__ RET NAME(...)`: the out-of-line fragment (link the `--emit func` PTX with
    `-rdc=true`; README "Embedding" has the recipe). Its parameter types compile to the fragment's
    `.param .b32` declarations (Fragment.cpp_declaration).
  - `NAME_inline(...)`: the same parameters and result, `static __device__ __forceinline__`, whose body is
    the fragment's own PTX body as one inline-asm statement (make_inline_asm): the MMA sequence lands in
    the caller, no CALL/RET and no argument marshalling. The body sits in a `{ }` block (its registers are
    block-local, PTX ISA 11.4 "scope"), its registers are renamed `%tl_*` so that none shadows a register
    nvcc substitutes for an operand, and any label gets `%=` (nvcc's per-asm-instance number), so a
    caller may inline it any number of times.
  - mma.sp: the register bundles of one lane (`NAME_c` for C and D, `NAME_a` / `NAME_b` for one K step of
    A / B, `NAME_k_step` with the metadata word and, block-scaled, the scale registers), `NAME_call` /
    `NAME_call_inline` taking bundles, the counts as an enum, and the per-lane layout as a comment table
    generated from compiler/isa/mma_sp/fragments.py (Fragment.lanes).
  - tcgen05: the layout facts of A and B and the constants (descriptors, K per call) as comments and enums.

The text depends only on the fragments (same input, same bytes).
"""
from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from ..isa.targets import format_version
from .fragment import ASM_CONSTRAINTS, Fragment

REGISTER_PREFIX = "tl_"          # inline-asm registers: %tl_r0, %tl_f3, ... (nvcc names its own %r, %f, %rd, %p)


class InlineAsm:
    """A fragment's body as the pieces of one GNU-style asm statement: `template` (PTX lines, `%N` for the
    operands, `%%` for a literal %), `outputs` (constraint, result index), `inputs` (constraint, parameter
    index), `clobbers`."""

    def __init__(self, template: list[str], outputs: list[tuple[str, int]], inputs: list[tuple[str, int]],
                 clobbers: list[str]):
        self.template, self.outputs, self.inputs, self.clobbers = template, outputs, inputs, clobbers


def make_inline_asm(f: Fragment) -> InlineAsm:
    """Turn the fragment's `.func` body into an inline-asm body: `ld.param` of parameter i becomes a `mov`
    from input operand i, the `st.param` of D movs to the output operands, `ret;` goes; every register is
    renamed into the `%tl_` namespace and every label gets `_%=`."""
    lines = f.text.split("\n")
    start = lines.index("{")
    end = len(lines) - 1 - lines[::-1].index("}")
    body = [ln.strip() for ln in lines[start + 1:end] if ln.strip()]
    if not body or body[-1] != "ret;" or any(ln == "ret;" for ln in body[:-1]):
        raise ValueError(f"{f.name}: the body does not end in its only ret;")
    body = body[:-1]
    prefixes = sorted({m.group(1) for ln in body for m in re.finditer(r"^\.reg \.\w+ %(\w+)<\d+>;$", ln)},
                      key=len, reverse=True)
    labels = [m.group(1) for ln in body if (m := re.match(r"^([$\w]+):$", ln))]
    n_out = f.result.count if f.result else 0
    param_index = {p.ptx_name: i for i, p in enumerate(f.params)}
    outputs = [(f"={ASM_CONSTRAINTS[f.result.type]}", i) for i in range(n_out)] if f.result else []
    inputs = [(ASM_CONSTRAINTS[p.value], i) for i, p in enumerate(f.params)]

    def rename(text: str) -> str:
        text = text.replace("%", "%%")                          # special registers (%laneid, ...) too
        if prefixes:
            text = re.sub(r"%%(" + "|".join(prefixes) + r")(?=\d|<)", rf"%%{REGISTER_PREFIX}\1", text)
        for label in labels:
            text = re.sub(rf"(?<![\w$]){re.escape(label)}(?![\w$])", f"{label}_%=", text)
        return text

    template: list[str] = ["{"]
    seen: set[int] = set()
    for ln in body:
        m = re.match(r"^ld\.param\.(\w+) (%\w+), \[(\w+)\];$", ln)
        if m and m.group(3) in param_index:
            i = param_index[m.group(3)]
            seen.add(i)
            template.append(f"mov.{m.group(1)} {rename(m.group(2))}, %{n_out + i};")
            continue
        m = re.match(r"^st\.param(?:\.v\d)?\.(\w+) \[(\w+)\], \{?([^}]*)\}?;$", ln)
        if m and f.result and m.group(2) == f.result.ptx_name:
            regs = [r.strip() for r in m.group(3).split(",")]
            assert len(regs) == n_out, ln
            template += [f"mov.{m.group(1)} %{i}, {rename(r)};" for i, r in enumerate(regs)]
            continue
        if "param" in ln.split(" ")[0]:
            raise ValueError(f"{f.name}: no inline form for `{ln}`")
        template.append(rename(ln))
    template.append("}")
    if seen != set(range(len(f.params))):
        raise ValueError(f"{f.name}: parameters not loaded: {sorted(set(range(len(f.params))) - seen)}")
    # tcgen05 fragments read shared memory and arrive on an mbarrier: a compiler barrier for memory
    clobbers = ["memory"] if f.result is None else []
    return InlineAsm(template, outputs, inputs, clobbers)


def _c_string(lines: Sequence[str], indent: str) -> str:
    return "\n".join(f'{indent}"{ln if ln in ("{", "}") else chr(9) + ln}\\n"' for ln in lines)


def _inline_function(f: Fragment) -> list[str]:
    asm = make_inline_asm(f)
    params = ", ".join(f"{p.cpp_type} {p.name}" for p in f.params)
    ret = "void" if f.result is None else f.result.cpp_type
    fields = "xyzw"
    outs = ", ".join(f'"{c}"(d.{fields[i]})' for c, i in asm.outputs)
    ins = ", ".join(f'"{c}"({f.params[i].name})' for c, i in asm.inputs)
    tail = f"\n        : {outs}\n        : {ins}"
    if asm.clobbers:
        tail += "\n        : " + ", ".join(f'"{c}"' for c in asm.clobbers)
    out = [f"static __device__ __forceinline__ {ret} {f.name}_inline({params}) {{"]
    if f.result is not None:
        out.append(f"    {ret} d;")
    out.append("    asm volatile(")
    out.append(_c_string(asm.template, "        "))
    out[-1] += tail + ");"
    if f.result is not None:
        out.append("    return d;")
    out.append("}")
    return out


def _lane_table(f: Fragment) -> list[str]:
    lanes = f.lanes
    per = lanes["elements_per_register"]
    out = ["Per-lane registers (PTX ISA 9.7.14.6.2; compiler/isa/mma_sp/fragments.py), lane = %laneid:",
           "  C/D r: (row, col) of each element, low bits first; A j: (row, word) = 32-bit word of the compressed",
           f"  16 x K/2 row ({per['a']} element(s) a word); B j: (n, word) = word along K of column n ({per['b']} a "
           "word); e: (row, chunk) of nibbles 0..7; '*' = a lane whose e the selector reads"]
    if "sa" in lanes:
        out.append("  sa / sb: rows of scale_A / columns of scale_B this lane's scale register supplies "
                   "(byte b = block b; PTX ISA 9.7.14.3)")
    for lane in range(32):
        c = " ".join("/".join(f"({r},{col})" for r, col in reg) for reg in lanes["c"][lane])
        a = " ".join(f"({r},{w})" for r, w in lanes["a"][lane])
        b = " ".join(f"({n},{w})" for n, w in lanes["b"][lane])
        e = " ".join(f"({r},{ch})" for r, ch in lanes["e"][lane])
        line = f"  lane {lane:2}: C/D {c} | A {a} | B {b} | e{'*' if lanes['e_read'][lane] else ' '} {e}"
        if "sa" in lanes:
            line += f" | sa {lanes['sa'][lane]} sb {lanes['sb'][lane]}"
        out.append(line)
    return out


def _mma_sp_bundles(f: Fragment) -> list[str]:
    assert f.result is not None
    n = f.name
    steps = f.constants["k_steps"]
    c_regs = sum(1 for p in f.params if re.fullmatch(r"c\d+", p.name))
    a_regs = sum(1 for p in f.params if re.fullmatch(r"a0_\d+", p.name))
    b_regs = sum(1 for p in f.params if re.fullmatch(r"b0_\d+", p.name))
    scaled = any(p.name == "sa0" for p in f.params)
    c_type = f.params[0].cpp_type
    out = [f"enum {{ {n}_k_steps = {steps}, {n}_c_regs = {c_regs}, {n}_a_regs = {a_regs}, {n}_b_regs = {b_regs}, "
           f"{n}_selector = {f.constants['selector']} }};",
           f"struct {n}_c {{ {c_type} r[{c_regs}]; }};          // C and D of one lane",
           f"struct {n}_a {{ unsigned r[{a_regs}]; }};       // A of one lane and K step (compressed)",
           f"struct {n}_b {{ unsigned r[{b_regs}]; }};       // B of one lane and K step",
           f"struct {n}_k_step {{ {n}_a a; {n}_b b; unsigned e;{' unsigned sa; unsigned sb;' if scaled else ''} }};"
           "  // + the lane's metadata word" + (" and scale registers" if scaled else ""),
           ""]
    args = [f"c.r[{i}]" for i in range(c_regs)]
    for s in range(steps):
        args += [f"k[{s}].a.r[{j}]" for j in range(a_regs)] + [f"k[{s}].b.r[{j}]" for j in range(b_regs)]
        args.append(f"k[{s}].e")
        if scaled:
            args += [f"k[{s}].sa", f"k[{s}].sb"]
    fields = "xyzw"[:f.result.count]
    for suffix, callee in (("call", n), ("call_inline", f"{n}_inline")):
        out += [f"static __device__ __forceinline__ {n}_c {n}_{suffix}(const {n}_c &c, const {n}_k_step (&k)[{steps}]) {{",
                f"    {f.result.cpp_type} d = {callee}({', '.join(args)});",
                f"    {n}_c out = {{{{{', '.join(f'd.{x}' for x in fields)}}}}};",
                "    return out;",
                "}"]
    return out


def _tcgen05_facts(f: Fragment) -> list[str]:
    n = f.name
    out = []
    for name, lay in sorted(f.layouts.items()):
        out.append(f"enum {{ {n}_{name.lower()}_bytes = {lay.size_bytes}, {n}_{name.lower()}_align = {lay.alignment} }};"
                   f"  // {name}: {lay.mn}x{lay.k} {lay.dtype}, {lay.major}-major, swizzle {lay.swizzle}, "
                   f"LBO {lay.lbo}, SBO {lay.sbo}")
    c = f.constants
    calls = f"{n}_calls_per_tile = {c['calls_per_tile']}, " if "calls_per_tile" in c else ""   # none: scheduled
    out.append(f"enum {{ {n}_k_per_call = {c['k_per_call']}, {calls}{n}_mma_per_call = {c['mma_per_call']} }};")
    return out


def fragment_header(fragments: Sequence[Fragment], source: str | None = None) -> str:
    """The header text for `fragments` (in order); `source` names the input in the first line."""
    guard = "TILEC_" + re.sub(r"\W", "_", "_".join(f.name for f in fragments)).upper() + "_H"
    out = [f"// Generated by `tilec compile --emit header`{f' from {source}' if source else ''}: do not edit.",
           "// Out of line: link the `--emit func` PTX (README \"Embedding\": nvcc -gencode arch=compute_XX,code=sm_XX",
           "// -dc frag.ptx, callers with -rdc=true). NAME_inline needs no link: the MMA sequence is inlined.",
           f"#ifndef {guard}", f"#define {guard}", "", "#include <vector_types.h>", ""]
    for f in fragments:
        req = f.requires
        out += [f"// ---- {f.name}: tile {f.tile}, engine {f.engine}; needs PTX ISA {format_version(req.ptx_version)}, "
                f"{req.target} (compile the caller for that target)"]
        out += [f"// {c}" for c in f.convention]
        out += [f"// {p.name}: {p.meaning}" for p in f.params if f.engine != "mma.sp"]
        if f.engine == "mma.sp":
            out += ["// params: c0.. = C; per K step s: a{s}_j, b{s}_j, e{s}"
                    + (", sa{s}, sb{s}" if any(p.name == "sa0" for p in f.params) else "")]
            out += [f"// {ln}" for ln in _lane_table(f)]
        out.append(f.cpp_declaration().rstrip("\n"))
        out += _inline_function(f)
        out += _mma_sp_bundles(f) if f.engine == "mma.sp" else _tcgen05_facts(f)
        out.append("")
    out.append(f"#endif  // {guard}")
    return "\n".join(out) + "\n"

