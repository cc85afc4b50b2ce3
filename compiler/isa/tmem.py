"""Where tcgen05 operands live in Tensor Memory: data-path layouts, sparse metadata, block-scale factors
and A in TMEM (the column plan of one kernel is compiler/passes/plans.py).

Pure Python (no numpy): the kernel emitter (compiler/ptx/tcgen05_kernel.py) turns these rules into per-thread PTX
arithmetic, and the tests check them cell by cell against the PTX figures' decodings and the reference
model (compiler/sim/tcgen05.py).

TMEM is 128 lanes x 512 columns of 32 bits per CTA (PTX 9.7.16.1); warp w of a warpgroup reaches
only lanes 32w..32w+31 with tcgen05.ld/st (9.7.16.8.3 access restrictions), so a 128-thread CTA
stages every cell with thread t writing lane t.

Sources, per rule:
- Data-path layouts A-G: PTX 9.7.16.10.5 (the table of M / cta_group / sparsity / .ws -> layout id;
  the figures are images). Lane maps from CUTLASS `UMMA::tmem_frg` / `tmem_frg_ws` (mma_sm100_desc.hpp:
  M=64 half data path `Shape<(_16,_4),N>:Stride<(_1,_32),_128>`, 2x2 `Shape<_64,(N/2,_2)>:Stride<_1,(_128,_64)>`,
  1x4 `Shape<_32,(N/4,_4)>:Stride<_1,(_128,_32)>`), PTX 9.7.16.10.5; the sim models D/A/F.
- Sparse metadata: PTX 9.7.16.10.8.4 (figures are images) as decoded by CUTLASS (`tmem_e_frg`
  and NOHEAT, verified twice); .ws M=64/32 from CUTLASS `tmem_e_frg_ws` (the M=128 rule on the M rows,
  repeated in every lane group of the 2x2 / 1x4 data path: strides _64 / _32); selector = column
  parity (PTX 9.7.16.10.8.4).
- Block-scale factors: PTX 9.7.16.10.7 ("Scale factors ... need to be duplicated to all 32 lane
  partitions"; Table 54 shapes M x {1,2,4}; SFA_ID / SFB_ID = byte offset in the 32-bit word) and
  CUTLASS `tmem_sf_frg` (row r = r0 + 32*r1 -> lane r0 of every 32-lane partition, column r1, the
  scale factors of one MMA in consecutive bytes; SFB of the 2x2 data path: N halves in lane halves;
  `make_runtime_instr_desc_block_scaled`: "The first 2-bits of TMEM address includes byte address").
  K = 96 (sm_103a): 3 (block32) / 6 (block16) factors per MMA (9.7.16.10.7.2.4-.5, .3.4-.5), SF IDs
  0-3 / 0, 2 drawn in Figures 243-258 (images); see `ScaleLayout` for the placement tilec chooses.
- A in TMEM: lane = the row's D lane (9.7.16.10.5: "A, D and the sparsity metadata" share the lane
  alignment), K packed along columns, 256 bits (8 columns) per MMA (CUTLASS: "Logical shape-K is always
  256 bits"; K = 96: 384 bits, extrapolated, `a_columns_per_mma`); fp4/fp6 under f8f6f4/mxf8f6f4 one per
  byte (PTX 9.7.16.10.4.3; container bits as the reference model: compiler/sim/numerics.tmem_element_slots).
  .ws M<128 and cta_group::2 M=128 repeat the rows in every lane group like the metadata (CUTLASS TS
  atoms: "should be duplicated").
"""
from __future__ import annotations

from dataclasses import dataclass

from ..diagnostics import SpecError
from .tcgen05_kinds import K96

LANES = 128
COLUMNS = 512
LANE_GROUP = 32            # lanes one warp reaches (9.7.16.8.3)
A_COLUMNS_PER_MMA = 8      # 256 bits of one row of A per MMA (CUTLASS "Logical shape-K is always 256 bits")
# Bits of one row of A per MMA, by K = 96 (Table 44 bit 31): every other shape reads 256 bits (above); a
# K = 96 MMA reads 96 packed e2m1 values = 384 bits. Extrapolated: no source documents A in TMEM with K = 96
# (CUTLASS's SM103 atoms read A from shared memory only); K packed along columns as for every other K.
_A_ROW_BITS = {False: 256, True: K96.k * 4}          # e2m1: 4 bits per value


