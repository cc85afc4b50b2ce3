"""`sparse-metadata-packing`: the sparse-A metadata each kernel needs.

- Warp-level mma.sp (PTX 9.7.14.6): a static pattern in the spec becomes the 32-bit metadata words
  in the per-lane order the instruction expects (compiler/mma_sp/metadata.py); runtime metadata is
  read by the kernel from global memory in the layout compiler/sparse.py produces.
- Dense tiles: nothing to do.
Invalid metadata values (PTX 9.7.14.6.1: 0b0000/0b0101/0b1010/0b1111; ordered metadata: only the six
increasing index pairs; tf32: only 0b0100/0b1110; 4:8 pairs pair-aligned) are located diagnostics
naming the row and chunk.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..diagnostics import SpecError
from ..ir import Hex, Op
from . import Pass, PassContext


@dataclass(frozen=True)
class SparseMetadataPacking(Pass):
    name = "sparse-metadata-packing"
    requires = ("verified",)
    provides = ("metadata",)
    description = "pack static sparsity patterns into metadata words (or mark runtime metadata)"

    def apply(self, module, ctx: PassContext) -> None:
        for tile in module.ops("tilec.tile"):
            spec = tile.payload
            if spec.sparsity is None:
                continue
            try:
                self.tile(tile, module)
            except SpecError as e:
                ctx.spec_error(e, spec, "sparsity")

    def tile(self, tile: Op, module) -> None:
        spec = tile.payload
        sp = spec.sparsity
        if tile.attrs["engine"] == "mma.sp":
            from ..mma_sp.forms import ORDERED_METADATA_PTX
            from ..mma_sp.metadata import static_metadata
            from ..targets import parse_version

            form = tile.facts["form"]
            if sp.metadata == "runtime":
                tile.body.append(Op("tilec.metadata", None, {"source": "runtime"}, loc=spec.loc("sparsity")))
                return
            ordered = parse_version(module.attrs["ptx_version"]) >= ORDERED_METADATA_PTX
            try:
                table = static_metadata(form.layout, sp.pattern if sp.pattern else sp.rows, ordered)
            except SpecError as e:
                where = "sparsity.pattern" if sp.pattern else "sparsity.rows"
                raise SpecError(e.message, where if e.field in (None, "sparsity", "sparsity.pattern", "sparsity.rows")
                                else e.field, e.hint) from None
            tile.facts["static_metadata"] = table
            # Print the words of the first 16-row tile and K step (lanes 0..31); the rest repeat.
            tile.body.append(Op("tilec.metadata", None,
                                {"source": "static", "period": (len(table), len(table[0])),
                                 "words": tuple(Hex(w) for w in table[0][0])},
                                loc=spec.loc("sparsity")))
            return
        raise SpecError("sparse tcgen05 tiles are not supported yet", "sparsity")
