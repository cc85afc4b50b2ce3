"""`descriptor-materialization`: the instruction descriptor (PTX 9.7.16.4.2, Tables 42-44), the
shared-memory descriptors of every MMA K step (9.7.16.4.1) and the zero-column mask (9.7.16.4.3)
become IR attributes. The emitter only prints them.

Smem descriptor start addresses are relative to the kernel's shared buffer, which is aligned to
1024 B; the kernel adds (buffer address >> 4) to the 14-bit start field at run time (no carry can
leave the field: shared addresses are below 2^18).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..diagnostics import SpecError
from ..ir import Hex, Op
from . import Pass, PassContext


@dataclass(frozen=True)
class DescriptorMaterialization(Pass):
    name = "descriptor-materialization"
    requires = ("layouts",)
    provides = ("descriptors",)
    description = "encode the instruction, smem and zero-column-mask descriptors into the IR"

    def apply(self, module, ctx: PassContext) -> None:
        for tile in module.ops("tilec.tile"):
            if tile.attrs["engine"] != "tcgen05":
                continue
            try:
                self.tile(tile)
            except SpecError as e:
                ctx.spec_error(e, tile.payload)

    def tile(self, tile: Op) -> None:
        from ..descriptors import InstrDesc
        from ..layout import smem_descriptors
        from ..tcgen05_kinds import mma_k

        spec = tile.payload
        kind = tile.attrs["kind"]
        sparse = spec.sparsity is not None
        a, b, d = (spec.operands[x] for x in "ABD")
        lay_a, lay_b = tile.op("tilec.smem_layout", "A"), tile.op("tilec.smem_layout", "B")
        idesc = InstrDesc(kind, a.dtype, b.dtype, d.dtype, spec.m, spec.n,
                          a_major=(lay_a.attrs["major"] if lay_a else (a.major or "K")),
                          b_major=lay_b.attrs["major"],
                          negate_a=spec.negate_a, negate_b=spec.negate_b, sparse=sparse,
                          sparsity_selector=0, saturate=spec.saturate, max_shift=spec.max_shift,
                          scale_type=(spec.operands["SFA"].dtype if "SFA" in spec.operands else None))
        tile.body.append(Op("tilec.instr_desc", None, {"kind": kind, "value": Hex(idesc.encode())},
                            loc=spec.loc("engine")))
        tile.facts["idesc"] = idesc
        step = mma_k(kind, sparse)
        for lay_op in (lay_a, lay_b):
            if lay_op is None:
                continue
            lay = lay_op.facts["layout"]
            k_step = step // 2 if (lay_op.sym == "A" and sparse) else step
            values = smem_descriptors(lay.dtype, lay.major, lay.swizzle, lay.mn, lay.k, k_step,
                                      base_address=lay_op.attrs["offset"],
                                      container_bits=lay.container_bits)
            tile.body.append(Op("tilec.smem_desc", lay_op.sym,
                                {"k_step": k_step, "values": tuple(Hex(v) for v in values)}, loc=lay_op.loc))
        if spec.zero_columns is not None:
            from ..descriptors import ZeroColumnMask
            from ..descriptors.zero_column_mask import solve_zero_columns

            z = spec.zero_columns
            if z.value is not None:
                zcm = ZeroColumnMask.decode(z.value)
                zcm.check(spec.m, spec.n)       # shift limit and M/N (decode alone cannot know them)
            else:
                zcm = solve_zero_columns(spec.m, spec.n, [set(c) for c in z.columns], shift=z.shift)
            tile.body.append(Op("tilec.zero_column_mask", None, {"value": Hex(zcm.encode())},
                                loc=spec.loc("zero_columns")))
