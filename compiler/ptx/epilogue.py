"""The fused epilogue's PTX, shared by the kernels that lower it (sparse_wgmma_kernel.py, sparse_gemm_kernel.py).

A kernel hands over its builder and an `EpiloguePlan` (compiler/passes/epilogue_lowering.py: the steps are
PTX instruction templates over {x}, {c}, {b}, {t0}.., {alpha}, {beta}); this module declares the registers
the plan needs, loads its parameters, and emits its steps, per element or for one 16-byte chunk of staged
f32 accumulators (4 elements of one row of D): C and bias in one vector load each, D stored converted.

A 1-byte D (s8, e4m3: compiler/isa/epilogue_outputs.py) leaves in 16-byte stores too: a D chunk is then
`groups` x 4 elements (4 groups: 16 elements, one v4.b32 store, where the tile's N allows; else 2: v2.b32),
each group of 4 staged accumulators run through the steps and packed into one word (`byte_chunk`).

Registers: %ev0..3 (a chunk's accumulators), %ce0..3 (C), %be0..3 (bias), %t0.. (scratch), %alpha, %beta,
%scale (f32); %rc (C), the bias base (u64; its name is the kernel's), %gq (u64 scratch); %hw0, %hw1 (packed
D; %hw0..3 for a 1-byte D). Only where the plan needs them: %ea0..3 (s32 accumulators before `to_f32`),
%bw0..3 (a 16-bit bias's words), %bh0, %bh1 (its halves), %eh0, %eh1 (b16) and %ei0, %ei1 (s32): the
1-byte conversions' scratch.
"""
from __future__ import annotations

from ..isa.epilogue_outputs import BIAS_TYPES
from ..passes.epilogue_lowering import SCRATCH, EpiloguePlan

CHUNK_BYTES = 16
GROUP = 4                     # f32 elements of one 16-byte group of staged accumulators


def abi_entries(plan: EpiloguePlan | None, buffers: dict) -> dict:
    """The epilogue's part of a kernel ABI: adds the bias buffer to `buffers` (when the plan reads one) and
    returns the ABI's extra keys ({"epilogue": what the runtime passes and a reference computes}, or {})."""
    if plan is None:
        return {}
    if plan.bias != "none":
        per = "column" if plan.bias == "col" else "row"
        buffers["bias"] = {"element": plan.bias_type, "shape": ["N"] if plan.bias == "col" else ["M"],
                           "layout": f"one {plan.bias_type} per {per} of D"}
    return {"epilogue": plan.describe()}


def declare(b, plan: EpiloguePlan, bias_reg: str) -> None:
    b.declare("f32", "%ev<4>", "%ce<4>", "%be<4>", f"%t<{SCRATCH}>", *(f"%{p}" for p in plan.params if p != "bias"))
    b.declare("u64", "%rc", bias_reg, "%gq")
    b.declare("b32", f"%hw<{4 if plan.packs else 2}>")
    if raw_accumulators(plan):
        b.declare("s32", "%ea<4>")
    if plan.bias != "none" and plan.bias_bytes != 4:
        b.declare("b32", "%bw<4>")
        b.declare("b16", "%bh<2>")
    if plan.packs:
        b.declare("b16", "%eh<2>")
        b.declare("s32", "%ei<2>")


def raw_accumulators(plan: EpiloguePlan) -> bool:
    """The steps start from integer accumulators ({a}) converted into f32 ({x}) by `to_f32`."""
    return any(s == "to_f32" for s, _ in plan.steps)


def load_params(b, plan: EpiloguePlan, bias_reg: str) -> None:
    """The plan's f32 parameters into registers; %rc = C and `bias_reg` = bias (global addresses)."""
    b.ins(f"// epilogue (tilec.epilogue_plan): {', '.join(s for s, _ in plan.steps)}")
    for p in plan.params:
        if p != "bias":
            b.ld_param("f32", f"%{p}", p)
    if plan.c == "epilogue":
        b.global_pointer("%rc", "c")
    if plan.bias != "none":
        b.global_pointer(bias_reg, "bias")


def element_steps(b, plan: EpiloguePlan, x: str, c: str, bias: str, acc: str | None = None,
                  scratch: list[str] | None = None, scalars: dict[str, str] | None = None) -> None:
    """The plan's per-element steps on element register `x` (its C element `c`, its bias `bias`; `acc`: the
    raw integer accumulator `to_f32` converts into `x`); the scratch and alpha / beta / scale registers are
    this module's `declare`d ones unless `scratch` / `scalars` name others (a kernel with numbered registers)."""
    regs = {"x": x, "c": c, "b": bias, "a": acc or x, "alpha": "%alpha", "beta": "%beta", "scale": "%scale",
            **{f"t{n}": f"%t{n}" for n in range(SCRATCH)}}
    if scratch is not None:
        regs.update({f"t{n}": r for n, r in enumerate(scratch[:SCRATCH])})
    regs.update(scalars or {})
    for _step, lines in plan.element_steps:
        for line in lines:
            b.ins(line.format(**regs) + ";")


