"""A pipelined structured-sparse GEMM around warp-level `mma.sp`: D = A*B (+ C), A 2:4 (1:2) sparse.

What `compiler/ptx/mma_sp_kernel.py` does one instruction tile at a time straight from global memory,
this kernel does as a whole GEMM schedule (the DSL's `schedule cta=MxNxK warps=WMxWN stages=S`):

* CTA tile `cta_m x cta_n`, walked along K in blocks of `cta_k`; `warps_m x warps_n` warps, each owning a
  `WM x WN` warp tile = (WM/16) x (WN/8) mma tiles (WM = cta_m/warps_m, WN = cta_n/warps_n).
* A `stages`-deep shared-memory ring filled with `cp.async.cg.shared.global` (16 B per copy, one
  `cp.async.commit_group` per K block, `cp.async.wait_group stages-2` + one `bar.sync` per K block;
  PTX ISA data-movement instructions cp.async, cp.async.commit_group, cp.async.wait_group). One tile
  per CTA: the K loop is unrolled over the ring, so every ring slot is an immediate offset.
* Fragments come out of shared memory with `ldmatrix.sync.aligned.m8n8.x4.shared.b16` (PTX ISA ldmatrix)
  for compressed A and for B, and `ld.shared.b32` for the metadata words; the fragments of the next
  k-step are loaded while the tensor cores work on the current one (two register buffers).
* Shared memory is XOR-swizzled (`swizzle`): every ldmatrix phase and every cp.async store phase
  touches 8 different 16-byte bank groups (tests/test_sparse_gemm_kernel.py checks every access with
  the address model the emitter itself uses: `fragment_accesses`, `copy_accesses`).
* CTAs are rasterised in groups of `raster_group` CTA rows along M (a 1-D grid), so that CTAs running
  at the same time share A and B panels in L2.
* D goes through a padded shared tile (`d_pitch`) and leaves in coalesced 16-byte stores when that
  tile fits the drained ring (`stage_d`; otherwise straight from the fragments). With the DSL's fused
  epilogue (`epilogue`: compiler/passes/epilogue_lowering.py's plan) the raw f32 accumulators are staged
  and the plan runs in the copy-out, per 16-byte chunk (compiler/ptx/epilogue.py), or per fragment pair
  when they are stored directly.
* `persistent=True`: CTAs walk tiles c, c + nctaid, ...; the copy side runs stages-1 K blocks ahead
  across tile boundaries (ring slots then live in the base registers). Correct (model and H100), but
  measured 10-25 % slower than one tile per CTA on the H100, so it is off by default.

Forms. Every form with 4 A registers, 4 B registers and 32-bit accumulators moves the same bytes per
k-step (compressed A: 16 rows x 32 B, B: 8 columns x 64 B, PTX ISA 9.7.14.6.2 (A and B fragments): every register is one
aligned 32-bit word of a row), so one byte-level kernel serves f16/bf16 m16n8k32, tf32 m16n8k16,
s8/u8 m16n8k64, e4m3/e5m2 m16n8k64 and the block-scaled kinds (below: mxf8f6f4 m16n8k64, e2m1 mxf4 /
mxf4nvf4 m16n8k128 with 4:8 metadata; `passes.limits.pipelined_form`). s4/u4 m16n8k128 moves the same bytes
but is not checked by the execution model yet, so the DSL keeps the simple kernel for it. ldmatrix moves 16-byte
rows whatever the element type: its `.b16` view puts bytes 4t..4t+3 of row g in lane 4g+t, exactly the
word `fragments.a_register_word` / `b_register_word` asks for.

Global layouts (the ones compiler/sparse.py produces; no re-packing):
  a_values   compressed A, row-major Mp x Kp/2 elements, Mp = M rounded up to whole CTA tiles (cta_m), Kp
             = K rounded up to whole K blocks (cta_k) (`sparse.compress_padded(..., value_rows=Mp)`: zero
             rows and columns), row stride Kp*bits/16 bytes.
  a_metadata uint32 [Mp/16][Kp/k][32] (`sparse.compress_padded(...)[1]`): the 32 lane words of each 16-row
             tile and k-step. A K block of `cta_k` holds `cta_k/k` consecutive k-steps, so the block's words of
             one 16-row tile are one contiguous run of 128*cta_k/k bytes (copied with cp.async like A/B).
  b          B^T, N x K, K contiguous (`sparse.pack_b`); rows `ldb` elements apart (ldb*bits/8 a multiple
             of 16). (For an LLM layer y = W x this is the activations tensor as stored, tokens x features.)
  c          (only with `accumulate_c`) row-major M x N of the accumulator type, rows `ldc` elements apart.
  d          row-major M x N of `d_type`, rows `ldd` elements apart: the accumulator type, or f16 / bf16
             (float forms) rounded to nearest even at the store (`cvt.rn.f16x2.f32` / `cvt.rn.bf16x2.f32`).
  (ldc and ldd times the element bytes multiples of 16; every base 16-byte aligned.) `Kp` is a u32
  parameter too (the ABI's `sizes`: the launcher computes it), so that the K loop's row strides of A and
  the metadata come from the constant bank like ldb rather than from a register (a 128x256 tile uses all
  255).
Limits (ABI `limits`, checked by compiler/runtime): M, N, K < 2^31, at most 2^31 - 1 tiles (the 1-D grid),
batch <= 65535. Global offsets that grow with a size (row * Kp * bytes, row * ldd * bytes) are 64-bit.

Edges (any M, N, K >= 1; not the block-scaled forms, whose scale-factor loads are not bounded: the ABI's
`requires` says so). The grid covers
ceil(M / cta_m) x ceil(N / cta_n) tiles and the K loop ceil(K / cta_k) blocks. A and its metadata are
padded by the packer (above), so their copies never leave the arrays; the padding's metadata nibbles are
legal (compiler/sparse.py: a zero-filled word would be the invalid nibble 0b0000, PTX ISA 9.7.14.6.1) and
its values zeros. B is not padded: every B copy carries a src-size (PTX ISA 9.7.9.25.3: `cp.async.cg
.shared.global [dst], [src], 16, src-size`, the bytes past src-size zero-filled), the bytes of its chunk
inside row n < N and column k < K, so the K tail multiplies zeros (0 x anything finite, where a poisoned
B would give NaN) and a row past N copies nothing. One register carries what the copies need per thread:
B rows left from its first row (bits 31:16) and the elements its chunk starts past the first of the
padded K (bits 15:0); the K block's remaining elements come from the K-block counter. C and D: a tile
inside D (m0 + cta_m <= M and n0 + cta_n <= N, a CTA-uniform branch on %m0 / %n0) loads C and stores D
with exactly the instructions of a kernel without edges; an edge tile loads C element by element where
row < M and column < N (0 elsewhere: those accumulators are never stored) and stores D the same way,
staged D per 16-byte chunk (one vector store where the chunk lies inside D, else its elements up to
column N); the fused epilogue's C and bias alike (compiler/ptx/epilogue.py edge_chunk for staged D).

Batches. Grid y is the batch index (%ctaid.y): A's values, its metadata and B of the batch lie
`batch_stride_a_values` / `batch_stride_a_metadata` / `batch_stride_b` bytes further on, C and D
`batch_stride_c` / `batch_stride_d` elements (u64 parameters). The bias is shared. Persistent CTAs walk
the tiles of their batch.

Shared memory per stage: [A: cta_m rows x 32*cta_k/k B][B: cta_n rows x 64*cta_k/k B][metadata:
cta_m/16 runs of 128*cta_k/k B], each region row-major; A and B swizzled. Dynamic shared memory
(`.extern .shared`): the launcher must allow `abi["dynamic_smem_bytes"]` for the kernel
(cudaFuncAttributeMaxDynamicSharedMemorySize) when it exceeds 48 KB.

Block-scaled forms (`.kind::mxf8f6f4 / mxf4 / mxf4nvf4 .block_scale`, sm_120a/sm_121a; PTX ISA 9.7.14.6.3,
block scaling 9.7.14.3) move A, B and metadata like the others (4 registers each: mxf8f6f4 in 8-bit
containers at m16n8k64, e2m1 packed at m16n8k128). Their scale factors come straight from global memory
(the layouts of the one-instruction-tile kernel: SFA uint8 [M][K/blk], SFB uint8 [N][K/blk], blk = k /
vector), one K block ahead of the MMAs in two register sets: a K block's scales of one row are
`scale_bytes` = ksteps x vector consecutive bytes (1..32), one ld.global (u8, u16, b32, v2 or v4.b32, two
v4 for 32) per lane, row pair and column quad. The selectors then pick without moving bytes:
  byte-id   k-step s reads byte s*vector of the row's bytes: word (s*vector) / 4, byte-id (s*vector) % 4
            (1X: 0..3; 2X: 0 or 2; 4X: 0 -- exactly the ranges of compiler/isa/mma_sp/block_scale.BYTE_ID);
  thread-id lane 4g + t holds SFA row g + 8*(t & 1) of mma tile 2p + (t >> 1) (thread-id-a = tile % 2 picks
            the lane pair) and SFB row g of mma tile 4r + t (thread-id-b = tile % 4 picks the lane), so one
            register serves two A tiles / four B tiles (block_scale.scale_a_lane / scale_b_lane).
Persistent CTAs do not take them (their copy side moves %m0 / %n0 ahead of the MMAs).

Measurements (throughput, ncu): docs/measurements.md.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from math import gcd

from ..bits import is_pow2, log2
from ..diagnostics import SpecError
from ..isa.mma_sp.block_scale import SCALE_VECTOR
from ..isa.mma_sp.forms import SHAPE_M, SHAPE_N, Form
# the largest shared memory one block may opt into (SMEM_PER_BLOCK, re-exported) lives with the targets
from ..isa.targets import SMEM_PER_BLOCK, Version, dynamic_smem_limit, format_version  # noqa: F401
from ..isa.types import TYPES
from ..passes.epilogue_lowering import EpiloguePlan
from ..passes.limits import EMULATED_FP8_HINT, emulated_fp8_problem
from ..passes.resources import check_shared_memory
from . import epilogue
from .builder import HAND_SCHEDULED, PtxBuilder, launch_limits, require_kernel_name, target_lines
from .mma_sp_kernel import KernelPTX, abi_head, mma_sp_instruction, mma_sp_ptx_version, scale_buffers

# Bytes of one k-step of one instruction tile for the forms this kernel takes (a_regs = b_regs = 4:
# 4 words x 32 lanes = 512 B = 16 A rows x 32 B = 8 B columns x 64 B; PTX ISA 9.7.14.6.2 (A and B fragments)).
A_STEP_ROW_BYTES = 32
B_STEP_ROW_BYTES = 64
META_STEP_BYTES = 128          # 32 lane words of one (16-row tile, k-step): sparse.compress layout
CHUNK = 16                     # cp.async.cg copies 16 bytes (PTX ISA cp.async: .cg takes cp-size 16 only)
LDMATRIX_ROW = 16              # one ldmatrix m8n8 row = 8 x b16 = 16 bytes (PTX ISA ldmatrix)
BANK_LINE = 128                # 32 banks x 4 bytes: one conflict-free shared-memory wavefront


# Accumulators per thread beyond which a warp tile no longer fits 255 registers next to two buffers of
# fragments (64x64 warp tile: 128 accumulators + 2 x (16 A + 32 B + 4 metadata) = 232).
MAX_ACCUMULATORS = 128

# How D is written from 32-bit accumulators: (PTX store type, conversion of an element pair or None).
# cvt.rn.{f16x2,bf16x2}.f32 d, a, b puts a in the upper and b in the lower half (PTX ISA cvt, packed .f16x2/.bf16x2),
# so the pair (col 2t, col 2t+1) is converted as `cvt d, c[2t+1], c[2t]`.
D_STORES = {
    "f32": ("v2.f32", None),
    "s32": ("v2.s32", None),
    "f16": ("b32", "cvt.rn.f16x2.f32"),
    "bf16": ("b32", "cvt.rn.bf16x2.f32"),
}


# A types whose pipelined kernels are checked by the execution model (tests/test_sparse_gemm_kernel.py;
# f16, bf16, s8 and tf32 also on the H100, benchmarks/sparse_gemm_sync.py) are passes/limits.PIPELINED_A_TYPES;
# the block-scaled kinds (4:8 e2m1 included) are checked by tests/test_block_scaled_kernels.py.
# --------------------------------------------------------------------------------------------------
# configuration
# --------------------------------------------------------------------------------------------------

class RingGeometry:
    """Sizes derived alike by both pipelined kernels' configurations: K blocks of `cta_k` (`ksteps`
    instruction k-steps each) staged through a ring of `stages` shared-memory slots holding `regions`."""

    @property
    def ksteps(self) -> int:           # mma k-steps per K block
        return self.cta_k // self.form.k

    @property
    def region_bytes(self) -> int:
        """Bytes of the operand regions of one slot."""
        return sum(r.bytes for r in self.regions.values())

    @property
    def ring_bytes(self) -> int:
        return self.stages * self.stage_bytes


@dataclass(frozen=True)
class SparseGemmConfig(RingGeometry):
    name: str
    form: Form
    target: str
    cta_m: int = 128
    cta_n: int = 256
    cta_k: int = 64
    warps_m: int = 2
    warps_n: int = 4
    stages: int = 3
    selector: int = 0
    ptx_version: Version | None = None     # None: the form's minimum, raised to 8.5 (ordered metadata)
    accumulate_c: bool = True              # D = A*B + C; False: D = A*B and no `c` parameter
    d_type: str | None = None              # None: the form's D type; f16/bf16 for float forms
    raster_group: int = 8                  # CTA rows along M walked together (L2 reuse)
    stage_d: bool = True                   # write D through shared memory (coalesced 16-byte stores)
    persistent: bool = False               # CTAs walk several tiles (needs an even k-step count); measured
                                           # slower than one tile per CTA on the H100 so far
    epilogue: EpiloguePlan | None = None   # the DSL's epilogue (tilec.epilogue_plan): applied before D is stored

    @property
    def threads(self) -> int:
        return 32 * self.warps_m * self.warps_n

    @property
    def warp_m(self) -> int:
        return self.cta_m // self.warps_m

    @property
    def warp_n(self) -> int:
        return self.cta_n // self.warps_n

    @property
    def tiles_m(self) -> int:          # mma tiles per warp along M
        return self.warp_m // SHAPE_M

    @property
    def tiles_n(self) -> int:
        return self.warp_n // SHAPE_N

    @property
    def out_type(self) -> str:
        return self.d_type or self.form.d_type

    @property
    def staged_type(self) -> str:
        """The element type of the staged D tile: with an epilogue the raw accumulators (it runs in the
        copy-out, with no accumulator live), else D's."""
        return self.form.c_type if self.epilogue is not None else self.out_type

    @property
    def preload_c(self) -> bool:
        """C enters the accumulators before the first MMA (which adds it), not in the epilogue."""
        return self.accumulate_c and (self.epilogue is None or self.epilogue.c == "accumulate")

    @cached_property
    def regions(self) -> dict[str, Region]:
        return _regions(self)

    @property
    def stage_bytes(self) -> int:
        return self.region_bytes

    @property
    def edge_k(self) -> bool:
        """Any K >= 1 (a zero-filled K tail, module docstring "Edges"); block-scaled forms take whole K blocks
        (their scale loads are not bounded)."""
        return self.form.block_scale is None

    @property
    def edge_mn(self) -> bool:
        """Any M, N >= 1 (partial edge tiles); block-scaled forms take whole tiles."""
        return self.edge_k

    @property
    def batched(self) -> bool:
        """A batch in grid y (module docstring "Batches"); not with block scaling (no batch strides for the
        scale factors)."""
        return self.form.block_scale is None

    @property
    def is_persistent(self) -> bool:
        """Persistent CTAs keep the fragment double buffer in step across K blocks only with an even
        number of k-steps per block (one loop iteration = one K block)."""
        return self.persistent and self.ksteps % 2 == 0

    @property
    def smem_limit(self) -> int:
        return dynamic_smem_limit(self.target)

    @property
    def d_pitch(self) -> int:
        """Shared row pitch of the staged D tile: padded by 8 elements, so that the 8 rows g of one
        fragment store (4 or 8 bytes per lane at column 2t) start 4*D-bytes banks apart: 8 rows x 4
        lanes cover each bank once per 128-byte wavefront."""
        return (self.cta_n + 8) * TYPES[self.staged_type].bits // 8

    @property
    def d_offset(self) -> int | None:
        """Where the staged D tile lives in shared memory, or None for direct fragment stores. One-tile
        CTAs reuse the drained ring; persistent CTAs need their own region (the ring already holds
        the next tile's first K blocks while D is written)."""
        tile = self.cta_m * self.d_pitch
        if not self.stage_d:
            return None
        if not self.is_persistent:
            return 0 if tile <= self.ring_bytes else None
        return self.ring_bytes if self.ring_bytes + tile <= self.smem_limit else None

    @property
    def smem_bytes(self) -> int:
        extra = self.cta_m * self.d_pitch if self.is_persistent and self.d_offset is not None else 0
        return self.ring_bytes + extra

    @property
    def unroll(self) -> int:
        """K blocks per loop iteration: a multiple of `stages` (ring slots become immediates) with an
        even number of k-steps (the two fragment buffers alternate) and, for block-scaled forms, an even
        number of K blocks (the two scale register sets alternate)."""
        u = self.stages * (1 if self.stages * self.ksteps % 2 == 0 else 2)
        return 2 * u if self.form.block_scale is not None and u % 2 else u

    # -- block scale factors (PTX ISA 9.7.14.3; see the module docstring) ----------------------------
    @property
    def scale_bytes(self) -> int:
        """Scale bytes of one SFA / SFB row per K block: ksteps x vector (0 without block scaling)."""
        bs = self.form.block_scale
        return self.ksteps * SCALE_VECTOR[bs.scale_vec] if bs is not None else 0

    @property
    def scale_words(self) -> int:
        return -(-self.scale_bytes // 4)

    @property
    def scale_registers(self) -> int:
        """32-bit scale registers per thread: two sets x (A tile pairs + B tile quads) x scale_words."""
        return 2 * (-(-self.tiles_m // 2) + -(-self.tiles_n // 4)) * self.scale_words


@dataclass(frozen=True)
class SlotRegion:
    """One operand's part of a ring slot of the pipelined kernels: `rows` rows of `row_bytes` at
    `offset` within the slot."""
    name: str
    rows: int
    row_bytes: int
    offset: int

    @property
    def bytes(self) -> int:
        return self.rows * self.row_bytes


@dataclass(frozen=True)
class Region(SlotRegion):
    """A SlotRegion copied from a global matrix whose row `row0 + r` starts at `r * stride` (stride in
    bytes, a power-of-two multiple of K)."""
    swizzled: bool
    stride_num: int          # global row stride = stride_reg * stride_num / stride_den bytes
    stride_den: int
    stride_reg: str          # %kp (K rounded up to whole K blocks: the packed A and metadata) or %ldb

    @property
    def chunks_per_row(self) -> int:
        return self.row_bytes // CHUNK

    def physical(self, offset: int) -> int:
        return swizzle(offset, self.row_bytes) if self.swizzled else offset


def _regions(cfg: SparseGemmConfig) -> dict[str, Region]:
    form, ks = cfg.form, cfg.ksteps
    bits = form.layout.storage_bits
    # A: Kp/2 elements a row (Kp = K rounded up to whole K blocks: the packer's zero columns)
    a = Region("A", cfg.cta_m, A_STEP_ROW_BYTES * ks, 0, True, bits, 16, "%kp")
    b = Region("B", cfg.cta_n, B_STEP_ROW_BYTES * ks, a.bytes, True, bits, 8, "%ldb")     # rows ldb elements apart
    # metadata: one "row" per 16-row tile; a row of [Mp/16][Kp/k][32] words is Kp/k * 128 bytes
    e = Region("E", cfg.cta_m // SHAPE_M, META_STEP_BYTES * ks, a.bytes + b.bytes, False,
               META_STEP_BYTES, form.k, "%kp")
    return {r.name: r for r in (a, b, e)}


def swizzle(offset: int, row_bytes: int) -> int:
    """Physical byte offset of logical byte `offset` of a row-major tile with `row_bytes`-byte rows.

    Bits 6:4 (the 16-byte chunk within a 128-byte bank line) are XORed with a 3-bit key: the index of
    the 128-byte line for rows of at most 128 bytes, the row index for longer rows. Eight consecutive
    rows read at the same logical chunk (one ldmatrix phase) then land in eight different chunks of
    the bank line, and a run of consecutive chunks (a cp.async store phase) stays a permutation of
    whole lines. 16-byte chunks are never split.
    """
    if row_bytes <= BANK_LINE:
        key = (offset >> 7) & 7
    else:
        key = (offset // row_bytes) & 7
    return offset ^ (key << 4)


def check_config(cfg: SparseGemmConfig) -> Version:
    """Validate `cfg`; return the PTX version to emit. Raises SpecError naming the schedule field."""
    form = cfg.form
    require_kernel_name(cfg.name)
    if form.a_regs != 4 or form.b_regs != 4 or form.c_regs != 4:
        raise SpecError(
            f"the pipelined sparse GEMM takes the k-wide mma.sp shapes with 32-bit accumulators "
            f"(4 A, 4 B and 4 C registers: f16/bf16 m16n8k32, tf32 m16n8k16, 8-bit m16n8k64, 4-bit "
            f"m16n8k128), not {form.name}", field="shape",
            hint="use the k-wide shape, or drop 'schedule' for the simple kernel")
    if form.block_scale is not None and cfg.persistent:
        raise SpecError(f"persistent CTAs do not take block-scaled {form.name} (their copy side runs ahead into "
                        f"the next tile, the scale loads follow the MMAs)", field="schedule.persistent",
                        hint="use one tile per CTA (persistent=False)")
    for what, v in (("warps_m", cfg.warps_m), ("warps_n", cfg.warps_n), ("cta_k", cfg.cta_k),
                    ("stages", cfg.stages), ("raster_group", cfg.raster_group)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise SpecError(f"schedule {what} must be a positive integer, not {v!r}", field="schedule")
    if not (is_pow2(cfg.warps_m) and is_pow2(cfg.warps_n)):
        raise SpecError(f"warps={cfg.warps_m}x{cfg.warps_n}: the warp grid must be powers of two",
                        field="schedule.warps")
    if cfg.threads > 1024:
        raise SpecError(f"{cfg.threads} threads per CTA exceed 1024", field="schedule.warps")
    for what, v, unit in (("M", cfg.cta_m, SHAPE_M * cfg.warps_m), ("N", cfg.cta_n, SHAPE_N * cfg.warps_n)):
        if not isinstance(v, int) or v < unit or v % unit:
            raise SpecError(f"schedule cta {what} = {v} is not a positive multiple of {unit} "
                            f"(instruction shape x warps)", field="schedule.cta")
    if cfg.cta_k % form.k or not is_pow2(cfg.ksteps) or cfg.ksteps > 8:
        raise SpecError(f"schedule cta K = {cfg.cta_k} must be {form.k}, {2 * form.k}, {4 * form.k} or "
                        f"{8 * form.k} (1, 2, 4 or 8 k-steps of {form.shape})", field="schedule.cta",
                        hint=f"cta K = {2 * form.k} is a good default")
    if not 2 <= cfg.stages <= 8:
        raise SpecError(f"the cp.async pipeline needs 2..8 stages, not {cfg.stages}", field="schedule.stages")
    acc = cfg.tiles_m * cfg.tiles_n * form.c_regs
    if acc > MAX_ACCUMULATORS:
        raise SpecError(f"warp tile {cfg.warp_m}x{cfg.warp_n} needs {acc} accumulator registers per thread; "
                        f"at most {MAX_ACCUMULATORS} fit beside double-buffered fragments",
                        field="schedule.warps", hint="use more warps (e.g. 64x64 warp tiles)")
    why = emulated_fp8_problem(form, cfg.target, cfg.tiles_m * cfg.tiles_n, cfg.threads)
    if why is not None:
        raise SpecError(why, field="schedule.warps", hint=EMULATED_FP8_HINT)
    out = cfg.out_type
    ep = cfg.epilogue
    packed = ep is not None and ep.packs          # a 1-byte D: the epilogue's conversions (isa/epilogue_outputs.py)
    if not packed and (out not in D_STORES or (out in ("f16", "bf16") and form.c_type != "f32") or
                       (out in ("f32", "s32") and out != form.c_type)):
        raise SpecError(f"D type {out} cannot be stored from {form.c_type} accumulators "
                        f"(use {form.c_type}{', f16 or bf16' if form.c_type == 'f32' else ''})", field="D.dtype")
    if ep is not None and (ep.out != out or ep.acc != form.c_type or (not packed and ep.convert != D_STORES[out][1])
                           or (ep.c != "none") != cfg.accumulate_c):
        raise SpecError(f"the epilogue plan (acc {ep.acc}, D {ep.out}, C {ep.c}) does not match the kernel "
                        f"(acc {form.c_type}, D {out}, C {'read' if cfg.accumulate_c else 'absent'})",
                        field="epilogue")
    ptx = mma_sp_ptx_version(form, cfg.target, cfg.ptx_version, cfg.selector)
    check_shared_memory(cfg.target, cfg.stages, cfg.stage_bytes, cfg.ring_bytes)
    return ptx


# --------------------------------------------------------------------------------------------------
# address model: per-thread shared-memory offsets, shared by the emitter and the tests
# --------------------------------------------------------------------------------------------------

# A term ((tid >> shift) & mask) * mul of a per-thread offset; offset = sum of terms + const.
Term = tuple[int, int, int]


@dataclass(frozen=True)
class Access:
    """One per-thread shared-memory access pattern within stage 0: logical offset (within `region`)
    = sum of terms of the thread index + `const`."""
    region: str
    terms: tuple[Term, ...]
    const: int

    def logical(self, tid: int) -> int:
        return self.const + sum(((tid >> s) & m) * mul for s, m, mul in self.terms)


def _warp_terms(cfg: SparseGemmConfig) -> tuple[Term, Term]:
    """(wm, wn) as terms: warp = tid >> 5, wn = warp % warps_n, wm = warp / warps_n (powers of two)."""
    lwn = log2(cfg.warps_n)
    return (5 + lwn, cfg.warps_m - 1, 1), (5, cfg.warps_n - 1, 1)


def fragment_accesses(cfg: SparseGemmConfig) -> dict[tuple[str, int, int], Access]:
    """{(operand, tile, k-step): Access} for the fragment loads of one warp tile within a K block.

    A, ldmatrix.x4 (matrix j = lane >> 3 holds A register j: rows 8*(j&1)..+7, bytes 16*(j>>1)..+15 of
    the 16 x 32 B k-step tile, fragments.a_register_word): lane supplies row (lane&7) + 8*((lane>>3)&1)
    and byte 16*(lane>>4); tile i adds 16i rows, k-step s adds 32s bytes; warp wm adds wm*WM rows.
    B, ldmatrix.x4 (matrix j holds B register j: the 8 columns' bytes 16j..16j+15 of the k-step,
    fragments.b_register_word): lane supplies column lane&7 and byte 16*(lane>>3); tile q adds 8q rows
    of B^T, k-step s adds 64s bytes; warp wn adds wn*WN rows.
    E, ld.shared.b32: lane reads word lane of the 128-byte run of (16-row tile wm*TM + i, k-step s).
    """
    ra, rb, re = (cfg.regions[x] for x in "ABE")
    (wm_s, wm_m, _), (wn_s, wn_m, _) = _warp_terms(cfg)
    out: dict[tuple[str, int, int], Access] = {}
    a_terms = ((0, 7, ra.row_bytes), (3, 1, 8 * ra.row_bytes), (4, 1, LDMATRIX_ROW),
               (wm_s, wm_m, cfg.warp_m * ra.row_bytes))
    b_terms = ((0, 7, rb.row_bytes), (3, 3, LDMATRIX_ROW), (wn_s, wn_m, cfg.warp_n * rb.row_bytes))
    e_terms = ((0, 31, 4), (wm_s, wm_m, cfg.tiles_m * re.row_bytes))
    for s in range(cfg.ksteps):
        for i in range(cfg.tiles_m):
            out["A", i, s] = Access("A", a_terms, SHAPE_M * i * ra.row_bytes + A_STEP_ROW_BYTES * s)
            out["E", i, s] = Access("E", e_terms, i * re.row_bytes + META_STEP_BYTES * s)
        for q in range(cfg.tiles_n):
            out["B", q, s] = Access("B", b_terms, SHAPE_N * q * rb.row_bytes + B_STEP_ROW_BYTES * s)
    return out


def copy_accesses(cfg: SparseGemmConfig) -> dict[tuple[str, int], tuple[Access, int]]:
    """{(operand, round): (Access, threads taking part)}: round j copies region chunks tid + j*T
    (16 bytes each, row-major), threads tid < the second element only (partial last round)."""
    t = cfg.threads
    out = {}
    for r in cfg.regions.values():
        chunks = r.bytes // CHUNK
        for j in range(-(-chunks // t)):
            out[r.name, j] = (Access(r.name, ((0, t - 1, CHUNK),), CHUNK * j * t), min(t, chunks - j * t))
    return out


def physical_offsets(cfg: SparseGemmConfig, acc: Access, threads: int | None = None) -> list[int]:
    """Per-thread physical byte offsets within stage 0 (region offset + swizzle) of an access."""
    reg = cfg.regions[acc.region]
    return [reg.offset + reg.physical(acc.logical(tid)) for tid in range(threads or cfg.threads)]


def _plan_bases(cfg: SparseGemmConfig, accesses, xor: bool = False) -> tuple[list[Access], dict]:
    """Share per-thread base registers. An access reuses a base when, for every thread, its physical
    offset is (base ^ x) + d with constants x and d: x = 0 (base + immediate), or with `xor` an x that
    only flips bits 6:4 (the swizzled chunk bits; a k-step further along a swizzled row flips them the
    same way in every row). Register values are base + shared-window address + region offset, all
    multiples of 128 apart from bits 6:0, so the XOR commutes with those additions.
    Returns (bases, {key: (base index, x, d)})."""
    assert all(r.offset % BANK_LINE == 0 for r in cfg.regions.values())
    bases: list[Access] = []
    phys: list[list[int]] = []
    where: dict = {}
    masks = range(0, BANK_LINE, CHUNK) if xor else (0,)
    for key, acc in accesses.items():
        p = physical_offsets(cfg, acc)
        found = None
        for bi, (b, bp) in enumerate(zip(bases, phys)):
            if b.region != acc.region or b.terms != acc.terms:
                continue
            for x in masks:
                d = p[0] - (bp[0] ^ x)
                if all(u - (v ^ x) == d for u, v in zip(p, bp)):
                    found = (bi, x, d)
                    break
            if found:
                break
        if found is None:
            found = (len(bases), 0, 0)
            bases.append(acc)
            phys.append(p)
        where[key] = found
    return bases, where


# --------------------------------------------------------------------------------------------------
# PTX emission
# --------------------------------------------------------------------------------------------------

class SparseGemmPTX(KernelPTX):
    """KernelPTX with this kernel's 1-D grid (rasterised tiles, or persistent CTAs) and its dynamic
    shared memory."""

    def grid(self, m: int, n: int, k: int, ctas: int | None = None, batch: int = 1) -> tuple[int, int, int]:
        """Launch grid for `batch` problems M x N x K (any sizes >= 1 where the ABI's `requires` is empty).
        Persistent kernels take `ctas`, the number of CTAs that run at once (multiprocessors x
        abi["max_ctas_per_sm"]); without it every tile gets its own CTA."""
        a = self.abi
        if min(m, n, k, batch) <= 0:
            raise SpecError(f"M, N, K, batch = {m}, {n}, {k}, {batch}: each must be at least 1", field="shape")
        if batch != 1 and "batch" not in a:
            raise SpecError(f"batch = {batch}: {a['kernel']} takes no batch (block-scaled)", field="shape.batch")
        for what, v, d in (("M", m, a["tile_m"]), ("N", n, a["tile_n"]), ("K", k, a["tile_k"])):
            if f"{what} % {d} == 0" in a["requires"] and v % d:
                raise SpecError(f"{what} = {v} is not a multiple of {d} ({a['kernel']} takes whole tiles)",
                                field=f"shape.{what}")
        tiles = -(-m // a["tile_m"]) * -(-n // a["tile_n"])
        if a["persistent"] and ctas:
            tiles = min(tiles, ctas)
        return tiles, batch, 1

    @property
    def smem_bytes(self) -> int:
        return self.abi["dynamic_smem_bytes"]


class _Writer(PtxBuilder):
    """Emits one kernel. Register roles (32-bit unless noted):
    %thr tid.x; %g, %t lane coordinates; %sm the shared window address of the dynamic buffer;
    %fb*, %cb* per-thread shared bases of fragment loads / copies (+ the current ring slot when
    persistent); %ga, %gb, %ge (64-bit) copy sources of the next K block; %kr K blocks left (one-tile
    CTAs); persistent: %ct / %it the computed / copied tile, %ck / %ik their K blocks left, %rs the ring
    slot being read, %pv "the copied tile exists"; %m0, %n0, %pid, %pm, %pn, %x, %y, %z scratch."""

    def __init__(self, cfg: SparseGemmConfig, ptx: Version):
        super().__init__(cfg.name, **HAND_SCHEDULED)
        self.cfg, self.ptx = cfg, ptx
        self.form = cfg.form
        self.acc_type = ".f32" if self.form.c_type == "f32" else ".s32"
        self.abytes = TYPES[self.form.c_type].bits // 8
        self.dbytes = TYPES[cfg.out_type].bits // 8
        self.store_type, self.convert = D_STORES.get(cfg.out_type, (None, None))   # a 1-byte D: epilogue.pack
        self.smem = f"{cfg.name}_smem"
        self.copies = copy_accesses(cfg)
        self.fbases, self.fwhere = _plan_bases(cfg, fragment_accesses(cfg), xor=True)
        self.cbases, self.cwhere = _plan_bases(cfg, {k: v[0] for k, v in self.copies.items()})
        self.xors = sorted({(bi, x) for bi, x, _d in self.fwhere.values() if x})
        self.partial = {name: n for (name, _j), (_a, n) in self.copies.items() if n < cfg.threads}
        self.add_params("u64", "a_values", "a_metadata", "b", *(("c",) if cfg.accumulate_c else ()), "d",
                        *(("sfa", "sfb") if self.form.block_scale is not None else ()))
        ep = cfg.epilogue
        if ep is not None:           # the epilogue's parameters: the bias pointer, then f32 alpha / beta
            self.add_params("u64", *(p for p in ep.params if p == "bias"))
            self.add_params("f32", *(p for p in ep.params if p != "bias"))
        # Kp: K rounded up to whole K blocks (the ABI's `sizes`: the launcher computes it), the row pitch of the
        # packed A and metadata
        self.add_params("u32", "M", "N", "K", "Kp", "ldb", *(("ldc",) if cfg.accumulate_c else ()), "ldd")
        # batch (grid y = the batch index): byte strides of the packed A and B, element strides of C and D
        self.batch_strides = {}
        if cfg.batched:
            self.batch_strides = {"a_values": 1, "a_metadata": 1, "b": 1,
                                  **({"c": self.abytes} if cfg.accumulate_c else {}), "d": self.dbytes}
            self.add_params("u64", *(f"batch_stride_{x}" for x in self.batch_strides))

    def global_pointer(self, reg: str, name: str, raw: str | None = None) -> None:
        """The global address of pointer parameter `name`, in this CTA's batch (%bz) where it has a batch
        stride (64-bit: a batch stride may pass 2^32)."""
        super().global_pointer(reg, name, raw)
        unit = self.batch_strides.get(name)
        if unit is not None:
            self.ld_param("u64", "%bo", f"batch_stride_{name}")
            self.ins("mov.u32 %bz, %ctaid.y;                      // the batch (grid y)")
            self.ins("cvt.u64.u32 %off, %bz;")
            self.ins("mul.lo.u64 %bo, %bo, %off;")
            self.ins(f"mad.lo.u64 {reg}, %bo, {unit}, {reg};          // this batch's")

    def terms(self, dst: str, acc: Access) -> None:
        """dst = logical offset of `acc` for this thread (%thr)."""
        self.ins(f"mov.u32 {dst}, {acc.const};")
        for s, m, mul in acc.terms:
            if m == 0 or mul == 0:
                continue
            self.ins(f"shr.u32 %x, %thr, {s};")
            self.ins(f"and.b32 %x, %x, {m};")
            self.ins(f"shl.b32 %x, %x, {log2(mul)};" if is_pow2(mul) else f"mul.lo.u32 %x, %x, {mul};")
            self.ins(f"add.u32 {dst}, {dst}, %x;")

    def swizzle(self, reg: str, region: Region) -> None:
        """reg ^= key << 4 (function `swizzle`): key = bits 9:7 of the offset, or the row's low bits."""
        if region.swizzled:
            self.ins(f"shr.u32 %x, {reg}, {3 if region.row_bytes <= BANK_LINE else log2(region.row_bytes) - 4};")
            self.ins("and.b32 %x, %x, 0x70;")
            self.ins(f"xor.b32 {reg}, {reg}, %x;")

    # -- setup pieces ------------------------------------------------------------------------------
    def header(self) -> None:
        cfg, form, out = self.cfg, self.form, self.module
        regions = cfg.regions
        out.append(f"// tilec pipelined sparse GEMM {cfg.name}: D = A*B{' + C' if cfg.accumulate_c else ''}, "
                   f"A {form.granularity.name} structured-sparse, form {form.name}")
        out.append(f"// CTA {cfg.cta_m}x{cfg.cta_n}x{cfg.cta_k}, warps {cfg.warps_m}x{cfg.warps_n} (warp tile "
                   f"{cfg.warp_m}x{cfg.warp_n} = {cfg.tiles_m}x{cfg.tiles_n} mma tiles), {cfg.stages} cp.async "
                   f"stages of {cfg.stage_bytes} B, D {cfg.out_type} "
                   f"({'staged in shared memory' if cfg.d_offset is not None else 'direct stores'}), "
                   f"{'persistent CTAs' if cfg.is_persistent else 'one tile per CTA'}, selector {cfg.selector}, "
                   f"raster group {cfg.raster_group}")
        out += target_lines(format_version(self.ptx), cfg.target)
        out.append(f"// {cfg.stages} stages x [A {regions['A'].bytes} B | B {regions['B'].bytes} B | metadata "
                   f"{regions['E'].bytes} B]" + (f", D tile at {cfg.d_offset}" if cfg.d_offset is not None else "")
                   + f"; dynamic (the launcher allows {cfg.smem_bytes} B)")
        out += [f".extern .shared .align {BANK_LINE} .b8 {self.smem}[];", ""]
        self.directives.append(f".maxntid {cfg.threads}, 1, 1")
        tm, tn = cfg.tiles_m, cfg.tiles_n
        self.declare("pred", "%pl", "%pe", "%pj", "%pv", "%pc<3>", "%pi", "%pr", "%pq", "%pw", "%pz", "%pk<4>")
        self.declare("u32", "%thr", "%g", "%t", "%x", "%y", "%z", "%M", "%N", "%K", "%kr", "%pid", "%pm", "%pn",
                     "%m0", "%n0", "%sm", "%ct", "%it", "%ck", "%ik", "%rs", "%kp", "%ldb", "%ldd", "%bz",
                     *(("%ldc",) if cfg.accumulate_c else ()))
        self.declare("u32", "%bq")
        self.declare("s32", "%szb", "%sz", "%ecl")
        self.declare("b16", "%hs")
        self.declare("u32", f"%fb<{len(self.fbases)}>", f"%cb<{len(self.cbases)}>", f"%xb<{max(1, len(self.xors))}>")
        self.declare("u64", "%ga", "%gb", "%ge", "%gd", "%gc", "%gt", "%off", "%rp", "%bo")
        self.declare("b32", f"%ra<{2 * tm * 4}>", f"%rb<{2 * tn * 4}>", f"%re<{2 * tm}>", "%h", "%v<4>")
        self.declare(self.acc_type, f"%acc<{tm * tn * 4}>")
        if self.form.block_scale is not None:
            pairs, quads, words = -(-tm // 2), -(-tn // 4), cfg.scale_words
            self.declare("pred", "%ps")
            self.declare("u64", "%gsa", "%gsb", f"%psa<{pairs}>", f"%psb<{quads}>")
            self.declare("b32", f"%sfa<{2 * pairs * words}>", f"%sfb<{2 * quads * words}>")
        if cfg.epilogue is not None:
            epilogue.declare(self, cfg.epilogue, "%rbias")
            self.declare("u64", "%gbias")
            if cfg.epilogue.packs and cfg.d_offset is None:
                self.declare("b32", f"%hq<{tn}>")          # a 1-byte D: the packed pairs of one fragment row

    def sizes(self, *names: str) -> None:
        """Load parameters (%kp = Kp, %ldb, %ldc, %ldd) where they are used: parameters live in the constant
        bank, which ptxas reads again rather than hold them in registers across the K loop (a 128x256 CTA
        tile uses all 255 registers; Kp computed from K in the kernel would take one more there)."""
        for name in names:
            self.ld_param("u32", f"%{name}", "Kp" if name == "kp" else name)

    def tiles_along(self, dst: str, size: str, tile: int) -> None:
        """dst = ceil(size / tile): the last tile may be partial (size < 2^31: no overflow)."""
        self.ins(f"add.u32 {dst}, {size}, {tile - 1};")
        self.div_imm(dst, dst, tile)

    def tile_count(self, dst: str) -> None:
        """dst = ceil(M / cta_m) * ceil(N / cta_n) (uses %x)."""
        cfg = self.cfg
        self.tiles_along("%x", "%M", cfg.cta_m)
        self.tiles_along(dst, "%N", cfg.cta_n)
        self.ins(f"mul.lo.u32 {dst}, {dst}, %x;")

    def raster(self, tile: str) -> None:
        """%m0, %n0 = first row / column of D tile `tile`: groups of raster_group tile rows along M,
        walked column by column (CTAs running together share A and B panels in L2)."""
        cfg, ins = self.cfg, self.ins
        G = cfg.raster_group
        ins(f"// tile {tile} -> (pm, pn): groups of {G} tile rows, walked column by column")
        self.tiles_along("%x", "%N", cfg.cta_n)
        ins(f"mul.lo.u32 %x, %x, {G};                  // tiles per group")
        ins(f"div.u32 %y, {tile}, %x;                  // group")
        ins(f"rem.u32 %z, {tile}, %x;                  // tile within the group")
        ins(f"mul.lo.u32 %pm, %y, {G};                 // first tile row of the group")
        self.tiles_along("%x", "%M", cfg.cta_m)
        ins("sub.u32 %x, %x, %pm;")
        ins(f"min.u32 %x, %x, {G};                     // tile rows in this group")
        ins("rem.u32 %y, %z, %x;")
        ins("add.u32 %pm, %pm, %y;")
        ins("div.u32 %pn, %z, %x;")
        ins(f"mul.lo.u32 %m0, %pm, {cfg.cta_m};")
        ins(f"mul.lo.u32 %n0, %pn, {cfg.cta_n};")

    def copy_pointers(self) -> None:
        """%ga/%gb/%ge = sources of this thread's first copy of K block 0 of tile (%m0, %n0): thread tid
        copies 16-byte chunk tid % cpr of region row tid / cpr (cpr = chunks per row)."""
        ins = self.ins
        self.sizes("kp", "ldb")
        for (name, reg), gp, par in zip(self.cfg.regions.items(), ("%ga", "%gb", "%ge"),
                                        ("a_values", "b", "a_metadata")):
            cpr = reg.chunks_per_row
            self.global_pointer(gp, par)
            ins(f"shr.u32 %x, %thr, {log2(cpr)};")
            if name == "E":                                                # one metadata row per 16 rows
                ins(f"shr.u32 %z, %m0, {log2(SHAPE_M)};")
                ins("add.u32 %x, %x, %z;")
            else:
                ins(f"add.u32 %x, %x, {'%m0' if name == 'A' else '%n0'};")
            if name == "B" and self.cfg.edge_k:
                ins("sub.s32 %bq, %N, %x;                       // B rows (columns of D) left from this row")
                ins("max.s32 %bq, %bq, 0;")
                ins(f"min.s32 %bq, %bq, {self.cfg.cta_n};")
                ins("shl.b32 %bq, %bq, 16;")
            # row * stride, then * the row stride's bytes per unit (num/den): 64 bits (K*4 or K*8 bytes a
            # row can exceed 2^32)
            ins(f"mul.wide.u32 %off, %x, {reg.stride_reg};")
            self.scale64("%off", reg.stride_num, reg.stride_den)
            ins(f"add.u64 {gp}, {gp}, %off;")
            ins(f"and.b32 %x, %thr, {cpr - 1};")
            if name == "B" and self.cfg.edge_k:
                # %bq = rows left (bits 31:16, at most cta_n) | elements this thread's chunk starts past the
                # row's K blocks' first (bits 15:0: c * per + Kp - K < 2 cta_k): one register for the K loop
                ins(f"mad.lo.u32 %bq, %x, {CHUNK * 8 // reg.stride_num}, %bq;")
                ins("sub.s32 %y, %kp, %K;")
                ins("add.u32 %bq, %bq, %y;")
            ins(f"mul.wide.u32 %off, %x, {CHUNK};")
            ins(f"add.u64 {gp}, {gp}, %off;")

    def smem_bases(self) -> None:
        ins, cfg = self.ins, self.cfg
        ins(f"mov.u32 %sm, {self.smem};")
        ins("// per-thread swizzled shared offsets in ring slot 0; other slots and tiles are immediates")
        for kind, bases in (("%fb", self.fbases), ("%cb", self.cbases)):
            for bi, acc in enumerate(bases):
                reg = cfg.regions[acc.region]
                self.terms("%y", acc)
                self.swizzle("%y", reg)
                ins(f"add.u32 {kind}{bi}, %y, %sm;")
                if reg.offset:
                    ins(f"add.u32 {kind}{bi}, {kind}{bi}, {reg.offset};")
        for name, n in self.partial.items():
            ins(f"setp.lt.u32 %pc{'ABE'.index(name)}, %thr, {n};        // partial last copy round")

    def acc_regs(self, i: int, q: int, h: int) -> tuple[str, str]:
        base = (i * self.cfg.tiles_n + q) * 4 + 2 * h        # c_{2h}, c_{2h+1}: row g + 8h, cols 2t, 2t+1
        return f"%acc{base}", f"%acc{base + 1}"

    def row_pointer(self, ptr: str, i: int, h: int, nbytes: int, stride: str, edge: bool = False) -> None:
        """%rp = ptr + ((m0 + wm*WM + 16i + 8h + g) * stride + n0 + wn*WN + 2t) * nbytes (PTX ISA 9.7.14.6.2,
        C/D fragments; `stride` the row stride in elements, %ldc or %ldd). `edge`: %pr = the row is in D."""
        cfg, ins = self.cfg, self.ins
        ins(f"shr.u32 %x, %thr, {5 + log2(cfg.warps_n)};")
        ins(f"mad.lo.u32 %x, %x, {cfg.warp_m}, %m0;")
        ins("add.u32 %x, %x, %g;")
        self.add_imm("%x", 16 * i + 8 * h)
        if edge:
            ins("setp.lt.u32 %pr, %x, %M;")
        ins(f"mul.wide.u32 %rp, %x, {stride};")
        ins("shr.u32 %x, %thr, 5;")
        ins(f"and.b32 %x, %x, {cfg.warps_n - 1};")
        ins(f"mad.lo.u32 %x, %x, {cfg.warp_n}, %n0;")
        ins("shl.b32 %y, %t, 1;")
        ins("add.u32 %x, %x, %y;")
        ins("cvt.u64.u32 %off, %x;")
        ins("add.u64 %rp, %rp, %off;")
        ins(f"mul.lo.u64 %rp, %rp, {nbytes};")
        ins(f"add.u64 %rp, %rp, {ptr};")

    # -- edges (module docstring "Edges") ---------------------------------------------------------------
    def edge_split(self, interior, edge) -> None:
        """interior() where tile (%m0, %n0) lies inside D, else edge(): a CTA-uniform branch (%m0, %n0 are
        the CTA's), so whole tiles run the code they run without edges. Kernels that take whole tiles only
        (edge_mn False) emit interior() alone."""
        cfg, ins = self.cfg, self.ins
        if not cfg.edge_mn:
            interior()
            return
        at_edge, done = self.label("EDGE"), self.label("EDGE_DONE")
        ins(f"add.u32 %x, %m0, {cfg.cta_m};")
        ins("setp.le.u32 %pi, %x, %M;")
        ins(f"add.u32 %x, %n0, {cfg.cta_n};")
        ins("setp.le.u32 %pq, %x, %N;")
        ins("and.pred %pi, %pi, %pq;                      // the whole tile lies inside D")
        ins(f"@!%pi bra.uni {at_edge};")
        interior()
        ins(f"bra.uni {done};")
        self.put(at_edge)
        edge()
        self.put(done)

    def fragment_columns_left(self) -> None:
        """%ecl = N - (n0 + wn*WN + 2t): the columns of D from this thread's first fragment column on
        (signed: negative past N)."""
        cfg, ins = self.cfg, self.ins
        ins("shr.u32 %x, %thr, 5;")
        ins(f"and.b32 %x, %x, {cfg.warps_n - 1};")
        ins(f"mad.lo.u32 %x, %x, {cfg.warp_n}, %n0;")
        ins("shl.b32 %y, %t, 1;")
        ins("add.u32 %x, %x, %y;")
        ins("sub.s32 %ecl, %N, %x;")

    def element_guard(self, col: int) -> None:
        """%pq = the row is in D (%pr) and column `col` after the fragment's first one is (%ecl)."""
        self.ins(f"setp.gt.s32 %pq, %ecl, {col};")
        self.ins("and.pred %pq, %pq, %pr;")

    def store_element(self, at: str, reg: str) -> None:
        """Store one accumulator `reg` as a D element at `at` where %pq (f16 / bf16: rounded to nearest
        even, PTX ISA cvt)."""
        if self.convert:               # the pair conversion of (reg, reg); its low half
            self.ins(f"{self.convert} %h, {reg}, {reg};")
            self.ins("cvt.u16.u32 %hs, %h;")
            self.ins(f"@%pq st.global.b16 {at}, %hs;")
        else:
            self.ins(f"@%pq st.global{self.acc_type} {at}, {reg};")

    def init_acc(self) -> None:
        """Accumulators of tile (%m0, %n0): C fragments (c_i at row g + 8*(i>>1), col 2t + (i&1),
        PTX ISA 9.7.14.6.2; isa/mma_sp/fragments.cd_element) or zeros. On an edge tile, C outside D reads as
        0 (those accumulators are never stored)."""
        cfg, ins = self.cfg, self.ins
        if cfg.preload_c:
            self.global_pointer("%gc", "c")
            self.sizes("ldc")

            def interior() -> None:
                for i in range(cfg.tiles_m):
                    for h in range(2):
                        self.row_pointer("%gc", i, h, self.abytes, "%ldc")
                        for q in range(cfg.tiles_n):
                            lo, hi = self.acc_regs(i, q, h)
                            ins(f"ld.global.v2{self.acc_type} {{{lo}, {hi}}}, [%rp+{8 * q * self.abytes}];")

            def edge() -> None:
                zero = "0f00000000" if self.acc_type == ".f32" else "0"
                self.fragment_columns_left()
                for i in range(cfg.tiles_m):
                    for h in range(2):
                        self.row_pointer("%gc", i, h, self.abytes, "%ldc", edge=True)
                        for q in range(cfg.tiles_n):
                            for e, reg in enumerate(self.acc_regs(i, q, h)):
                                self.element_guard(8 * q + e)
                                ins(f"mov{self.acc_type} {reg}, {zero};")
                                ins(f"@%pq ld.global{self.acc_type} {reg}, [%rp+{(8 * q + e) * self.abytes}];")

            self.edge_split(interior, edge)
        else:
            zero = "0f00000000" if self.acc_type == ".f32" else "0"
            for r in range(cfg.tiles_m * cfg.tiles_n * 4):
                ins(f"mov{self.acc_type} %acc{r}, {zero};")

    # -- the pipeline ------------------------------------------------------------------------------
    def issue_copies(self, slot: int, pred: str, left: str, ahead: int = 0) -> None:
        """cp.async one K block into ring slot `slot` (an immediate over the %cb bases), commit. The block
        is the `left - ahead`-th last of its tile (`left` a register: K blocks left)."""
        cfg, ins = self.cfg, self.ins
        self.sizes("kp", "ldb")
        for (name, reg), gp in zip(cfg.regions.items(), ("%ga", "%gb", "%ge")):
            rounds = [j for (n, j) in self.copies if n == name]
            ins(f"mov.u64 %gt, {gp};")
            bounded = name == "B" and cfg.edge_k
            if bounded:
                # B is read within its N x K: src-size = the bytes of the chunk inside the row (0..16), the
                # rest zero-filled (PTX ISA 9.7.9.25.3, cp.async src-size; a src-size equal to cp-size
                # copies the whole chunk, only a larger one is undefined); rows past N copy nothing
                per = CHUNK * 8 // reg.stride_num                  # B elements a chunk
                # elements of the row from this thread's chunk on: (left - ahead) * cta_k - (Kp - K) - c * per
                ins("and.b32 %szb, %bq, 0xFFFF;")
                ins(f"shl.b32 %sz, {left}, {log2(cfg.cta_k)};")
                ins("sub.s32 %szb, %sz, %szb;")
                if ahead:
                    ins(f"sub.s32 %szb, %szb, {ahead * cfg.cta_k};")
                ins("max.s32 %szb, %szb, 0;")
                ins(f"min.s32 %szb, %szb, {per};")
                if per != CHUNK:
                    ins(f"shl.b32 %szb, %szb, {log2(CHUNK // per)};")
                rows_per_round = cfg.threads // reg.chunks_per_row
            for j in rounds:
                bi, _x, d = self.cwhere[name, j]
                guard = pred
                if self.copies[name, j][1] < cfg.threads:
                    ins(f"and.pred %pj, {pred}, %pc{'ABE'.index(name)};")
                    guard = "%pj"
                size = ""
                if bounded:
                    ins(f"setp.gt.u32 %pz, %bq, {(j * rows_per_round) << 16 | 0xFFFF};   // row {j * rows_per_round} on is in B")
                    ins("selp.b32 %sz, %szb, 0, %pz;")
                    size = ", %sz"
                ins(f"@{guard} cp.async.cg.shared.global [%cb{bi}+{slot * cfg.stage_bytes + d}], [%gt], {CHUNK}{size};")
                if j != rounds[-1]:
                    # T chunks further: T/cpr rows (K * (T/cpr) * num/den bytes) when T >= cpr; a row
                    # longer than T chunks (the metadata of 8 k-steps with one warp) takes several rounds,
                    # moving 16*T bytes along it, then to the next row's start. A chain from the previous
                    # round: per-round offsets from the base become loop invariants that ptxas keeps in
                    # registers (and then spills)
                    cpr, t = reg.chunks_per_row, cfg.threads
                    rows = (j + 1) * t // cpr - j * t // cpr
                    along = ((j + 1) * t % cpr - j * t % cpr) * CHUNK
                    common = gcd(rows * reg.stride_num, reg.stride_den)      # bytes per K: num / den
                    num, den = rows * reg.stride_num // common, reg.stride_den // common
                    if den > 1:                       # 4-bit rows: K/4 or K/2 bytes (K % cta_k == 0)
                        ins(f"shr.u32 %x, {reg.stride_reg}, {log2(den)};")
                        ins(f"mad.wide.u32 %gt, %x, {num}, %gt;")
                    elif rows:
                        ins(f"mad.wide.u32 %gt, {reg.stride_reg}, {num}, %gt;")
                    if along:
                        ins(f"add.s64 %gt, %gt, {along};")
            ins(f"add.u64 {gp}, {gp}, {reg.row_bytes};")

        ins("cp.async.commit_group;")

    def load_fragments(self, slot: int, s: int, buf: int) -> None:
        """ldmatrix A and B, ld.shared metadata of k-step s of ring slot `slot` into buffer `buf`."""
        cfg, ins, fw = self.cfg, self.ins, self.fwhere
        off = slot * cfg.stage_bytes
        for bi, x in sorted({fw[key][:2] for key in fw if key[2] == s and fw[key][1]}):
            ins(f"xor.b32 %xb{self.xors.index((bi, x))}, %fb{bi}, {x};")   # bits 6:4 of a later k-step

        def addr(key) -> str:
            bi, x, d = fw[key]
            return f"[%xb{self.xors.index((bi, x))}+{off + d}]" if x else f"[%fb{bi}+{off + d}]"

        tm, tn = cfg.tiles_m, cfg.tiles_n
        for i in range(tm):
            regs = ", ".join(f"%ra{(buf * tm + i) * 4 + j}" for j in range(4))
            ins(f"ldmatrix.sync.aligned.m8n8.x4.shared.b16 {{{regs}}}, {addr(('A', i, s))};")
        for i in range(tm):
            ins(f"ld.shared.b32 %re{buf * tm + i}, {addr(('E', i, s))};")
        for q in range(tn):
            regs = ", ".join(f"%rb{(buf * tn + q) * 4 + j}" for j in range(4))
            ins(f"ldmatrix.sync.aligned.m8n8.x4.shared.b16 {{{regs}}}, {addr(('B', q, s))};")

    def mmas(self, buf: int, scale_set: int = 0, s: int = 0) -> None:
        """The mma.sp of one k-step (fragment buffer `buf`); block-scaled forms read k-step `s` of the
        scale registers of set `scale_set` (module docstring: byte-id and thread-id selectors)."""
        cfg = self.cfg
        tm, tn = cfg.tiles_m, cfg.tiles_n
        opcode = self.form.instruction(self.ptx)
        for i in range(tm):
            for q in (range(tn) if i % 2 == 0 else range(tn - 1, -1, -1)):   # serpentine: B stays hot
                c = [f"%acc{(i * tn + q) * 4 + r}" for r in range(4)]
                self.ins(mma_sp_instruction(opcode, c, [f"%ra{(buf * tm + i) * 4 + j}" for j in range(4)],
                                            [f"%rb{(buf * tn + q) * 4 + j}" for j in range(4)], c,
                                            f"%re{buf * tm + i}", cfg.selector, self.scale_operands(scale_set, s, i, q)))

    def scale_operands(self, scale_set: int, s: int, i: int, q: int) -> str:
        """`, scale-a-data, {byte-id-a, thread-id-a}, scale-b-data, {byte-id-b, thread-id-b}` of mma tile
        (i, q) at k-step s, or "" without block scaling."""
        bs = self.form.block_scale
        if bs is None:
            return ""
        cfg = self.cfg
        words = cfg.scale_words
        word, byte_id = divmod(s * SCALE_VECTOR[bs.scale_vec], 4)
        pairs, quads = -(-cfg.tiles_m // 2), -(-cfg.tiles_n // 4)
        sa = f"%sfa{(scale_set * pairs + i // 2) * words + word}"
        sb = f"%sfb{(scale_set * quads + q // 4) * words + word}"
        return f", {sa}, {{{byte_id}, {i % 2}}}, {sb}, {{{byte_id}, {q % 4}}}"

    def scale_pointers(self) -> None:
        """%psa<p> / %psb<r>: this lane's SFA row of A tile pair p and SFB row of B tile quad r at K block 0
        (module docstring): rows of K / k * vector bytes, row * pitch in 64 bits. A lane whose tile of the
        pair / quad does not exist (odd tiles_m, tiles_n not a multiple of 4) reads the first tile's row."""
        cfg, ins, form = self.cfg, self.ins, self.form
        tm, tn = cfg.tiles_m, cfg.tiles_n
        self.global_pointer("%gsa", "sfa")
        self.global_pointer("%gsb", "sfb")
        ins(f"// scale factors (PTX ISA 9.7.14.3): SFA [M][K/blk], SFB [N][K/blk] .{form.block_scale.scale_type} "
            f"bytes, {cfg.scale_bytes} a row per K block")
        ins(f"shr.u32 %z, %K, {log2(form.k)};")
        ins(f"mul.lo.u32 %z, %z, {SCALE_VECTOR[form.block_scale.scale_vec]};       // scale bytes a row")
        for p in range(-(-tm // 2)):
            ins(f"shr.u32 %x, %thr, {5 + log2(cfg.warps_n)};")
            ins(f"mad.lo.u32 %x, %x, {cfg.warp_m}, %m0;")
            ins("add.u32 %x, %x, %g;")
            ins("and.b32 %y, %t, 1;")
            ins("shl.b32 %y, %y, 3;")
            ins("add.u32 %x, %x, %y;                           // row g + 8*(t & 1): thread-id-a picks the pair")
            if 2 * p + 1 < tm:
                ins("shr.u32 %y, %t, 1;")
                ins(f"shl.b32 %y, %y, {log2(SHAPE_M)};")
                ins(f"add.u32 %x, %x, %y;                           // lanes t >> 1 = 1: tile {2 * p + 1}")
            self.add_imm("%x", 2 * SHAPE_M * p)
            ins("mul.wide.u32 %off, %x, %z;")
            ins(f"add.u64 %psa{p}, %gsa, %off;")
        for r in range(-(-tn // 4)):
            count = min(4, tn - 4 * r)
            ins("shr.u32 %x, %thr, 5;")
            ins(f"and.b32 %x, %x, {cfg.warps_n - 1};")
            ins(f"mad.lo.u32 %x, %x, {cfg.warp_n}, %n0;")
            ins("add.u32 %x, %x, %g;")
            if count > 1:
                if count < 4:
                    ins(f"setp.lt.u32 %ps, %t, {count};")
                    ins("selp.u32 %y, %t, 0, %ps;")
                    ins(f"shl.b32 %y, %y, {log2(SHAPE_N)};")
                else:
                    ins(f"shl.b32 %y, %t, {log2(SHAPE_N)};")
                ins(f"add.u32 %x, %x, %y;                           // lane 4g + t: tile {4 * r} + t (thread-id-b)")
            self.add_imm("%x", 4 * SHAPE_N * r)
            ins("mul.wide.u32 %off, %x, %z;")
            ins(f"add.u64 %psb{r}, %gsb, %off;")

    def load_scales(self, scale_set: int, pred: str) -> None:
        """One K block's scale bytes of every A tile pair / B tile quad into set `scale_set` (where `pred`),
        then the pointers one K block on."""
        cfg, ins = self.cfg, self.ins
        nbytes, words = cfg.scale_bytes, cfg.scale_words
        for ptr, count, reg in (("%psa", -(-cfg.tiles_m // 2), "%sfa"), ("%psb", -(-cfg.tiles_n // 4), "%sfb")):
            for p in range(count):
                first = (scale_set * count + p) * words
                if nbytes < 4:
                    ins(f"@{pred} ld.global.{'u8' if nbytes == 1 else 'u16'} {reg}{first}, [{ptr}{p}];")
                for h in range(0, words if nbytes >= 4 else 0, 4):
                    regs = [f"{reg}{first + h + j}" for j in range(min(4, words - h))]
                    at = f"[{ptr}{p}+{4 * h}]" if h else f"[{ptr}{p}]"
                    if len(regs) == 1:
                        ins(f"@{pred} ld.global.b32 {regs[0]}, {at};")
                    else:
                        ins(f"@{pred} ld.global.v{len(regs)}.b32 {{{', '.join(regs)}}}, {at};")
                ins(f"add.u64 {ptr}{p}, {ptr}{p}, {nbytes};")

    def ring_step(self, regs: list[str], pred_wrap: str) -> None:
        """Persistent CTAs: move base registers one ring slot on (back to slot 0 where `pred_wrap`)."""
        cfg, ins = self.cfg, self.ins
        ins(f"selp.b32 %x, {-(cfg.stages - 1) * cfg.stage_bytes}, {cfg.stage_bytes}, {pred_wrap};")
        for r in regs:
            ins(f"add.u32 {r}, {r}, %x;")

    # -- D ------------------------------------------------------------------------------------------
    def store_d(self) -> None:
        """Accumulators -> D for tile (%m0, %n0) (%gd loaded)."""
        cfg, ins = self.cfg, self.ins
        ep = cfg.epilogue
        self.sizes(*(("ldc",) if cfg.accumulate_c else ()), "ldd")
        if ep is not None:
            epilogue.load_params(self, ep, "%rbias")
        if cfg.d_offset is not None:
            self.store_d_staged()
            return
        ins(f"// accumulators -> D ({cfg.out_type}, row-major M x N, rows ldd apart), fragment by fragment")
        packs = ep is not None and ep.packs           # a 1-byte D: fragment_epilogue packs %hq{q}

        def interior() -> None:
            for i in range(cfg.tiles_m):
                for h in range(2):
                    if ep is not None:
                        self.fragment_epilogue(i, h)
                    self.row_pointer("%gd", i, h, self.dbytes, "%ldd")
                    for q in range(cfg.tiles_n):
                        if packs:
                            ins(f"st.global.b16 [%rp+{8 * q}], %hq{q};")
                            continue
                        self.store_pair("global", f"[%rp+{8 * q * self.dbytes}]", *self.acc_regs(i, q, h),
                                        self.store_type, self.convert)

        def edge() -> None:                # element by element, where row < M and column < N
            self.fragment_columns_left()
            for i in range(cfg.tiles_m):
                for h in range(2):
                    if ep is not None:
                        self.fragment_epilogue(i, h, edge=True)
                    self.row_pointer("%gd", i, h, self.dbytes, "%ldd", edge=True)
                    for q in range(cfg.tiles_n):
                        if packs:                  # byte e of the pair: bits 8e.. of %hq{q}
                            for e in range(2):
                                self.element_guard(8 * q + e)
                                if e:
                                    ins(f"shr.b32 %hq{q}, %hq{q}, 8;")
                                ins(f"@%pq st.global.b8 [%rp+{8 * q + e}], %hq{q};")
                            continue
                        for e, reg in enumerate(self.acc_regs(i, q, h)):
                            self.element_guard(8 * q + e)
                            self.store_element(f"[%rp+{(8 * q + e) * self.dbytes}]", reg)

        self.edge_split(interior, edge)

    def fragment_epilogue(self, i: int, h: int, edge: bool = False) -> None:
        """Direct D stores: the plan on the accumulator pairs of row 16i + 8h + g of the warp tile, every q
        (%gq: C of pair q = 0, %gbias: its bias; row and column as row_pointer computes them). `edge`: C and
        the bias read element by element where row < M and column < N (%ecl: fragment_columns_left), 0
        elsewhere (those elements are never stored)."""
        cfg, ins, ep = self.cfg, self.ins, self.cfg.epilogue
        ins(f"shr.u32 %x, %thr, {5 + log2(cfg.warps_n)};")
        ins(f"mad.lo.u32 %x, %x, {cfg.warp_m}, %m0;")
        ins("add.u32 %x, %x, %g;")
        self.add_imm("%x", 16 * i + 8 * h)
        ins("shr.u32 %y, %thr, 5;")
        ins(f"and.b32 %y, %y, {cfg.warps_n - 1};")
        ins(f"mad.lo.u32 %y, %y, {cfg.warp_n}, %n0;")
        ins("shl.b32 %z, %t, 1;")
        ins("add.u32 %y, %y, %z;                           // row %x, column %y of pair q = 0")
        if edge:
            ins("setp.lt.u32 %pr, %x, %M;")
        if ep.c == "epilogue":
            ins("mul.wide.u32 %gq, %x, %ldc;")
            ins("cvt.u64.u32 %off, %y;")
            ins("add.u64 %gq, %gq, %off;")
            ins(f"mad.lo.u64 %gq, %gq, {self.abytes}, %rc;")
        bb = ep.bias_bytes
        if ep.bias != "none":
            ins(f"mul.wide.u32 %gbias, {'%y' if ep.bias == 'col' else '%x'}, {bb};")
            ins("add.u64 %gbias, %gbias, %rbias;")
        raw = epilogue.raw_accumulators(ep)       # s32 accumulators: the f32 steps on %ev0, %ev1
        for q in range(cfg.tiles_n):
            lo, hi = self.acc_regs(i, q, h)
            if edge:
                epilogue.zero_inputs(self, ep)
                if ep.bias == "row":
                    epilogue.load_bias(self, ep, "@%pr ", "[%gbias]", 1)
                for e in range(2):
                    if ep.c == "epilogue" or ep.bias == "col":
                        self.element_guard(8 * q + e)
                    if ep.c == "epilogue":
                        ins(f"@%pq ld.global.f32 %ce{e}, [%gq+{(8 * q + e) * self.abytes}];")
                    if ep.bias == "col":
                        epilogue.load_bias(self, ep, "@%pq ", f"[%gbias+{(8 * q + e) * bb}]", 1, e)
            else:
                if ep.c == "epilogue":
                    ins(f"ld.global.v2.f32 {{%ce0, %ce1}}, [%gq+{8 * q * self.abytes}];")
                if ep.bias == "col":
                    epilogue.load_bias(self, ep, "", f"[%gbias+{8 * q * bb}]", 2)
                elif ep.bias == "row" and q == 0:
                    epilogue.load_bias(self, ep, "", "[%gbias]", 1)
            xs = ["%ev0", "%ev1"] if raw else [lo, hi]
            for k, x in enumerate(xs):
                epilogue.element_steps(self, ep, x, f"%ce{k}", f"%be{k if ep.bias == 'col' else 0}", (lo, hi)[k])
            if ep.packs:                          # a 1-byte D: the pair into the low half of %hq{q}
                epilogue.pack(self, ep, f"%hq{q}", xs)

    def store_d_staged(self) -> None:
        """D through a padded cta_m x cta_n shared tile: fragments in, then 16-byte chunks out,
        consecutive threads taking consecutive chunks of a row (coalesced global stores)."""
        cfg, ins = self.cfg, self.ins
        T, dbytes, pitch = cfg.threads, self.dbytes, cfg.d_pitch
        ep = cfg.epilogue
        if ep is not None:
            dbytes = self.abytes                 # the raw accumulators are staged
        ins(f"// accumulators -> shared D tile (pitch {pitch} B) -> D ({cfg.out_type}, row-major M x N)")
        if not cfg.is_persistent:
            ins("cp.async.wait_group 0;")
        ins("bar.sync 0;                                  // the D tile (ring) is free")
        self.terms("%y", d_stage_access(cfg))
        ins("add.u32 %y, %y, %sm;")
        if cfg.d_offset:
            ins(f"add.u32 %y, %y, {cfg.d_offset};")
        for i in range(cfg.tiles_m):
            for h in range(2):
                for q in range(cfg.tiles_n):
                    if ep is not None:
                        lo, hi = self.acc_regs(i, q, h)
                        ins(f"st.shared.v2{self.acc_type} [%y+{(16 * i + 8 * h) * pitch + 8 * q * dbytes}], "
                            f"{{{lo}, {hi}}};")
                        continue
                    self.store_pair("shared", f"[%y+{(16 * i + 8 * h) * pitch + 8 * q * dbytes}]",
                                    *self.acc_regs(i, q, h), "b32" if self.convert else "v2.b32", self.convert)
        ins("bar.sync 0;")
        cpr = cfg.cta_n * dbytes // CHUNK                      # 16-byte chunks per D row
        chunks = cfg.cta_m * cpr
        if ep is not None and ep.packs:                        # a 1-byte D: epilogue.byte_chunk
            groups = epilogue.byte_groups(ep, cfg.cta_n)
            per = epilogue.GROUP * groups
            cpr = cfg.cta_n // per

            c_stride = "%ldc" if cfg.accumulate_c else "%ldd"

            def byte_body(edge: bool) -> None:
                ins(f"div.u32 %pm, %z, {cpr};                        // tile row")
                ins(f"rem.u32 %pn, %z, {cpr};                        // chunk in the row")
                ins(f"mad.lo.u32 %x, %pm, {pitch}, %sm;")
                ins(f"mad.lo.u32 %x, %pn, {CHUNK * groups}, %x;")
                if cfg.d_offset:
                    ins(f"add.u32 %x, %x, {cfg.d_offset};")
                ins("add.u32 %pm, %pm, %m0;                      // row of D")
                ins(f"mad.lo.u32 %pn, %pn, {per}, %n0;              // column of D")
                guards = None
                if edge:                # the row exists; the whole chunk inside D (%pw), or part of it (%pz)
                    ins("setp.lt.u32 %pr, %pm, %M;")
                    ins(f"add.u32 %y, %pn, {per};")
                    ins("setp.le.and.u32 %pw, %y, %N, %pr;")
                    ins("setp.gt.and.u32 %pz, %y, %N, %pr;")
                    guards = ("%pr", "%pw", "%pz", "%pq", "%y")
                epilogue.byte_chunk(self, ep, groups, "%x", "%pm", "%pn", "%rbias", "%gd", c_stride, "%ldd", guards)

            def byte_edge() -> None:
                epilogue.zero_inputs(self, ep)
                epilogue.chunk_loop(self, "%z", "%thr", T, cfg.cta_m * cpr, "%pj", lambda: byte_body(True))

            self.edge_split(lambda: epilogue.chunk_loop(self, "%z", "%thr", T, cfg.cta_m * cpr, "%pj",
                                                        lambda: byte_body(False)), byte_edge)
            return
        if ep is not None:
            c_stride = "%ldc" if cfg.accumulate_c else "%ldd"

            def body(edge: bool) -> None:
                ins(f"div.u32 %pm, %z, {cpr};                        // tile row")
                ins(f"rem.u32 %pn, %z, {cpr};                        // chunk in the row")
                ins(f"mad.lo.u32 %x, %pm, {pitch}, %sm;")
                ins(f"mad.lo.u32 %x, %pn, {CHUNK}, %x;")
                at = f"[%x+{cfg.d_offset}]" if cfg.d_offset else "[%x]"
                ins(f"ld.shared.v4.f32 {{%ev0, %ev1, %ev2, %ev3}}, {at};")
                ins("add.u32 %pm, %pm, %m0;                      // row of D")
                ins(f"mad.lo.u32 %pn, %pn, {CHUNK // dbytes}, %n0;              // column of D")
                if not edge:
                    epilogue.chunk(self, ep, "", "%pm", "%pn", "%rbias", dbytes, self.dbytes, self.convert, "%gd",
                                   c_stride=c_stride, d_stride="%ldd")
                    return
                # the row in D; the whole chunk inside it, or only its first elements (epilogue.edge_chunk)
                ins("setp.lt.u32 %pr, %pm, %M;")
                ins("sub.s32 %ecl, %N, %pn;")
                ins(f"setp.ge.s32 %pq, %ecl, {CHUNK // dbytes};")
                ins("and.pred %pw, %pr, %pq;")
                ins(f"setp.lt.s32 %pz, %ecl, {CHUNK // dbytes};")
                ins("and.pred %pz, %pr, %pz;")
                epilogue.zero_inputs(self, ep)
                epilogue.edge_chunk(self, ep, "%pm", "%pn", "%rbias", dbytes, self.dbytes, self.convert, "%gd",
                                    c_stride, "%ldd", ("%pr", "%pw", "%pz"), [f"%pk{e}" for e in range(4)])

            self.edge_split(lambda: epilogue.chunk_loop(self, "%z", "%thr", T, chunks, "%pj", lambda: body(False)),
                            lambda: epilogue.chunk_loop(self, "%z", "%thr", T, chunks, "%pj", lambda: body(True)))
            return
        per = CHUNK // dbytes                                  # D elements a chunk

        def copy_out(edge: bool) -> None:
            for guard in self.thread_rounds("%x", "%thr", T, chunks, "%pj"):
                ins(f"div.u32 %pm, %x, {cpr};                        // tile row")
                ins(f"rem.u32 %pn, %x, {cpr};                        // chunk in the row")
                ins(f"mad.lo.u32 %x, %pm, {pitch}, %sm;")
                ins(f"mad.lo.u32 %x, %pn, {CHUNK}, %x;")
                at = f"[%x+{cfg.d_offset}]" if cfg.d_offset else "[%x]"
                ins(f"{guard}ld.shared.v4.b32 {{%v0, %v1, %v2, %v3}}, {at};")
                ins("add.u32 %pm, %pm, %m0;")
                ins("mul.wide.u32 %rp, %pm, %ldd;                 // row * ldd elements in 64 bits")
                self.scale64("%rp", dbytes, 1)
                ins(f"mad.lo.u32 %pn, %pn, {per}, %n0;")
                ins(f"mul.wide.u32 %off, %pn, {dbytes};")
                ins("add.u64 %rp, %rp, %off;")
                ins("add.u64 %rp, %rp, %gd;")
                if not edge:
                    ins(f"{guard}st.global.v4.b32 [%rp], {{%v0, %v1, %v2, %v3}};")
                    continue
                # the row in D, then: the whole chunk inside (one vector store), or its first elements
                ins("setp.lt.u32 %pr, %pm, %M;")
                if guard:
                    ins("and.pred %pr, %pr, %pj;")
                ins("sub.s32 %ecl, %N, %pn;                      // columns of D from the chunk's first on")
                ins(f"setp.ge.s32 %pq, %ecl, {per};")
                ins("and.pred %pw, %pr, %pq;")
                ins("@%pw st.global.v4.b32 [%rp], {%v0, %v1, %v2, %v3};")
                ins(f"setp.lt.s32 %pw, %ecl, {per};")
                ins("and.pred %pr, %pr, %pw;                      // a chunk across column N")
                for e in range(per):
                    self.element_guard(e)
                    if dbytes == 4:
                        ins(f"@%pq st.global.b32 [%rp+{4 * e}], %v{e};")
                    else:
                        if e % 2:
                            ins(f"shr.b32 %z, %v{e // 2}, 16;")
                        ins(f"cvt.u16.u32 %hs, {'%z' if e % 2 else f'%v{e // 2}'};")
                        ins(f"@%pq st.global.b16 [%rp+{2 * e}], %hs;")

        self.edge_split(lambda: copy_out(False), lambda: copy_out(True))

    # -- kernels -------------------------------------------------------------------------------------
    def prologue(self) -> None:
        ins, cfg = self.ins, self.cfg
        self.problem_dims("%thr")

        ins("and.b32 %x, %thr, 31;")
        ins("shr.u32 %g, %x, 2;                           // g = lane >> 2, t = lane & 3 (9.7.14.6.2)")
        ins("and.b32 %t, %x, 3;")
        self.smem_bases()

    def one_tile(self) -> None:
        """One tile per CTA: the ring slots are immediates (the K loop is unrolled over the ring)."""
        cfg, ins = self.cfg, self.ins
        S, KS = cfg.stages, cfg.ksteps
        self.prologue()
        self.sizes("kp")
        ins(f"shr.u32 %kr, %kp, {log2(cfg.cta_k)};            // K blocks still to compute")
        ins("mov.u32 %pid, %ctaid.x;")
        self.raster("%pid")
        self.copy_pointers()
        if self.form.block_scale is not None:
            self.scale_pointers()
            ins("setp.gt.u32 %ps, %kr, 0;")
            self.load_scales(0, "%ps")
        ins(f"// prologue: K blocks 0..{S - 2} into slots 0..{S - 2} (one commit group each, empty past K)")
        for s in range(S - 1):
            ins(f"setp.gt.u32 %pl, %kr, {s};")
            self.issue_copies(s, "%pl", "%kr", s)
        self.init_acc()
        ins(f"cp.async.wait_group {S - 2};")
        ins("bar.sync 0;")
        self.load_fragments(0, 0, 0)
        loop, done = self.label("LOOP"), self.label("EPILOGUE")
        self.put(loop)
        U = cfg.unroll
        for u in range(U):
            slot = u % S
            ins(f"// ---- K block kb (ring slot {slot}); refill slot {(u + S - 1) % S} with block kb + {S - 1}")
            for s in range(KS):
                buf = (u * KS + s) % 2
                if s == 0:
                    ins(f"setp.gt.u32 %pl, %kr, {S - 1};       // block kb + {S - 1} exists")
                    self.issue_copies((u + S - 1) % S, "%pl", "%kr", S - 1)
                    if self.form.block_scale is not None:
                        ins("setp.gt.u32 %ps, %kr, 1;              // block kb + 1 exists: its scales")
                        self.load_scales((u + 1) % 2, "%ps")
                if s == KS - 1:
                    # block kb+1 landed (commits so far: S-1 + kb+1; kb+2 needed -> S-2 may pend), and
                    # every warp is done with the slot refilled next (its fragments were read above)
                    ins(f"cp.async.wait_group {S - 2};")
                    ins("bar.sync 0;")
                    self.load_fragments((u + 1) % S, 0, 1 - buf)
                else:
                    self.load_fragments(slot, s + 1, 1 - buf)
                self.mmas(buf, u % 2, s)
            if u == U - 1:
                self.count_down("%kr", "%pe", loop)
            else:
                self.count_down("%kr", "%pe", done, exit_when_zero=True)
        self.put(done)
        self.raster("%pid")
        self.global_pointer("%gd", "d")
        self.store_d()
        ins("ret;")

    def persistent(self) -> None:
        """Persistent CTAs: CTA c computes tiles c, c + nctaid, ... as one stream of K blocks. The copy
        side runs stages-1 blocks ahead and crosses into the next tile on its own, so the next tile's
        first blocks load while this tile's D is written. Ring slots live in the base registers."""
        cfg, ins = self.cfg, self.ins
        S, KS = cfg.stages, cfg.ksteps
        fregs = [f"%fb{i}" for i in range(len(self.fbases))]
        self.prologue()
        done, loop = self.label("DONE"), self.label("LOOP")
        ins("mov.u32 %ct, %ctaid.x;                       // tile being computed")
        self.tile_count("%pm")
        ins("setp.ge.u32 %pe, %ct, %pm;")
        ins(f"@%pe bra.uni {done};")
        ins("mov.u32 %it, %ct;                            // tile being copied")
        ins("mov.u32 %pid, %ct;")
        self.raster("%pid")
        self.copy_pointers()
        self.sizes("kp")
        ins(f"shr.u32 %ik, %kp, {log2(cfg.cta_k)};            // K blocks of the copied tile left")
        ins("mov.u32 %ck, %ik;                            // K blocks of the computed tile left")
        ins("setp.eq.u32 %pv, %ik, %ik;                   // the copied tile exists")
        ins("mov.u32 %rs, 0;                              // ring slot being read")
        ins(f"// prologue: the first {S - 1} K blocks of the stream into slots 0..{S - 2}")
        for _ in range(S - 1):
            self.issue_block(advance="plain")
            self.next_copy_block()
        if cfg.preload_c:                  # the copy side may have moved %m0/%n0 to a later tile
            self.raster("%ct")
        self.init_acc()
        ins(f"cp.async.wait_group {S - 2};")
        ins("bar.sync 0;")
        self.load_fragments(0, 0, 0)
        self.put(loop)
        for s in range(KS):
            buf = s % 2
            if s == 0:
                self.issue_block(advance="ring")
            if s == KS - 1:
                # next block landed (S-2 newer groups may pend) and everyone is done with the slot
                # refilled next; then the read bases move to the next slot
                ins(f"cp.async.wait_group {S - 2};")
                ins("bar.sync 0;")
                ins(f"setp.eq.u32 %pe, %rs, {S - 1};")
                self.ring_step(fregs, "%pe")
                ins("add.u32 %rs, %rs, 1;")
                ins("selp.u32 %rs, 0, %rs, %pe;")
                self.load_fragments(0, 0, 1 - buf)
            else:
                self.load_fragments(0, s + 1, 1 - buf)
            self.mmas(buf)
        self.next_copy_block()
        self.count_down("%ck", "%pe", loop)
        ins("// tile finished: D out, next tile (its first K blocks are already in the ring)")
        self.raster("%ct")
        self.global_pointer("%gd", "d")
        self.store_d()
        ins("mov.u32 %x, %nctaid.x;")
        ins("add.u32 %ct, %ct, %x;")
        self.tile_count("%pm")
        ins("setp.ge.u32 %pe, %ct, %pm;")
        ins(f"@%pe bra.uni {done};")
        self.sizes("kp")
        ins(f"shr.u32 %ck, %kp, {log2(cfg.cta_k)};")
        self.raster("%ct")
        self.init_acc()
        ins(f"bra.uni {loop};")
        self.put(done)
        ins("ret;")

    def issue_block(self, advance: str) -> None:
        """Persistent CTAs: copy the next K block of the stream (if its tile exists) into the write slot
        (%cb bases) and step the write slot; `next_copy_block` moves the stream position."""
        cfg, ins = self.cfg, self.ins
        self.issue_copies(0, "%pv", "%ik")
        cregs = [f"%cb{i}" for i in range(len(self.cbases))]
        if advance == "plain":             # prologue: slots 0..S-2, no wrap
            for r in cregs:
                ins(f"add.u32 {r}, {r}, {cfg.stage_bytes};")
        else:                              # write slot = read slot - 1: it wraps when the read slot is 0
            ins("setp.eq.u32 %pe, %rs, 0;")
            self.ring_step(cregs, "%pe")

    def next_copy_block(self) -> None:
        """The copy side's next K block: the same tile, or block 0 of its next tile (kept out of the
        straight-line code of the K loop so that ptxas can interleave copies with mma)."""
        cfg, ins = self.cfg, self.ins
        nxt = self.label("SAME_TILE")
        self.count_down("%ik", "%pe", nxt)
        ins("mov.u32 %x, %nctaid.x;                       // the copy side moves to its next tile")
        ins("add.u32 %it, %it, %x;")
        self.tile_count("%pm")
        ins("setp.lt.u32 %pv, %it, %pm;")
        self.sizes("kp")
        ins(f"shr.u32 %ik, %kp, {log2(cfg.cta_k)};")
        self.raster("%it")
        self.copy_pointers()
        self.put(nxt)


def d_stage_access(cfg: SparseGemmConfig) -> Access:
    """Per-thread offset in the staged D tile of fragment (0, 0, h=0): row wm*WM + g, column
    wn*WN + 2t (fragment (i, h, q) adds (16i + 8h) rows and 8q columns; PTX ISA 9.7.14.6.2,
    isa/mma_sp/fragments.cd_element)."""
    (wm_s, wm_m, _), (wn_s, wn_m, _) = _warp_terms(cfg)
    pitch, dbytes = cfg.d_pitch, TYPES[cfg.staged_type].bits // 8
    return Access("D", ((wm_s, wm_m, cfg.warp_m * pitch), (2, 7, pitch), (wn_s, wn_m, cfg.warp_n * dbytes),
                        (0, 3, 2 * dbytes)), 0)


def emit_sparse_gemm(cfg: SparseGemmConfig) -> SparseGemmPTX:
    """Emit the PTX module of the pipelined sparse GEMM `cfg` (same config -> same bytes)."""
    ptx = check_config(cfg)
    w = _Writer(cfg, ptx)
    w.header()
    (w.persistent if cfg.is_persistent else w.one_tile)()
    return SparseGemmPTX(cfg.name, w.render(), ptx, cfg.target, _abi(cfg, ptx, w.params))


def padded_sizes(abi: dict, m: int, k: int) -> dict[str, int]:
    """The sizes compiler/sparse.py's packer pads an M x K A to for this kernel (compress_padded): whole CTA
    tiles of rows (`value_rows`; `meta_rows` 16-row tiles) and whole K blocks (`k_values`; `meta_words`, 32
    per k-step), so that no copy of A or its metadata leaves the packed arrays (the padding's metadata
    nibbles are legal, PTX ISA 9.7.14.6.1; its values zeros)."""
    tm, tk, fk = abi["tile_m"], abi["tile_k"], abi["form_k"]
    rows, kp = -(-m // tm) * tm, -(-k // tk) * tk
    return {"value_rows": rows, "k_values": kp, "meta_rows": rows // SHAPE_M, "meta_words": kp // fk * 32}


def operand_buffers(form: Form, d_type: str) -> dict:
    """ABI buffers a_values, a_metadata, b, d of the pipelined kernels (the layouts of compiler/sparse.py)."""
    bits = form.layout.storage_bits
    buffers = {
        "a_values": {"element": form.a_type, "shape": ["M", "K/2"], "bytes": f"M*K*{bits}/16",
                     "layout": "row-major compressed A (sparse.compress values)"},
        "a_metadata": {"element": "u32", "shape": ["M/16", f"K/{form.k}", 32],
                       "layout": "per 16-row tile and k-step, the 32 lane words (sparse.compress metadata)"},
        "b": {"element": form.b_type, "shape": ["N", "K"], "bytes": f"N*K*{bits}/8",
              "layout": "B transposed: row n holds column n of B (sparse.pack_b)"},
        "d": {"element": d_type, "shape": ["M", "N"], "layout": "row-major (written); 16-byte aligned"},
    }
    if bits == 4:
        # shapes count elements; 4-bit ones (e2m1) share a byte two at a time, so the arrays hold half as many
        # bytes a row: the runtime reads `packed` (as for mma_sp_kernel's ABI)
        for name in ("a_values", "b"):
            buffers[name]["packed"] = True
    return buffers


def _abi(cfg: SparseGemmConfig, ptx: Version, params) -> dict:
    form = cfg.form
    tm, tn, tk, bits = cfg.cta_m, cfg.cta_n, cfg.cta_k, form.layout.storage_bits
    mp, kp = f"(M + {tm - 1}) // {tm} * {tm}", f"(K + {tk - 1}) // {tk} * {tk}"
    buffers = operand_buffers(form, cfg.out_type)
    pitched = ("rows any number of elements apart (the launch's `{}`, in elements) whose bytes are a multiple of "
               "16; 16-byte aligned")
    buffers["a_values"].update(shape=[mp, f"{kp} // 2"], bytes=f"({mp})*({kp})*{bits}/16",
                               layout=f"row-major compressed A of A padded with zeros to whole {tm}-row tiles and "
                                      f"{tk}-element K blocks (sparse.compress_padded values)")
    buffers["a_metadata"].update(shape=[f"({mp}) // {SHAPE_M}", f"({kp}) // {form.k}", 32],
                                 layout=f"sparse.compress metadata of A padded with zero elements to whole {tm}-row "
                                        f"tiles and {tk}-element K blocks (sparse.compress_padded)")
    buffers["b"].update(pitch="ldb", layout="B transposed: row n holds column n of B (sparse.pack_b); "
                        + pitched.format("ldb"))
    buffers["b"].pop("bytes", None)
    buffers["d"].update(pitch="ldd", layout="row-major (written); " + pitched.format("ldd"))
    if form.block_scale is not None:
        buffers.update(scale_buffers(form, aligned=min(cfg.scale_bytes, CHUNK)))
    if cfg.accumulate_c:
        buffers["c"] = {"element": form.c_type, "shape": ["M", "N"], "pitch": "ldc",
                        "layout": "row-major; " + pitched.format("ldc")}
    batch = {}
    if cfg.batched:
        # every buffer but the bias (shared by all batches) may have a leading batch dimension: its stride the
        # kernel parameter batch_stride_<buffer> (bytes for the packed A and B, elements for C and D)
        for name in ("a_values", "a_metadata", "b", "c", "d"):
            if name in buffers:
                buffers[name]["batch_stride"] = f"batch_stride_{name}"
        batch = {"batch": "grid y: the batch index; each buffer's batch at its batch_stride_<buffer> parameter "
                          "(bytes for a_values, a_metadata and b, elements for c and d)"}
    extra = epilogue.abi_entries(cfg.epilogue, buffers)
    # CTAs that fit one SM at once: 64K registers at up to 256 per thread (ptxas may use all 255 that
    # .maxntid allows), and the shared memory of an SM (1 KB of it reserved per CTA on sm_80+)
    regs_fit = 65536 // (cfg.threads * 256)
    smem_fit = (cfg.smem_limit + 1024) // (cfg.smem_bytes + 1024)
    return {
        **abi_head(cfg.name, "sparse_gemm", form.name, form.instruction(ptx), cfg.target, ptx, params, buffers),
        "metadata": "runtime",
        "selector": cfg.selector,
        "tile_m": tm, "tile_n": tn, "tile_k": tk, "form_k": form.k,
        "warps": [cfg.warps_m, cfg.warps_n], "stages": cfg.stages, "raster_group": cfg.raster_group,
        "persistent": cfg.is_persistent,
        "max_ctas_per_sm": max(1, min(regs_fit, smem_fit)),
        "block": [cfg.threads, 1, 1],
        # grid y: the batch (always 1 for the block-scaled forms, which take none: no `batch` entry)
        "grid": ["min(tiles, multiprocessors * max_ctas_per_sm)" if cfg.is_persistent else "tiles", "batch", 1],
        # partial last tile row / column / K block where the kernel takes them (module docstring, "Edges")
        "tiles": f"((M + {tm - 1}) // {tm}) * ((N + {tn - 1}) // {tn})",
        "dynamic_smem_bytes": cfg.smem_bytes,
        "requires": ([] if cfg.edge_mn else [f"M % {tm} == 0", f"N % {tn} == 0"]) +
                    ([] if cfg.edge_k else [f"K % {tk} == 0"]),
        # the raster's tiles per group ceil(N / cta_n) * raster_group is a u32 product (Writer.raster)
        "limits": launch_limits("MNK", ["tiles", *(("batch",) if cfg.batched else ())])
                  + [f"(N + {tn - 1}) // {tn} * {cfg.raster_group} < {1 << 32}"],
        # sizes the launcher derives from M, N, K and passes as the u32 parameters of these names
        "sizes": {"Kp": kp},
        **batch,
        **extra,
    }
