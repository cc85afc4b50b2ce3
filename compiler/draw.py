"""`tilec draw`: SVG pictures of what a descriptor means.

Each drawer returns one SVG document as text, built from the same functions the compiler uses (the
canonical layout of compiler/layout.py, the TMEM data paths of compiler/isa/tmem.py, the zero-column mask
generator of compiler/descriptors/zero_column_mask.py), so a picture can never disagree with what is
emitted. Every cell is a `<rect class="cell">` whose `data-*` attributes name what it stands for (element
coordinates, byte offset, lane, column); tests/test_draw.py parses them back and checks them against those
functions. Output is deterministic: no timestamps, no ids from memory addresses, fixed number formatting.

Pure Python; imported only by `tilec draw` (compiler/cli.py), never on the start-up path of other commands.
"""
from __future__ import annotations

from .diagnostics import SpecError

CELL_W = 64          # px of one 16-byte chunk / one column cell
CELL_H = 20          # px of one row of cells
MARGIN_X = 150       # room on the left for stride brackets and row labels
TOP = 70             # title and subtitle above the grid
LEGEND_LINE = 16

# Eight fills that stay distinguishable in print; one per logical chunk column so that the swizzle shows up
# as a permutation of colours along each memory row.
PALETTE = ("#8dd3c7", "#ffffb3", "#bebada", "#fb8072", "#80b1d3", "#fdb462", "#b3de69", "#fccde5")


def _esc(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")


class Svg:
    """A tiny SVG writer: elements in insertion order, attributes in the order given."""

    def __init__(self) -> None:
        self.items: list[str] = []

    def add(self, tag: str, text: str | None = None, **attrs) -> None:
        parts = []
        for key, value in attrs.items():
            if value is None:
                continue
            name = key.rstrip("_").replace("_", "-")
            parts.append(f'{name}="{_esc(str(value))}"')
        head = f"<{tag} {' '.join(parts)}" if parts else f"<{tag}"
        self.items.append(f"{head}/>" if text is None else f"{head}>{_esc(text)}</{tag}>")

    def text(self, x: int, y: int, text: str, size: int = 11, anchor: str = "start", cls: str | None = None,
             weight: str | None = None) -> None:
        self.add("text", text, x=x, y=y, font_size=size, text_anchor=anchor, class_=cls, font_weight=weight)

    def render(self, width: int, height: int, title: str) -> str:
        head = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
                f'viewBox="0 0 {width} {height}" font-family="monospace">')
        body = "\n".join(self.items)
        return (f'<?xml version="1.0" encoding="UTF-8"?>\n{head}\n<title>{_esc(title)}</title>\n'
                f'<rect x="0" y="0" width="{width}" height="{height}" fill="white"/>\n{body}\n</svg>\n')


class Figure(Svg):
    """Every drawing's frame: a title and subtitle above the grid, a legend below it (`finish`)."""

    def __init__(self, title: str, subtitle: str) -> None:
        super().__init__()
        self.title, self.subtitle = title, subtitle
        self.text(10, 22, title, size=14, cls="title", weight="bold")
        self.text(10, 42, subtitle, size=11, cls="subtitle")

    def finish(self, legend: list[str], legend_y: int, grid_right: int) -> str:
        """The document with `legend` from `legend_y` down, wide enough for the grid (its right edge at
        `grid_right`) and for every line of text."""
        self.text(10, legend_y, "Legend", size=12, cls="legend", weight="bold")
        for i, line in enumerate(legend):
            self.text(10, legend_y + (i + 1) * LEGEND_LINE, line, size=11, cls="legend")
        bottom = legend_y + (len(legend) + 1) * LEGEND_LINE
        width = max([grid_right] + [20 + 7 * len(line) for line in legend + [self.title, self.subtitle]])
        return self.render(width, bottom + 10, self.title)


# ---- shared-memory canonical layout (PTX ISA 9.7.16.3.3, 9.7.16.4.1) ---------------------------

def default_smem_geometry(dtype: str, major: str, swizzle: str, container_bits: int | None = None) -> tuple[int, int]:
    """(mn, k) of a picture showing two atoms along each dimension, so both strides appear."""
    from .isa.swizzle import SWIZZLE_MODES
    from .layout import container_bits_for

    mode = SWIZZLE_MODES[swizzle]
    bits = container_bits if container_bits is not None else container_bits_for(dtype)
    along = 2 * mode.width * 8 // bits       # elements along the contiguous dimension: two atom widths
    lines = 2 * mode.atom_rows
    return (lines, along) if major == "K" else (along, lines)


