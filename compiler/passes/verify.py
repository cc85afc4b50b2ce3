"""`verify`: legality of each tile against the PTX tables, with located diagnostics.

Everything here is a lookup in a table owned elsewhere (one source of truth per fact):
- tcgen05 kinds, types and shapes: compiler/isa/tcgen05_kinds.py (PTX 9.7.16.2.1 Table 39, Tables 42-44);
- tcgen05 instruction forms, PTX versions and targets: compiler/isa/tcgen05_forms.py (9.7.16.10.9);
- warp-level mma.sp forms, selectors, versions and targets: compiler/isa/mma_sp/forms.py (9.7.14.6).
It also resolves the kind and the `.version` of the module (the highest minimum of every form used,
never below the target's own minimum) and rejects a user-given version below that.
"""
from __future__ import annotations


from ..diagnostics import CompileError, Diagnostic, SpecError
from ..isa.identifiers import is_c_identifier, is_ptx_identifier
from ..isa.targets import MAX_PTX, TARGETS, format_version, is_released, version_problem
from . import Pass, PassContext
from .derive import form_op, module_spec, tile_loc, tile_spec
from .limits import MAX_SCHEDULE_STAGES, check_limits
from .symbols import symbol_collision

# Operands each engine needs, and the spaces each may live in (tcgen05: compiler/isa/tcgen05_forms.py;
# mma.sp: the spaces tilec's warp-level kernels read their fragments from).
_MMA_SP_OPERANDS = {"A": ("global", "reg"), "B": ("global", "reg"), "C": ("global", "reg"),
                    "D": ("global", "reg")}
# Block-scaled kinds take scale_A / scale_B (PTX 9.7.14.3): SFA/SFB buffers, or registers in a fragment.
_MMA_SP_SCALE_OPERANDS = {"SFA": ("global", "reg"), "SFB": ("global", "reg")}
_FIELD_ALIASES = {"satfinite": "saturate", "kind": "engine.kind", "name": "tile"}


def _k96_hint() -> str:
    from ..isa.tcgen05_kinds import K96

    return (f"K = {K96.k} is the dense kind::{' / '.join(K96.kinds)} MMA of a CTA pair: "
            f"cta_group={K96.cta_group}, M={'/'.join(map(str, K96.ms))}, block_scale vec=32 (or vec=16 for "
            f"mxf4nvf4), target {' / '.join(K96.targets)} (PTX Table 39, Table 60)")


def _check_operands(tile, ctx: PassContext, allowed: dict, optional: dict = {}):
    spec = tile_spec(tile)
    for name, spaces in allowed.items():
        if name not in spec.operands:
            ctx.fail(f"{spec.engine} tile '{spec.name}' needs operand {name}", spec.loc("tile"),
                     f"add e.g. '{name}: <type> {spaces[0]};'")
    for name, o in spec.operands.items():
        spaces = allowed.get(name) or optional.get(name)
        if spaces is None:
            ctx.fail(f"operand {name} is not used by {spec.engine}", spec.loc(name),
                     f"{spec.engine} takes {', '.join(list(allowed) + list(optional))}")
        if o.space not in spaces:
            ctx.fail(f"operand {name} of {spec.engine} cannot live in {o.space}", spec.loc(f"{name}.space"),
                     f"{name} lives in {' or '.join(spaces)}")


def _check_operand_values(spec) -> None:
    """Instruction operands the tile gives as values (PTX 9.7.16.10.9.1)."""
    from ..isa.tcgen05_forms import DISABLE_LANE_REGS, SCALE_INPUT_D_RANGE

    if spec.disable_output_lane is not None:
        # a vector of 4 (cta_group::1) / 8 (::2) .b32 masks, bit i of element 0 = TMEM lane i
        lanes = spec.disable_output_lane
        if len(lanes) != DISABLE_LANE_REGS[spec.cta_group] or any(not 0 <= v < 1 << 32 for v in lanes):
            raise SpecError(f"disable_output_lane takes {DISABLE_LANE_REGS[spec.cta_group]} 32-bit masks with "
                            f"cta_group::{spec.cta_group}, got {list(map(hex, lanes))}",
                            "disable_output_lane.value", "bit i of mask j disables TMEM lane 32*j + i")
    if spec.scale_input_d is not None and spec.scale_input_d not in SCALE_INPUT_D_RANGE:
        # "The valid range of values for argument scale-input-d is [0, 15]"
        raise SpecError(f"scale_input_d is an immediate in [0, 15], not {spec.scale_input_d}",
                        "scale_input_d.value", "D is scaled by 2^-scale_input_d")


