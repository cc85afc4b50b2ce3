"""`sparse-metadata-packing`: the sparse-A metadata each kernel needs.

- Warp-level mma.sp (PTX 9.7.14.6): a static pattern in the spec becomes the 32-bit metadata words
  in the per-lane order the instruction expects (compiler/isa/mma_sp/metadata.py); runtime metadata is
  read by the kernel from global memory in the layout compiler/sparse.py produces.
- tcgen05 `.sp` (PTX 9.7.16.10.8): the metadata lives in Tensor Memory. The kernel reads natural
  words (row r, word w = the 4-bit codes of chunks 8w..8w+7, code i in bits 4i) either from the META
  parameter (runtime) or from a periodic table this pass packs from the static pattern, and stages them
  into the TMEM layout of its kind and data path (compiler/isa/tmem.py: f16/tf32 rows m and
  m+8 sharing a cell, 8-bit and fp4 kinds one lane per row and two columns per MMA, M=64 half data path,
  .ws lane groups). The selector (f16/tf32) is the metadata column's parity, set per MMA by
  descriptor-materialization; a user selector other than 0 is rejected by verify.
- Dense tiles: nothing to do.
Invalid metadata values (PTX 9.7.14.6.1: 0b0000/0b0101/0b1010/0b1111; ordered metadata: only the six
increasing index pairs; tf32: only 0b0100/0b1110; 4:8 pairs pair-aligned) are located diagnostics
naming the row and chunk.
"""
from __future__ import annotations


from ..diagnostics import SpecError
from ..ir import Hex, Op
from . import Pass, PassContext
from .derive import mma_form, tile_spec


class SparseMetadataPacking(Pass, name="sparse-metadata-packing", requires=("verified",), provides=("metadata",),
                            description="pack static sparsity patterns into metadata words (or mark runtime metadata)"):

    def apply(self, module, ctx: PassContext) -> None:
        ctx.each_tile(module, lambda tile: self.tile(tile, module), having="tilec.sparsity", field="sparsity")

    def tile(self, tile: Op, module) -> None:
        spec = tile_spec(tile)
        sp = spec.sparsity
        if tile.attrs["engine"] == "mma.sp":
            from ..isa.mma_sp.forms import ORDERED_METADATA_PTX
            from ..isa.mma_sp.metadata import static_metadata
            from ..isa.targets import parse_version

            form = mma_form(tile)
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
            # table[16-row tile % pm][K step % pk] = the words of lanes 0..31; period = [pm, pk] and
            # `words` is the table row-major, so the first 32 are the first tile and K step
            tile.body.append(Op("tilec.metadata", None,
                                {"source": "static", "period": (len(table), len(table[0])),
                                 "words": tuple(Hex(w) for t in table for step in t for w in step)},
                                loc=spec.loc("sparsity")))
            return
        self.tcgen05(tile, spec)

    def tcgen05(self, tile: Op, spec) -> None:
        """Static patterns -> the smallest periodic table of natural words; runtime -> the META layout."""
        from ..isa.mma_sp.forms import GRANULARITIES, SparseLayout
        from math import lcm as _lcm

        from ..isa.mma_sp.metadata import PATTERNS, expand_pattern, legal_nibbles, validate_nibbles
        from ..isa.tmem import METADATA_CHUNK, pack_metadata_words
        from ..isa.tcgen05_kinds import kind_info, mma_k

        sp = spec.sparsity
        kind = tile.attrs["kind"]
        chunk = METADATA_CHUNK[kind]
        words_per_row = spec.total_k // (8 * chunk)
        # The nibble rules of 9.7.14.6.1 (shared with mma.sp: compiler/isa/mma_sp/metadata.py) keyed by the
        # kind's granularity (9.7.16.10.8); only the six increasing pairs are emitted (PTX ISA 9.7.16.10.8.2/.3).
        lay = SparseLayout(k=mma_k(kind, True), storage_bits=8, granularity=GRANULARITIES[kind_info(kind).sparsity],
                           fragment_section="9.7.16.10.8")
        if sp.metadata == "runtime":
            tile.body.append(Op("tilec.metadata", None, {"source": "runtime", "words_per_row": words_per_row},
                                loc=spec.loc("sparsity")))
            return
        pattern = sp.pattern if sp.pattern else sp.rows
        where = "sparsity.pattern" if sp.pattern else "sparsity.rows"
        codes = legal_nibbles(lay, ordered=True)
        if isinstance(pattern, str):
            if pattern not in PATTERNS:
                raise SpecError(f"unknown sparsity pattern '{pattern}'", where,
                                "named patterns: " + ", ".join(PATTERNS) + ", or rows=[...]")
            rows_period = len(codes) if pattern == "rotate" else 1
            chunks_period = {"rotate": len(codes), "alternate": 1 if 0b1000 in codes else 2}.get(pattern, 1)
        else:
            rows_period = len(pattern)
            chunks_period = 1
            for row in pattern:
                chunks_period = _lcm(chunks_period, max(len(row), 1))
        period_words = _lcm(chunks_period, 8) // 8
        try:
            nibbles = expand_pattern(lay, pattern, rows_period, period_words * 8 * chunk)
            validate_nibbles(lay, nibbles, ordered=True)
        except SpecError as e:
            raise SpecError(e.message, where if e.field in (None, "sparsity", "sparsity.pattern", "sparsity.rows",
                                                            "sparsity.metadata") else e.field, e.hint) from None
        table = tuple(tuple(pack_metadata_words(row)) for row in nibbles)
        # table[row % period rows][word % period words], natural words (compiler/passes/plans.py
        # Tcgen05Metadata); `words` is the table row-major
        tile.body.append(Op("tilec.metadata", None,
                            {"source": "static", "period": (len(table), len(table[0])),
                             "words": tuple(Hex(w) for row in table for w in row), "words_per_row": words_per_row},
                            loc=spec.loc("sparsity")))