def pack(b, plan: EpiloguePlan, word: str, xs: list[str]) -> None:
    """A 1-byte D: elements `xs` (4, or 2: the low half) packed into b32 `word`, element 0 in the low byte."""
    regs = {"w": word, **{f"x{k}": x for k, x in enumerate(xs)}, "h0": "%eh0", "h1": "%eh1", "i0": "%ei0",
            "i1": "%ei1"}
    for line in (plan.quad if len(xs) == 4 else plan.pair):
        b.ins(line.format(**regs) + ";")


def load_bias(b, plan: EpiloguePlan, guard: str, at: str, count: int, first: int = 0) -> None:
    """Bias elements first..first+count-1 (1, 2 or 4 consecutive ones, at address `at`, aligned to their
    size) into %be{first}..: f32 loaded as it is, a 16-bit type as words widened to f32 (BIAS_TYPES)."""
    ins = b.ins
    regs = [f"%be{first + e}" for e in range(count)]
    if plan.bias_bytes == 4:
        ins(f"{guard}ld.global.{'v%d.' % count if count > 1 else ''}f32 "
            f"{'{' + ', '.join(regs) + '}' if count > 1 else regs[0]}, {at};")
        return
    words = [f"%bw{first}"] if count == 1 else [f"%bw{first // 2 + e}" for e in range(count // 2)]
    vec = {1: ("b16", words[0]), 2: ("b32", words[0]), 4: ("v2.b32", "{" + ", ".join(words) + "}")}[count]
    ins(f"{guard}ld.global.{vec[0]} {vec[1]}, {at};")
    for e, r in enumerate(regs):
        widen(b, plan, r, words[e // 2], high=e % 2 == 1, guard=guard)


def widen(b, plan: EpiloguePlan, f: str, w: str, high: bool, guard: str = "") -> None:
    """f32 register `f` = the bias element in the low (or high) half of word `w` (`guard`ed like its load)."""
    t = BIAS_TYPES[plan.bias_type]
    for line in (t.high if high else t.low):
        b.ins(guard + line.format(f=f, w=w, h0="%bh0", h1="%bh1") + ";")


def chunk_loop(b, item: str, tid: str, threads: int, total: int, pred: str, body) -> None:
    """for (item = tid; item < total; item += threads) body(): a loop, not unrolled rounds. Unrolled, ptxas
    hoists the shared loads of many rounds above the activations and spills at the 168-register budget
    of the 384-thread wgmma CTA (24 bytes for silu at 128 x 256); a loop keeps one chunk live."""
    loop, done = b.label("EPILOGUE_CHUNK"), b.label("EPILOGUE_DONE")
    b.ins(f"mov.u32 {item}, {tid};")
    b.ins(f"setp.ge.u32 {pred}, {item}, {total};")
    b.ins(f"@{pred} bra {done};")
    b.put(loop)
    body()
    b.ins(f"add.u32 {item}, {item}, {threads};")
    b.ins(f"setp.lt.u32 {pred}, {item}, {total};")
    b.ins(f"@{pred} bra{'.uni' if total % threads == 0 else ''} {loop};")
    b.put(done)


def chunk(b, plan: EpiloguePlan, guard: str, row: str, col: str, bias_reg: str, abytes: int, dbytes: int,
          convert: str | None, d_base: str, c_stride: str = "%N", d_stride: str = "%N") -> None:
    """One chunk of staged accumulators already in %ev0..3: D row `row`, first column `col` (u32
    registers). %rp = its element index in D (64-bit; rows `d_stride` elements apart, C's `c_stride`),
    C and bias loaded (`guard`ed like the chunk's shared load), the steps per element, D stored: v4.f32,
    or two cvt pairs as v2.b32 (PTX ISA cvt: `cvt.rn.f16x2.f32 d, a, b` puts a in the upper half)."""
    ins = b.ins
    per = CHUNK_BYTES // abytes
    ins(f"mul.wide.u32 %rp, {row}, {d_stride};")
    ins(f"cvt.u64.u32 %off, {col};")
    ins("add.u64 %rp, %rp, %off;                     // element index in D")
    if plan.c == "epilogue":
        _c_address(b, row, abytes, c_stride, d_stride)
        ins(f"{guard}ld.global.v4.f32 {{%ce0, %ce1, %ce2, %ce3}}, [%gq];")
    _bias_address(b, plan, row, col, bias_reg)
    if plan.bias != "none":
        load_bias(b, plan, guard, "[%gq]", 4 if plan.bias == "col" else 1)
    for k in range(per):
        element_steps(b, plan, f"%ev{k}", f"%ce{k}", f"%be{k if plan.bias == 'col' else 0}")
    ins(f"mad.lo.u64 %gq, %rp, {dbytes}, {d_base};")
    if convert:
        for h in range(per // 2):
            ins(f"{convert} %hw{h}, %ev{2 * h + 1}, %ev{2 * h};")
        ins(f"{guard}st.global.v2.b32 [%gq], {{%hw0, %hw1}};")
    else:
        ins(f"{guard}st.global.v4.f32 [%gq], {{%ev0, %ev1, %ev2, %ev3}};")


def _c_address(b, row: str, abytes: int, c_stride: str, d_stride: str) -> None:
    """%gq = C's address of the chunk whose D element index is %rp (%off = its column, 64-bit)."""
    if c_stride != d_stride:
        b.ins(f"mul.wide.u32 %gq, {row}, {c_stride};")
        b.ins("add.u64 %gq, %gq, %off;")
        b.ins(f"mad.lo.u64 %gq, %gq, {abytes}, %rc;")
    else:
        b.ins(f"mad.lo.u64 %gq, %rp, {abytes}, %rc;")


def _bias_address(b, plan: EpiloguePlan, row: str, col: str, bias_reg: str) -> None:
    if plan.bias != "none":
        b.ins(f"mul.wide.u32 %gq, {col if plan.bias == 'col' else row}, {plan.bias_bytes};")
        b.ins(f"add.u64 %gq, %gq, {bias_reg};")


def zero_inputs(b, plan: EpiloguePlan) -> None:
    """C and bias registers = 0 before an edge tile's predicated loads: an element outside D computes
    from defined values (it is never stored)."""
    regs = [f"%ce{e}" for e in range(4)] * (plan.c == "epilogue") + [f"%be{e}" for e in range(4)] * (plan.bias != "none")
    for r in regs:
        b.ins(f"mov.f32 {r}, 0f00000000;")
    if plan.bias != "none" and plan.bias_bytes != 4:
        for e in range(4):
            b.ins(f"mov.b32 %bw{e}, 0;")


def edge_chunk(b, plan: EpiloguePlan, row: str, col: str, bias_reg: str, abytes: int, dbytes: int,
               convert: str | None, d_base: str, c_stride: str, d_stride: str, guards: tuple[str, str, str],
               elem: list[str]) -> None:
    """`chunk` for a tile on the edge of D: `guards` = (the row exists, the whole chunk is inside D, only
    part of it is): a whole chunk is read and stored with vector accesses, a partial one element by
    element (predicates `elem`, column col + e < N), nothing outside D is read or written. The steps run
    once on %ev0..3 either way."""
    ins = b.ins
    row_ok, whole, part = guards
    per = CHUNK_BYTES // abytes
    for e, p in enumerate(elem[:per]):
        ins(f"add.u32 %y, {col}, {e};")
        ins(f"setp.lt.and.u32 {p}, %y, %N, {part};")
    ins(f"mul.wide.u32 %rp, {row}, {d_stride};")
    ins(f"cvt.u64.u32 %off, {col};")
    ins("add.u64 %rp, %rp, %off;                     // element index in D")
    if plan.c == "epilogue":
        _c_address(b, row, abytes, c_stride, d_stride)
        ins(f"@{whole} ld.global.v4.f32 {{%ce0, %ce1, %ce2, %ce3}}, [%gq];")
        for e, p in enumerate(elem[:per]):
            ins(f"@{p} ld.global.f32 %ce{e}, [%gq+{e * abytes}];")
    _bias_address(b, plan, row, col, bias_reg)
    if plan.bias == "col":
        load_bias(b, plan, f"@{whole} ", "[%gq]", 4)
        for e, p in enumerate(elem[:per]):
            load_bias(b, plan, f"@{p} ", f"[%gq+{plan.bias_bytes * e}]", 1, e)
    elif plan.bias == "row":
        load_bias(b, plan, f"@{row_ok} ", "[%gq]", 1)
    for k in range(per):
        element_steps(b, plan, f"%ev{k}", f"%ce{k}", f"%be{k if plan.bias == 'col' else 0}")
    ins(f"mad.lo.u64 %gq, %rp, {dbytes}, {d_base};")
    if convert:
        for h in range(per // 2):
            ins(f"{convert} %hw{h}, %ev{2 * h + 1}, %ev{2 * h};")
        ins(f"@{whole} st.global.v2.b32 [%gq], {{%hw0, %hw1}};")
        for e, p in enumerate(elem[:per]):       # element e: the low (even e) or high half of %hw{e/2}
            word = f"%hw{e // 2}"
            if e % 2:
                ins(f"shr.b32 %hw{e // 2}, %hw{e // 2}, 16;")
            ins(f"@{p} st.global.b16 [%gq+{e * dbytes}], {word};")
    else:
        ins(f"@{whole} st.global.v4.f32 [%gq], {{%ev0, %ev1, %ev2, %ev3}};")
        for e, p in enumerate(elem[:per]):
            ins(f"@{p} st.global.b32 [%gq+{4 * e}], %ev{e};")


def byte_groups(plan: EpiloguePlan, cta_n: int) -> int:
    """Staged 16-byte groups (4 accumulators) per D chunk: 1 for a 2- or 4-byte D (as `chunk`); a 1-byte D
    packs 4 groups into one 16-byte store where the tile's N is a multiple of 16, else 2 (8 bytes)."""
    if not plan.packs:
        return 1
    return 4 if cta_n % (4 * GROUP) == 0 else 2


def byte_chunk(b, plan: EpiloguePlan, groups: int, smem: str, row: str, col: str, bias_reg: str, d_base: str,
               c_stride: str = "%N", d_stride: str = "%N", edge: tuple[str, str, str, str, str] | None = None) -> None:
    """One D chunk of a 1-byte D: `groups` x 4 staged accumulators from shared address `smem` (each group
    one v4 load), C and bias per group in one vector load each, the steps per element, each group packed
    into word %hw{g} (`pack`), and one v{groups}.b32 store at D row `row`, column `col`. `edge` = (the row
    exists, the whole chunk is inside D, only part of it is, a predicate and a u32 scratch register): a whole
    chunk as above under its predicate, a partial one element by element (loads, and byte stores up to
    column N); nothing outside D is read or written."""
    ins = b.ins
    raw = raw_accumulators(plan)
    row_ok, whole, part, p, y = edge or ("", "", "", "", "")
    ins(f"mul.wide.u32 %rp, {row}, {d_stride};")
    ins(f"cvt.u64.u32 %off, {col};")
    ins("add.u64 %rp, %rp, %off;                     // element index in D")

    def each(g: int, load) -> None:
        """load(e, guard) for the elements of group g that exist (edge: one predicate at a time)."""
        for e in range(GROUP):
            ins(f"add.u32 {y}, {col}, {GROUP * g + e};")
            ins(f"setp.lt.and.u32 {p}, {y}, %N, {part};")
            load(e, f"@{p} ")

    for g in range(groups):
        kind, regs = ("s32", "%ea") if raw else ("f32", "%ev")
        ins(f"ld.shared.v4.{kind} {{{', '.join(f'{regs}{e}' for e in range(GROUP))}}}, [{smem}+{CHUNK_BYTES * g}];")
        if plan.c == "epilogue":               # C: f32 (C_IN_EPILOGUE), 16 bytes a group
            _c_address(b, row, 4, c_stride, d_stride)
            vector = f"ld.global.v4.f32 {{%ce0, %ce1, %ce2, %ce3}}, [%gq+{CHUNK_BYTES * g}];"
            if edge is None:
                ins(vector)
            else:
                ins(f"@{whole} {vector}")
                each(g, lambda e, guard: ins(f"{guard}ld.global.f32 %ce{e}, [%gq+{CHUNK_BYTES * g + 4 * e}];"))
        if plan.bias == "col":
            _bias_address(b, plan, row, col, bias_reg)
            at = GROUP * g * plan.bias_bytes
            if edge is None:
                load_bias(b, plan, "", f"[%gq+{at}]", GROUP)
            else:
                load_bias(b, plan, f"@{whole} ", f"[%gq+{at}]", GROUP)
                each(g, lambda e, guard: load_bias(b, plan, guard, f"[%gq+{at + plan.bias_bytes * e}]", 1, e))
        elif plan.bias == "row" and g == 0:
            _bias_address(b, plan, row, col, bias_reg)
            load_bias(b, plan, f"@{row_ok} " if edge else "", "[%gq]", 1)
        for k in range(GROUP):
            element_steps(b, plan, f"%ev{k}", f"%ce{k}", f"%be{k if plan.bias == 'col' else 0}",
                          f"%ea{k}" if raw else None)
        pack(b, plan, f"%hw{g}", [f"%ev{k}" for k in range(GROUP)])
    ins(f"add.u64 %gq, %rp, {d_base};")
    words = "{" + ", ".join(f"%hw{g}" for g in range(groups)) + "}"
    if edge is None:
        ins(f"st.global.v{groups}.b32 [%gq], {words};")
        return
    ins(f"@{whole} st.global.v{groups}.b32 [%gq], {words};")
    for e in range(GROUP * groups):             # byte e: bits 8*(e%4).. of %hw{e/4}
        ins(f"add.u32 {y}, {col}, {e};")
        ins(f"setp.lt.and.u32 {p}, {y}, %N, {part};")
        ins(f"shr.b32 %ei0, %hw{e // GROUP}, {8 * (e % GROUP)};")
        ins(f"@{p} st.global.b8 [%gq+{e}], %ei0;")