MAX_CHUNKS = 4096


def smem_layout_svg(layout, title: str, subtitle: str, lbo: int | None = None, sbo: int | None = None,
                    notes: list[str] | None = None) -> str:
    """The tile's bytes in memory order, one cell per 16-byte chunk, one memory row per swizzle-atom line.

    A cell at memory row y, column x holds the chunk at byte offset y * width + 16 * x (width = the atom's
    line: 16 B unswizzled, 32/64/128 B swizzled); its label is the logical (row, k) range it carries. The
    fill colour is the chunk's logical column along the contiguous dimension, so a swizzle shows as those
    colours permuted from one memory row to the next. Atoms (core matrices when unswizzled) are outlined.
    """
    from .layout import CHUNK_BYTES

    lbo = layout.lbo if lbo is None else lbo
    sbo = layout.sbo if sbo is None else sbo
    width = layout.mode.width
    cols = width // CHUNK_BYTES
    rows = layout.size_bytes // width
    per = layout.elems_per_chunk
    if layout.lines * layout.chunks_per_line > MAX_CHUNKS:
        raise SpecError(f"{layout.mn} x {layout.k} is {layout.lines * layout.chunks_per_line} chunks; "
                        f"draw shows at most {MAX_CHUNKS}", field="tile")
    svg = Figure(title, subtitle)
    grid_x, grid_y = MARGIN_X, TOP + 20
    for x in range(cols):
        svg.text(grid_x + x * CELL_W + CELL_W // 2, grid_y - 6, f"+{x * CHUNK_BYTES} B", size=10, anchor="middle")
    cells = []
    for line in range(layout.lines):
        for chunk in range(layout.chunks_per_line):
            row, k = (line, chunk * per) if layout.major == "K" else (chunk * per, line)
            offset = layout.offset(row, k)
            cells.append((offset, line, chunk, row, k))
    for offset, line, chunk, row, k in sorted(cells):
        y, x = divmod(offset, width)
        px, py = grid_x + (x // CHUNK_BYTES) * CELL_W, grid_y + y * CELL_H
        if layout.major == "K":
            label = f"r{row} k{k}-{k + per - 1}" if per > 1 else f"r{row} k{k}"
        else:
            label = f"k{k} r{row}-{row + per - 1}" if per > 1 else f"k{k} r{row}"
        fill = PALETTE[chunk % len(PALETTE)]
        svg.add("rect", class_="cell", x=px, y=py, width=CELL_W, height=CELL_H, fill=fill, stroke="#999",
                stroke_width="0.5", data_row=row, data_k=k, data_elements=per, data_offset=offset,
                data_line=line, data_chunk=chunk)
        svg.text(px + CELL_W // 2, py + 14, label, size=9, anchor="middle")
    for y in range(0, rows, 1):
        if (y * width) % 128 == 0 or width >= 128:
            svg.text(grid_x - 6, grid_y + y * CELL_H + 14, f"{y * width}", size=9, anchor="end")
    atom_rows = layout.atom_bytes // width
    for a in range(0, rows, atom_rows):
        svg.add("rect", class_="atom", x=grid_x, y=grid_y + a * CELL_H, width=cols * CELL_W,
                height=atom_rows * CELL_H, fill="none", stroke="black", stroke_width=2,
                data_offset=a * width)
    # Stride brackets: a vertical span from byte 0 to byte LBO / SBO, in memory rows.
    strides = [("SBO", sbo, 40, "#1f4e9e")]
    lbo_used = not (layout.major == "K" and layout.swizzle != "none")
    if lbo_used:
        strides.append(("LBO", lbo, 80, "#b2182b"))
    for name, value, dx, colour in strides:
        if value <= 0 or value >= layout.size_bytes:
            continue
        y1, y2 = grid_y, grid_y + (value // width) * CELL_H
        x = grid_x - dx
        svg.add("line", class_="stride", x1=x, y1=y1, x2=x, y2=y2, stroke=colour, stroke_width=2,
                data_name=name, data_bytes=value)
        svg.add("line", x1=x, y1=y2, x2=x + 10, y2=y2, stroke=colour, stroke_width=2)
        svg.add("line", x1=x, y1=y1, x2=x + 10, y2=y1, stroke=colour, stroke_width=2)
        svg.text(x - 4, (y1 + y2) // 2, f"{name}", size=11, anchor="end", weight="bold")
        svg.text(x - 4, (y1 + y2) // 2 + 12, f"{value} B", size=10, anchor="end")
    unit = "element" if per == 1 else f"{per} elements"
    contiguous = "K" if layout.major == "K" else "MN (rows)"
    legend = [
        f"cell = one 16-byte chunk ({unit} of {layout.dtype}, {layout.storage}); label = its (row, k) range",
        f"memory rows of {width} B top to bottom (byte offset on the left); contiguous dimension: {contiguous}",
        f"fill colour = logical chunk column along {contiguous}; "
        + ("swizzle Swizzle<%d,%d,%d> permutes those columns row by row"
           % (layout.mode.xor_bits, layout.mode.xor_base, layout.mode.xor_shift)
           if layout.swizzle != "none" else "no swizzle: columns stay in order"),
        f"thick outline = one {layout.mode.atom_rows} x {width} B "
        + ("core matrix (8 rows x 16 B)" if layout.swizzle == "none" else f"{layout.swizzle} swizzle atom"),
        f"SBO = {sbo} B: stride-dimension byte offset (PTX ISA 9.7.16.3.2)",
        (f"LBO = {lbo} B: leading-dimension byte offset (PTX ISA 9.7.16.3.1)" if lbo_used else
         "LBO: not used for K-major swizzled layouts ('assumed 1', PTX ISA 9.7.16.3.1)"),
    ] + list(notes or [])
    grid_bottom = grid_y + rows * CELL_H
    return svg.finish(legend, grid_bottom + 30, grid_x + cols * CELL_W + 20)


def draw_smem_desc(value: int, dtype: str = "f16", major: str = "K", mn: int | None = None,
                   k: int | None = None) -> str:
    """The canonical layout a shared-memory descriptor (PTX ISA 9.7.16.4.1) describes for an `mn x k`
    operand of `dtype` stored `major`-major: the swizzle comes from the descriptor, LBO / SBO as encoded."""
    from .descriptors.smem import SmemDesc
    from .layout import canonical_layout

    desc = SmemDesc.decode(value)
    if mn is None or k is None:
        dmn, dk = default_smem_geometry(dtype, major, desc.swizzle)
        mn = dmn if mn is None else mn
        k = dk if k is None else k
    layout = canonical_layout(dtype, major, desc.swizzle, mn, k)
    notes = []
    lbo_used = not (major == "K" and desc.swizzle != "none")
    if desc.sbo != layout.sbo:
        notes.append(f"note: this {mn} x {k} tile's canonical SBO is {layout.sbo} B; the descriptor says {desc.sbo} B")
    if lbo_used and desc.lbo_mode == "relative" and desc.lbo != layout.lbo:
        notes.append(f"note: this {mn} x {k} tile's canonical LBO is {layout.lbo} B; the descriptor says {desc.lbo} B")
    title = f"smem-desc {value:#018x}: {major}-major {dtype} {mn} x {k}, {desc.swizzle} swizzle"
    subtitle = (f"PTX ISA 9.7.16.3.3 canonical layouts (9.7.16.4.1 shared memory descriptor); "
                f"start {desc.start_address:#x}, base offset {desc.base_offset}, {desc.lbo_mode} LBO")
    return smem_layout_svg(layout, title, subtitle, lbo=desc.lbo, sbo=desc.sbo, notes=notes)


# ---- TMEM accumulator (PTX ISA 9.7.16.10.5 data-path layouts) -----------------------------------

LANE_H = 6


def draw_tmem(m: int, n: int, cta_group: int = 1, ws: bool = False, sparse: bool = False,
              source: str | None = None) -> str:
    """Where the accumulator D of an M x N tcgen05.mma lives in TMEM (one CTA's view): one bar per lane,
    spanning the columns that hold one D row's elements (one 32-bit column per element)."""
    from .isa.tmem import LANE_GROUP, LANES, data_path

    dp = data_path(m, cta_group, sparse, ws)
    cols = dp.d_columns(n)
    col_px = max(2, min(8, 512 // max(cols, 1)))
    svg = Figure(f"{source + ': ' if source else ''}TMEM accumulator, M = {m}, N = {n}, cta_group::{cta_group}"
                 f"{', .ws' if ws else ''}{', .sp' if sparse else ''}: data-path layout {dp.layout}",
                 f"PTX ISA 9.7.16.10.5 (data-path layouts), layout {dp.layout}: {dp.rows} rows per CTA, "
                 f"{dp.organization}")
    gx, gy = MARGIN_X, TOP + 20
    for c in range(0, cols, max(1, cols // 4)):
        svg.text(gx + c * col_px, gy - 6, f"col {c}", size=9)
    for lane in range(LANES):
        y = gy + lane * LANE_H
        role = dp.lane_d_role(lane, n)
        if role is None:
            svg.add("rect", class_="cell", x=gx, y=y, width=cols * col_px, height=LANE_H, fill="#eeeeee",
                    stroke="#ccc", stroke_width="0.3", data_lane=lane, data_unused=1)
            continue
        row, col0 = role
        fold = col0 // cols if cols else 0
        svg.add("rect", class_="cell", x=gx, y=y, width=cols * col_px, height=LANE_H,
                fill=PALETTE[fold % len(PALETTE)], stroke="#888", stroke_width="0.3", data_lane=lane,
                data_row=row, data_col0=col0, data_columns=cols)
    for g in range(LANES // LANE_GROUP):
        y = gy + g * LANE_GROUP * LANE_H
        svg.add("rect", class_="lanegroup", x=gx, y=y, width=cols * col_px, height=LANE_GROUP * LANE_H,
                fill="none", stroke="black", stroke_width=1.5, data_warp=g)
        svg.text(gx - 6, y + 10, f"lanes {g * LANE_GROUP}-{(g + 1) * LANE_GROUP - 1}", size=9, anchor="end")
        svg.text(gx - 6, y + 22, f"warp {g} (mod 4)", size=9, anchor="end")
        for half in (0, 1):
            lane = g * LANE_GROUP + half * 16
            role = dp.lane_d_role(lane, n)
            label = "unused" if role is None else f"D rows {role[0]}.. cols {role[1]}-{role[1] + cols - 1}"
            svg.text(gx + 4, gy + lane * LANE_H + 5 * LANE_H, label, size=9)
    legend = [
        f"bar = one TMEM lane (128 lanes top to bottom) x {cols} columns of 32 bits (TMEM columns 0-{cols - 1})",
        "label = the D rows and D columns the lanes hold; grey = lane not used by this layout",
        f"fill colour = which part of N the lane holds ({dp.folds} part(s))",
        "outlined: the 32 lanes one warp reaches (warp id mod 4, PTX ISA 9.7.16.8.3)",
    ]
    return svg.finish(legend, gy + LANES * LANE_H + 30, gx + cols * col_px + 200)


def draw_idesc(value: int, kind: str, cta_group: int = 1, ws: bool = False) -> str:
    """The TMEM accumulator of the MMA an instruction descriptor (PTX ISA 9.7.16.4.2) describes."""
    from .descriptors.instr import InstrDesc

    d = InstrDesc.decode(value, kind)
    return draw_tmem(d.m, d.n, cta_group, ws, bool(getattr(d, "sparse", False)), source=f"idesc {value:#010x}")


# ---- zero-column mask (PTX ISA 9.7.16.4.3, Table 45) ------------------------------------------------

def draw_zcm(value: int, m: int = 128, n: int = 128) -> str:
    """Which of the N MMA columns a zero-column mask zeroes, sub-mask by sub-mask."""
    from .descriptors.zero_column_mask import SUB_MASKS, ZeroColumnMask

    zcm = ZeroColumnMask.decode(value)
    masks = zcm.masks(m, n)
    parts = SUB_MASKS[m]
    width = n // parts
    col_px = max(6, min(24, 1024 // n))
    svg = Figure(f"zero-column mask {value:#018x}, M = {m}, N = {n}",
                 f"PTX ISA 9.7.16.4.3 (zero-column mask descriptor, Table 45): {parts} sub-mask(s) of {width} "
                 f"columns; runs of {zcm.zero_run} zeroed / {zcm.use_run} used; column shift {zcm.shift}")
    gx, gy = MARGIN_X, TOP + 20
    for i, mask in enumerate(masks):
        y = gy + i * (CELL_H + 14)
        svg.text(gx - 6, y + 14, f"sub-mask {i}", size=10, anchor="end")
        for j in range(width):
            col = i * width + j
            zeroed = (mask >> j) & 1
            svg.add("rect", class_="cell", x=gx + col * col_px, y=y, width=col_px, height=CELL_H,
                    fill="#555555" if zeroed else "#b3de69", stroke="white", stroke_width="0.5",
                    data_column=col, data_submask=i, data_zeroed=zeroed, data_b_column=col + zcm.shift)
        svg.text(gx + i * width * col_px, y + CELL_H + 11, f"col {i * width}", size=9)
    legend = [
        "cell = one MMA column j (left to right); it reads column j + shift of B",
        "dark = zeroed (mask bit 1: B column read as zeros); green = used (mask bit 0)",
        f"sub-mask i covers columns [i*N/{parts}, (i+1)*N/{parts}) (table 'Zero-Column Mask breakup')",
    ]
    return svg.finish(legend, gy + parts * (CELL_H + 14) + 30, gx + n * col_px + 20)


# ---- sparse A of mma.sp (PTX ISA 9.7.14.6.1 sparse matrix storage, metadata) ---------------------------

def draw_sparse(dtype: str = "f16", shape: str = "m16n8k16", seed: int = 0) -> str:
    """One 16 x K A tile of `mma.sp` with a random legal sparsity pattern (seeded, so deterministic): the
    dense tile with its kept elements numbered as they are stored (compressed row order), and each chunk's
    metadata nibble (two 2-bit indices, PTX ISA 9.7.14.6.1) as compiler/sparse.py packs it."""
    import numpy as np

    from .isa.mma_sp.forms import layout_for
    from .sparse import compress, decompress, random_sparse, unpack_metadata_words

    layout = layout_for(dtype, shape)
    gran = layout.granularity
    m, k = layout.m, layout.k
    a = random_sparse(np.random.default_rng(seed), m, k, dtype, shape)
    values, words = compress(a, dtype, shape)
    nibbles = unpack_metadata_words(words, layout)
    # what the hardware reconstructs from (values, metadata): the kept positions are its non-zeros
    # (random_sparse with density 1 makes every kept value non-zero)
    kept = np.asarray(decompress(values, words, dtype, shape)).astype(np.float64) != 0
    chunks = k // gran.chunk
    cw = max(10, min(28, 896 // k))
    svg = Figure(f"sparse A of mma.sp.{shape} .{dtype} ({gran.name}), seed {seed}: kept elements and metadata",
                 f"PTX ISA 9.7.14.6.1 (sparse matrix storage, metadata); {m} x {k} dense, "
                 f"{m} x {k // 2} stored; {chunks} chunk(s) of {gran.chunk} per row")
    gx, gy = MARGIN_X - 80, TOP + 20
    for c in range(chunks):
        svg.text(gx + c * gran.chunk * cw + 2, gy - 6, f"k{c * gran.chunk}", size=9)
    for r in range(m):
        stored = 0
        svg.text(gx - 6, gy + r * CELL_H + 14, f"row {r}", size=9, anchor="end")
        for col in range(k):
            x, y = gx + col * cw, gy + r * CELL_H
            if kept[r, col]:
                svg.add("rect", class_="cell", x=x, y=y, width=cw, height=CELL_H, fill="#80b1d3", stroke="#666",
                        stroke_width="0.5", data_row=r, data_k=col, data_kept=1, data_stored=stored)
                if cw >= 16:
                    svg.text(x + cw // 2, y + 14, str(stored), size=9, anchor="middle")
                stored += 1
            else:
                svg.add("rect", class_="cell", x=x, y=y, width=cw, height=CELL_H, fill="#f4f4f4", stroke="#ccc",
                        stroke_width="0.5", data_row=r, data_k=col, data_kept=0)
        for c in range(chunks):
            svg.add("rect", class_="chunk", x=gx + c * gran.chunk * cw, y=gy + r * CELL_H, width=gran.chunk * cw,
                    height=CELL_H, fill="none", stroke="black", stroke_width=1.2)
    mx = gx + k * cw + 40
    nw = 34
    svg.text(mx, gy - 6, "metadata nibbles (one per chunk)", size=9)
    for r in range(m):
        for c in range(chunks):
            nib = int(nibbles[r, c])
            x, y = mx + c * nw, gy + r * CELL_H
            svg.add("rect", class_="nibble", x=x, y=y, width=nw, height=CELL_H, fill=PALETTE[nib % len(PALETTE)],
                    stroke="#666", stroke_width="0.5", data_row=r, data_chunk=c, data_nibble=nib)
            svg.text(x + nw // 2, y + 14, f"{nib:04b}", size=9, anchor="middle")
    legend = [
        f"left: the dense {m} x {k} A tile; blue = kept element, numbered by its place in the stored row",
        f"thick outline = one {gran.chunk}-element chunk ({gran.name}: {gran.keep} group(s) of {gran.group} kept)",
        "right: each chunk's metadata nibble, bits 3:2 = second index, bits 1:0 = first index",
        "nibbles as compiler/sparse.py packs them into the per-lane e words (fragments.metadata_slot)",
    ]
    return svg.finish(legend, gy + m * CELL_H + 30, mx + chunks * nw + 20)


# ---- a tile file's operands --------------------------------------------------------------------------

def draw_tile(text: str, filename: str, tile: str | None = None, operand: str = "A") -> str:
    """The picture of one operand of a compiled tile: A or B in shared memory (its canonical layout and the
    first K step's descriptor), D (the TMEM accumulator of a tcgen05 tile), or the sparse A of an mma.sp
    tile. Compile errors propagate (CompileError); choices the file does not offer raise ValueError."""
    from .driver import compile_source
    from .passes.derive import smem_layout, tile_spec

    result = compile_source(text, filename)
    tiles = {o.sym: o for o in result.module.ops("tilec.tile") if o.sym is not None}
    if tile is None:
        if len(tiles) != 1:
            raise ValueError(f"{filename} has {len(tiles)} tiles; pick one with --tile ({', '.join(sorted(tiles))})")
        tile = next(iter(tiles))
    if tile not in tiles:
        raise ValueError(f"{filename} has no tile '{tile}' (tiles: {', '.join(sorted(tiles))})")
    op = tiles[tile]
    spec = tile_spec(op)
    where = f"{filename}: tile {tile}"
    if spec.engine != "tcgen05":
        from .passes.derive import mma_form

        shape = getattr(mma_form(op), "shape", None)
        if operand == "A" and spec.sparsity is not None and shape:
            return draw_sparse(spec.operands["A"].dtype, shape)
        raise ValueError(f"{where} ({spec.engine}): draw tile shows tcgen05 operands (A, B in shared memory, D "
                         f"in TMEM) and the sparse A of mma.sp")
    if operand == "D":
        return draw_tmem(spec.m, spec.n, spec.cta_group, spec.ws, spec.sparsity is not None, source=where)
    if operand not in ("A", "B"):
        raise ValueError(f"--operand {operand}: one of A, B, D")
    lay_op = next((o for o in op.ops("tilec.smem_layout") if o.sym == operand), None)
    if lay_op is None:
        raise ValueError(f"{where}: operand {operand} is not in shared memory (no canonical layout to draw)")
    layout = smem_layout(op, lay_op, spec)
    from .descriptors.smem import SmemDesc

    value = result.descriptors[tile][f"{operand}_desc"][0]
    desc = SmemDesc.decode(value)
    title = (f"{where}, operand {operand}: {layout.major}-major {layout.dtype} {layout.mn} x {layout.k}, "
             f"{layout.swizzle} swizzle")
    subtitle = (f"PTX ISA 9.7.16.3.3 canonical layouts; first K step's smem-desc {value:#018x} "
                f"(9.7.16.4.1): LBO {desc.lbo} B, SBO {desc.sbo} B")
    return smem_layout_svg(layout, title, subtitle, lbo=desc.lbo, sbo=desc.sbo)


DRAWERS = ("idesc", "smem-desc", "sparse", "tile", "tmem", "zcm")
