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
            from ..mma_sp.metadata import expand_pattern, pack_metadata

            form = tile.facts["form"]
            ordered = module.attrs["ptx_version"] >= "8.5"
            if sp.metadata == "runtime":
                tile.body.append(Op("tilec.metadata", None, {"source": "runtime"}, loc=spec.loc("sparsity")))
                return
            nib = expand_pattern(form, sp.pattern if sp.pattern else sp.rows, 16, spec.k, ordered=ordered)
            words = pack_metadata(form, nib)
            tile.facts["metadata_words"] = tuple(words)
            tile.body.append(Op("tilec.metadata", None,
                                {"source": "static", "words": tuple(Hex(w) for w in words)},
                                loc=spec.loc("sparsity")))
            return
        raise SpecError("sparse tcgen05 tiles are not supported yet", "sparsity")