def a_columns_per_mma(k96: bool = False) -> int:
    """TMEM columns (32 bits each) one row of A in TMEM occupies per MMA."""
    return _A_ROW_BITS[k96] // 32


# --------------------------------------------------------------------------------------------------
# Data-path layouts (PTX 9.7.16.10.5)

@dataclass(frozen=True)
class DataPath:
    """One data-path layout, seen from one CTA.

    organization:
      "full"   - 128 rows, row i in lane i (layouts A, D; "4x1").
      "half"   - 64 rows in half the lanes: row i in lane 32*(i>>4) + (i&15) (layouts C, F, lane
                 alignment 0; "4x1, 1/2 datapath utilized").
      "folded" - `rows` (64 or 32) rows repeated in 128/rows lane groups; lane group g computes D columns
                 [g*N/folds, (g+1)*N/folds) (layouts B, E "2x2", G "1x4").
    """
    layout: str
    rows: int
    organization: str

    @property
    def folds(self) -> int:
        return LANES // self.rows if self.organization == "folded" else 1

    # ---- rows -> lanes ---------------------------------------------------------------------------
    def logical_lanes(self, logical: int) -> tuple[int, ...]:
        """Physical lanes holding logical lane `logical` (the M=128 rule's lane of an operand row, < rows)."""
        if not 0 <= logical < self.rows:
            raise ValueError(f"logical lane {logical} outside 0..{self.rows - 1}")
        if self.organization == "full":
            return (logical,)
        if self.organization == "half":
            return (32 * (logical >> 4) + (logical & 15),)
        return tuple(logical + self.rows * g for g in range(self.folds))

    def lane_logical(self, lane: int) -> int | None:
        """Inverse of logical_lanes: the logical lane a physical lane holds (None: unused lane)."""
        if self.organization == "full":
            return lane
        if self.organization == "half":
            return None if lane & 16 else 16 * (lane >> 5) + (lane & 15)
        return lane % self.rows

    # ---- D -------------------------------------------------------------------------------------
    def d_columns(self, n: int) -> int:
        """TMEM columns D occupies (one 32-bit column per element, 9.7.16.10.4.1)."""
        return n // self.folds

    def d_cell(self, row: int, col: int, n: int) -> tuple[int, int]:
        """(lane, column) of D element (row, col) of this CTA's rows."""
        per = self.d_columns(n)
        if self.organization == "folded":
            return row + self.rows * (col // per), col % per
        return self.logical_lanes(row)[0], col

    def lane_d_role(self, lane: int, n: int) -> tuple[int, int] | None:
        """(row, first D column) whose d_columns(n) consecutive elements lane `lane` holds, or None."""
        row = self.lane_logical(lane)
        if row is None:
            return None
        return row, (lane // self.rows) * self.d_columns(n) if self.organization == "folded" else 0


# PTX 9.7.16.10.5 table: (M, cta_group, sparse, ws) -> layout id. `None` = either.
_DATA_PATH_TABLE = (
    (32, 1, None, True, "G"),
    (64, 1, None, True, "E"),
    (64, 1, None, False, "F"),
    (128, 1, None, None, "D"),
    (128, 2, False, False, "B"),
    (128, 2, True, False, "C"),
    (256, 2, None, False, "A"),
)
# layout id -> (rows per CTA, organization)
_LAYOUTS = {"A": (128, "full"), "B": (64, "folded"), "C": (64, "half"), "D": (128, "full"),
            "E": (64, "folded"), "F": (64, "half"), "G": (32, "folded")}


def data_path(m: int, cta_group: int = 1, sparse: bool = False, ws: bool = False) -> DataPath:
    for tm, tg, tsp, tws, letter in _DATA_PATH_TABLE:
        if tm == m and tg == cta_group and tsp in (None, sparse) and tws in (None, ws):
            rows, org = _LAYOUTS[letter]
            return DataPath(letter, rows, org)
    raise SpecError(f"no TMEM data-path layout for M={m}, cta_group::{cta_group}{', .ws' if ws else ''} "
                    f"(PTX 9.7.16.10.5)", "shape.M")


# --------------------------------------------------------------------------------------------------
# Sparse metadata (PTX 9.7.16.10.8.4)

@dataclass(frozen=True)
class MetadataFormat:
    """How one MMA's metadata sits in TMEM.

    Natural words: row r of A, word w holds the nibbles of chunks 8w..8w+7 (nibble i at bits 4i) - the
    global-memory layout of runtime metadata, `[m_total][total_k / (8 * chunk)]` uint32.
    "shared16": f16/tf32 - one word (= one column) per MMA; rows m and m+8 share a cell, K halves j
      go 8 lanes apart: logical lane 16*(m>>4) + (m&7) + 8j, bits 16*((m>>3)&1) + 4n for chunk 4j+n.
      Two MMAs share a 64-bit granule: the even column is passed, `column & 1` is the selector.
    "row8": 8-bit kinds and fp4 kinds - logical lane = row, two words (columns) per MMA, selector 0.
    """
    name: str
    words_per_mma: int

    def selector_and_column(self, step: int) -> tuple[int, int]:
        """(idesc sparsity selector, column offset of [sp-meta-tmem]) of the MMA `step` of a stage."""
        if self.name == "shared16":
            return step & 1, step & ~1
        return 0, self.words_per_mma * step


METADATA_FORMATS = {"shared16": MetadataFormat("shared16", 1), "row8": MetadataFormat("row8", 2)}
# The natural metadata word of rows past a problem's edge (a ws kernel's image covers whole tiles): every nibble
# 0b0100, indices (0, 1), legal for every granularity (2:4, 4:8 pairs, tf32 1:2: PTX 9.7.16.10.8.1); A's rows
# there are TMA zero fill, so whatever it selects multiplies zeros.
METADATA_PAD_WORD = 0x44444444
# The scale-factor byte of rows past the edge: 1.0 (ue8m0: 2^(127 - 127); ue4m3: exponent 7 = bias, mantissa 0;
# PTX 9.7.16.10.7), finite, so zero-filled A / B rows stay zero (0xFF ue8m0 would be NaN).
SCALE_ONE = {"ue8m0": 0x7F, "ue4m3": 0x38}
_KIND_METADATA = {"f16": "shared16", "tf32": "shared16", "f8f6f4": "row8", "i8": "row8",
                  "mxf8f6f4": "row8", "mxf4": "row8", "mxf4nvf4": "row8"}
# Dense elements per metadata chunk (one nibble): 9.7.16.10.8 granularities 2:4 (4), 1:2 (2), 4:8 (8).
METADATA_CHUNK = {"f16": 4, "tf32": 2, "f8f6f4": 4, "i8": 4, "mxf8f6f4": 4, "mxf4": 8, "mxf4nvf4": 8}


def metadata_format(kind: str) -> MetadataFormat:
    return METADATA_FORMATS[_KIND_METADATA[kind]]


def metadata_sources(fmt: MetadataFormat, logical: int) -> tuple[tuple[int, int], ...]:
    """For a logical lane: ((row, bit shift of the row's word), ...) whose 16-bit halves (shared16) or
    whole word (row8) make up the cell. shared16: cell = (W[m][s] >> 16j) & 0xFFFF | ((W[m+8][s] >> 16j)
    & 0xFFFF) << 16 with m = 16*(λ>>4) + (λ&7), j = (λ>>3)&1."""
    if fmt.name == "row8":
        return ((logical, 0),)
    m = 16 * (logical >> 4) + (logical & 7)
    j = (logical >> 3) & 1
    return ((m, 16 * j), (m + 8, 16 * j))


def metadata_cell(fmt: MetadataFormat, logical: int, word_of_row) -> int:
    """The 32-bit TMEM cell of logical lane `logical` for one column, given word_of_row(row) = that row's
    natural metadata word for the column's MMA (shared16) or the column itself (row8)."""
    sources = metadata_sources(fmt, logical)
    if fmt.name == "row8":
        return word_of_row(sources[0][0]) & 0xFFFFFFFF
    (lo_row, shift), (hi_row, _) = sources
    return ((word_of_row(lo_row) >> shift) & 0xFFFF) | (((word_of_row(hi_row) >> shift) & 0xFFFF) << 16)


def metadata_image(kind: str, dp: DataPath, words: list[list[int]]) -> dict[tuple[int, int], int]:
    """{(lane, column): cell} of one CTA's metadata. words[row][w]: natural words of the CTA's rows
    (dp.rows of them), w over the stage (words_per_mma per MMA)."""
    fmt = metadata_format(kind)
    ncols = len(words[0])
    image = {}
    for logical in range(dp.rows):
        for col in range(ncols):
            cell = metadata_cell(fmt, logical, lambda r: words[r][col])
            for lane in dp.logical_lanes(logical):
                image[(lane, col)] = cell
    return image


def pack_metadata_words(nibbles_row) -> list[int]:
    """Natural words of one row: nibble i of word w = chunk 8w + i (the global metadata layout)."""
    if len(nibbles_row) % 8:
        raise SpecError(f"a metadata row of {len(nibbles_row)} chunks is not a whole number of 32-bit words")
    out = []
    for w in range(len(nibbles_row) // 8):
        word = 0
        for i in range(8):
            word |= (nibbles_row[8 * w + i] & 0xF) << (4 * i)
        out.append(word)
    return out


# --------------------------------------------------------------------------------------------------
# Block-scale factors (PTX 9.7.16.10.7)

# Scale factors one MMA takes per row of A / column of B (Table 54: M x 1 / 2 / 4 for every K but 96).
SCALE_FACTORS_PER_MMA = {("mxf8f6f4", "scale_vec::1X"): 1, ("mxf8f6f4", "block32"): 1,
                         ("mxf8f6f4", "implicit"): 1,
                         ("mxf4", "scale_vec::2X"): 2, ("mxf4", "block32"): 2, ("mxf4", "implicit"): 2,
                         ("mxf4nvf4", "scale_vec::2X"): 2, ("mxf4nvf4", "block32"): 2,
                         ("mxf4nvf4", "scale_vec::4X"): 4, ("mxf4nvf4", "block16"): 4}
# K = 96 (sm_103a): 9.7.16.10.7.2.4 / .3.4 "three scale factors per row ... block size as 32" (block32,
# "semantically equivalent to scale_vec::3X"; mxf4's omitted size is block32) and .2.5 / .3.5 "six scale
# factors per row ... block size as 16" (block16, "scale_vec::6X"). The .scale_vec::NX spellings are
# defined only for K = 64 / 128 (tcgen05_forms.Tcgen05Mma._check_k96).
K96_SCALE_FACTORS_PER_MMA = {("mxf4", "block32"): K96.k // 32, ("mxf4", "implicit"): K96.k // 32,
                             ("mxf4nvf4", "block32"): K96.k // 32, ("mxf4nvf4", "block16"): K96.k // 16}


def scale_factors_per_mma(kind: str, block_scale: str, k96: bool = False) -> int:
    """Scale factors per row of A (and per column of B) of one MMA."""
    table = K96_SCALE_FACTORS_PER_MMA if k96 else SCALE_FACTORS_PER_MMA
    if (kind, block_scale) not in table:
        raise SpecError(f"no scale-factor layout for kind::{kind} .{block_scale}{' with K = 96' if k96 else ''} "
                        f"(PTX 9.7.16.10.7.1 Table 54)", "block_scale.vec")
    return table[(kind, block_scale)]


def scale_vector_elements(kind: str, block_scale: str, k96: bool = False) -> int | None:
    """Elements of K that share one scale factor: the kind's dense K (Table 39; K = 96 for the K96 variant)
    over the factors one MMA takes per row (Table 54). So `.scale_vec::2X` of mxf4nvf4 covers 32 elements
    like its alias `.block32`, and `.scale_vec::4X` 16 like `.block16` (9.7.16.10.9.1 aliases). None for a
    vector size the kind does not take (the form check names it)."""
    from .tcgen05_kinds import mma_k

    table = K96_SCALE_FACTORS_PER_MMA if k96 else SCALE_FACTORS_PER_MMA
    if (kind, block_scale) not in table:
        return None
    return mma_k(kind, sparse=False, k96=k96) // table[(kind, block_scale)]


def scale_id_step(kind: str) -> int:
    """Granularity (bytes) of the SF IDs the kind's instruction descriptor can hold: Table 43 bits 29-30 /
    4-5 take 0-3 (any byte of the word), Table 44 takes 0 or 2 (half words)."""
    from .descriptors import CODES

    ids = sorted(CODES[kind]["a_scale_id"])
    return min(b - a for a, b in zip(ids, ids[1:])) if len(ids) > 1 else 4


@dataclass(frozen=True)
class ScaleLayout:
    """Where one operand's scale factors of one stage sit: a *group* is 4 bytes (one 32-bit column
    per 32-row slice). Each row's factors form a byte stream through consecutive groups; MMA `step` owns
    stream bytes [b, b + nsf) with b = step * stride, and `b % 4` is the idesc's SF ID (9.7.16.10.7.2/.3:
    "byte offset in the Tensor Memory word").

    `stride` = nsf rounded up to the SF-ID granularity of the descriptor (`scale_id_step`): equal to nsf
    for every K but 96. K = 96 block32 (3 factors, Table 44 IDs 0 / 2) takes stride 4, so every MMA starts
    a word at SF ID 0 (Figures 243 / 247: SFB_ID 0) and its factors stay inside it; the fourth byte is
    padding. K = 96 block16 (6 factors) takes stride 6: SF IDs alternate 0 and 2 (Figures 253-258 draw
    SFB_ID 0 and 2) and every MMA's factors continue past the end of their word. Where they continue is
    not in the PTX text (the figures are images): modelled as the same lane and column in the next group
    (the stream continues), i.e. + `slices` columns. Single reading, not confirmed on silicon."""
    nsf: int                  # scale factors per MMA per row
    slices: int               # 32-row slices = columns per group
    halves: int               # 2: SFB of the 2x2 data path, N halves in lane halves; else 1
    stride: int = 0           # stream bytes per MMA (0: = nsf)

    @property
    def step_bytes(self) -> int:
        return self.stride or self.nsf

    def step_position(self, step: int) -> tuple[int, int]:
        """(column offset of the MMA's scale-factor address, SF ID)."""
        byte = step * self.step_bytes
        return (byte // 4) * self.slices, byte % 4

    def stream_bytes(self, steps: int) -> int:
        """Bytes of a row's stream that `steps` MMAs use (through the last MMA's last factor)."""
        return (steps - 1) * self.step_bytes + self.nsf if steps else 0

    def columns(self, steps: int) -> int:
        return -(-self.stream_bytes(steps) // 4) * self.slices

    def byte_source(self, byte: int) -> tuple[int, int] | None:
        """(MMA step, factor index) stored at stream byte `byte`, or None for padding."""
        step, j = divmod(byte, self.step_bytes)
        return (step, j) if j < self.nsf else None

    def lanes_of(self, index: int, extent: int) -> tuple[tuple[int, int], ...]:
        """((lane, column offset in a group), ...) holding row/column `index` of an extent-long operand:
        index = r0 + 32*r1 (+ extent/2 * h) -> lane r0 of every 32-lane partition (of half h), column r1."""
        if self.halves == 2:
            half = extent // 2
            h, rest = divmod(index, half)
            r1, r0 = divmod(rest, LANE_GROUP)
            return tuple((r0 + 64 * h + LANE_GROUP * p, r1) for p in range(2))
        r1, r0 = divmod(index, LANE_GROUP)
        return tuple((r0 + LANE_GROUP * p, r1) for p in range(LANES // LANE_GROUP))

    def lane_index(self, lane: int, slice_: int, extent: int) -> int | None:
        """Inverse: the row/column whose factors lane `lane` holds in column `slice_` of a group."""
        if self.halves == 2:
            index = (lane & 31) + LANE_GROUP * slice_ + (extent // 2) * (lane >> 6)
            return index if (lane & 31) + LANE_GROUP * slice_ < extent // 2 else None
        index = (lane & 31) + LANE_GROUP * slice_
        return index if index < extent else None


def scale_layouts(kind: str, block_scale: str, dp: DataPath, n: int,
                  k96: bool = False) -> tuple[ScaleLayout, ScaleLayout]:
    """(SFA, SFB) layouts of one CTA for a block-scaled tile."""
    nsf = scale_factors_per_mma(kind, block_scale, k96)
    granule = scale_id_step(kind)
    stride = -(-nsf // granule) * granule
    stride = 0 if stride == nsf else stride
    sfa = ScaleLayout(nsf, -(-dp.rows // LANE_GROUP), 1, stride)
    if dp.organization == "folded":
        if (n // 2) % LANE_GROUP and n // 2 > LANE_GROUP:
            raise SpecError(f"SFB of the 2x2 data path (layout {dp.layout}) needs N/2 a multiple of 32 or "
                            f"at most 32, not N={n}", "shape.N")
        sfb = ScaleLayout(nsf, -(-(n // 2) // LANE_GROUP), 2, stride)
    else:
        sfb = ScaleLayout(nsf, -(-n // LANE_GROUP), 1, stride)
    return sfa, sfb
