"""`ptx-emission`: one `.entry` per tile, behind a `.version`/`.target` header derived by `verify`."""
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
        from ..ptx.builder import module_header

        parts = [module_header(module.attrs["ptx_version"], module.attrs["target"])]
        for tile in list(module.ops("tilec.tile")):
            if tile.attrs["engine"] == "tcgen05":
                from ..ptx.tcgen05_kernel import emit_tcgen05_kernel

                text, abi = emit_tcgen05_kernel(tile)
            else:
                from ..ptx.mma_sp_kernel import entry_for_tile

                text, abi = entry_for_tile(tile, module)
            parts.append(text)
            module.body.append(Op("ptx.kernel", tile.sym, {"entry": tile.sym, "lines": text.count("\n")},
                                  loc=tile.loc, payload={"abi": abi}))
        module.payload["ptx"] = "\n".join(parts)
