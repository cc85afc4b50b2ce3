"""Module-scope symbols of the PTX tilec writes, checked by `verify` before any PTX is written.

Every tile becomes a `.visible .entry` named after the tile, and some kernels also declare symbols of
their own at module scope, where they share one namespace with every entry of the file (PTX 4.4
identifiers; ptxas rejects a redefinition, and ptxas 13.0 crashed on an entry whose name was another
kernel's `.extern .shared` array):

  <tile>_smem      `.extern .shared` dynamic shared memory of the pipelined mma.sp and wgmma kernels
  <tile>_metadata  `.const` static metadata table of the one-instruction-tile mma.sp kernel
  <tile>_meta      `.global` static metadata table of a tcgen05 kernel

tilec keeps these spellings (emitted PTX stays byte-identical and readable) and reports a tile name that
collides with one as a located diagnostic. `<tile>_metadata` is reserved whenever an mma.sp tile has
static metadata (its kernel writes the table unless every word is the same, which is known only later).
Exported names (entries, fragments) must also be C identifiers, so host code can name them (tile names
are, by the DSL's grammar; compiler/ptx/fragment.py fragment_name checks the fragment prefix).
"""
from __future__ import annotations

from .limits import mma_sp_kernel
from .derive import mma_form, tile_spec


def internal_symbols(tile) -> list[tuple[str, str]]:
    """(name, what) of each module-scope symbol the tile's kernel declares besides its entry."""

    name = tile.sym
    sparsity = tile.op("tilec.sparsity")          # what tile_spec(tile).sparsity is made from
    static = sparsity is not None and sparsity.attrs["metadata"] != "runtime"
    if tile.attrs.get("engine") == "tcgen05":
        return [(f"{name}_meta", "static metadata table (.global)")] if static else []
    if tile.attrs.get("engine") != "mma.sp" or tile.op("tilec.mma_form") is None:
        return []
    kernel = mma_sp_kernel(tile_spec(tile), mma_form(tile))
    if kernel in ("wgmma", "pipelined mma.sp"):
        return [(f"{name}_smem", "dynamic shared memory array (.extern .shared)")]
    return [(f"{name}_metadata", "static metadata table (.const)")] if static else []


def symbol_collision(tiles) -> tuple[object, str] | None:
    """The first tile (in file order) whose entry or internal symbol names something already declared,
    with the message; None when every module-scope name is unique."""
    owner: dict[str, tuple[object, str]] = {}
    for tile in tiles:
        owner.setdefault(tile.sym, (tile, "kernel entry"))
    for tile in tiles:
        for sym, what in internal_symbols(tile):
            other, other_what = owner.get(sym, (None, ""))
            if other is None:
                owner[sym] = (tile, what)
                continue
            if other_what == "kernel entry":
                return other, (f"tile name '{sym}' is the name of the {what} tilec declares for tile "
                               f"'{tile.sym}' (PTX module scope)")
            return tile, (f"the {what} of tile '{tile.sym}' is named '{sym}', like the {other_what} of tile "
                          f"'{other.sym}'")
    return None
