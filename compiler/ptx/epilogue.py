"""The fused epilogue's PTX, shared by the kernels that lower it (sparse_wgmma_kernel.py, sparse_gemm_kernel.py).

A kernel hands over its builder and an `EpiloguePlan` (compiler/passes/epilogue_lowering.py: the steps are
PTX instruction templates over {x}, {c}, {b}, {t0}.., {alpha}, {beta}); this module declares the registers
the plan needs, loads its parameters, and emits its steps, per element or for one 16-byte chunk of staged
f32 accumulators (4 elements of one row of D): C and bias in one vector load each, D stored converted.

Registers: %ev0..3 (a chunk's accumulators), %ce0..3 (C), %be0..3 (bias), %t0.. (scratch), %alpha, %beta
(f32); %rc (C), the bias base (u64; its name is the kernel's), %gq (u64 scratch); %hw0, %hw1 (packed D).
"""
from __future__ import annotations

from ..passes.epilogue_lowering import SCRATCH, EpiloguePlan

CHUNK_BYTES = 16


def abi_entries(plan: EpiloguePlan | None, buffers: dict) -> dict:
    """The epilogue's part of a kernel ABI: adds the bias buffer to `buffers` (when the plan reads one) and
    returns the ABI's extra keys ({"epilogue": what the runtime passes and a reference computes}, or {})."""
    if plan is None:
        return {}
    if plan.bias != "none":
        per = "column" if plan.bias == "col" else "row"
        buffers["bias"] = {"element": "f32", "shape": ["N"] if plan.bias == "col" else ["M"],
                           "layout": f"one f32 per {per} of D"}
    return {"epilogue": plan.describe()}


def declare(b, plan: EpiloguePlan, bias_reg: str) -> None:
    b.declare("f32", "%ev<4>", "%ce<4>", "%be<4>", f"%t<{SCRATCH}>", *(f"%{p}" for p in plan.params if p != "bias"))
    b.declare("u64", "%rc", bias_reg, "%gq")
    b.declare("b32", "%hw<2>")


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


def element_steps(b, plan: EpiloguePlan, x: str, c: str, bias: str, scratch: list[str] | None = None,
                  scalars: dict[str, str] | None = None) -> None:
    """The plan's per-element steps on element register `x` (its C element `c`, its bias `bias`); the
    scratch and alpha / beta registers are this module's `declare`d ones unless `scratch` / `scalars` name
    others (a kernel with numbered registers)."""
    regs = {"x": x, "c": c, "b": bias, "alpha": "%alpha", "beta": "%beta",
            **{f"t{n}": f"%t{n}" for n in range(SCRATCH)}}
    if scratch is not None:
        regs.update({f"t{n}": r for n, r in enumerate(scratch[:SCRATCH])})
    regs.update(scalars or {})
    for _step, lines in plan.element_steps:
        for line in lines:
            b.ins(line.format(**regs) + ";")


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
    if plan.bias == "col":
        ins(f"{guard}ld.global.v4.f32 {{%be0, %be1, %be2, %be3}}, [%gq];")
    elif plan.bias == "row":
        ins(f"{guard}ld.global.f32 %be0, [%gq];")
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
        b.ins(f"mul.wide.u32 %gq, {col if plan.bias == 'col' else row}, 4;")
        b.ins(f"add.u64 %gq, %gq, {bias_reg};")


def zero_inputs(b, plan: EpiloguePlan) -> None:
    """C and bias registers = 0 before an edge tile's predicated loads: an element outside D computes
    from defined values (it is never stored)."""
    regs = [f"%ce{e}" for e in range(4)] * (plan.c == "epilogue") + [f"%be{e}" for e in range(4)] * (plan.bias != "none")
    for r in regs:
        b.ins(f"mov.f32 {r}, 0f00000000;")


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
        ins(f"@{whole} ld.global.v4.f32 {{%be0, %be1, %be2, %be3}}, [%gq];")
        for e, p in enumerate(elem[:per]):
            ins(f"@{p} ld.global.f32 %be{e}, [%gq+{4 * e}];")
    elif plan.bias == "row":
        ins(f"@{row_ok} ld.global.f32 %be0, [%gq];")
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
