"""The tcgen05.mma issue sequence, written once for the `.entry` kernel (tcgen05_kernel.py) and the
`.func` fragment (fragment.py).

What both do: put each distinct instruction descriptor in a register, materialize the optional
trailing operands, turn each shared-memory descriptor offset into a descriptor (`operand base >> 4`
plus the materialized value), and issue one `tcgen05.mma` per K step - enable-input-d from the
caller's predicate for the first, true after it - then `tcgen05.commit` to an mbarrier. What differs
(where A lives, how the metadata and scale-factor TMEM addresses are formed, collector priming) comes
in as per-step callbacks and options.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .builder import PtxBuilder


def descriptor_base(b: PtxBuilder, smem_address: str) -> str:
    """A .b64 register holding `smem_address >> 4`. The start-address field of a shared-memory descriptor
    holds address bits 17..4 (PTX 9.7.16.4.1); the materialized descriptors carry the operand's offset
    within its buffer, so the issuer adds the buffer's own address. Shared addresses are below 2^18,
    so the addition cannot carry out of the 14-bit field."""
    r32, r64 = b.reg("r"), b.reg("rd")
    b.ins(f"shr.u32 {r32}, {smem_address}, 4;")
    b.ins(f"cvt.u64.u32 {r64}, {r32};")
    return r64


def descriptor(b: PtxBuilder, base: str, value: int) -> str:
    """A .b64 register holding descriptor `value` relocated by `base` (see descriptor_base)."""
    r = b.reg("rd")
    b.ins(f"add.u64 {r}, {base}, {int(value):#018x};")
    return r


def idesc_registers(b: PtxBuilder, values) -> dict[int, str]:
    """One .b32 register per distinct instruction descriptor value, in first-use order."""
    regs: dict[int, str] = {}
    for v in map(int, values):
        if v not in regs:
            regs[v] = b.reg("r")
            b.ins(f"mov.b32 {regs[v]}, {v:#010x};")
    return regs


def trailing_operands(b: PtxBuilder, spec: Any, zero_column_mask: int | None) -> dict[str, Any]:
    """The optional trailing operands in ISA order (PTX 9.7.16.10.9.1): {disable-output-lane} mask
    registers, the scale-input-d immediate, the .ws zero-column mask descriptor register; keyword
    arguments of Tcgen05Form.render."""
    extra: dict[str, Any] = {}
    if spec.disable_output_lane is not None:
        lanes = b.regs("r", len(spec.disable_output_lane))
        for reg, mask in zip(lanes, spec.disable_output_lane):
            b.ins(f"mov.b32 {reg}, {mask:#010x};")
        extra["disable_lanes"] = lanes
    if spec.scale_input_d is not None:
        extra["scale_input_d"] = spec.scale_input_d
    if zero_column_mask is not None:
        zcm = b.reg("rd")
        b.ins(f"mov.b64 {zcm}, {int(zero_column_mask):#018x};")
        extra["zcm"] = zcm
    return extra


def commit(b: PtxBuilder, mbar: str, cta_group: int = 1, cta_mask: str | None = None, pred: str | None = None) -> None:
    """`tcgen05.commit` to the mbarrier at [mbar]: one arrive once the issuing thread's earlier tcgen05 async
    ops complete (PTX 9.7.16.12.1), multicast to `cta_mask`'s CTAs; guarded by `pred` when given."""
    from ..isa.tcgen05_forms import tcgen05_commit

    b.ins((f"@{pred} " if pred else "") + tcgen05_commit(mbar, cta_group, cta_mask=cta_mask))


def issue_mmas(b: PtxBuilder, form: Any, d: str, steps: int, *,
               a_operand: Callable[[int], str], b_operand: Callable[[int], str],
               step_operands: Callable[[int], dict[str, str]], idesc: Callable[[int], str],
               first_enable: str, enable: str, extra: dict[str, Any], mbar: str, cta_mask: str | None = None,
               primer: tuple[Any, str, str] | None = None) -> None:
    """One `tcgen05.mma` of `form` per K step s into TMEM address `d`: A and B from `a_operand(s)` /
    `b_operand(s)`, `step_operands(s)` (metadata, scale factors) and `idesc(s)`, enable-input-d
    `first_enable` for step 0 and `enable` (a true predicate) after it, the trailing operands `extra`;
    then `tcgen05.commit` to `mbar` (multicast to `cta_mask` for a CTA pair, PTX 9.7.16.12.1).
    `primer` = (form, scratch TMEM address, false predicate): before each MMA an MMA of that form with
    the same operands (only the zero-column mask of `extra`) fills the collector buffer the real one
    reads (tcgen05_kernel.collector_priming)."""
    from ..isa.tcgen05_forms import tcgen05_commit

    for s in range(steps):
        a, bd = a_operand(s), b_operand(s)
        operands = step_operands(s)
        if primer is not None:
            prime, scratch, never = primer
            zcm = {k: v for k, v in extra.items() if k == "zcm"}
            b.ins(prime.render(scratch, a, bd, idesc(s), never, **operands, **zcm))
        b.ins(form.render(d, a, bd, idesc(s), first_enable if s == 0 else enable, **operands, **extra))
    b.ins(tcgen05_commit(mbar, form.cta_group, cta_mask=cta_mask))
