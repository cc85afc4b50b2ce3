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
                text, abi = _mma_sp_entry(tile, module)
            parts.append(text)
            module.body.append(Op("ptx.kernel", tile.sym, {"entry": tile.sym, "lines": text.count("\n")},
                                  loc=tile.loc, payload={"abi": abi}))
        module.payload["ptx"] = "\n".join(parts)


def _mma_sp_entry(tile: Op, module) -> tuple[str, dict]:
    """The mma.sp kernel of a tile (compiler/ptx/mma_sp_kernel.py), without its module header."""
    from ..ptx.mma_sp_kernel import MmaSpKernelConfig, emit_mma_sp_kernel
    from ..targets import parse_version

    spec = tile.payload
    grid = {}
    if spec.schedule is not None:     # warps and per-warp instruction tiles of the CTA tile
        sc = spec.schedule
        grid = dict(warps_m=sc.warps_m, warps_n=sc.warps_n, tiles_m=sc.cta_m // (spec.m * sc.warps_m),
                    tiles_n=sc.cta_n // (spec.n * sc.warps_n))
    cfg = MmaSpKernelConfig(name=spec.name, form=tile.facts["form"], target=module.attrs["target"],
                            ptx_version=parse_version(module.attrs["ptx_version"]),
                            selector=spec.sparsity.selector,
                            static_metadata=tile.facts.get("static_metadata"), **grid)
    k = emit_mma_sp_kernel(cfg)
    body = [ln for ln in k.text.splitlines()
            if not ln.startswith((".version", ".target", ".address_size"))]
    while body and (not body[0].strip() or body[0].startswith("//")):
        body.pop(0)
    return "\n".join(body) + "\n", k.abi