def _block_scales():
    from ..isa.mma_sp.forms import BLOCK_SCALES

    return BLOCK_SCALES


class Verify(Pass, name="verify", requires=(), provides=("verified",),
             description="check every tile against the PTX tables; resolve kind and PTX version"):

    def apply(self, module, ctx: PassContext) -> None:
        fspec = module_spec(module)
        target = TARGETS[fspec.target]
        needed = target.min_ptx
        if fspec.ptx_version is not None and not is_released(fspec.ptx_version):
            # a version given in code (compile_source(ptx_version=...)); text is checked by the front end
            message, hint = version_problem(format_version(fspec.ptx_version))
            ctx.fail(message, fspec.loc("ptx"), hint)

        for tile in module.ops("tilec.tile"):
            if not is_ptx_identifier(tile.sym or ""):
                ctx.fail(f"tile name '{tile.sym}' is not a PTX identifier (it names the kernel's .entry)",
                         tile_loc(tile, "tile"), "use letters, digits and '_', starting with a letter")
            if not is_c_identifier(tile.sym):
                # the DSL's grammar has no `$`; IR text (compile_ir, `tilec opt`) can spell one
                ctx.fail(f"tile name '{tile.sym}' is not a C identifier (host code looks the kernel's .entry up "
                         "by name)", tile_loc(tile, "tile"), "use letters, digits and '_'")
            try:
                if tile.attrs["engine"] == "tcgen05":
                    v = self.tcgen05(tile, ctx, fspec)
                elif tile.attrs["engine"] == "mma.sp":
                    v = self.mma_sp(tile, ctx, fspec)
                else:
                    ctx.fail("dense warp-level 'mma' is not supported; tilec emits sparse 'mma.sp'",
                             tile_loc(tile, "engine.name"), "write 'engine mma.sp;' and a 'sparsity' statement")
                check_limits(tile, fspec.target)   # budgets on the code the tile's kernel unrolls (limits.py)
            except SpecError as e:
                # Tables name some fields by their PTX words; the spec records the DSL's.
                field = _FIELD_ALIASES.get(e.field or "", e.field)
                ctx.spec_error(SpecError(e.message, field, e.hint), tile)
            needed = max(needed, v)
        clash = symbol_collision(module.ops("tilec.tile"))      # module-scope names (symbols.py)
        if clash is not None:
            ctx.fail(clash[1], tile_loc(clash[0], "tile"), "rename the tile")
        if needed > MAX_PTX:
            ctx.fail(f"this file needs PTX ISA {format_version(needed)}, newer than the supported "
                     f"{format_version(MAX_PTX)}", fspec.loc("target"))
        if fspec.ptx_version is not None:
            if fspec.ptx_version < needed:
                ctx.fail(f"PTX ISA {format_version(fspec.ptx_version)} is too old for this file: "
                         f"{fspec.target} and the forms used need {format_version(needed)}",
                         fspec.loc("ptx"), f"write 'ptx {format_version(needed)};' or drop the statement")
            if fspec.ptx_version > MAX_PTX:
                ctx.fail(f"PTX ISA {format_version(fspec.ptx_version)} is newer than the supported "
                         f"{format_version(MAX_PTX)}", fspec.loc("ptx"))
            needed = fspec.ptx_version
        module.attrs["ptx_version"] = format_version(needed)

    # -- tcgen05 -----------------------------------------------------------------------------------
    def tcgen05(self, tile, ctx: PassContext, fspec):
        from ..descriptors.instr import InstrDesc
        from ..isa.tcgen05_forms import OPERAND_SPACES, SCALE_OPERAND_SPACES, Tcgen05Mma, check_target, infer_ptx_version
        from ..isa.tcgen05_kinds import (K96, check_major, check_options, check_scale, check_shape, infer_kind,
                                         kind_info, mma_k)
        from ..isa.tmem import scale_vector_elements

        from .epilogue_lowering import accumulator_type, check_epilogue

        spec = tile_spec(tile)
        if spec.epilogue is not None and spec.schedule is None:
            raise SpecError("the epilogue is lowered into the whole-GEMM kernels of a 'schedule' (the warp-specialised "
                            "tcgen05 kernel, the sparse wgmma kernel); this tile's kernel stores D as the MMA leaves it",
                            "epilogue", "add e.g. 'schedule cta=128x128x64 stages=4;'")
        spaces, optional = OPERAND_SPACES, SCALE_OPERAND_SPACES
        if spec.epilogue is not None:
            # the warp-specialised kernel's epilogue (compiler/ptx/tcgen05_ws_kernel.py) reads the TMEM
            # accumulators and writes D to global memory in D's type; C (beta*C) is read from global memory
            spaces = {**spaces, "D": ("tmem", "global")}
            optional = {**optional, "C": ("global",)}
        _check_operands(tile, ctx, spaces, optional)
        a, b = spec.operands["A"], spec.operands["B"]
        # the MMA's D is the TMEM accumulator: D's type, or with an epilogue its accumulator type (D's type is
        # then the output's; epilogue-lowering checks which outputs it converts to)
        acc = accumulator_type(spec)
        if spec.epilogue is not None:
            check_epilogue(spec)
        scaled = spec.block_scale is not None or "SFA" in spec.operands or "SFB" in spec.operands
        kind = spec.kind
        if kind is None:
            try:
                kind = infer_kind(a.dtype, b.dtype, acc, block_scaled=scaled)
            except SpecError as e:
                raise SpecError(e.message, e.field or "A.dtype", e.hint) from None
        tile.attrs["kind"] = kind
        if spec.schedule is not None:         # the warp-specialised kernel (passes/warp_specialization.py)
            from .warp_specialization import check_tcgen05_schedule

            check_tcgen05_schedule(spec, kind, fspec.target)
        sparse = spec.sparsity is not None
        if sparse:
            want = kind_info(kind).sparsity
            if spec.sparsity.ratio != want:
                raise SpecError(f"kind::{kind} sparse A is {want}, not {spec.sparsity.ratio}", "sparsity.ratio")
            if spec.sparsity.selector:
                # PTX 9.7.16.10.8.4: the hardware reads metadata in 64-bit granules; f16/tf32 MMAs use half of
                # one and the idesc selector names the half (= the metadata column's parity), 8-bit and
                # fp4 kinds a whole granule with selector 0 (Tables 42-44 bits 0-1). tilec places the
                # metadata, so it sets the selector of every MMA itself.
                raise SpecError(f"the tcgen05 sparsity selector is chosen by tilec (the parity of each MMA's "
                                f"metadata column), not given: selector={spec.sparsity.selector}",
                                "sparsity.selector", "drop selector=")
        if a.space == "tmem":
            # A in Tensor Memory is read K-major (9.7.16.10.1 Table 49 transposes only smem descriptors;
            # CUTLASS: "A from TMEM can't be transposed") and has no swizzle (a property of smem layouts).
            if a.major == "MN":
                raise SpecError("A in tensor memory cannot be MN-major (transposed)", "A.major",
                                "drop major=MN, or keep A in smem")
            if a.swizzle not in (None, "auto", "none"):
                raise SpecError(f"swizzle={a.swizzle} describes a shared-memory layout; A is in tensor memory",
                                "A.swizzle", "drop swizzle=")
        # K = 96 is its own Table 39 row (dense mxf4 / mxf4nvf4, cta_group::2, M = 256; idesc bit 31, Table
        # 44); no other row has K = 96, so `shape K=96` always asks for it and the row's rules blame the rest.
        k96 = spec.k == K96.k
        if k96 and kind_info(kind).k96:
            # the K = 96 row's own conditions, blamed on the statement that breaks them
            pair = f"cta_group::{K96.cta_group} (a CTA pair, M = {'/'.join(map(str, K96.ms))})"
            for broken, what, field in ((spec.cta_group != K96.cta_group, f"{pair} (PTX Table 39); "
                                         f"{K96.outside_note()}", "engine.cta_group"),
                                        (sparse != K96.sparse, "a dense A (there is no sparse K = 96 MMA) "
                                         "(PTX Table 39)", "sparsity")):
                if broken:
                    raise SpecError(f"K = {K96.k} needs {what}", field, _k96_hint())
        try:
            check_shape(kind, spec.m, spec.n, cta_group=spec.cta_group, sparse=sparse, ws=spec.ws, k96=k96)
        except SpecError as e:
            if k96 and e.hint is None:
                raise SpecError(e.message, e.field, _k96_hint()) from None
            raise
        want_k = mma_k(kind, sparse, k96)
        if spec.k != want_k:
            raise SpecError(f"K of one tcgen05.mma kind::{kind} {'sparse' if sparse else 'dense'} instruction "
                            f"is {want_k}, not {spec.k}", "shape.K", f"write K={want_k}")
        if spec.total_k % want_k or spec.total_k <= 0:
            raise SpecError(f"loop K={spec.total_k} is not a positive multiple of the instruction K={want_k}",
                            "loop.K", f"use a multiple of {want_k}, e.g. {max(want_k, spec.total_k // want_k * want_k)}")
        for name, o in (("A", a), ("B", b)):
            if o.space == "smem":
                check_major(kind, name, o.dtype, o.major or "K",
                            None if o.swizzle in (None, "auto") else o.swizzle, spec.n, spec.cta_group)
        check_options(kind, negate_a=spec.negate_a, negate_b=spec.negate_b, saturate=spec.saturate,
                      scale_input_d=spec.scale_input_d is not None)
        scale_type = spec.operands["SFA"].dtype if "SFA" in spec.operands else None
        info = kind_info(kind)
        if info.block_scaled:
            # Tables 43/44: a block-scaled MMA always has scale factors and a vector size (Table 54).
            if spec.block_scale is None:
                raise SpecError(f".kind::{kind} is block scaled: it needs a scale vector size",
                                "engine.kind", "add e.g. 'block_scale vec=32;' (Table 54)")
            if scale_type is None and "SFB" in spec.operands:
                scale_type = spec.operands["SFB"].dtype
            if scale_type is None and len(info.scale_types) == 1:
                scale_type = info.scale_types[0]          # the kind's only scale-factor type
            if scale_type is None:
                raise SpecError(f".kind::{kind} takes {' or '.join(info.scale_types)} scale factors: say which",
                                "engine.kind", f"add 'SFA: {info.scale_types[0]} tmem;' and 'SFB: "
                                f"{info.scale_types[0]} tmem;' (Table 44 bit 23)")
        if "SFB" in spec.operands and spec.operands["SFB"].dtype != scale_type:
            raise SpecError("SFA and SFB must have the same scale type (one idesc field, Tables 43/44)",
                            "SFB.dtype")
        # elements per scale factor, for `.block16`/`.block32` and their `.scale_vec::NX` aliases alike (a
        # 2X of mxf4nvf4 is a block32: ue4m3 scales must be refused there too, ptxas cannot see the idesc)
        vec = scale_vector_elements(kind, spec.block_scale, k96) if spec.block_scale else None
        check_scale(kind, scale_type, vec)
        # The instruction descriptor's constructor checks the types for the kind (Tables 42-44).
        InstrDesc(kind, a.dtype, b.dtype, acc, spec.m, spec.n,
                  a_major=a.major or "K", b_major=b.major or "K",
                  negate_a=spec.negate_a, negate_b=spec.negate_b, sparse=sparse,
                  sparsity_selector=0, saturate=spec.saturate, max_shift=spec.max_shift,
                  scale_type=scale_type, k96=k96)
        form = Tcgen05Mma(kind, cta_group=spec.cta_group, sparse=sparse, ws=spec.ws,
                          a_in_tmem=(a.space == "tmem"), block_scale=spec.block_scale,
                          collector=spec.collector, ashift=spec.ashift,
                          disable_output_lane=spec.disable_output_lane is not None,
                          scale_input_d=spec.scale_input_d is not None,
                          zero_column_mask=spec.zero_columns is not None, k96=k96)
        if spec.ashift:
            form.check_ashift_m(spec.m)
        _check_operand_values(spec)
        try:
            check_target(form, fspec.target, fspec.ptx_version)
        except SpecError as e:
            raise SpecError(e.message, e.field or "target", e.hint) from None
        tile.body.append(form_op("tcgen05", form, scale_type, spec.loc("engine")))
        return infer_ptx_version([form], fspec.target)

    # -- mma.sp ------------------------------------------------------------------------------------
    @staticmethod
    def _mma_sp_scale_words(spec) -> tuple[str | None, str | None]:
        """The `.stype` (the SFA/SFB element type) and `.scale_vec_size` a block-scaled mma.sp tile asks
        for; mma.sp spells its vector size 1X/2X/4X (PTX 9.7.14.3 Table 36), not tcgen05's block16/32."""
        from ..isa.mma_sp.block_scale import SCALE_VECTOR

        ops = spec.operands
        scale_type = (ops.get("SFA") or ops.get("SFB")).dtype if ("SFA" in ops or "SFB" in ops) else None
        vec = spec.block_scale
        if vec is None or vec == "implicit":
            scaled_kinds = sorted({s.kind for s in _block_scales()})
            if vec is not None and spec.kind not in scaled_kinds:
                raise SpecError(f"block_scale is only taken by the block-scaled kinds {', '.join(scaled_kinds)}",
                                "block_scale", "drop the statement")
            return scale_type, None
        size = vec.removeprefix("scale_vec::")
        if size not in SCALE_VECTOR:          # Table 35's sizes; block16/block32 are tcgen05's own spellings
            sizes = list(SCALE_VECTOR)
            raise SpecError(f"mma.sp spells the scale vector size {', '.join(sizes[:-1])} or {sizes[-1]}; {vec} is "
                            "a tcgen05 spelling", "block_scale.vec",
                            "write e.g. 'block_scale vec=2X;' (PTX 9.7.14.3 Table 36)")
        return scale_type, size

    @staticmethod
    def _mma_sp_check_scales(spec, form, ctx: PassContext) -> None:
        """A block-scaled form reads scale_A and scale_B (PTX 9.7.14.3): both operands, one `.stype`, and
        the vector size spelled where the ISA makes it mandatory (mxf4nvf4, forms.BLOCK_SCALES)."""
        from ..isa.mma_sp.block_scale import block_elements

        ops = spec.operands
        bs = form.block_scale
        if not bs.vec_optional and spec.block_scale in (None, "implicit"):
            legal = sorted({s.scale_vec for s in _block_scales() if s.kind == form.kind})
            raise SpecError(f"kind::{form.kind} needs its scale vector size spelled (.scale_vec_size is "
                            f"mandatory for it, PTX 9.7.14.6.3 syntax)",
                            "block_scale" if spec.block_scale else "engine.kind",
                            f"add 'block_scale vec={' or vec='.join(legal)};'")
        for name in ("SFA", "SFB"):
            if name not in ops:
                ctx.fail(f"block-scaled mma.sp ({form.name}) needs operand {name}: scale_{name[-1]} holds one "
                         f".{bs.scale_type} factor per {'row' if name == 'SFA' else 'column'} and "
                         f"{block_elements(form.k, bs.scale_vec)} K (PTX 9.7.14.3 Table 35)",
                         spec.loc("tile"), f"add '{name}: {bs.scale_type} global;'")
        if ops["SFB"].dtype != ops["SFA"].dtype:
            raise SpecError(f"SFA and SFB must have the same scale type (mma.sp has one .stype), not "
                            f"{ops['SFA'].dtype} and {ops['SFB'].dtype}", "SFB.dtype",
                            f"write 'SFB: {ops['SFA'].dtype} ...;'")

    def mma_sp(self, tile, ctx: PassContext, fspec):
        from ..isa.mma_sp.forms import find_form

        from .epilogue_lowering import accumulator_type, check_epilogue, check_epilogue_kernel

        spec = tile_spec(tile)
        # C is optional where the kernel can leave it out (the wgmma GEMM, and a pipelined GEMM with an
        # epilogue: D = A*B; epilogue-lowering)
        c_optional = spec.schedule is not None and (spec.schedule.mma == "wgmma" or spec.epilogue is not None)
        required = {k: v for k, v in _MMA_SP_OPERANDS.items() if k != "C" or not c_optional}
        _check_operands(tile, ctx, required, {**_MMA_SP_SCALE_OPERANDS, "C": _MMA_SP_OPERANDS["C"]})
        if spec.sparsity is None:
            ctx.fail("an mma.sp tile needs a 'sparsity' statement", spec.loc("tile"),
                     "add e.g. 'sparsity 2:4 metadata=runtime;'")
        ops = spec.operands
        scale_type, scale_vec = self._mma_sp_scale_words(spec)
        check_epilogue(spec, fspec.target)
        # the MMA's C and D are the accumulators: C's type (or, without C, the accumulator type), and D's
        # unless an epilogue converts them into D's type
        acc = accumulator_type(spec)
        form_c = ops["C"].dtype if "C" in ops else acc
        form_d = acc if spec.epilogue is not None else ops["D"].dtype
        try:
            form = find_form(f"m{spec.m}n{spec.n}k{spec.k}", ops["A"].dtype, ops["B"].dtype, form_c,
                             form_d, kind=spec.kind, scale_type=scale_type, scale_vec=scale_vec)
        except SpecError as e:
            # find_form names the PTX words; the tile spells them as the SFA type and `block_scale vec=`
            field = {"scale_type": "SFA.dtype" if "SFA" in ops else "SFB.dtype",
                     "scale_vec": "block_scale.vec"}.get(e.field or "", e.field)
            raise SpecError(e.message, field, e.hint) from None
        if spec.sparsity.ratio != form.granularity.name:
            raise SpecError(f"{form.shape} with {ops['A'].dtype} is {form.granularity.name} sparse, not "
                            f"{spec.sparsity.ratio}", "sparsity.ratio")
        form.check_selector(spec.sparsity.selector)
        check_epilogue_kernel(spec, form)
        if spec.total_k % spec.k or spec.total_k <= 0:
            raise SpecError(f"loop K={spec.total_k} is not a positive multiple of the instruction K={spec.k}",
                            "loop.K")
        if spec.saturate:
            form = find_form(f"m{spec.m}n{spec.n}k{spec.k}", ops["A"].dtype, ops["B"].dtype, form_c,
                             form_d, kind=spec.kind, satfinite=True)
        min_ptx, err = form.requirements(fspec.target, fspec.ptx_version)
        if err:
            bs = form.block_scale
            if bs is not None and err.field == "ptx" and bs.min_ptx > max(form.row.min_ptx, MAX_PTX):
                # the scale combination, not the instruction, needs the newer PTX (mxf4nvf4 4X .ue8m0 is
                # PTX 9.1): the error belongs on `block_scale vec=`, with what the pinned ptxas takes
                legal = ", ".join(f"scale_vec::{s.scale_vec} with .{s.scale_type}" for s in _block_scales()
                                  if s.kind == bs.kind and s.min_ptx <= MAX_PTX)
                raise SpecError(err.message, "block_scale.vec", f"with this ptxas: {legal}")
            raise err
        if form.block_scale is not None:
            self._mma_sp_check_scales(spec, form, ctx)
        tile.attrs["kind"] = form.kind or "none"
        tile.body.append(form_op("mma.sp", form, None, spec.loc("engine")))
        if spec.schedule is not None:
            sc = spec.schedule
            for what, value, unit, field in (("cta M", sc.cta_m, spec.m * sc.warps_m, "schedule.cta"),
                                             ("cta N", sc.cta_n, spec.n * sc.warps_n, "schedule.cta"),
                                             ("cta K", sc.cta_k, spec.k, "schedule.cta")):
                if value % unit:
                    raise SpecError(f"schedule {what} = {value} is not a multiple of {unit} (instruction shape "
                                    f"x warps)", field)
            if not 1 <= sc.stages <= MAX_SCHEDULE_STAGES:
                raise SpecError(f"schedule stages = {sc.stages}; use 1..{MAX_SCHEDULE_STAGES}", "schedule.stages")
            if sc.accumulators is not None:
                raise SpecError("schedule accumulators= counts TMEM accumulators of tcgen05 tiles; an mma.sp "
                                "tile accumulates in registers", "schedule.accumulators", "drop accumulators=")
            if sc.cluster != 1 and (sc.mma != "wgmma" or sc.cluster != 2):
                raise SpecError(f"schedule cluster = {sc.cluster}: CTA pairs (cluster=2) exist for mma=wgmma "
                                "only (they share B by TMA multicast)", "schedule.cluster",
                                "drop cluster=, or write mma=wgmma cluster=2")
            check_schedule_options(sc)
            if sc.promote is not None:
                from ..isa.wgmma import PROMOTED_A_TYPES

                if sc.mma != "wgmma":
                    raise SpecError("schedule promote=N is the two-level fp8 accumulation of the sparse wgmma kernel; "
                                    "warp-level mma.sp accumulates its fp8 products in f32", "schedule.promote",
                                    "drop promote=, or write mma=wgmma (sm_90a)")
                if ops["A"].dtype not in PROMOTED_A_TYPES:
                    raise SpecError(f"schedule promote=N adds fp8 wgmma accumulators into f32 every N K blocks; "
                                    f"{ops['A'].dtype} sums are f32 (or s32) already", "schedule.promote",
                                    f"drop promote= (it serves A {' / '.join(PROMOTED_A_TYPES)})")
                if sc.promote < 1:
                    raise SpecError(f"schedule promote = {sc.promote}: every N >= 1 K blocks", "schedule.promote",
                                    "write promote=4 (CUTLASS's interval), or drop promote= for no promotion")
            if sc.mma == "wgmma":
                # warpgroup wgmma.mma_async.sp (compiler/ptx/sparse_wgmma_kernel.py): sm_90a only, and only
                # the forms one wgmma k-step matches (PTX 9.7.15.6.3 syntax and target notes)
                from ..isa.wgmma import WGMMA_TARGET, required_ptx, wgmma_form_problem

                if fspec.target != WGMMA_TARGET:
                    raise SpecError(f"schedule mma=wgmma needs target {WGMMA_TARGET} (wgmma.mma_async.sp, PTX "
                                    f"9.7.15.6.3), not {fspec.target}", "schedule.mma",
                                    "write 'target sm_90a;' or mma=sync")
                problem = wgmma_form_problem(form)
                if problem:
                    raise SpecError(problem.message, "schedule.mma", problem.hint)
                min_ptx = max(min_ptx, required_ptx(form))
        if fspec.ptx_version is None:
            # Prefer `.sp::ordered_metadata` (PTX 8.5): ptxas advises it on every target and plain
            # `.sp` is several times slower on newer parts (ptxas advice). A pinned `ptx` wins.
            from ..isa.mma_sp.forms import ORDERED_METADATA_PTX

            return max(min_ptx, ORDERED_METADATA_PTX)
        return min_ptx


