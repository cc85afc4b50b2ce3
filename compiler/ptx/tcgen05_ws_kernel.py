"""The persistent, warp-specialised tcgen05 GEMM of a tile with a `schedule` (D = A * B^T, K-major A and B).

The structure comes from the IR: `tilec.ws_plan` (compiler/passes/warp_specialization.py: roles, ring,
barriers, accumulators, scheduler), the smem layouts and descriptors (layout-selection,
descriptor-materialization) and the instruction form. This module composes one emitter per role over a
shared setup; none of them decides a size.

  setup      thread 0 initialises the mbarriers (full/empty per ring slot, acc_full/acc_empty per
             accumulator); warp 0 allocates the TMEM columns (9.7.16.7.1) and relinquishes the permit;
             the CTA meets (tcgen05 fences around the barrier, 9.7.16.6.4) and reads the TMEM address.
  producer   warp 5, lane 0: for each of its tiles and K blocks, wait until the slot is empty, announce
             its bytes on the slot's full barrier (mbarrier.arrive.expect_tx, 9.7.13.15.11) and load the A
             and B boxes with cp.async.bulk.tensor (9.7.9.25.5.1), one box per swizzle atom along K, and
             the block's sparse-metadata / scale-factor images (META, SFA, SFB: `tmem_image` layout)
             through their own tensor maps (rows of 16 bytes), all completing on that barrier
             (.mbarrier::complete_tx::bytes).
  mma        warp 4, lane 0: per tile, wait until the accumulator is empty; per K block wait for the
             slot's full phase, copy the slot's metadata / scale-factor images into the slot's TMEM columns
             (tcgen05.cp, 9.7.16.8.2: ordered before the MMAs that follow, 9.7.16.6.2), issue the block's
             tcgen05.mma (enable-input-d false for the first of the tile) and tcgen05.commit to the slot's
             empty barrier (the slot is free once those copies and MMAs have read it, 9.7.16.12.1); after the
             last block commit to the accumulator's full barrier.
  epilogue   warps 0-3: per tile, wait for the accumulator's full phase, read warp w's 32 lanes 32 columns
             at a time with tcgen05.ld.32x32b.x32 (9.7.16.8.3), apply the fused epilogue (tilec.epilogue_plan)
             and convert to D's type, write the chunk to one of the warp's two staging buffers in shared
             memory (swizzled like D's tensor map), fence.proxy.async.shared::cta, and lane 0 stores the box
             by TMA (cp.async.bulk.tensor .global.shared::cta.bulk_group, 9.7.9.25.5.1), waiting with
             cp.async.bulk.wait_group.read before a buffer is written again; after the tile's last
             tcgen05.ld (and tcgen05.fence::before_thread_sync) lane 0 arrives on the accumulator's empty
             barrier, before that chunk's stores (`epilogue_role`).
  teardown   the CTA meets; warp 0 frees the TMEM columns.
A CTA pair (cta_group::2, `schedule ... cluster=2`, M = 256): each CTA loads its 128 rows of A and its N/2 rows
of B; both CTAs' copies complete on the leader's (rank 0) full barrier (`.cta_group::2` on the TMA,
9.7.9.25.5.1), whose expect_tx counts both halves; only the leader's MMA warp issues (the MMAs read both
CTAs' shared memory and write both CTAs' TMEM) and its commits multicast to the same barrier of both CTAs
(9.7.16.12.1); each CTA's epilogue reads its own 128 rows and arrives on the leader's acc_empty through
`mapa` (count 8). The CTAs meet at `barrier.cluster` after the setup and around the teardown. Each CTA's
data is its own (B is split by N, not shared), so no copy is multicast. Block-scaled and sparse pairs: each
CTA loads its 128 rows' SFA / META image and the pair's SFB image (every CTA's TMEM holds SFB for all N,
9.7.16.10.7), and the leader's tcgen05.cp.cta_group::2 copies in both CTAs, each from its own shared memory.
Sparse and block-scaled tiles (tcgen05.mma.sp .kind::mxf8f6f4 2:4, .kind::mxf4 / mxf4nvf4 4:8 with .block_scale,
9.7.16.10.9.2 and 9.7.16.10.7) carry all three images in each slot, META then SFA then SFB, and each MMA names its
metadata columns and its SFA / SFB group; the sparse MMA has the dense MMA's number of scale factors (Table 54
counts them per MMA, the same for every K the kind takes: 1 for mxf8f6f4, 2 for .block32 fp4, 4 for .block16)
over twice the K, so one factor covers 64 (.block32) or 32 (.block16) elements of K, which the ABI's
`requires` and the images' `vector` state.
The MMA form follows the tile. `.ws` (`engine tcgen05 ws`, tcgen05.mma.ws{.sp}, 9.7.16.10.9.3-4): M = 32 / 64
accumulate in the folded data-path layouts G / E (9.7.16.10.5: the rows repeated in 4 / 2 lane groups, group g
holding D columns [g N / groups, (g + 1) N / groups)), so an accumulator is N / groups columns and epilogue warp w
stores rows 32 (w mod M/32).. of lane group w div (M/32); a sparse tile's metadata image repeats its rows in every
lane group (`tmem_image`); the zero-column mask is every MMA's last operand; no collector usage
(warp_specialization.check_ws_collector says why). A in TMEM (`A: T tmem`, tcgen05.mma [d], [a-tmem], b-desc,
9.7.16.10.9.1): the producer loads the block's A unswizzled into the slot (`_StagedA`: a box per 16-byte K chunk
of the 128 rows, the no-swizzle K-major canonical layout) and the MMA thread copies it into the slot's TMEM
columns, one tcgen05.cp .128x256b per MMA, before the block's MMAs (`copy_a`); `.ws` M = 64 / 32 refuse it
(warp_specialization.check_a_in_tmem: the PTX text places A's rows in no lanes of Layouts E / G).
Every role walks the same static persistent schedule: CTA b takes tiles b, b + nctaid.x, ..., tile t at
(t mod tiles_m, (t div tiles_m) mod tiles_n, t div (tiles_m tiles_n)) (along M first, then N, then the batch);
tiles_m = ceil(M / tile M), tiles_n = ceil(N / tile N), ceil(K / cta K) K blocks: TMA loads fill the parts
of a box outside A and B with zeros and the TMA store clips D at its extents, so dense tiles take any
M, N, K >= 1. Sparse and block-scaled tiles take any M, N and a batch too: their META / SFA / SFB images
(`tmem_image`) cover whole CTA (pair) tiles of rows, those past M / N padded with legal values (metadata
nibbles 0b0100 selecting A's zero fill, scale factors 1.0), one problem's images after another's, and the
producer's image row is (batch index * row tiles + row tile) * K blocks + K block. They take any K >= 1 that
is a multiple of `k_unit` (`requires`: whole metadata chunks, whole scale-factor vectors, whole TMA elements
of packed rows; `k_units` says why, from PTX 9.7.16.10.8 / 9.7.16.10.7): the last K block's images are padded
past K with the same legal values (`tmem_image`), so the padded products are 0 x 0 and D is exact.
With `persistent=clc` (cluster launch control, PTX 9.7.13.17-18) the grid is one CTA (pair)
per tile and a seventh warp schedules: CTA b starts on tile ctaid.x (a pair: ctaid.x / 2) and every role
then takes, in order, the tile of each cluster the scheduler warp canceled (`clusterlaunchcontrol.try_cancel`,
a pair: `.multicast::cluster::all`), reading each 16-byte answer from a 2-slot ring (clc_full / clc_empty
barriers, `scheduler_role`, `clc_tile_loop`) until the first failed answer. Ring slots and accumulators
advance with a phase bit that
flips each time their index wraps (mbarrier phases, 9.7.13.15.16 try_wait.parity); a producer waiting on
a fresh empty barrier waits for parity 1 ("the phase before the first"), which completes at once.

Tensor maps. The kernel takes its CUtensorMaps (A, B, the META / SFA / SFB images, then D; 128 bytes each)
by value, in one parameter `tensor_maps` of 128 bytes per map (`.param .align 64 .b8 NAME_tensor_maps[N]`; the
ABI's param of type "bytes", as the sparse wgmma kernel's). cp.async.bulk.tensor takes the generic address of
a map in .param, .const or .global space (PTX 9.7.9.25.5.1); the producer and the epilogue warps take the
parameter's with `cvta.param`, and the producer prefetches every map. A map in global memory, which the
host writes through the generic proxy (a copy), needs `fence.proxy.tensormap::generic.acquire` in every CTA
before its first use; a parameter needs none. That fence is why: measured on an H200 for the sparse wgmma
kernel (docs/measurements.md "Tensor maps as a parameter"), its three fences cost about 2 us of every launch.
tcgen05 does not run on an H100/H200, so this kernel's saving is not measured.

ABI (`abi()`; `tilec compile --emit json`): params tensor_maps (bytes: the CUtensorMaps by value, above),
[META | SFA, SFB: their TMEM images, `tmem_image`], [C], [bias, alpha, beta], M, N, K,
batch (u32), [batch_stride_c (u64)]; A is [batch][M][K] and B [batch][N][K] row-major (K-major), D [batch][M][N]
row-major in D's type (rows and batches of each any multiple of 16 bytes apart: the maps' strides), C [M][N]
dense in the accumulator type, problem z's at z * batch_stride_c elements (0: one C for the whole batch); grid (min(tiles, SM count), 1, 1) (persistent=clc: (tiles, 1, 1)), block (192, 1, 1) (persistent=clc:
224), dynamic shared memory `dynamic_smem_bytes`,
clusters of (2, 1, 1) for a pair (ABI `cluster`; grid even). `tensor_map_args` gives each map's
cuTensorMapEncodeTiled arguments (rank 3; the runtime's driver encodes them, the CPU emulator reads and
writes through them). `buffers` states every array (element type, shape in M, N, K) as
compiler/runtime/abi.py's buffers family does, so compiler/runtime launches this kernel by the path of the
TMA + wgmma.sp kernels (`tilec run --check` on a B200). Sparse and
block-scaled tiles require K a multiple of `k_unit` (`requires`).
With an `epilogue` statement D's type is the output's and the TMEM accumulator is f32 (s32 for integer A:
epilogue-lowering's accumulator_type), C is read in the epilogue (never preloaded into TMEM).
"""
from __future__ import annotations

from dataclasses import replace
from math import gcd

from ..diagnostics import SpecError
from ..ir import Op
from ..isa import bulk_copy
from ..isa.tcgen05_kinds import mma_k
from ..isa.tmem import LANE_GROUP, data_path
from ..isa.types import TYPES
from ..passes.warp_specialization import WsPlan, ws_plan
from ..passes.epilogue_lowering import SCRATCH
from .builder import PtxBuilder, bytes_param, launch_limits
from .epilogue import element_steps
from .pipeline import RingCode, RingPlan, ring_plan
from .tcgen05_issue import commit, descriptor, descriptor_base, idesc_registers, issue_mmas, trailing_operands

