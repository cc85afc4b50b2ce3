"""The codegen passes (registered in compiler/passes/__init__.py like every pass; they live here because
they build the PTX layer's kernel configurations):

`kernel-selection`: the kernel that implements each tile, printed as `tilec.kernel {kernel, config}`:
- tcgen05: the tcgen05 kernel (compiler/ptx/tcgen05_kernel.py), wholly determined by the tile's plans;
- mma.sp with `schedule ... mma=wgmma`: the warpgroup GEMM (sparse_wgmma_kernel.SparseWgmmaConfig);
- mma.sp with a `schedule` of 2 or more stages, runtime metadata and a form the pipelined kernel serves
  (PIPELINED_A_TYPES at the k-wide shape): the pipelined sparse GEMM (sparse_gemm_kernel.SparseGemmConfig);
- otherwise the one-instruction-tile kernel (mma_sp_kernel.MmaSpKernelConfig), its warp grid from the
  schedule.
`config` holds the configuration dataclass's fields one by one, less those the IR holds elsewhere (the
name = the tile's symbol, the form = tilec.mma_form, the target and PTX version = the module's, the
static metadata = tilec.metadata); `kernel_config` rebuilds the dataclass from them.

`ptx-emission`: one `.entry` per tile from its tilec.kernel, behind a `.version`/`.target` header derived
by `verify`. The PTX text and each kernel's ABI are the pipeline's output (module.outputs["ptx"],
["abi"]); the IR gets a `ptx.kernel @tile {entry, lines}` per kernel.
Option `variant` (PassContext.options): None for the real kernels; "smem-dump" emits every tcgen05
tile's kernel for `.target sm_90a` with its tcgen05 instructions left out and the shared buffer written
to a parameter S after each K stage (compiler/ptx/tcgen05_kernel.py), for checking copies and layouts on
a Hopper GPU.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from ..diagnostics import SpecError
from ..isa.types import TYPES
from ..ir import Op
from ..passes import Pass, PassContext
from ..passes.derive import mma_form, required, scale_layouts, tile_loc, tile_spec, tile_view
from .builder import module_header

# configuration fields the IR holds elsewhere (see the module docstring)
_HELD_ELSEWHERE = ("name", "form", "target", "ptx_version", "static_metadata", "epilogue")


def _kernel_classes() -> dict[str, type]:
    from .mma_sp_kernel import MmaSpKernelConfig
    from .sparse_gemm_kernel import SparseGemmConfig
    from .sparse_wgmma_kernel import SparseWgmmaConfig

    return {"mma_sp": MmaSpKernelConfig, "sparse_gemm": SparseGemmConfig, "sparse_wgmma": SparseWgmmaConfig}


def _config_attr(config: Any) -> dict[str, Any]:
    return {f.name: getattr(config, f.name) for f in dataclasses.fields(config)
            if f.name not in _HELD_ELSEWHERE and getattr(config, f.name) is not None}


def kernel_config(view, module: Op) -> Any:
    """The configuration dataclass of an mma.sp tile's `tilec.kernel` (view: derive.tile_view)."""
    from ..isa.targets import parse_version

    op = required(view.ir, "tilec.kernel", "kernel-selection")
    cls = _kernel_classes()[op.attrs["kernel"]]
    held = {"name": view.sym, "form": view.facts["form"], "target": module.attrs["target"],
            "ptx_version": parse_version(module.attrs["ptx_version"])}
    if any(f.name == "static_metadata" for f in dataclasses.fields(cls)):
        held["static_metadata"] = view.facts.get("static_metadata")
    if any(f.name == "epilogue" for f in dataclasses.fields(cls)):
        from ..passes.epilogue_lowering import epilogue_plan

        held["epilogue"] = epilogue_plan(view.ir)
    return cls(**held, **dict(op.attrs.get("config", {})))