def check_schedule_options(sc) -> None:
    """persistent=, raster=, split_k= of an mma.sp tile's schedule: the values the DSL admits and the kernels
    they belong to (the wgmma kernel says what of them it implements: sparse_wgmma_kernel.check_config)."""
    from ..spec import SPLIT_K_STREAM

    if sc.persistent == "clc":
        raise SpecError("persistent=clc asks for cluster launch control (the PTX instruction clusterlaunchcontrol."
                        "try_cancel, PTX ISA 8.6, sm_100 and later): it schedules tcgen05 tiles, not mma.sp ones",
                        "schedule.persistent", "write persistent=static (mma=wgmma) or leave persistent= out")
    if sc.raster is not None and sc.raster < 1:
        raise SpecError(f"raster={sc.raster}: a raster group walks at least one tile row", "schedule.raster",
                        "write raster=8, or leave raster= out for the kernel's default")
    if sc.split_k != SPLIT_K_STREAM and sc.split_k < 1:
        raise SpecError(f"split_k={sc.split_k}: K is cut into at least one slice", "schedule.split_k",
                        "write split_k=2 (or more), split_k=stream, or leave split_k= out")
    if sc.mma != "wgmma":
        for field, set_ in (("persistent", sc.persistent != "none"), ("raster", sc.raster is not None),
                            ("split_k", sc.split_k != 1)):
            if set_:
                raise SpecError(f"schedule {field}= is a schedule of the sparse wgmma kernel (mma=wgmma); the "
                                f"mma={sc.mma} kernels launch one CTA per output tile over the whole K",
                                f"schedule.{field}", f"write mma=wgmma (target sm_90a), or leave {field}= out")