KERNEL_KIND = "tcgen05_ws"
TMA_MAP_BYTES = 128                                   # sizeof(CUtensorMap)
TMA_MAP_ALIGN = 64                                    # a CUtensorMap's alignment (cuTensorMapEncodeTiled)
# cuTensorMapEncodeTiled enums (cuda.h): CUtensorMapDataType UINT8 / UINT16 / UINT32, CUtensorMapSwizzle
TMA_DATA_TYPE = {8: 0, 16: 1, 32: 2}
TMA_SWIZZLE = {"none": 0, "32B": 1, "64B": 2, "128B": 3}
TMA_L2_PROMOTION_256B = 3
D_CHUNK = 8                                           # TMEM columns per tcgen05.ld (.32x32b.x8)
# the META / SFA / SFB images through their tensor maps: 16-byte rows (one tcgen05.cp source row), boxes of at
# most 256 of them (cuTensorMapEncodeTiled: boxDim[i] <= 256)
IMAGE_ROW_BYTES, IMAGE_BOX_ROWS = 16, 256


class _Operand:
    """One smem operand's TMA boxes: a box per swizzle atom along K (inner = atom width in elements,
    rows = the tile's M or N), placed at `offset + j * atom_stride` of the slot."""

    def __init__(self, name: str, lay_op: Op, layout, rows: int):
        self.name, self.rows = name, rows
        self.elem_bits = layout.elem_bits             # bits of one stored element (its container)
        self.offset = lay_op.attrs["offset"]
        self.swizzle = lay_op.attrs["swizzle"]
        # TMA elements: the operand's own, or bytes for packed sub-byte values (fp4 two per byte)
        self.bits = max(layout.elem_bits, 8)
        self.k_block = layout.k * layout.elem_bits // self.bits   # stored K units per block (sparse A: half)
        width = layout.mode.width                     # bytes of one swizzled row of an atom
        self.inner = width * 8 // self.bits
        self.atoms = self.k_block // self.inner
        self.atom_stride = layout.offset(0, width * 8 // layout.elem_bits) if self.atoms > 1 else 0


class _StagedA(_Operand):
    """A in TMEM on its way there: its TMA boxes write the K block unswizzled into the slot at `plan.a_smem`,
    one box per 16-byte K chunk of all the CTA's rows (inner = 16 bytes of elements, rows = 128), so the
    chunks form the no-swizzle K-major canonical layout tcgen05.cp reads (warp_specialization A_CP_SHAPE)."""

    def __init__(self, plan: WsPlan, dtype: str, rows: int):
        from ..passes.warp_specialization import A_CHUNK_BYTES

        self.name, self.rows = "A", rows
        self.elem_bits = self.bits = TYPES[dtype].bits
        self.offset, self.swizzle = plan.a_smem, "none"
        self.k_block = plan.k_block
        self.inner = A_CHUNK_BYTES * 8 // self.bits
        self.atoms = self.k_block // self.inner
        self.atom_stride = rows * A_CHUNK_BYTES


class _RoleRing:
    """One role's walk over a ring of compiler/ptx/pipeline.py (RingCode): its pipeline state and the
    registers its protocol steps write. `slot_addr`, `full_bar` and `empty_bar` are the current slot's,
    located at each wait, so no address is carried around a loop."""

    def __init__(self, kb: PtxBuilder, plan, base: str):
        from .pipeline import PipelineState, RingCode

        self.kb, self.plan = kb, plan
        self.code = RingCode(kb, plan, base)
        self.state = PipelineState(*kb.regs("r", 2))
        self.slot_addr, self.full_bar, self.empty_bar, self.scratch = kb.regs("r", 4)
        self.wrap, self.ready = kb.regs("p", 2)

    @property
    def index(self) -> str:
        return self.state.stage

    def start(self) -> None:
        self.code.start(self.state)

    def wait_full(self) -> None:
        """Consumer: until the current slot is full; `empty_bar` then names its empty barrier (the MMA warp
        commits to it)."""
        self.code.locate(self.state, self.slot_addr, self.full_bar, self.scratch)
        self.code.wait(self.state, self.full_bar, self.ready)
        self.kb.ins(f"add.u32 {self.empty_bar}, {self.full_bar}, {self.plan.empty(0) - self.plan.full(0)};")

    def wait_empty(self, scope: str | None = None) -> None:
        """Producer: until the consumers released the current slot (`scope` "cluster": some of them in the
        other CTA of a pair)."""
        self.code.locate(self.state, self.slot_addr, self.full_bar, self.scratch)
        self.code.acquire(self.state, self.full_bar, self.empty_bar, self.scratch, self.ready, scope)

    def advance(self) -> None:
        self.code.advance(self.state, self.wrap)


class _WsKernel:
    def __init__(self, tile: Op):
        from ..passes.derive import operand_extents, smem_layout

        self.tile, self.spec = tile, tile.payload
        self.plan: WsPlan = ws_plan(tile)
        self.form = tile.facts["form"]
        self.kind = tile.attrs["kind"]
        self.sparse = self.spec.sparsity is not None
        self.scaled = self.form.block_scale is not None
        from ..passes.epilogue_lowering import epilogue_plan

        self.epi = epilogue_plan(tile)               # the fused epilogue (None: D as the MMAs leave it)
        self.steps = self.plan.k_block // mma_k(self.kind, self.sparse, self.form.k96)
        self.d_type = TYPES[self.spec.operands["D"].dtype]
        self.pair = self.plan.cluster == 2
        # where D lives in TMEM (PTX 9.7.16.10.5): `rows` rows per CTA; a folded layout (.ws M = 64 / 32: E, G)
        # repeats them in 128 / rows lane groups, group g holding D columns [g N / folds, (g + 1) N / folds)
        self.dp = data_path(self.spec.m, self.spec.cta_group, self.sparse,
                            self.spec.ws)
        self.a_tmem = self.plan.a_region is not None        # A copied into TMEM per slot (tcgen05.cp)
        self.ops = {n: _StagedA(self.plan, self.spec.operands["A"].dtype, operand_extents(self.spec, n)[0])
                    if n == "A" and self.a_tmem else
                    _Operand(n, op, smem_layout(tile, op, self.spec), operand_extents(self.spec, n)[0])
                    for n in ("A", "B") for op in [tile.op("tilec.smem_layout", n)]}
        self.kb = PtxBuilder(self.spec.name)
        self.e = self.kb.emit
        self.rings = self._rings(tile)

    def _rings(self, tile: Op) -> dict[str, RingPlan]:
        """The kernel's rings: the smem ring of pipeline-planning's tilec.pipeline (checked against the
        ws_plan's slots) and the TMEM accumulators."""
        plan = self.plan
        smem = ring_plan(tile)
        if smem is None or (smem.stages, smem.stage_bytes, smem.barrier_offset) != (plan.stages, plan.stage_bytes,
                                                                                   plan.full):
            raise SpecError("tilec.pipeline does not state the ring of tilec.ws_plan: run pipeline-planning",
                            "schedule")
        smem.check()
        # a CTA pair's copies all complete on the leader's full barrier, whose expect_tx announces both CTAs'
        # bytes (tcgen05.mma cta_group::2 reads both CTAs' slots)
        smem = replace(smem, tx_bytes=smem.tx_bytes * plan.cluster)
        counts = plan.barrier_counts()
        rings = {"smem": smem,
                 "accumulator": RingPlan(plan.accumulators, 0, 0, counts["acc_full"], counts["acc_empty"],
                                         plan.acc_full)}
        rings["accumulator"].check()
        if plan.clc:
            from ..isa.clc import RESPONSE_BYTES

            # persistent=clc: the response ring, relative to its first response (`clc_base`): slot s = response
            # s (16 bytes), full[s] = clc_full[s] (the scheduler's expect_tx and the 16 response bytes), empty[s]
            # = clc_empty[s] (one arrival per reading warp)
            rings["clc"] = RingPlan(plan.clc_stages, RESPONSE_BYTES, RESPONSE_BYTES, counts["clc_full"],
                                    counts["clc_empty"], plan.clc_full - plan.clc_response)
            rings["clc"].check()
        return rings

    def ring_base(self, name: str) -> str:
        return self.clc_base if name == "clc" else self.base

    def ring(self, name: str) -> _RoleRing:
        """A role's walk over ring `name`, started at slot 0, phase 0."""
        r = _RoleRing(self.kb, self.rings[name], self.ring_base(name))
        r.start()
        return r

    # ---- whole kernel ----------------------------------------------------------------------------
    def emit(self) -> tuple[str, dict]:
        kb, e, plan = self.kb, self.e, self.plan
        # D has no pointer parameter: the epilogue stores it through its tensor map (the last); the maps are
        # one parameter, by value (module docstring, "Tensor maps")
        kb.add_params(bytes_param(self.map_count() * TMA_MAP_BYTES, TMA_MAP_ALIGN), "tensor_maps")
        kb.add_params("u64", *(("META",) if self.sparse else ()), *(("SFA", "SFB") if self.scaled else ()))
        if self.epi is not None:
            if self.epi.c == "epilogue":
                kb.add_params("u64", "C")
            for name in self.epi.params:              # the epilogue's parameters: bias (u64) first, then f32 scalars
                kb.add_params("u64" if name == "bias" else "f32", name)
        kb.add_params("u32", "M", "N", "K", "batch")
        if self.epi is not None and self.epi.c == "epilogue":
            # C's batch stride in elements (0: one C for every problem of the batch), as the sparse wgmma kernel's
            kb.add_params("u64", "batch_stride_c")
        kb.directives.append(f".reqntid {plan.threads}, 1, 1")
        if self.pair:
            # a CTA pair is a cluster of two (9.7.16.10.9.1 cta_group::2; 11.7.1 .reqnctapercluster)
            kb.directives.append(".reqnctapercluster 2, 1, 1")
        self.smem = f"{self.spec.name}_smem"
        kb.module += [f".extern .shared .align 1024 .b8 {self.smem}[];", ""]
        self.setup()
        end = kb.label("roles_done")
        to_mma, to_tma = kb.label("mma_role"), kb.label("tma_role")
        p = kb.reg("p")
        e(f"setp.eq.u32 {p}, {self.warp}, {plan.tma_warp};")
        e(f"@{p} bra.uni {to_tma};")
        e(f"setp.eq.u32 {p}, {self.warp}, {plan.mma_warp};")
        e(f"@{p} bra.uni {to_mma};")
        if plan.clc:
            to_sched = kb.label("sched_role")
            e(f"setp.eq.u32 {p}, {self.warp}, {plan.sched_warp};")
            e(f"@{p} bra.uni {to_sched};")
        self.epilogue_role()
        e(f"bra.uni {end};")
        if plan.clc:
            kb.put(to_sched)
            self.scheduler_role()
            e(f"bra.uni {end};")
        kb.put(to_mma)
        self.mma_role()
        e(f"bra.uni {end};")
        kb.put(to_tma)
        self.producer_role()
        kb.put(end)
        self.teardown()
        e("ret;")
        return kb.render(), self.abi()

    # ---- setup -----------------------------------------------------------------------------------
    def setup(self) -> None:
        from ..isa.tcgen05_forms import tcgen05_alloc, tcgen05_relinquish_alloc_permit

        kb, e, plan = self.kb, self.e, self.plan
        self.tid, self.warp, self.lane = kb.regs("r", 3)
        e(f"mov.u32 {self.tid}, %tid.x;")
        e(f"shr.u32 {self.warp}, {self.tid}, 5;")
        e(f"and.b32 {self.lane}, {self.tid}, 31;")
        self.p_lane0 = kb.reg("p")
        e(f"setp.eq.u32 {self.p_lane0}, {self.lane}, 0;")
        if self.pair:
            self.rank, self.p_leader = kb.reg("r"), kb.reg("p")
            e(f"mov.u32 {self.rank}, %cluster_ctarank;")
            e(f"setp.eq.u32 {self.p_leader}, {self.rank}, 0;")
            self.p_lead0 = kb.reg("p")
            e(f"and.pred {self.p_lead0}, {self.p_leader}, {self.p_lane0};")
            self.cta_mask = kb.reg("h")
            e(f"mov.b16 {self.cta_mask}, 3;")      # both CTAs of the pair (%cluster_ctarank 0 and 1)
        self.base = kb.reg("r")
        kb.comment("the ring on the 1024-byte swizzle repeat (descriptors and TMA swizzle assume base offset 0)")
        e(f"mov.u32 {self.base}, {self.smem};")
        e(f"add.u32 {self.base}, {self.base}, 1023;")
        e(f"and.b32 {self.base}, {self.base}, -1024;")
        self.m, self.n, self.k = kb.regs("r", 3)
        for reg, name in ((self.m, "M"), (self.n, "N"), (self.k, "K")):
            kb.ld_param("u32", reg, name)
        self.batch = kb.reg("r")
        kb.ld_param("u32", self.batch, "batch")
        self.tiles_m, self.tiles_n, self.tiles, self.kblocks = kb.regs("r", 4)
        # whole and partial tiles (TMA loads fill the parts outside A and B with zeros, the TMA store of D clips
        # at its extents, 9.7.9.25.5.1) and K blocks (a K tail reads zeros)
        for dst, size, unit in ((self.tiles_m, self.m, self.spec.m), (self.tiles_n, self.n, self.spec.n),
                                (self.kblocks, self.k, plan.k_block)):
            e(f"add.u32 {dst}, {size}, {unit - 1};")
            kb.div_imm(dst, dst, unit)                     # M: tiles of the pair (M = 256) with cta_group::2
        e(f"mul.lo.u32 {self.tiles}, {self.tiles_n}, {self.tiles_m};")
        e(f"mul.lo.u32 {self.tiles}, {self.tiles}, {self.batch};")
        p0, x = kb.reg("p"), kb.reg("r")
        e(f"setp.eq.u32 {p0}, {self.tid}, 0;")
        if plan.clc:
            self.clc_base = kb.reg("r")
            e(f"add.u32 {self.clc_base}, {self.base}, {plan.clc_response};")
        for name, ring in self.rings.items():
            RingCode(kb, ring, self.ring_base(name)).init(p0, x, f"thread 0 initialises the {name} ring's barriers: full x"
                                                      f"{ring.stages} (count {ring.full_arrivals}), empty x"
                                                      f"{ring.stages} (count {ring.empty_arrivals})")
        self.slot = kb.reg("r")
        e(f"add.u32 {self.slot}, {self.base}, {plan.tmem_slot};")
        p_w0, alloc = kb.reg("p"), kb.label("alloc_done")
        e(f"setp.ne.u32 {p_w0}, {self.warp}, 0;")
        e(f"@{p_w0} bra.uni {alloc};")
        kb.comment(f"warp 0 allocates {plan.tmem_columns} TMEM columns: {plan.accumulators} accumulator(s) of "
                   f"{plan.acc_columns}")
        e(tcgen05_alloc(self.slot, plan.tmem_columns, plan.cluster))
        e(tcgen05_relinquish_alloc_permit(plan.cluster))
        kb.put(alloc)
        self.thread_sync()
        self.taddr = kb.reg("r")
        e(f"ld.shared.b32 {self.taddr}, [{self.slot}];")

    def thread_sync(self) -> None:
        """The CTA (a pair: the cluster) meets; tcgen05 operations before and after are ordered across it
        (9.7.16.6.4)."""
        self.e("tcgen05.fence::before_thread_sync;")
        self.kb.cta_sync(cluster=self.pair)
        self.e("tcgen05.fence::after_thread_sync;")

    def teardown(self) -> None:
        from ..isa.tcgen05_forms import tcgen05_dealloc

        kb, e = self.kb, self.e
        self.thread_sync()                       # every role is done with TMEM
        p, skip = kb.reg("p"), kb.label("dealloc_done")
        e(f"setp.ne.u32 {p}, {self.warp}, 0;")
        e(f"@{p} bra.uni {skip};")
        e(tcgen05_dealloc(self.taddr, self.plan.tmem_columns, self.plan.cluster))
        kb.put(skip)
        if self.pair:
            kb.cta_sync(cluster=True)            # neither CTA exits while its peer may still reach its memory

    # ---- shared pieces of the roles -------------------------------------------------------------
    def tile_loop(self, stem: str, body) -> None:
        """for (t = ctaid.x; t < tiles; t += nctaid.x) body(m0, n0): the static persistent schedule, tiles
        along M first, then N, then the batch (`self.z` = the tile's batch index while the body is emitted).
        A pair walks pair tiles (cluster index = ctaid.x / 2); m0 is this CTA's first row. persistent=clc:
        `clc_tile_loop`."""
        if self.plan.clc:
            self.clc_tile_loop(stem, body)
            return
        kb, e = self.kb, self.e
        t, stride = kb.regs("r", 2)
        p = kb.reg("p")
        e(f"mov.u32 {t}, %ctaid.x;")
        e(f"mov.u32 {stride}, %nctaid.x;")
        if self.pair:
            e(f"shr.u32 {t}, {t}, 1;")
            e(f"shr.u32 {stride}, {stride}, 1;")
        top, done = kb.label(f"{stem}_tile"), kb.label(f"{stem}_tiles_done")
        kb.put(top)
        e(f"setp.ge.u32 {p}, {t}, {self.tiles};")
        e(f"@{p} bra.uni {done};")
        self.tile_body(t, body)
        e(f"add.u32 {t}, {t}, {stride};")
        e(f"bra.uni {top};")
        kb.put(done)

    def clc_tile_loop(self, stem: str, body) -> None:
        """persistent=clc: body(m0, n0) for this CTA's own tile (ctaid.x; a pair: ctaid.x / 2), then for the
        tile of each cluster the scheduler warp canceled, in the order of its answers, until the first
        failed answer (no cluster is left to cancel). Per answer the warp waits for clc_full[s] (acquire at
        cluster scope: the try_cancel completion is tracked there, PTX 9.7.13.17), loads the 16 bytes into a
        .b128 register, decodes them (clusterlaunchcontrol.query_cancel, 9.7.13.18: the ctaid only when
        canceled), fences the generic-proxy read against the next async-proxy write of the slot
        (fence.proxy.async.shared::cta) and lane 0 releases the slot on the (leader's) clc_empty[s]."""
        from ..isa.clc import first_ctaid_x, is_canceled, load_response

        kb, e = self.kb, self.e
        t, x = kb.regs("r", 2)
        p_more = kb.reg("p")
        answer = kb.reg("q")
        e(f"mov.u32 {t}, %ctaid.x;")
        if self.pair:
            e(f"shr.u32 {t}, {t}, 1;")
        clc = self.ring("clc")
        top, done = kb.label(f"{stem}_tile"), kb.label(f"{stem}_tiles_done")
        kb.put(top)
        self.tile_body(t, body)
        kb.comment("the next tile: the scheduler warp's next answer")
        clc.code.locate(clc.state, clc.slot_addr, clc.full_bar, clc.scratch)
        kb.wait_parity(clc.ready, clc.full_bar, clc.state.phase, kb.label("WAIT"), uni=True, scope="cluster")
        e(load_response(answer, clc.slot_addr))
        e(is_canceled(p_more, answer))
        e(f"@{p_more} {first_ctaid_x(x, answer)}")
        e("fence.proxy.async.shared::cta;")
        self.release_answer(clc)
        clc.advance()
        e(f"@!{p_more} bra.uni {done};")
        e(f"shr.u32 {t}, {x}, 1;" if self.pair else f"mov.u32 {t}, {x};")
        e(f"bra.uni {top};")
        kb.put(done)

    def release_answer(self, clc: _RoleRing) -> None:
        """Lane 0 of the warp arrives on clc_empty[s] (a pair: the leader's, through mapa)."""
        kb, e = self.kb, self.e
        e(f"add.u32 {clc.empty_bar}, {clc.full_bar}, {clc.plan.empty(0) - clc.plan.full(0)};")
        if not self.pair:
            e(f"@{self.p_lane0} mbarrier.arrive.shared::cta.b64 _, [{clc.empty_bar}];")
            return
        # release at cluster scope: the reads (and the proxy fence) happen before the leader's next
        # multicast answer rewrites this CTA's slot
        e(f"mapa.shared::cluster.u32 {clc.empty_bar}, {clc.empty_bar}, 0;")
        e(f"@{self.p_lane0} mbarrier.arrive.release.cluster.shared::cluster.b64 _, [{clc.empty_bar}];")

    def scheduler_role(self) -> None:
        """persistent=clc: the scheduler warp (lane 0 issues; a pair: the leader's only). Per request: wait
        until slot s of the response ring is free (clc_empty[s]: every reading warp released its previous
        answer), arm clc_full[s] with expect_tx of the 16 response bytes (a pair: both CTAs' barriers, the
        peer's through mapa), issue clusterlaunchcontrol.try_cancel (PTX 9.7.13.17; a pair
        .multicast::cluster::all: the answer and its complete-tx reach both CTAs), then read the answer
        itself: after the first failure no further request is issued (undefined once a failure was
        observed), and every request issued has completed before the warp leaves."""
        from ..isa.clc import RESPONSE_BYTES, is_canceled, load_response, try_cancel

        kb, e, plan = self.kb, self.e, self.plan
        kb.comment(f"---- tile scheduler (warp {plan.sched_warp}, lane 0 issues clusterlaunchcontrol.try_cancel"
                   f"{'; the leader CTA of the pair' if self.pair else ''})")
        idle = kb.label("sched_idle")
        if self.pair:
            e(f"@!{self.p_leader} bra.uni {idle};")
        p_more = kb.reg("p")
        answer = kb.reg("q")
        clc = self.ring("clc")
        top = kb.label("sched_request")
        kb.put(top)
        clc.wait_empty("cluster" if self.pair else None)
        e(f"@{self.p_lane0} mbarrier.arrive.expect_tx.shared::cta.b64 _, [{clc.full_bar}], {RESPONSE_BYTES};")
        if self.pair:
            e(f"mapa.shared::cluster.u32 {clc.scratch}, {clc.full_bar}, 1;")
            e(f"@{self.p_lane0} mbarrier.arrive.expect_tx.shared::cluster.b64 _, [{clc.scratch}], {RESPONSE_BYTES};")
        e(f"@{self.p_lane0} {try_cancel(clc.slot_addr, clc.full_bar, multicast=self.pair)}")
        kb.wait_parity(clc.ready, clc.full_bar, clc.state.phase, kb.label("WAIT"), uni=True, scope="cluster")
        e(load_response(answer, clc.slot_addr))
        e(is_canceled(p_more, answer))
        e("fence.proxy.async.shared::cta;")
        clc.advance()
        e(f"@{p_more} bra.uni {top};")
        kb.put(idle)

    def tile_body(self, t: str, body) -> None:
        """Tile t's coordinates (along M first, then N, then the batch), then body(m0, n0)."""
        kb, e = self.kb, self.e
        mi, ni, m0, n0, z = kb.regs("r", 5)
        e(f"rem.u32 {mi}, {t}, {self.tiles_m};")
        e(f"div.u32 {ni}, {t}, {self.tiles_m};")
        e(f"div.u32 {z}, {ni}, {self.tiles_n};")
        e(f"rem.u32 {ni}, {ni}, {self.tiles_n};")
        e(f"mul.lo.u32 {m0}, {mi}, {self.spec.m};")
        if self.pair:
            e(f"mad.lo.u32 {m0}, {self.rank}, {self.spec.m // 2}, {m0};")
        e(f"mul.lo.u32 {n0}, {ni}, {self.spec.n};")
        self.z = z
        body(m0, n0)

    def k_loop(self, stem: str, body) -> None:
        """for (kb = 0; kb < K / k_block; kb++) body(kb)."""
        kb, e = self.kb, self.e
        i, p = kb.reg("r"), kb.reg("p")
        e(f"mov.u32 {i}, 0;")
        top, done = kb.label(f"{stem}_k"), kb.label(f"{stem}_k_done")
        kb.put(top)
        e(f"setp.ge.u32 {p}, {i}, {self.kblocks};")
        e(f"@{p} bra.uni {done};")
        body(i)
        e(f"add.u32 {i}, {i}, 1;")
        e(f"bra.uni {top};")
        kb.put(done)

    # ---- producer --------------------------------------------------------------------------------
    def producer_role(self) -> None:

        kb, e, plan = self.kb, self.e, self.plan
        kb.comment(f"---- TMA producer (warp {plan.tma_warp}, lane 0 issues)")
        names = ("A", "B") + plan.cp_operands          # the tensor maps, in the ABI's order
        maps = {name: kb.reg("rd") for name in names}
        self.maps_address(maps["A"])
        for i, name in enumerate(names[1:], 1):
            e(f"add.u64 {maps[name]}, {maps['A']}, {i * TMA_MAP_BYTES};")
        # every map into the cache of tensor maps before its first use, D's (the epilogue warps') too
        # (PTX 9.7.9 prefetch{.tensormap_space}.tensormap: a map in .param or .const space, generic address)
        dmap = kb.reg("rd")
        e(f"add.u64 {dmap}, {maps['A']}, {(self.map_count() - 1) * TMA_MAP_BYTES};")
        for reg in (*maps.values(), dmap):
            e(f"@{self.p_lane0} prefetch.tensormap [{reg}];")
        ring = self.ring("smem")
        issuer = self.p_lead0 if self.pair else self.p_lane0
        # a pair's copies complete on the leader's full barrier (.cta_group::2 lets the mbarrier be the peer's,
        # 9.7.9.25.5.1), which alone expects the bytes of both CTAs
        suffix = ".cta_group::2" if self.pair else ""
        full, zero, nb0 = kb.reg("r"), kb.reg("r"), kb.reg("r")
        if self.pair:
            e(f"mov.u32 {zero}, 0;")
        if plan.cp_operands:            # the per-K-block TMEM operands' images (META, SFA, SFB)
            tile_index, image_row, batch_tiles = kb.regs("r", 3)

        def block(kreg: str, m0: str, n0: str) -> None:
            ring.wait_empty()
            ring.code.arm(ring.full_bar, issuer)
            bar = ring.full_bar
            if self.pair:
                e(f"mapa.shared::cluster.u32 {full}, {ring.full_bar}, {zero};")
                bar = full
            x, dst = kb.regs("r", 2)
            b_row = n0
            if self.pair:                                       # this CTA's half of B's rows
                e(f"mad.lo.u32 {nb0}, {self.rank}, {self.ops['B'].rows}, {n0};")
                b_row = nb0
            for name, row0 in (("A", m0), ("B", b_row)):
                op = self.ops[name]
                for j in range(op.atoms):
                    e(f"mul.lo.u32 {x}, {kreg}, {op.k_block};")
                    if j:
                        e(f"add.u32 {x}, {x}, {j * op.inner};")
                    e(f"add.u32 {dst}, {ring.slot_addr}, {op.offset + j * op.atom_stride};")
                    e(f"@{self.p_lane0} cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes"
                      f"{suffix} [{dst}], [{maps[name]}, {{{x}, {row0}, {self.z}}}], [{bar}];")
            for name, at, nbytes in zip(plan.cp_operands, plan.cp_smem, plan.cp_bytes):
                # image (row tile, K block) of `name`: `nbytes` contiguous bytes = nbytes / 16 rows of its
                # tensor map's 16-byte rows, loaded like A and B (a pair: each CTA its own rows' SFA / META
                # and the pair's SFB, completing on the leader's barrier)
                row0, extent = (n0, self.spec.n) if name == "SFB" else (m0, self.spec.m // plan.cluster)
                # the image's row tiles of one problem: ceil(rows / tile) CTA (pair) tiles of tile / extent
                # row tiles each (tmem_image pads the last); problem z's come after z such sets
                row_tiles, per_tile = ((self.tiles_n, 1) if name == "SFB" else (self.tiles_m, plan.cluster))
                e(f"mul.lo.u32 {batch_tiles}, {self.z}, {row_tiles};")
                if per_tile > 1:
                    e(f"mul.lo.u32 {batch_tiles}, {batch_tiles}, {per_tile};")
                e(f"div.u32 {tile_index}, {row0}, {extent};")
                e(f"add.u32 {tile_index}, {tile_index}, {batch_tiles};")
                e(f"mad.lo.u32 {tile_index}, {tile_index}, {self.kblocks}, {kreg};")
                rows = nbytes // IMAGE_ROW_BYTES
                for j in range(0, rows, IMAGE_BOX_ROWS):
                    e(f"mad.lo.u32 {image_row}, {tile_index}, {rows}, {j};")
                    e(f"add.u32 {dst}, {ring.slot_addr}, {at + j * IMAGE_ROW_BYTES};")
                    e(f"mov.u32 {x}, 0;")
                    e(f"@{self.p_lane0} cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
                      f"{suffix} [{dst}], [{maps[name]}, {{{x}, {image_row}}}], [{bar}];")
            ring.advance()

        self.tile_loop("tma", lambda m0, n0: self.k_loop("tma", lambda i: block(i, m0, n0)))

    # ---- MMA issuer -----------------------------------------------------------------------------
    def mma_role(self) -> None:

        kb, e, plan, spec = self.kb, self.e, self.plan, self.spec
        kb.comment(f"---- MMA issuer (warp {plan.mma_warp}, lane 0 issues{'; the leader CTA of the pair' if self.pair else ''})")
        idle = None
        if self.pair:
            idle = kb.label("mma_idle")
            e(f"@!{self.p_leader} bra.uni {idle};")
        idesc_op = self.tile.op("tilec.instr_desc")
        step_values = [int(v) for v in idesc_op.attrs.get("step_values", (idesc_op.attrs["value"],) * self.steps)]
        idesc_regs = idesc_registers(kb, step_values)
        # .ws: the zero-column mask descriptor (9.7.16.4.3), the last operand of every MMA (no collector:
        # warp_specialization.check_ws_collector says why)
        zcm_op = self.tile.op("tilec.zero_column_mask")
        extra = trailing_operands(kb, spec, None if zcm_op is None else int(zcm_op.attrs["value"]))
        da, db = (None if n == "A" and self.a_tmem else self.tile.op("tilec.smem_desc", n).attrs["values"]
                  for n in ("A", "B"))
        p_true, p_acc = kb.constant_pred(True), kb.reg("p")
        ring = self.ring("smem")
        accs = self.ring("accumulator")
        d, cols = kb.reg("r"), kb.reg("r")
        cp_at = kb.reg("r") if plan.tmem_stage is not None else None
        a_cols = kb.regs("r", self.steps) if self.a_tmem else None
        fmt = None
        if self.sparse:
            from ..isa.tmem import metadata_format

            fmt = metadata_format(self.kind)

        scales = self.tile.facts.get("scale_layouts") if self.scaled else None

        def step_operands(s: int) -> dict[str, str]:
            operands = {}
            if fmt is not None:
                _, col = fmt.selector_and_column(s)
                meta = kb.reg("r")
                e(f"add.u32 {meta}, {cols}, {plan.stage_regions[0] + col};")
                operands["meta"] = meta
            if scales is not None:
                # each 4-byte group of the factor stream in its own sf_group_columns (the tcgen05.cp layout)
                sfa, sfb = (replace(lay, slices=g) for lay, g in zip(scales, plan.sf_group_columns))
                acol, _ = sfa.step_position(s)
                bcol, _ = sfb.step_position(s)
                ra, rb = kb.regs("r", 2)
                e(f"add.u32 {ra}, {cols}, {plan.stage_regions[-2] + acol};")
                e(f"add.u32 {rb}, {cols}, {plan.stage_regions[-1] + bcol};")
                operands["scale_a"], operands["scale_b"] = ra, rb
            return operands

        def tile(m0: str, n0: str) -> None:
            # a pair: the epilogues of both CTAs release the accumulator at cluster scope (`epilogue_role`)
            accs.wait_empty("cluster" if self.pair else None)
            e("tcgen05.fence::after_thread_sync;")
            e(f"mad.lo.u32 {d}, {accs.index}, {plan.acc_columns}, {self.taddr};")

            def block(i: str) -> None:
                ring.wait_full()
                e("tcgen05.fence::after_thread_sync;")
                skip = kb.label("issued")
                e(f"@!{self.p_lane0} bra {skip};")
                e(f"setp.ne.u32 {p_acc}, {i}, 0;")
                sdesc = descriptor_base(kb, ring.slot_addr)
                if plan.tmem_stage is not None:             # slot s's TMEM operands, copied from its images
                    e(f"mad.lo.u32 {cols}, {ring.index}, {plan.tmem_stage_columns}, {self.taddr};")
                    e(f"add.u32 {cols}, {cols}, {plan.tmem_stage};")
                    self.copy_tmem_operands(sdesc, cols, cp_at)
                if self.a_tmem:
                    self.copy_a(sdesc, cols, a_cols)
                issue_mmas(kb, self.form, f"[{d}]", self.steps,
                           a_operand=(lambda s: f"[{a_cols[s]}]") if self.a_tmem else
                           (lambda s: descriptor(kb, sdesc, da[s])),
                           b_operand=lambda s: descriptor(kb, sdesc, db[s]),
                           step_operands=step_operands, idesc=lambda s: idesc_regs[step_values[s]],
                           first_enable=p_acc, enable=p_true,
                           extra=extra, mbar=ring.empty_bar, cta_mask=self.cta_mask if self.pair else None)
                kb.put(skip)
                ring.advance()

            self.k_loop("mma", block)

            kb.comment("the tile's MMAs complete -> the accumulator is full")
            commit(kb, accs.full_bar, plan.cluster, self.cta_mask if self.pair else None, pred=self.p_lane0)
            accs.advance()

        self.tile_loop("mma", tile)
        if idle is not None:
            kb.put(idle)

    # ---- epilogue -------------------------------------------------------------------------------
    def epilogue_role(self) -> None:
        """Warps 0-3, warp w on rows 32w.. of the tile (its TMEM lane quarter, 9.7.16.8.3), `d_chunk` columns
        at a time: tcgen05.ld .32x32b (lane = row), the fused epilogue on the f32 values (tilec.epilogue_plan:
        beta*C and bias read from global memory, guarded by the problem's extents), D's type (cvt.rn.{f16x2,
        bf16x2}.f32 pairs, PTX 9.7.9.21; a 16-bit accumulator's low halves packed with bfi), then the chunk
        into one of the warp's staging buffers (row per lane, 16-byte pieces swizzled like the D tensor
        map), `fence.proxy.async.shared::cta` (the generic-proxy writes become visible to the TMA engine), and
        lane 0 stores the 32-row box with cp.async.bulk.tensor .global.shared::cta.bulk_group (9.7.9.25.5.1),
        one bulk group per chunk. Before a buffer is written again lane 0 waits until the store that read it
        has (cp.async.bulk.wait_group.read: `d_buffers` - 1 groups may still be reading the other buffer).
        The TMA store clips the box at the tensor's extents (rows >= M, columns >= N are not written). The
        accumulator is released right after the tile's last tcgen05.ld, before that chunk's stores, so the
        MMA warp starts on it while the epilogue finishes."""
        kb, e, plan = self.kb, self.e, self.plan
        kb.comment(f"---- epilogue (warps {plan.epilogue_warps[0]}-{plan.epilogue_warps[-1]}: warp w reads TMEM "
                   "lanes 32w..32w+31 = rows 32w.. of the tile, stages D in shared memory, stores it by TMA)")
        accs = self.ring("accumulator")
        chunk, out = plan.d_chunk, self.d_type
        row_bytes = chunk * out.bits // 8
        chunks = plan.acc_columns // chunk
        lane_field, tw, ta, row0, row, col, gcol, bi, bufs, buf, xr, lrow, t = kb.regs("r", 13)
        tcol, el = kb.regs("r", 2)        # the chunk's TMEM address; a column index (apart from smem addresses)
        p, p_row, p_store, p_el = kb.regs("p", 4)
        remote = kb.reg("r")
        e(f"shl.b32 {lane_field}, {self.warp}, 21;")     # (32 * warp) << 16: the lane field (9.7.16.1)
        # warp w reads lanes 32w..32w+31: rows 32 (w mod g).. of lane group w div g, g = rows / 32 warps per group
        # (one group, g = 4, unless the layout is folded)
        warp_row, fold_col = self.warp, None
        if self.dp.folds > 1:
            per_group = self.dp.rows // LANE_GROUP
            warp_row, fold_col = kb.regs("r", 2)
            e(f"and.b32 {warp_row}, {self.warp}, {per_group - 1};")
            e(f"shr.u32 {fold_col}, {self.warp}, {per_group.bit_length() - 1};")
            e(f"mul.lo.u32 {fold_col}, {fold_col}, {plan.acc_columns};")
        e(f"add.u32 {tw}, {self.taddr}, {lane_field};")
        dmap = kb.reg("rd")
        self.maps_address(dmap)
        e(f"add.u64 {dmap}, {dmap}, {(self.map_count() - 1) * TMA_MAP_BYTES};")    # D's map: the last
        kb.comment(f"this warp's {plan.d_buffers} staging buffer(s) of 32 x {chunk} {out.name} ({plan.d_swizzle} "
                   "swizzle: 16-byte piece j of row r at j ^ ((r * row bytes / 128) mod atom rows))")
        e(f"mad.lo.u32 {bufs}, {self.warp}, {plan.d_buffers * plan.d_stage_bytes}, {self.base};")
        e(f"add.u32 {bufs}, {bufs}, {plan.d_stage};")
        e(f"mul.lo.u32 {lrow}, {self.lane}, {row_bytes};")
        mask = {"128B": 7, "64B": 3, "32B": 1}.get(plan.d_swizzle, 0)
        e(f"shr.u32 {xr}, {lrow}, 7;")
        e(f"and.b32 {xr}, {xr}, {mask};")
        e(f"shl.b32 {xr}, {xr}, 4;")
        e(f"mov.u32 {bi}, 0;")
        epi = self.epi
        scalars, scratch = {}, []
        bias_ptr = c_ptr = c_row = None
        if epi is not None:
            kb.comment("fused epilogue (tilec.epilogue_plan): " + ", ".join(name for name, _ in epi.steps))
            scratch = kb.regs("f", SCRATCH)
            for name in epi.params:
                if name != "bias":
                    scalars[name] = kb.reg("f")
                    kb.ld_param("f32", scalars[name], name)
            if epi.bias != "none":
                bias_ptr = kb.reg("rd")
                kb.global_pointer(bias_ptr, "bias")
            if epi.c == "epilogue":
                c_ptr, c_row, n64, c_batch, z64 = kb.regs("rd", 5)
                kb.global_pointer(c_ptr, "C")
                e(f"cvt.u64.u32 {n64}, {self.n};")
                kb.ld_param("u64", c_batch, "batch_stride_c")
        creg, breg = kb.reg("f"), kb.reg("f")
        at, col4 = kb.regs("rd", 2)
        v = kb.regs("r", chunk)
        words = v if out.bits == 32 else kb.regs("r", chunk // 2)

        def load_guarded(dst: str, ptr: str, pred: str) -> None:
            e(f"mov.f32 {dst}, 0f00000000;")              # outside the problem: a defined value, never stored
            e(f"@{pred} ld.global.f32 {dst}, [{ptr}];")

        def chunk_body(last: bool) -> None:
            e(f"add.u32 {tcol}, {ta}, {col};")
            e(f"tcgen05.ld.sync.aligned.32x32b.x{chunk}.b32 {{{', '.join(v)}}}, [{tcol}];")
            e("tcgen05.wait::ld.sync.aligned;")
            if last:
                kb.comment("the tile's last columns are read: release the accumulator" +
                           (" (the leader's barrier)" if self.pair else ""))
                e("tcgen05.fence::before_thread_sync;")
                # a pair: each CTA's epilogue arrives on the accumulator's empty barrier of both CTAs, whose
                # leader's MMA then overwrites those TMEM columns. The remote arrive must order this CTA's
                # tcgen05.ld reads (fenced by before_thread_sync, 9.7.16.6.4) before that MMA across CTAs:
                # .release.cluster here and .acquire.cluster in the MMA warp's wait, as a default .cta scope
                # excludes the peer's threads (PTX ISA 8.5, 8.7: not morally strong, no synchronization)
                accs.code.release(accs.index, self.p_lane0, accs.scratch, remote, ctas=plan.cluster,
                                  scope="cluster" if self.pair else None)
            e(f"add.u32 {gcol}, {self.n0}, {col};")
            if epi is not None:
                if c_ptr is not None:
                    e(f"mul.wide.u32 {col4}, {gcol}, 4;")
                    e(f"add.u64 {col4}, {c_row}, {col4};")
                for i, x in enumerate(v):
                    if c_ptr is not None or epi.bias == "col":
                        e(f"add.u32 {el}, {gcol}, {i};")
                        e(f"setp.lt.u32 {p_el}, {el}, {self.n};")
                    if epi.bias == "col":
                        e(f"mul.wide.u32 {at}, {el}, 4;")
                        e(f"add.u64 {at}, {bias_ptr}, {at};")
                        load_guarded(breg, at, p_el)
                    if c_ptr is not None:
                        e(f"and.pred {p_el}, {p_el}, {p_row};")
                        e(f"add.u64 {at}, {col4}, {4 * i};")
                        load_guarded(creg, at, p_el)
                    element_steps(kb, epi, x, creg, breg, scratch=scratch, scalars=scalars)
            if out.bits == 16:
                for i, w in enumerate(words):
                    if epi is not None:
                        e(f"{epi.convert} {w}, {v[2 * i + 1]}, {v[2 * i]};")   # the first source is the upper half
                    else:
                        # a 16-bit accumulator occupies the low half of its 32-bit TMEM column (9.7.16.10.4.1)
                        e(f"bfi.b32 {w}, {v[2 * i + 1]}, {v[2 * i]}, 16, 16;")
            e(f"mad.lo.u32 {buf}, {bi}, {plan.d_stage_bytes}, {bufs};")
            kb.comment(f"the store that last read this buffer is done reading it (at most {plan.d_buffers - 1} "
                       "bulk group(s) still reading the other)")
            e(f"@{self.p_lane0} {bulk_copy.wait_group(plan.d_buffers - 1, read=True)}")
            e("bar.warp.sync -1;")
            e(f"add.u32 {t}, {buf}, {lrow};")
            for j in range(row_bytes // 16):
                piece = kb.reg("r")
                e(f"xor.b32 {piece}, {xr}, {16 * j};")
                e(f"add.u32 {piece}, {piece}, {t};")
                e(f"st.shared.v4.b32 [{piece}], {{{', '.join(words[4 * j:4 * j + 4])}}};")
            e("fence.proxy.async.shared::cta;")
            e("bar.warp.sync -1;")
            e(f"setp.lt.u32 {p_store}, {gcol}, {self.n};")
            e(f"and.pred {p_store}, {p_store}, {self.p_lane0};")
            e(f"setp.lt.and.u32 {p_store}, {row0}, {self.m}, {p_store};")
            e(f"@{p_store} cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [{dmap}, {{{gcol}, {row0}, "
              f"{self.z}}}], [{buf}];")
            e(f"@{self.p_lane0} {bulk_copy.COMMIT_GROUP}")
            if plan.d_buffers == 2:
                e(f"xor.b32 {bi}, {bi}, 1;")

        n0w = kb.reg("r") if fold_col else None

        def tile(m0: str, n0: str) -> None:
            self.n0 = n0
            if fold_col:
                e(f"add.u32 {n0w}, {n0}, {fold_col};")     # the first D column of this warp's lane group
                self.n0 = n0w
            accs.wait_full()
            e("tcgen05.fence::after_thread_sync;")
            e(f"mad.lo.u32 {row0}, {warp_row}, 32, {m0};")
            e(f"add.u32 {row}, {row0}, {self.lane};")
            e(f"setp.lt.u32 {p_row}, {row}, {self.m};")
            e(f"mad.lo.u32 {ta}, {accs.index}, {plan.acc_columns}, {tw};")
            if epi is not None and epi.bias == "row":             # one bias value per row of D
                e(f"mul.wide.u32 {at}, {row}, 4;")
                e(f"add.u64 {at}, {bias_ptr}, {at};")
                load_guarded(breg, at, p_row)
            if c_ptr is not None:                     # C row: (z * batch_stride_c + row * N) * 4 bytes
                e(f"cvt.u64.u32 {c_row}, {row};")
                e(f"mul.lo.u64 {c_row}, {c_row}, {n64};")
                e(f"cvt.u64.u32 {z64}, {self.z};")
                e(f"mad.lo.u64 {c_row}, {z64}, {c_batch}, {c_row};")
                e(f"shl.b64 {c_row}, {c_row}, 2;")
                e(f"add.u64 {c_row}, {c_ptr}, {c_row};")
            e(f"mov.u32 {col}, 0;")
            if chunks > 1:
                top = kb.label("store_d")
                kb.put(top)
                chunk_body(last=False)
                kb.count_up(col, chunk, p, plan.acc_columns - chunk, top)
            chunk_body(last=True)
            accs.advance()

        self.tile_loop("epi", tile)
        kb.comment("every store of D has completed before the CTA's shared memory goes away")
        e(f"@{self.p_lane0} {bulk_copy.wait_group(0)}")

    # ---- the per-K-block TMEM operands (sparse metadata, scale factors) ------------------------------
    def copy_tmem_operands(self, sdesc: str, cols: str, at: str) -> None:
        """The MMA thread copies the slot's metadata / scale-factor images into the slot's TMEM columns
        (`cols`) with tcgen05.cp (9.7.16.8.2), one 4-column copy per 16-byte-wide source: metadata
        .128x128b (row i -> lane i), scale factors .32x128b.warpx4 (row i -> lane i of every lane quarter).
        Each source is a no-swizzle K-major matrix of 16-byte rows, 8-row core matrices 128 bytes apart
        (SBO; 9.7.16.4.1). The MMAs issued next by this thread read them: tcgen05.cp -> tcgen05.mma is a
        pipelined pair, executed in issue order (9.7.16.6.2), so no wait comes between; the slot's
        tcgen05.commit to its empty barrier tracks the copies too, so the producer reloads the images only
        after they were read. The columns are written again only when this slot comes round, after the
        wait on its full barrier, which follows that commit's arrival: the MMAs that read them are done."""
        from ..descriptors.smem import SmemDesc
        from ..isa.tcgen05_forms import CP_GEOMETRY, tcgen05_cp
        from ..passes.warp_specialization import CP_COLUMNS, CP_FORMS

        kb, e, plan = self.kb, self.e, self.plan
        for name, offset, nbytes, region in zip(plan.cp_operands, plan.cp_smem, plan.cp_bytes, plan.stage_regions):
            shape, multicast = CP_FORMS[name]
            chunk = CP_GEOMETRY[shape][0] * 16
            kb.comment(f"{name}: {nbytes // chunk} tcgen05.cp .{shape}{'.' + multicast if multicast else ''} -> "
                       f"TMEM columns +{region}..+{region + nbytes // chunk * CP_COLUMNS - 1}")
            for q in range(nbytes // chunk):
                value = SmemDesc(offset + q * chunk, lbo=chunk, sbo=8 * 16).encode()
                e(f"add.u32 {at}, {cols}, {region + q * CP_COLUMNS};")
                e(tcgen05_cp(at, descriptor(kb, sdesc, value), shape, plan.cluster, multicast))

    def copy_a(self, sdesc: str, cols: str, at: list[str]) -> None:
        """A in TMEM: the MMA thread copies the slot's A into the slot's A columns, one tcgen05.cp .128x256b per
        MMA (9.7.16.8.2; `.cta_group::2` in both CTAs of a pair, each from its own slot): MMA s's 256 bits of each
        of the 128 rows, row i -> lane i (isa.tmem: A shares D's lanes, 8 columns per MMA). Its source is the
        MMA's two 16-byte K chunks of the no-swizzle K-major layout the producer's boxes wrote (`_StagedA`): SBO
        128 bytes between 8-row core matrices, LBO the 128 rows x 16 bytes between the two chunks (9.7.16.4.1).
        tcgen05.cp -> tcgen05.mma issued by one thread is a pipelined pair, executed in order (9.7.16.6.2), so
        the MMA reads the copied columns without a wait; the slot's tcgen05.commit to its empty barrier tracks
        the copies too, and the columns are overwritten only when the slot comes round, after that commit's
        arrival (the MMAs that read them are done), as for the metadata (`copy_tmem_operands`). `at[s]` is MMA
        s's A address."""
        from ..descriptors.smem import SmemDesc
        from ..isa.tcgen05_forms import CP_GEOMETRY, tcgen05_cp
        from ..isa.tmem import a_columns_per_mma
        from ..passes.warp_specialization import A_CHUNK_BYTES, A_CP_SHAPE

        kb, e, plan, op = self.kb, self.e, self.plan, self.ops["A"]
        width = CP_GEOMETRY[A_CP_SHAPE][1]
        chunks = width * 32 // (8 * A_CHUNK_BYTES)              # 16-byte K chunks per copy (2)
        kb.comment(f"A: {self.steps} tcgen05.cp .{A_CP_SHAPE} (one per MMA) -> TMEM columns +{plan.a_region}.."
                   f"+{plan.a_region + self.steps * a_columns_per_mma() - 1} of the slot")
        for s, reg in enumerate(at):
            value = SmemDesc(op.offset + s * chunks * op.atom_stride, lbo=op.atom_stride, sbo=8 * A_CHUNK_BYTES)
            e(f"add.u32 {reg}, {cols}, {plan.a_region + s * a_columns_per_mma()};")
            e(tcgen05_cp(reg, descriptor(kb, sdesc, value.encode()), A_CP_SHAPE, plan.cluster))

    # ---- ABI ------------------------------------------------------------------------------------
    @property
    def any_size(self) -> bool:
        """Every tile takes any M, N >= 1 and a batch, and any K >= 1 that is a multiple of `k_unit` (dense:
        1): a partial last K block reads TMA zero fill in A and B, and `tmem_image` pads its META / SFA / SFB
        image with legal values (metadata nibbles 0b0100, scale factors 1.0), so its padded products are
        exact zeros."""
        return True

    def k_units(self) -> list[tuple[int, str, str]]:
        """The multiples K must be, each as (elements of K, the tile field that imposes it, why). The K
        block itself is not one of them (a K tail is zero-filled, `any_size`); what is left is what no
        zero fill can pad inside one row of A or B:
        * sparse: a whole metadata chunk (isa.tmem METADATA_CHUNK: 2:4 -> 4, tf32 1:2 -> 2, 4:8 pairs
          -> 8; PTX 9.7.16.10.8): A holds the kept half of each chunk (M x K/2, 9.7.16.10.8.1), so a chunk
          cut by K has no compressed form, and its metadata nibble no meaning;
        * block-scaled: a whole scale-factor vector (PTX 9.7.16.10.7: one factor per row of A / column of
          B for each vector of K elements; the kernel's MMA takes `nsf` of them per MMA K), so the last
          vector's factor scales only elements of the problem;
        * packed or halved rows: every operand's row a whole number of TMA elements (cp.async.bulk.tensor
          counts its box and extents in elements, 9.7.9.25.5.1: two e2m1 to a byte, sparse A's kept half)."""
        from ..isa.tmem import METADATA_CHUNK

        out: list[tuple[int, str, str]] = []
        if self.sparse:
            chunk = METADATA_CHUNK[self.kind]
            out.append((chunk, "sparsity.ratio",
                        f"a {self.spec.sparsity.ratio} sparse A keeps {chunk // 2} of every {chunk} elements along K "
                        f"and one metadata nibble describes those {chunk} (PTX 9.7.16.10.8): K must be whole "
                        f"{chunk}-element chunks"))
        if self.scaled:
            nsf = self.tile.facts["scale_layouts"][0].nsf
            vector = mma_k(self.kind, self.sparse, self.form.k96) // nsf
            out.append((vector, "block_scale.vec",
                        f"one scale factor covers {vector} elements of K (.{self.form.block_scale}, PTX "
                        f"9.7.16.10.7): K must be whole {vector}-element scale vectors"))
        for name, op in self.ops.items():
            unit = self.plan.k_block // gcd(self.plan.k_block, op.k_block)
            if unit > 1:
                what = "kept half of a row" if self.sparse and name == "A" else "row"
                out.append((unit, f"{name}.dtype",
                            f"{name}'s {what} is stored as {op.bits}-bit TMA elements, {op.k_block} per "
                            f"{self.plan.k_block} elements of K (PTX 9.7.9.25.5.1): K must be a multiple of {unit}"))
        return out

    @property
    def k_unit(self) -> int:
        """K a multiple of this (`requires`; 1: any K): the least common multiple of `k_units`."""
        unit = 1
        for u, _, _ in self.k_units():
            unit = unit * u // gcd(unit, u)
        return unit

    def map_count(self) -> int:
        """The tensor maps in the `tensor_maps` parameter: A, B, the META / SFA / SFB images, D."""
        return len(self.ops) + len(self.plan.cp_operands) + 1

    def maps_address(self, reg: str) -> None:
        """`reg` = the generic address of the `tensor_maps` parameter (PTX ISA cvta: .param{::entry} takes a
        kernel parameter's address), which cp.async.bulk.tensor and prefetch.tensormap take for a map in
        .param space (9.7.9.25.5.1); a map there needs no fence.proxy.tensormap (the host wrote nothing
        through the generic proxy)."""
        self.e(f"mov.b64 {reg}, {self.kb.param('tensor_maps')};")
        self.e(f"cvta.param.u64 {reg}, {reg};")

    def buffers(self) -> dict:
        """Every array the kernel reads or writes, as compiler/runtime/abi.py's `buffers` family states
        them (element type, shape expressions in M, N, K; a 4-bit type `packed`, two to a byte, its shape
        counting elements), the same contract as the TMA + wgmma.sp kernels', so one runtime path encodes
        the tensor maps, checks the arrays and launches both."""
        spec = self.spec
        a, b, d = (spec.operands[x].dtype for x in "ABD")
        out = {}
        for name, dtype, rows in (("A", a, "M"), ("B", b, "N")):
            op = self.ops[name]
            # stored elements of a row: K * (stored K units per block, in TMA elements of op.bits) / tile_k,
            # counted in elements of op.elem_bits (sparse A: the kept half)
            num, den = op.k_block * op.bits, op.elem_bits * self.plan.k_block
            g = gcd(num, den)
            num, den = num // g, den // g
            cols = "K" + (f" * {num}" if num != 1 else "") + (f" / {den}" if den != 1 else "")
            out[name] = {"element": dtype, "shape": [rows, cols],
                         "layout": f"[{rows}][{cols}] {dtype} row-major (K-major"
                                   f"{', the kept half of each row' if self.sparse and name == 'A' else ''}); "
                                   "read through its tensor map only",
                         **({"packed": True} if op.elem_bits == 4 else {})}
        # rows of A, B and D: a multiple of 16 bytes apart (cuTensorMapEncodeTiled's globalStrides), the
        # maps' strides; a batch through the maps' third dimension (`batch`)
        out["D"] = {"element": d, "shape": ["M", "N"],
                    "layout": f"[M][N] {d} row-major (written by the epilogue's TMA stores only)"}
        if self.epi is not None and self.epi.c == "epilogue":
            out["C"] = {"element": self.epi.acc, "shape": ["M", "N"],
                        "layout": f"[M][N] {self.epi.acc} row-major, dense (a batch: batch_stride_c elements "
                                  "apart, 0: one C for all)"}
        for name in self.plan.cp_operands:
            out[name] = self.image_buffer(name)
        if self.epi is not None and self.epi.bias != "none":
            out["bias"] = {"element": "f32", "shape": ["N" if self.epi.bias == "col" else "M"]}
        return out

    def image_spec(self, name: str) -> dict:
        """The ABI's `tmem_images` entry of META / SFA / SFB: what `tmem_image` needs to build the buffer
        from its natural layout (the copy's shape, its source rows = TMEM lanes, the columns per K block,
        the row tile and K block; metadata: the natural words per block, the cell format and the K
        elements of one nibble (`chunk`); scale factors: columns per 4-byte group, 32-row slices, factors
        per MMA, stream bytes per MMA and the K elements of one factor (`vector`)). `pad` is also what the
        image holds past K in a partial last K block (`tmem_image`)."""
        from ..isa.tcgen05_forms import CP_GEOMETRY
        from ..isa.tmem import METADATA_CHUNK, METADATA_PAD_WORD, SCALE_ONE, metadata_format
        from ..passes.warp_specialization import CP_FORMS

        plan = self.plan
        shape, multicast = CP_FORMS[name]
        lanes = CP_GEOMETRY[shape][0]
        out = {"copy": shape + (f".{multicast}" if multicast else ""), "lanes": lanes,
               "columns": plan.cp_bytes[plan.cp_operands.index(name)] // (lanes * 4),
               "row_tile": self.spec.n if name == "SFB" else self.spec.m // plan.cluster, "k_block": plan.k_block,
               # rows are padded up to whole CTA (pair) tiles with `pad` (a legal, finite natural value)
               "tile_rows": self.spec.n if name == "SFB" else self.spec.m}
        if name == "META":
            fmt = metadata_format(self.kind)
            return {**out, "words": self.steps * fmt.words_per_mma, "format": fmt.name, "pad": METADATA_PAD_WORD,
                    "chunk": METADATA_CHUNK[self.kind]}
        i = 0 if name == "SFA" else 1
        lay = self.tile.facts["scale_layouts"][i]
        return {**out, "group_columns": plan.sf_group_columns[i], "slices": lay.slices, "nsf": lay.nsf,
                "step_bytes": lay.step_bytes, "pad": SCALE_ONE[self.tile.facts.get("scale_type") or "ue8m0"],
                "vector": mma_k(self.kind, self.sparse, self.form.k96) // lay.nsf}

    def image_buffer(self, name: str) -> dict:
        """META / SFA / SFB as the kernel reads them: per (row tile, K block) the bytes its tcgen05.cp
        copies take in shared memory (`tmem_image` builds them from the natural layouts)."""
        plan = self.plan
        nbytes = plan.cp_bytes[plan.cp_operands.index(name)]
        rows, extent = ("N", self.spec.n) if name == "SFB" else ("M", self.spec.m // plan.cluster)
        tile = self.spec.n if name == "SFB" else self.spec.m
        row_tiles = f"(({rows} + {tile - 1}) // {tile})" + (f" * {tile // extent}" if tile != extent else "")
        element = "u32" if name == "META" else self.tile.facts.get("scale_type") or "ue8m0"
        count = nbytes // 4 if name == "META" else nbytes
        spec = self.image_spec(name)
        word_k = 8 * spec["chunk"] if name == "META" else 0
        natural = (f"[{rows}][(K + {word_k - 1}) // {word_k}] u32 words (word w of row r = the 4-bit codes of "
                   "chunks 8w..8w+7; those of chunks past K are not read)" if name == "META" else
                   f"[{rows}][K / {spec['vector']}] {element} (one factor per {spec['vector']} elements of K, "
                   "in K order)")
        return {"element": element, "shape": [row_tiles, f"(K + {plan.k_block - 1}) // {plan.k_block}", count],
                "layout": f"per {extent}-row tile of {rows} (padded to whole {tile}-row tiles; a batch: the "
                          f"problems' images one after another) and {plan.k_block}-deep K block (the last one "
                          f"padded past K), the TMEM image its "
                          f"tcgen05.cp copies (Kernel.host_image / pack_image, tcgen05_ws_kernel.tmem_image with "
                          f"`tmem_images`, of the natural {natural})"}

    def scheduler_plan(self) -> dict:
        """persistent=clc: what the ABI says of the tile scheduler (the plan's `scheduler` entry)."""
        from ..isa.clc import RESPONSE_BYTES

        plan = self.plan
        return {"kind": "clc", "warp": plan.sched_warp, "responses": plan.clc_stages,
                "response_bytes": RESPONSE_BYTES,
                "request": "clusterlaunchcontrol.try_cancel" + (".multicast::cluster::all" if self.pair else ""),
                "first_tile": "ctaid.x / 2" if self.pair else "ctaid.x",
                "next_tile": "first ctaid.x of the canceled cluster" + (" / 2" if self.pair else ""),
                "end": "the first failed answer (no cluster left to cancel)"}

    def abi(self) -> dict:
        spec, plan = self.spec, self.plan
        maps = [{"operand": n, "elem_bits": op.bits, "data_type": TMA_DATA_TYPE[op.bits], "swizzle": op.swizzle,
                 "box": [op.inner, op.rows, 1], "k_per_block": op.k_block} for n, op in self.ops.items()]
        for name, nbytes in zip(plan.cp_operands, plan.cp_bytes):
            rows = nbytes // IMAGE_ROW_BYTES
            maps.append({"operand": name, "elem_bits": 8, "data_type": TMA_DATA_TYPE[8], "swizzle": "none",
                         "box": [IMAGE_ROW_BYTES, min(rows, IMAGE_BOX_ROWS)], "image_rows": rows,
                         "row_tile": self.image_spec(name)["row_tile"]})
        # D (the last map): one warp's staging buffer per box (32 rows of d_chunk columns)
        maps.append({"operand": "D", "elem_bits": self.d_type.bits, "data_type": TMA_DATA_TYPE[self.d_type.bits],
                     "swizzle": plan.d_swizzle, "box": [plan.d_chunk, 32, 1]})
        d = spec.operands["D"].dtype
        # static persistent: one CTA (pair) per multiprocessor (pair), never more than there are tiles;
        # persistent=clc: one CTA (pair) per tile, those not launched yet are canceled and taken by running ones
        if plan.clc:
            grid = ["2 * tiles" if self.pair else "tiles", 1, 1]
        else:
            grid = ["2 * min(tiles, multiprocessors // 2)" if self.pair else "min(tiles, multiprocessors)", 1, 1]
        tiles = f"((M + {spec.m - 1}) // {spec.m}) * ((N + {spec.n - 1}) // {spec.n}) * batch"
        epi = self.epi
        c_param = epi is not None and epi.c == "epilogue"
        return {
            "kernel_kind": KERNEL_KIND,
            "entry": spec.name,
            "params": [{"name": "tensor_maps", "type": "bytes", "bytes": len(maps) * TMA_MAP_BYTES,
                        "align": TMA_MAP_ALIGN,
                        "layout": f"{len(maps)} CUtensorMaps ({', '.join(t['operand'] for t in maps)}) by value; "
                                  "tcgen05_ws_kernel.tensor_map_args gives the driver's encoder their arguments"},
                       *({"name": n, "type": "u64", "layout": self.image_buffer(n)["layout"]}
                         for n in plan.cp_operands),
                       *([{"name": "C", "type": "u64", "layout": f"[batch][M][N] {epi.acc} row-major (or one "
                                                                  "[M][N] for all: batch_stride_c 0)"}]
                         if c_param else []),
                       *([{"name": n, "type": "u64" if n == "bias" else "f32",
                           "layout": (f"[{'N' if epi.bias == 'col' else 'M'}] f32" if n == "bias" else "f32 scalar")}
                          for n in epi.params] if epi is not None else []),
                       {"name": "M", "type": "u32"}, {"name": "N", "type": "u32"}, {"name": "K", "type": "u32"},
                       {"name": "batch", "type": "u32"},
                       *([{"name": "batch_stride_c", "type": "u64",
                           "layout": "elements between two problems' C (0: one C for every problem)"}]
                         if c_param else [])],
            "buffers": self.buffers(),
            "tensor_maps": maps,
            **({"tmem_images": {n: self.image_spec(n) for n in plan.cp_operands}} if plan.cp_operands else {}),
            "requires": [f"K % {self.k_unit} == 0"] if self.k_unit > 1 else [],
            "batch": "the tile loop walks the batch after M and N; A, B and D through rank-3 tensor maps "
                     "(their batch strides in the maps), C at batch_stride_c elements per batch (0: one C for "
                     "all), one bias for all"
                     + ("; META / SFA / SFB: each problem's images after the previous one's (rank-2 maps)"
                        if plan.cp_operands else ""),
            # the tile loop's t + nctaid.x is a u32 sum (tile_loop): tiles stay 2^16 (more than any SM count)
            # below 2^32
            # persistent=clc: the grid itself (a CTA per tile) within CUDA's limits
            "limits": launch_limits(("M", "N", "K"), grid if plan.clc else []) + [
                "batch <= 65535", f"{tiles} <= {(1 << 32) - (1 << 16)}"] + [
                # an image's TMA row coordinate is a signed 32-bit integer (cp.async.bulk.tensor)
                f"{self.image_buffer(t['operand'])['shape'][0]} * ((K + {plan.k_block - 1}) // {plan.k_block}) * "
                f"batch * "
                f"{t['image_rows']} < {1 << 31}" for t in maps if "image_rows" in t],
            "grid": grid,
            "persistent": plan.scheduler,
            "tiles": tiles,
            "block": [plan.threads, 1, 1],
            **({"cluster": [2, 1, 1]} if self.pair else {}),
            "dynamic_smem_bytes": plan.smem_bytes,
            "tile_m": spec.m, "tile_n": spec.n, "tile_k": plan.k_block,
            "tmem_columns": plan.tmem_columns,
            **({"epilogue": epi.describe()} if epi is not None else {}),
            "plan": {"stages": plan.stages, "stage_bytes": plan.stage_bytes, "tx_bytes": plan.tx_bytes,
                     "accumulators": plan.accumulators, "acc_columns": plan.acc_columns,
                     "d_staging": {"chunk": plan.d_chunk, "buffers_per_warp": plan.d_buffers,
                                   "buffer_bytes": plan.d_stage_bytes, "swizzle": plan.d_swizzle},
                     "roles": {"epilogue": list(plan.epilogue_warps), "mma": plan.mma_warp, "tma": plan.tma_warp,
                               **({"scheduler": plan.sched_warp} if plan.clc else {})},
                     "barriers": {name: {"count": n, "number": plan.stages if name in ("full", "empty")
                                         else plan.clc_stages if name.startswith("clc") else plan.accumulators}
                                  for name, n in plan.barrier_counts().items()},
                     **({"scheduler": self.scheduler_plan()} if plan.clc else {}),
                     **({"why": plan.why} if plan.why else {})},
        }


def smem_ring(tile: Op) -> RingPlan:
    """The smem ring of a scheduled tcgen05 tile (pipeline-planning prints it into tilec.pipeline): the
    ws_plan's slots and barriers; full[s] completes by the producer's (a pair: the leader's) expect_tx and
    the TMA bytes, empty[s] by the MMA warp's one tcgen05.commit."""
    plan = ws_plan(tile)
    # a slot's copies into one CTA (a pair's leader expects both CTAs' bytes: `_WsKernel._rings`)
    return RingPlan(plan.stages, plan.stage_bytes, plan.tx_bytes // plan.cluster, 1, 1, plan.full)


def emit_tcgen05_ws_kernel(tile: Op) -> tuple[str, dict]:
    """(PTX text of the .entry without the module header, ABI dict) for one scheduled tcgen05 tile (a
    derive.tile_view)."""
    return _WsKernel(tile).emit()


def check_k(tile: Op, k: int) -> None:
    """SpecError naming the tile field that imposes it (`field`, for a located diagnostic) and why, from the
    PTX ISA (`hint`), when a problem's K is not a multiple of one of the kernel's K units (`_WsKernel.k_units`:
    what the ABI's `requires` states as one `K % k_unit == 0`)."""
    for unit, field, why in _WsKernel(tile).k_units():
        if k % unit:
            raise SpecError(f"K = {k} is not a multiple of {unit}, which the warp-specialised kernel of tile "
                            f"'{tile.payload.name}' needs", field, hint=why)


def tensor_map_args(abi: dict, m: int, n: int, k: int, batch: int = 1,
                    row_bytes: dict[str, int] | None = None, packed_rows: bool = False,
                    batch_bytes: dict[str, int] | None = None) -> list[dict]:
    """Per tensor map (A, B, the META / SFA / SFB images, D): the cuTensorMapEncodeTiled arguments (rank 3: the row, the rows, the batch,
    innermost first; strides in bytes) for `batch` problems of M x N x K, less the global address. A row
    is `row_bytes[operand]` bytes apart (a multiple of 16, cuTensorMapEncodeTiled's rule for globalStrides),
    default its bytes rounded up to 16, or with `packed_rows` exactly its bytes (contiguous arrays;
    ValueError when they are not a multiple of 16); a batch `rows` rows apart, or `batch_bytes[operand]`
    bytes (a strided batch: a positive multiple of 16, globalStrides' rule). An image is rows of 16 bytes
    (UINT8, no swizzle, rank 2): `image_rows` per (problem, row tile, K block), in that order, the row tiles
    of whole CTA (pair) tiles (`tmem_image` pads them)."""
    out = []
    for t in abi["tensor_maps"]:
        if "image_rows" in t:
            spec = abi["tmem_images"][t["operand"]]
            tiles = -(-(n if t["operand"] == "SFB" else m) // spec["tile_rows"]) * spec["tile_rows"] // t["row_tile"]
            rows = tiles * -(-k // abi["tile_k"]) * t["image_rows"] * batch
            out.append({"operand": t["operand"], "data_type": t["data_type"], "dims": (IMAGE_ROW_BYTES, rows),
                        "strides": (IMAGE_ROW_BYTES,), "box": tuple(t["box"]), "element_strides": (1, 1),
                        "swizzle": TMA_SWIZZLE["none"], "l2_promotion": TMA_L2_PROMOTION_256B})
            continue
        if t["operand"] == "D":
            inner, rows = n, m
        else:
            rows = m if t["operand"] == "A" else n
            inner = k * t["k_per_block"] // abi["tile_k"]  # stored K elements of a row (sparse A: K / 2)
        packed = -(-inner * t["elem_bits"] // 8)
        if packed_rows and packed % 16:
            raise ValueError(f"{t['operand']}: rows of {packed} bytes")
        pitch = (row_bytes or {}).get(t["operand"]) or -(-packed // 16) * 16
        between = (batch_bytes or {}).get(t["operand"]) or pitch * rows
        out.append({"operand": t["operand"], "data_type": t["data_type"], "dims": (inner, rows, batch),
                    "strides": (pitch, between), "box": tuple(t["box"]), "element_strides": (1, 1, 1),
                    "swizzle": TMA_SWIZZLE[t["swizzle"]], "l2_promotion": TMA_L2_PROMOTION_256B})
    return out


def tmem_image(image: dict, natural, rows: int, k: int) -> list[int]:
    """META / SFA / SFB of a problem with `rows` rows (M; N for SFB) and depth K as the kernel reads them:
    for each row tile and K block, the block's TMEM operand columns of lanes 0..127 (metadata) or 0..31
    (scale factors: the copy repeats them in every lane quarter) as tcgen05.cp copies them, 16 bytes (4
    columns) per source row, one source per 4 columns. `image`: the ABI's `tmem_images` entry of the
    buffer (`_WsKernel.image_spec`); `natural`: the natural layout (rows of META words, rows of compact
    scale-factor bytes), indexable as natural[row][i]. Returns the image's u32 words (META) or bytes (SFA /
    SFB) in order. Pure Python, from the ABI alone: the host packer of the runtime (Kernel.pack_image) and
    of the emulator.

    K is any multiple of the kernel's `k_unit` (the ABI's `requires`): ceil(K / K block) blocks, the last
    one partial. Past K the image holds image["pad"] as it does past `rows`, whatever `natural` holds there
    (it needs no columns past K): metadata nibbles 0b0100 for the chunks past K (a natural word may hold
    both), scale factors 1.0 for the vectors past K. The TMA loads fill A and B there with zeros (PTX
    9.7.9.25.5.1), so every product of the padding is 0 x 0 (a legal nibble selects zeros of A; a finite
    scale keeps them zeros) and D is exact."""
    from ..isa.tmem import METADATA_FORMATS, metadata_cell

    lanes, columns, extent = image["lanes"], image["columns"], image["row_tile"]
    kblocks = -(-k // image["k_block"])
    # whole CTA (pair) tiles of rows: those past `rows` read image["pad"] (legal metadata selecting A's TMA zero
    # fill, scale factor 1.0: isa.tmem METADATA_PAD_WORD, SCALE_ONE), whatever `natural` holds there
    tile_rows = image["tile_rows"]
    row_tiles = -(-rows // tile_rows) * tile_rows // extent
    pad = image["pad"]
    out: list[int] = []
    if "format" in image:                       # metadata: one natural word per column, cells per the format
        fmt, words = METADATA_FORMATS[image["format"]], image["words"]
        chunks = k // image["chunk"]            # live nibbles of a row (K a multiple of the chunk: `k_units`)

        def word(row: int, i: int) -> int:
            """Natural word i of `row`, its nibbles of chunks past K (all of them past `rows`) the pad's."""
            live = chunks - 8 * i if row < rows else 0
            if live >= 8:
                return int(natural[row][i])
            if live <= 0:
                return pad
            mask = (1 << 4 * live) - 1
            return int(natural[row][i]) & mask | pad & ~mask & 0xFFFFFFFF
        for rt in range(row_tiles):
            for kb in range(kblocks):
                for q in range(columns // 4):
                    for lane in range(lanes):
                        for c in range(4 * q, 4 * q + 4):
                            # lane -> logical lane: a folded data path (.ws M = 64 / 32, PTX 9.7.16.10.5) repeats
                            # the tile's rows in every lane group of `extent` lanes (isa.tmem DataPath)
                            out.append(metadata_cell(fmt, lane % extent,
                                                     lambda r: word(rt * extent + r, kb * words + c))
                                       if c < words else 0)
        return out
    factors = k // image["vector"]              # live factors of a row (K a multiple of the vector: `k_units`)

    def value(row: int, i: int) -> int:
        return int(natural[row][i]) if row < rows and i < factors else pad
    group, slices, nsf, step_bytes = image["group_columns"], image["slices"], image["nsf"], image["step_bytes"]
    stage_groups = columns // group
    for rt in range(row_tiles):
        for kb in range(kblocks):
            for q in range(columns // 4):
                for lane in range(lanes):
                    for c in range(4 * q, 4 * q + 4):
                        g, r1 = divmod(c, group)
                        row = lane + 32 * r1
                        for b in range(4 * (kb * stage_groups + g), 4 * (kb * stage_groups + g) + 4):
                            step, j = divmod(b, step_bytes)
                            live = r1 < slices and row < extent and j < nsf
                            out.append(value(rt * extent + row, step * nsf + j) if live else 0)
    return out
