"""`descriptor-materialization`: the instruction descriptor (PTX 9.7.16.4.2, Tables 42-44), the
shared-memory descriptors of every MMA K step (9.7.16.4.1) and the zero-column mask (9.7.16.4.3)
become IR attributes. The emitter only prints them.

Smem descriptor start addresses are relative to the kernel's shared buffer, which is aligned to
1024 B; the kernel adds (buffer address >> 4) to the 14-bit start field at run time (no carry can
leave the field: shared addresses are below 2^18). K = 96 tiles use the absolute-LBO mode (bit 52,
9.7.16.3.1.2): their LBO field is an address too, buffer-relative here, relocated the same way.
"""
from __future__ import annotations


from ..ir import Hex, Op
from . import Pass, PassContext
from .derive import mma_form, pipeline, scale_layouts, scale_type, smem_layout, tile_spec


class DescriptorMaterialization(Pass, name="descriptor-materialization", requires=("layouts",), provides=("descriptors",),
                                description="encode the instruction, smem and zero-column-mask descriptors into the IR"):

    def apply(self, module, ctx: PassContext) -> None:
        ctx.each_tile(module, self.tile, engine="tcgen05")

    @staticmethod
    def step_fields(tile: Op, step: int, scales=None) -> dict:
        """Instruction-descriptor fields of MMA `step` of a stage that differ from step to step
        (`scales`: the tile's SFA/SFB TMEM layouts, derive.scale_layouts)."""
        fields = {}
        if tile.op("tilec.sparsity") is not None:
            from ..isa.tmem import metadata_format

            selector, _ = metadata_format(tile.attrs["kind"]).selector_and_column(step)
            if selector:
                fields["sparsity_selector"] = selector
        if scales is not None:
            (_, a_id), (_, b_id) = (lay.step_position(step) for lay in scales)
            if a_id or b_id:
                fields["a_scale_id"], fields["b_scale_id"] = a_id, b_id
        return fields

    def tile(self, tile: Op) -> None:
        from ..descriptors.instr import InstrDesc
        from ..isa.tcgen05_kinds import mma_k
        from ..layout import smem_descriptors
        from .epilogue_lowering import accumulator_type

        spec = tile_spec(tile)
        form = mma_form(tile)
        scales = scale_layouts(tile, spec, form)
        kind = tile.attrs["kind"]
        sparse = spec.sparsity is not None
        k96 = form.k96                # Table 44 bit 31 "K Dimension": 1 = dense K 96
        a, b = spec.operands["A"], spec.operands["B"]
        lay_a, lay_b = tile.op("tilec.smem_layout", "A"), tile.op("tilec.smem_layout", "B")
        base = dict(a_major=(lay_a.attrs["major"] if lay_a else (a.major or "K")), b_major=lay_b.attrs["major"],
                    negate_a=spec.negate_a, negate_b=spec.negate_b, sparse=sparse, saturate=spec.saturate,
                    max_shift=spec.max_shift, k96=k96,
                    scale_type=scale_type(tile))
        acc = accumulator_type(spec)      # the TMEM accumulator (D's type unless an epilogue converts it)
        idesc = InstrDesc(kind, a.dtype, b.dtype, acc, spec.m, spec.n, **base)
        attrs = {"kind": kind, "value": Hex(idesc.encode())}
        steps = pipeline(tile)["k_block"] // mma_k(kind, sparse, k96)
        per_step = [self.step_fields(tile, s, scales) for s in range(steps)]
        if any(per_step):
            # The fields that change from MMA to MMA of a stage: the f16/tf32 sparsity selector = the
            # metadata column's parity (PTX ISA Table 44 sparsity selector, 9.7.16.10.8.4) and the scale-factor IDs = byte offsets of the
            # MMA's scale factors in their TMEM word (9.7.16.10.7.2/.3). Step 0 is `value`.
            attrs["step_values"] = tuple(Hex(InstrDesc(kind, a.dtype, b.dtype, acc, spec.m, spec.n,
                                                       **base, **f).encode()) for f in per_step)
            attrs["value"] = attrs["step_values"][0]
        tile.body.append(Op("tilec.instr_desc", None, attrs, loc=spec.loc("engine")))
        step = mma_k(kind, sparse, k96)
        for lay_op in (lay_a, lay_b):
            if lay_op is None:
                continue
            lay = smem_layout(tile, lay_op, spec)
            k_step = step // 2 if (lay_op.sym == "A" and sparse) else step
            # bit 52 (9.7.16.4.1 / 9.7.16.3.1): "absolute" for K = 96 tiles (layout-selection's LBO_MODE); then
            # the LBO field holds the shared address of each step's second piece, relative to the buffer
            # like the start address (the kernel adds the buffer address to both fields)
            lbo_mode = lay_op.attrs.get("lbo_mode", "relative")
            values = smem_descriptors(lay.dtype, lay.major, lay.swizzle, lay.mn, lay.k, k_step,
                                      base_address=lay_op.attrs["offset"], lbo_mode=lbo_mode,
                                      container_bits=lay.container_bits)
            attrs = {"k_step": k_step, "values": tuple(Hex(v) for v in values)}
            if lbo_mode != "relative":
                attrs["lbo_mode"] = lbo_mode
            tile.body.append(Op("tilec.smem_desc", lay_op.sym, attrs, loc=lay_op.loc))
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