def _select_mma_sp(view, module: Op, schedule=None) -> tuple[str, Any]:
    """The kernel and configuration of an mma.sp tile; with `schedule` (a ScheduleSpec), those the tile
    would get with that schedule instead of its own (compiler/ptx/schedules.py asks, for every candidate)."""
    from ..isa.targets import parse_version
    from .mma_sp_kernel import MmaSpKernelConfig
    from ..passes.limits import pipelined_form
    from .sparse_gemm_kernel import SparseGemmConfig

    spec, form = view.payload, view.facts["form"]
    sc = schedule if schedule is not None else spec.schedule
    ptx = parse_version(module.attrs["ptx_version"])
    static = view.facts.get("static_metadata")
    target = module.attrs["target"]
    if sc is not None and sc.mma == "wgmma":          # warpgroup wgmma.mma_async.sp, TMA-fed (sm_90a)
        from ..passes.epilogue_lowering import accumulator_type, epilogue_plan
        from .sparse_wgmma_kernel import config_from_schedule

        plan = epilogue_plan(view.ir)
        acc, out = accumulator_type(spec), spec.operands["D"].dtype
        return "sparse_wgmma", config_from_schedule(
            spec.name, form, target, ptx, sc, spec.sparsity.selector, static,
            accumulate_c=plan.c != "none" if plan is not None else "C" in spec.operands,
            d_type=out if out != acc else None, epilogue=plan)
    if sc is not None and sc.stages >= 2 and static is None and pipelined_form(form):
        if spec.epilogue is None:
            return "sparse_gemm", SparseGemmConfig(
                name=spec.name, form=form, target=target, ptx_version=ptx, cta_m=sc.cta_m, cta_n=sc.cta_n,
                cta_k=sc.cta_k, warps_m=sc.warps_m, warps_n=sc.warps_n, stages=sc.stages,
                selector=spec.sparsity.selector)
        from ..passes.epilogue_lowering import accumulator_type, epilogue_plan

        plan = epilogue_plan(view.ir)
        acc, out = accumulator_type(spec), spec.operands["D"].dtype
        return "sparse_gemm", SparseGemmConfig(
            name=spec.name, form=form, target=target, ptx_version=ptx, cta_m=sc.cta_m, cta_n=sc.cta_n,
            cta_k=sc.cta_k, warps_m=sc.warps_m, warps_n=sc.warps_n, stages=sc.stages, selector=spec.sparsity.selector,
            accumulate_c=plan.c != "none", d_type=out if out != acc else None, epilogue=plan)
    grid = {}
    if sc is not None:        # warps and per-warp instruction tiles of the CTA tile
        grid = dict(warps_m=sc.warps_m, warps_n=sc.warps_n, tiles_m=sc.cta_m // (spec.m * sc.warps_m),
                    tiles_n=sc.cta_n // (spec.n * sc.warps_n))
    return "mma_sp", MmaSpKernelConfig(name=spec.name, form=form, target=target, ptx_version=ptx,
                                       selector=spec.sparsity.selector, static_metadata=static, **grid)


def _not_pipelined_reason(view) -> tuple[str, str] | None:
    """Why a `schedule` of 2 or more stages (which asks for the pipelined sparse GEMM) gets the
    one-instruction-tile mma.sp kernel instead, and what to change: None when it does not."""
    from ..passes.limits import PIPELINED_A_TYPES

    sc, form = view.payload.schedule, view.facts["form"]
    if sc is None or sc.stages < 2 or sc.mma == "wgmma":
        return None
    if view.facts.get("static_metadata") is not None:
        return ("static metadata", "the pipelined kernel reads its metadata from the META parameter: write "
                "`metadata=runtime`, or `stages=1` to ask for the one-instruction-tile kernel")
    if form.kind is not None and form.block_scale is None:
        return (f"mma.sp .kind::{form.kind}", "the pipelined kernel serves the forms without .kind and the "
                "block-scaled kinds; write `stages=1`")
    if form.block_scale is None and form.a_type not in PIPELINED_A_TYPES:
        return (f"A type {form.a_type}", f"the pipelined kernel serves A types {', '.join(PIPELINED_A_TYPES)}; "
                "write `stages=1`")
    if form.c_regs != 4:
        return (f"{form.c_type} C/D (the pipelined kernel accumulates in 32-bit registers)",
                "write `C: f32` and `D: f32` (s32 for integer types), or `stages=1`")
    if form.a_regs != 4 or form.b_regs != 4:
        return (f"the m{form.layout.m}n{form.layout.n}k{form.k} shape (the pipelined kernel uses the k-wide shape of "
                f"{form.a_type}, 4 A and 4 B registers)", "use the k-wide instruction shape, or `stages=1`")
    return None


def _tcgen05_kernel_attrs(tile: Op) -> dict[str, Any]:
    """The tcgen05 kernel and the immediates its copy code derives from the loop K (the u32 operands of
    its `mul.lo.u32` / `mul.wide.u32` row addressing, typed so that the IR verifier checks them)."""
    from ..isa.tcgen05_kinds import mma_k
    from .tcgen05_kernel import _tmem_container_bits

    spec, kind, form = tile_spec(tile), tile.attrs["kind"], mma_form(tile)
    attrs: dict[str, Any] = {"kernel": "tcgen05"}
    sparse = spec.sparsity is not None
    for name in ("A", "B"):
        o = spec.operands[name]
        k_stored = spec.total_k // 2 if (name == "A" and sparse) else spec.total_k
        if o.space == "tmem":
            attrs[f"{name.lower()}_row_bytes"] = k_stored * _tmem_container_bits(o.dtype, kind) // 8
        elif (o.major or "K") == "K":
            attrs[f"{name.lower()}_row_bytes"] = k_stored * TYPES[o.dtype].bits // 8
    scales = scale_layouts(tile, spec, form)
    if scales is not None:
        attrs["sf_row_bytes"] = spec.total_k // mma_k(kind, sparse, form.k96) * scales[0].nsf
    return attrs


class KernelSelection(Pass, name="kernel-selection", requires=("descriptors", "metadata", "epilogue", "roles"),
                      provides=("kernels",),
                      description="choose each tile's kernel and print its configuration"):

    def apply(self, module, ctx: PassContext) -> None:
        for tile in module.ops("tilec.tile"):
            if tile.attrs["engine"] == "tcgen05":
                try:
                    attrs = {"kernel": "tcgen05_ws"} if tile.op("tilec.ws_plan") is not None else \
                        _tcgen05_kernel_attrs(tile)
                except SpecError as e:
                    ctx.spec_error(e, tile)
                tile.body.append(Op("tilec.kernel", None, attrs, loc=tile.loc))
                continue
            try:
                kernel, config = _select_mma_sp(tile_view(tile), module)
            except SpecError as e:        # located on the schedule field the kernel names
                ctx.spec_error(e, tile, "schedule")
            if kernel == "mma_sp":
                reason = _not_pipelined_reason(tile_view(tile))
                if reason is not None:
                    ctx.warn(f"the schedule asks for {tile_view(tile).payload.schedule.stages} stages, but the "
                             f"pipelined sparse GEMM does not serve {reason[0]}: tile '{tile.sym}' gets the "
                             "one-instruction-tile mma.sp kernel", tile_loc(tile, "schedule"), reason[1])
            if kernel == "sparse_wgmma" and config.spill_note is not None:
                why, hint = config.spill_note          # measured with ptxas -v (sparse_wgmma_kernel.spill_note)
                ctx.warn(f"tile '{tile.sym}': {why}", tile_loc(tile, "schedule"), hint)
            tile.body.append(Op("tilec.kernel", None, {"kernel": kernel, "config": _config_attr(config)},
                                loc=tile.locs.get("schedule", tile.loc)))


class PtxEmission(Pass, name="ptx-emission", requires=("kernels", "pipeline", "resources"), provides=("ptx",),
                  description="print each tile as a complete PTX kernel"):

    def apply(self, module, ctx: PassContext) -> None:
        from .tcgen05_kernel import SMEM_DUMP, SMEM_DUMP_PTX, SMEM_DUMP_TARGET, VARIANTS

        variant = (ctx.options or {}).get("variant")
        if variant not in VARIANTS:
            ctx.fail(f"unknown kernel variant '{variant}'",
                     hint="variants: " + ", ".join(v for v in VARIANTS if v))
        if variant == SMEM_DUMP:
            header = module_header(SMEM_DUMP_PTX, SMEM_DUMP_TARGET)
        else:
            header = module_header(module.attrs["ptx_version"], module.attrs["target"])
        parts = [header]
        abis: dict[str, dict] = {}
        for tile in list(module.ops("tilec.tile")):
            if tile.attrs["engine"] == "tcgen05":
                from .tcgen05_kernel import emit_tcgen05_kernel

                try:
                    if tile.op("tilec.ws_plan") is not None:
                        from .tcgen05_ws_kernel import emit_tcgen05_ws_kernel

                        if variant is not None:
                            raise SpecError(f"the {variant} variant checks the per-thread copies of the single-stage "
                                            "kernel; a scheduled tile's kernel loads by TMA", "schedule",
                                            "drop the schedule to get the single-stage kernel")
                        text, abi = emit_tcgen05_ws_kernel(tile_view(tile))
                    else:
                        text, abi = emit_tcgen05_kernel(tile_view(tile), variant)
                except SpecError as e:
                    ctx.spec_error(e, tile)
            elif variant == SMEM_DUMP:
                ctx.fail(f"the {SMEM_DUMP} variant exists for tcgen05 tiles only; tile '{tile.sym}' is "
                         f"{tile.attrs['engine']}", tile_loc(tile, "engine"))
            else:
                try:
                    text, abi = _mma_sp_entry(tile, module)
                except SpecError as e:        # located on the schedule field the emitter names
                    ctx.spec_error(e, tile, "schedule")
            parts.append(text)
            abis[tile.sym or ""] = abi
            module.body.append(Op("ptx.kernel", tile.sym, {"entry": tile.sym, "lines": text.count("\n")},
                                  loc=tile.loc))
        module.outputs["ptx"] = "\n".join(parts)
        module.outputs["abi"] = abis


def _mma_sp_entry(tile: Op, module: Op) -> tuple[str, dict]:
    """The mma.sp kernel of a tile (its tilec.kernel), without its module header."""
    from .mma_sp_kernel import KernelPTX, emit_mma_sp_kernel
    from .sparse_gemm_kernel import emit_sparse_gemm

    view = tile_view(tile)
    config = kernel_config(view, module)
    kernel = tile.op("tilec.kernel").attrs["kernel"]
    k: KernelPTX
    if kernel == "sparse_wgmma":
        from .pipeline import ring_plan
        from .sparse_wgmma_kernel import emit_sparse_wgmma

        k = emit_sparse_wgmma(config, ring_plan(tile))
    elif kernel == "sparse_gemm":
        k = emit_sparse_gemm(config)
    else:
        k = emit_mma_sp_kernel(config)
    body = [ln for ln in k.text.splitlines()
            if not ln.startswith((".version", ".target", ".address_size"))]
    while body and (not body[0].strip() or body[0].startswith("//")):
        body.pop(0)
    return "\n".join(body) + "\n", k.abi
