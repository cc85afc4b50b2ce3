"""`ptx-emission`: one `.entry` per tile, behind a `.version`/`.target` header derived by `verify`.

Option `variant` (PassContext.options): None for the real kernels; "smem-dump" emits every tcgen05
tile's kernel for `.target sm_90a` with its tcgen05 instructions left out and the shared buffer written
to a parameter S after each K stage (compiler/ptx/tcgen05_kernel.py), for checking copies and layouts on
a Hopper GPU.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..ir import Op
from . import Pass, PassContext


@dataclass(frozen=True)
class PtxEmission(Pass):
    name = "ptx-emission"
    requires = ("descriptors", "metadata")
    provides = ("ptx",)
    description = "print each tile as a complete PTX kernel"

    def apply(self, module, ctx: PassContext) -> None:
        from ..diagnostics import SpecError
        from ..ptx.builder import module_header
        from ..ptx.tcgen05_kernel import SMEM_DUMP, SMEM_DUMP_PTX, SMEM_DUMP_TARGET, VARIANTS

        variant = (ctx.options or {}).get("variant")
        if variant not in VARIANTS:
            ctx.fail(f"unknown kernel variant '{variant}'",
                     hint="variants: " + ", ".join(v for v in VARIANTS if v))
        if variant == SMEM_DUMP:
            header = module_header(SMEM_DUMP_PTX, SMEM_DUMP_TARGET)
        else:
            header = module_header(module.attrs["ptx_version"], module.attrs["target"])
        parts = [header]
        for tile in list(module.ops("tilec.tile")):
            if tile.attrs["engine"] == "tcgen05":
                from ..ptx.tcgen05_kernel import emit_tcgen05_kernel

                try:
                    text, abi = emit_tcgen05_kernel(tile, variant)
                except SpecError as e:
                    ctx.spec_error(e, tile.payload)
            elif variant == SMEM_DUMP:
                ctx.fail(f"the {SMEM_DUMP} variant exists for tcgen05 tiles only; tile '{tile.sym}' is "
                         f"{tile.attrs['engine']}", tile.payload.loc("engine"))
            else:
                try:
                    text, abi = _mma_sp_entry(tile, module)
                except SpecError as e:        # located on the schedule field the emitter names
                    ctx.spec_error(e, tile.payload, "schedule")
            parts.append(text)
            module.body.append(Op("ptx.kernel", tile.sym, {"entry": tile.sym, "lines": text.count("\n")},
                                  loc=tile.loc, payload={"abi": abi}))
        module.payload["ptx"] = "\n".join(parts)


def _mma_sp_entry(tile: Op, module) -> tuple[str, dict]:
    """The mma.sp kernel of a tile, without its module header: with `schedule ... mma=wgmma` the warpgroup
    GEMM of compiler/ptx/sparse_wgmma_kernel.py; the pipelined sparse GEMM
    (compiler/ptx/sparse_gemm_kernel.py) when the tile has a `schedule` with 2 or more stages, runtime
    metadata and a form that kernel serves (PIPELINED_A_TYPES at the k-wide shape); otherwise the
    one-instruction-tile kernel of compiler/ptx/mma_sp_kernel.py (its warp grid from the schedule)."""
    from ..ptx.mma_sp_kernel import KernelPTX, MmaSpKernelConfig, emit_mma_sp_kernel
    from ..ptx.sparse_gemm_kernel import SparseGemmConfig, emit_sparse_gemm, pipelined_form
    from ..isa.targets import parse_version

    spec = tile.payload
    form = tile.facts["form"]
    sc = spec.schedule
    ptx = parse_version(module.attrs["ptx_version"])
    static = tile.facts.get("static_metadata")
    k: KernelPTX
    if sc is not None and sc.mma == "wgmma":          # warpgroup wgmma.mma_async.sp, TMA-fed (sm_90a)
        from ..ptx.sparse_wgmma_kernel import config_from_schedule, emit_sparse_wgmma

        k = emit_sparse_wgmma(config_from_schedule(spec.name, form, module.attrs["target"], ptx, sc,
                                                   spec.sparsity.selector, static))
    elif sc is not None and sc.stages >= 2 and static is None and pipelined_form(form):
        k = emit_sparse_gemm(SparseGemmConfig(
            name=spec.name, form=form, target=module.attrs["target"], ptx_version=ptx,
            cta_m=sc.cta_m, cta_n=sc.cta_n, cta_k=sc.cta_k, warps_m=sc.warps_m, warps_n=sc.warps_n,
            stages=sc.stages, selector=spec.sparsity.selector))
    else:
        grid = {}
        if sc is not None:        # warps and per-warp instruction tiles of the CTA tile
            grid = dict(warps_m=sc.warps_m, warps_n=sc.warps_n, tiles_m=sc.cta_m // (spec.m * sc.warps_m),
                        tiles_n=sc.cta_n // (spec.n * sc.warps_n))
        k = emit_mma_sp_kernel(MmaSpKernelConfig(name=spec.name, form=form, target=module.attrs["target"],
                                                 ptx_version=ptx, selector=spec.sparsity.selector,
                                                 static_metadata=static, **grid))
    body = [ln for ln in k.text.splitlines()
            if not ln.startswith((".version", ".target", ".address_size"))]
    while body and (not body[0].strip() or body[0].startswith("//")):
        body.pop(0)
    return "\n".join(body) + "\n", k.abi
