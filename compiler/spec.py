"""Tile specs: the plain-data form of a tile, shared by the DSL front end and the Python API.

A `FileSpec` holds a target, an optional PTX version and tiles. Field values are plain Python; `locs`
maps a field path ("shape.N", "A.swizzle", "sparsity.selector", ...) to the source location it was
written at, so that any check can blame the exact token. Specs built in code have no locs; their
diagnostics point at the tile as a whole.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from .diagnostics import Loc
from .isa.epilogue_outputs import ACCUMULATORS, BIAS_TYPES
from .isa.swizzle import SWIZZLE_MODES

# The words a spec's fields hold, read by the front end, the printer and the IR's attribute types alike.
OPERAND_NAMES = ("A", "B", "C", "D", "SFA", "SFB")
SPACES = ("global", "smem", "tmem", "reg")             # OperandSpec.space
METADATA_SOURCES = ("runtime", "static")              # SparsitySpec.metadata
SCHEDULE_MMAS = ("sync", "wgmma")                     # ScheduleSpec.mma
SCHEDULE_PERSISTENT = ("none", "static", "clc")       # ScheduleSpec.persistent
SPLIT_K_STREAM = "stream"                             # ScheduleSpec.split_k: stream-K instead of N slices
# What OperandSpec.swizzle may hold: a swizzle mode of compiler/isa/swizzle.py, or "auto" (layout selection
# picks one: compiler/layout.py choose_swizzle).
SWIZZLES = (*SWIZZLE_MODES, "auto")


@dataclass
class OperandSpec:
    dtype: str
    space: str                      # global | smem | tmem | reg
    major: str | None = None        # K | MN (smem operands)
    swizzle: str | None = None      # none | 32B | 64B | 128B | 128B_base32B | auto


@dataclass
class SparsitySpec:
    ratio: str                      # 2:4 | 1:2 | 4:8
    metadata: str = "runtime"       # runtime (read from global memory) | static (in the spec)
    pattern: str | None = None      # a named repeating pattern (static metadata)
    rows: tuple | None = None       # per-row kept positions (static metadata), cycled over rows
    selector: int = 0


@dataclass
class ZeroColumnsSpec:
    value: int | None = None        # a raw 64-bit zero-column mask descriptor
    columns: tuple | None = None    # wanted zeroed columns, one tuple of ints per sub-mask
    shift: int = 0


@dataclass
class ScheduleSpec:
    """A whole-GEMM schedule for warp-level tiles: the CTA tile, its warp grid and the smem pipeline."""
    cta_m: int
    cta_n: int
    cta_k: int
    warps_m: int = 1
    warps_n: int = 1
    stages: int = 2
    mma: str = "sync"               # sync: warp-level mma.sp; wgmma: warpgroup wgmma.mma_async.sp (sm_90a)
    cluster: int = 1                # CTAs per cluster along M sharing B by multicast (mma=wgmma)
    # persistent CTAs: none (one CTA per output tile), static (grid = min(tiles, SMs x CTAs/SM), each CTA
    # walks tiles in raster order), clc (cluster launch control `clusterlaunchcontrol.try_cancel`, tcgen05)
    persistent: str = "none"
    raster: int | None = None       # tile rows walked together (L2 reuse); None: the kernel's default
    split_k: int | str = 1          # K slices across CTAs (N), or "stream" (stream-K); 1: no split
    # tcgen05 tiles: TMEM accumulators (1 or 2: the epilogue of one tile overlaps the MMAs of the next);
    # None = the warp-specialization pass chooses (2 where they fit in the 512 columns)
    accumulators: int | None = None
    # fp8 sparse wgmma: every N K blocks the wgmma accumulators are added into f32 registers and restart
    # (two-level accumulation: wgmma's fp8 accumulation keeps fewer bits than f32); None = no promotion
    promote: int | None = None


# The fused epilogue (README "DSL tour"): D = convert(scale * act(alpha*(A*B) + beta*C + bias)), converted
# to D's type (scale: the quantisation scale of an s8 / e4m3 D; compiler/isa/epilogue_outputs.py).
EPILOGUE_BIAS = ("none", "row", "col")
EPILOGUE_ACTS = ("none", "relu", "silu", "gelu_tanh", "gelu_erf")
EPILOGUE_ACCS = ACCUMULATORS
EPILOGUE_BIAS_TYPES = tuple(BIAS_TYPES)
EPILOGUE_PARAM = "param"        # alpha= / beta= / scale=param: an f32 kernel parameter instead of an immediate


@dataclass
class EpilogueSpec:
    """`epilogue [alpha=X|param] [beta=X|param] [bias=row|col] [bias_type=f32|f16|bf16] [act=...]
    [acc=f32|s32] [scale=X|param];`: what happens to the accumulators between the last MMA and the store of D
    (whose declared type is the output type). alpha, beta and scale are decimal literals as written (None: 1;
    beta needs operand C; scale an s8 or e4m3 D) or "param"."""
    alpha: str | None = None
    beta: str | None = None
    bias: str = "none"              # none | row (one value per row of D: M values) | col (N values)
    act: str = "none"               # none | relu | silu | gelu_tanh | gelu_erf
    acc: str | None = None          # the accumulator type; None: C's type, else the MMA form's float/int one
    scale: str | None = None        # the output scale (D = convert(scale * ...)); None: 1
    bias_type: str | None = None    # the bias vector's element type; None: f32


def field_loc(locs: dict[str, Loc], key: str | None = None, tile: Loc | None = None) -> Loc | None:
    """The location of a tile field ("sparsity.ratio") in `locs`, falling back to its statement ("sparsity"),
    then to the tile's ("tile", else `tile`). File-level keys ("target", "ptx") have no fallback: when
    --arch overrides the file, no token is to blame."""
    if key in ("target", "ptx"):
        return locs.get(key)
    while key:
        if key in locs:
            return locs[key]
        key = key.rpartition(".")[0]
    return locs.get("tile", tile)


@dataclass
class TileSpec:
    name: str
    engine: str                     # tcgen05 | mma.sp
    m: int
    n: int
    k: int
    operands: dict[str, OperandSpec]
    k_total: int | None = None      # the tile's whole K (a loop of instructions); None = one instruction
    kind: str | None = None         # tcgen05 kind / mma.sp kind; None = inferred from the types
    cta_group: int = 1
    ws: bool = False
    collector: str | None = None
    ashift: bool = False
    sparsity: SparsitySpec | None = None
    block_scale: str | None = None  # block16 | block32 | scale_vec::1X | 2X | 4X
    negate_a: bool = False
    negate_b: bool = False
    saturate: bool = False
    max_shift: int = 0
    scale_input_d: int | None = None
    disable_output_lane: tuple | None = None
    zero_columns: ZeroColumnsSpec | None = None
    schedule: ScheduleSpec | None = None
    epilogue: EpilogueSpec | None = None
    locs: dict[str, Loc] = field(default_factory=dict, compare=False, repr=False)

    def loc(self, key: str | None = None) -> Loc | None:
        """The location of a field, falling back to its statement, then to the tile (`field_loc`)."""
        return field_loc(self.locs, key)

    @property
    def total_k(self) -> int:
        return self.k_total if self.k_total is not None else self.k


@dataclass
class FileSpec:
    target: str
    tiles: list[TileSpec]
    ptx_version: tuple[int, int] | None = None
    filename: str = "<string>"
    locs: dict[str, Loc] = field(default_factory=dict, compare=False, repr=False)

    def loc(self, key: str | None = None) -> Loc | None:
        return self.locs.get(key) if key else None


def with_target(spec: FileSpec, target: str) -> FileSpec:
    return replace(spec, target=target)
