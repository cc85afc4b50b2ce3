"""A complete `.entry` kernel for one tcgen05 tile: every `tcgen05.mma` form tilec accepts.

Covered: kinds f16, tf32, f8f6f4, i8, mxf8f6f4, mxf4, mxf4nvf4; cta_group::1 and ::2 (a cluster of two
CTAs); A from a shared-memory descriptor or from Tensor Memory (with .ashift); `.sp` (metadata in TMEM);
`.ws` / `.ws.sp` (M = 128, 64, 32: data-path layouts D, E, G) with the zero-column mask; `.block_scale`
(SFA / SFB in TMEM); collector usage (`::use` / `::lastuse` after a priming `::fill` MMA, see
`collector_priming`); disable-output-lane; scale-input-d; the K = 96 shape of mxf4 / mxf4nvf4 (sm_103a,
idesc bit 31): 128B-swizzled stages of 768 K whose descriptors use the absolute-LBO mode (bit 52, PTX
9.7.16.3.1.2; the kernel relocates both address fields), 3 / 6 scale factors per MMA, A in TMEM 12 columns
per MMA. The TMEM layouts are in compiler/isa/tmem.py.

Kernel ABI (also reported by `tilec compile --emit json`, see `_abi`):
  params : A, B, D (u64) global pointers; SFA, SFB (u64, block-scaled kinds); META (u64, sparse tiles
           with metadata=runtime); S (u64, smem-dump variant only); m_total, n_total (u32), multiples
           of the tile's M and N, below 2^31, with a grid within CUDA's limits (ABI `limits`:
           builder.launch_limits). K is the tile's `loop K` (fixed). Byte offsets that grow with
           m_total / n_total are 64-bit; offsets within a row or a stage stay 32-bit.
  data   : A (smem) is [m_total][K] row-major when K-major, [K][m_total] when MN-major; sparse A holds
           the kept values, [m_total][K/2]. B is [n_total][K] row-major when K-major (B transposed),
           [K][n_total] when MN-major. Values are packed at their own width (fp4 two per byte, fp6 four per
           3 bytes, PTX 5.5.1.1.1); the kernel pads them for .kind::f8f6f4 / mxf8f6f4 (.b4x16_p64 /
           .b6x16_p32). A in TMEM is [m_total][K_stored] in its TMEM container: as in shared memory,
           except fp4/fp6 under f8f6f4/mxf8f6f4 one value per byte (e2m1 in bits 5:2, e3m2/e2m3 in 5:0).
           D is [m_total][n_total] row-major in the D type.
           META: uint32 [m_total][K / (8*chunk)]: word w of row r holds the 4-bit codes of chunks
           8w..8w+7 (code i in bits 4i+3..4i; chunk = 4 elements for 2:4, 2 for tf32 1:2, 8 for 4:8).
           SFA: uint8 [m_total][K/K_mma * NSF], SFB: uint8 [n_total][K/K_mma * NSF], the NSF scale
           factors of each MMA's K range in K order (NSF = 1, 2 or 4, Table 54; 3 or 6 with K = 96).
  launch : grid (n_total / N, m_total / M, 1) - for cta_group::2 (2 * n_total / N, m_total / M, 1) with
           clusters of (2, 1, 1) (`.reqnctapercluster`); block (128, 1, 1); static shared memory only.

Per CTA: warp 0 allocates TMEM (PTX 9.7.16.7.1; both CTAs of a pair with cta_group::2); thread 0
initializes an mbarrier. For each K stage all 128 threads copy the smem operands from global memory into
the canonical layout chosen by layout-selection (16-byte chunks at the copy map's offsets) and stage the
TMEM operands with `tcgen05.st` (thread t = lane t): A (in TMEM), the sparse metadata and the scale
factors. Then `tcgen05.wait::st`, `fence.proxy.async` (9.7.16.6.5), the thread-sync fences
around a CTA (cluster) barrier (9.7.16.6.4), one thread (of the pair) issues the stage's MMAs
(enable-input-d false only for the first) and `tcgen05.commit`s to the mbarrier (`.multicast::cluster`
to both CTAs for cta_group::2); everyone waits on the barrier's phase. Finally each warp reads its 32 TMEM
lanes of D with `tcgen05.ld.32x32b.x8` (9.7.16.8.3) through the data-path layout and stores them.

Checked without Blackwell hardware: ptxas assembles every (form x target) kernel
(tests/test_tcgen05_all_forms.py), and the CPU emulator (compiler/emulator/tcgen05.py) runs the kernels
as emitted against the layout-free reference model's D (compiler/sim/tcgen05.py), .ashift included.
Resting on single sources or extrapolation (to confirm on silicon): the .ws / 2x2 TMEM layouts of A and
metadata (CUTLASS atoms only), fp4/fp6 A in TMEM one per byte (e2m1 in bits 5:2, the reference model's
reading of Figures 199/200), SFB slices for N not a multiple of 32, the collector-priming MMA's scratch
region, and what .ashift does to A.

The smem-dump variant (option variant="smem-dump") is the same kernel for `.target sm_90a` with every
tcgen05 instruction (and TMEM staging) left out; after each stage's copy the CTA writes its whole shared
buffer to S (see `_abi`), for checking the copies and layouts on a Hopper GPU.
"""
from __future__ import annotations

from dataclasses import replace

from ..bits import is_pow2, log2
from ..diagnostics import SpecError
from ..ir import Op
from ..isa.tcgen05_kinds import mma_k
from ..isa.tmem import a_columns_per_mma, data_path, metadata_format
from ..passes.plans import collector_priming
from ..isa.types import TYPES
from .builder import PtxBuilder, launch_limits
from .tcgen05_issue import descriptor, descriptor_base, idesc_registers, issue_mmas, trailing_operands

THREADS = 128
SMEM_DUMP = "smem-dump"
VARIANTS = (None, SMEM_DUMP)
SMEM_DUMP_TARGET = "sm_90a"
# PTX 8.0 introduced sm_90a; the dump kernel uses nothing newer (ld/st, bar.sync, fence.proxy.async).
SMEM_DUMP_PTX = "8.0"


# --------------------------------------------------------------------------------------------------
# Small helpers

def _pow2_runs(n: int) -> list[tuple[int, int]]:
    """(start, count) runs of power-of-two length <= 32 covering 0..n-1 (tcgen05.st .num values)."""
    out, at = [], 0
    while at < n:
        size = 32
        while size > n - at:
            size //= 2
        out.append((at, size))
        at += size
    return out


def _tmem_store(kb: PtxBuilder, taddr: str, regs: list[str], column: int = 0) -> None:
    """Store regs[j] of every thread to column `column` + j of its lane (tcgen05.st.32x32b, 9.7.16.8.4);
    `taddr` is a register, the column offsets go into the [reg+imm] address."""
    from ..isa.tcgen05_forms import tcgen05_st

    for start, count in _pow2_runs(len(regs)):
        at = column + start
        addr = taddr if at == 0 else f"{taddr}+{at}"
        kb.emit(tcgen05_st(addr, regs[start:start + count], "32x32b", count))


# --------------------------------------------------------------------------------------------------
# The kernel

class _Kernel:
    def __init__(self, tile: Op, variant: str | None):
        if variant not in VARIANTS:
            raise SpecError(f"unknown kernel variant '{variant}'", hint="variants: smem-dump")
        self.tile = tile
        self.spec = spec = tile.payload
        self.kind = tile.attrs["kind"]
        self.dump = variant == SMEM_DUMP
        self.form = tile.facts["form"]
        self.cta_group = spec.cta_group
        self.sparse = spec.sparsity is not None
        self.a_tmem = spec.operands["A"].space == "tmem"
        self.scaled = self.form.block_scale is not None
        self.priming = collector_priming(spec)
        self.dp = data_path(spec.m, spec.cta_group, self.sparse, spec.ws)
        self.k96 = self.form.k96
        self.mma_k = mma_k(self.kind, self.sparse, self.k96)
        self.k_block = tile.facts["k_block"]
        self.steps = self.k_block // self.mma_k
        self.n_stages = spec.total_k // self.k_block
        self.plan = tile.facts["tmem_plan"]
        self.d_type = TYPES[spec.operands["D"].dtype]
        self.kb = PtxBuilder(spec.name)
        self.e = self.kb.emit

    def op(self, name: str, sym: str | None = None) -> Op:
        """A descriptor op the earlier passes put on the tile (they always do for a tcgen05 tile)."""
        found = self.tile.op(name, sym)
        if found is None:
            raise SpecError(f"{name}{' @' + sym if sym else ''} is missing: run descriptor-materialization first")
        return found

    # ---- driver ----------------------------------------------------------------------------------
    def emit(self) -> tuple[str, dict]:
        self.declare()
        self.prologue()
        self.stage_loop()
        if not self.dump:
            self.epilogue()
            self.teardown()
        self.e("ret;")
        return self.kb.render(), self.abi()

    # ---- declarations ----------------------------------------------------------------------------
    def params(self) -> list[str]:
        names = ["A", "B", "D"]
        if self.scaled:
            names += ["SFA", "SFB"]
        if self.sparse and self.spec.sparsity.metadata == "runtime":
            names.append("META")
        if self.dump:
            names.append("S")
        return names

    def declare(self) -> None:
        kb, spec = self.kb, self.spec
        for p in self.params():
            kb.params.append(("u64", p))
        kb.params += [("u32", "m_total"), ("u32", "n_total")]
        kb.directives.append(f".reqntid {THREADS}, 1, 1")
        if self.cta_group == 2 and not self.dump:
            # A CTA pair is a cluster of two (9.7.16.10.9.1 cta_group::2; 11.7.1 .reqnctapercluster).
            kb.directives.append(".reqnctapercluster 2, 1, 1")
        self.smem_bytes = self.tile.facts["smem_bytes"]
        self.smem, self.mbar, self.slot = f"{spec.name}_smem", f"{spec.name}_mbar", f"{spec.name}_tmem_slot"
        kb.shared.append(f".shared .align 1024 .b8 {self.smem}[{max(self.smem_bytes, 16)}];")
        if not self.dump:
            kb.shared += [f".shared .align 8 .b64 {self.mbar};", f".shared .align 4 .b32 {self.slot};"]
        meta = self.tile.facts.get("tcgen05_metadata")
        if meta is not None and meta.source == "static" and not self.dump:
            words = ", ".join(f"{w:#010x}" for row in meta.table for w in row)
            kb.module += [f".global .align 4 .b32 {spec.name}_meta[{meta.period_rows * meta.period_words}]"
                          f" = {{{words}}};", ""]

    # ---- synchronisation -------------------------------------------------------------------------
    def sync(self) -> None:
        """A CTA barrier, or for a CTA pair a cluster barrier (the MMA of the pair reads both CTAs'
        shared and tensor memory)."""
        self.kb.cta_sync(cluster=self.cta_group == 2 and not self.dump)

    def thread_sync(self) -> None:
        """tcgen05 ops before / after a thread synchronisation (9.7.16.6.4.1 fences)."""
        self.e("tcgen05.fence::before_thread_sync;")
        self.sync()
        self.e("tcgen05.fence::after_thread_sync;")

    # ---- prologue --------------------------------------------------------------------------------
    def prologue(self) -> None:
        from ..isa.tcgen05_forms import tcgen05_alloc, tcgen05_relinquish_alloc_permit

        kb, e, spec = self.kb, self.e, self.spec
        self.tid, self.warp = kb.regs("r", 2)
        e(f"mov.u32 {self.tid}, %tid.x;")
        e(f"shr.u32 {self.warp}, {self.tid}, 5;")
        self.p_w0, self.p_t0 = kb.reg("p"), kb.reg("p")
        e(f"setp.eq.u32 {self.p_w0}, {self.warp}, 0;")
        e(f"setp.eq.u32 {self.p_t0}, {self.tid}, 0;")
        # Tile coordinates. A pair of CTAs (cta_group::2) is a cluster along x: rank = %ctaid.x & 1
        # (= %cluster_ctarank for clusters of (2,1,1)); each holds M/2 rows of A and D and N/2 rows of B.
        bx, by = kb.regs("r", 2)
        e(f"mov.u32 {bx}, %ctaid.x;")
        e(f"mov.u32 {by}, %ctaid.y;")
        self.m0, self.n0, self.nb0 = kb.regs("r", 3)
        rows_cta = spec.m // self.cta_group
        e(f"mul.lo.u32 {self.m0}, {by}, {spec.m};")
        if self.cta_group == 2:
            self.rank, ntile = kb.regs("r", 2)
            e(f"and.b32 {self.rank}, {bx}, 1;")
            e(f"shr.u32 {ntile}, {bx}, 1;")
            e(f"mad.lo.u32 {self.m0}, {self.rank}, {rows_cta}, {self.m0};")
            e(f"mul.lo.u32 {self.n0}, {ntile}, {spec.n};")
            e(f"mad.lo.u32 {self.nb0}, {self.rank}, {spec.n // 2}, {self.n0};")
        else:
            e(f"mul.lo.u32 {self.n0}, {bx}, {spec.n};")
            e(f"mov.u32 {self.nb0}, {self.n0};")
        self.m_total, self.n_total = kb.regs("r", 2)
        kb.ld_param("u32", self.m_total, "m_total")
        kb.ld_param("u32", self.n_total, "n_total")
        self.gptr = {}
        for p in self.params():
            raw, g = kb.regs("rd", 2)
            kb.global_pointer(g, p, raw)
            self.gptr[p] = g
        meta = self.tile.facts.get("tcgen05_metadata")
        if meta is not None and meta.source == "static" and not self.dump:
            g = kb.reg("rd")
            e(f"mov.u64 {g}, {spec.name}_meta;")
            self.gptr["META"] = g
        self.sbase = kb.reg("r")
        e(f"mov.u32 {self.sbase}, {self.smem};")
        if self.dump:
            return
        cols = self.plan.allocated
        kb.comment(f"warp 0 allocates {cols} TMEM columns (D {self.plan.d_columns}"
                   + "".join(f", {n} {c}" for n, c in (("scratch D", self.plan.d_columns if self.priming else 0),
                                                       ("metadata", self.plan.meta_columns),
                                                       ("SFA", self.plan.sfa_columns),
                                                       ("SFB", self.plan.sfb_columns), ("A", self.plan.a_columns))
                             if c) + f"; data-path layout {self.dp.layout})")
        skip = kb.label("alloc_done")
        e(f"@!{self.p_w0} bra {skip};")
        e(tcgen05_alloc(self.slot, cols, self.cta_group))
        e(tcgen05_relinquish_alloc_permit(self.cta_group))
        kb.put_label(skip)
        e(f"@{self.p_t0} mbarrier.init.shared::cta.b64 [{self.mbar}], 1;")
        if self.cta_group == 2:
            # the peer's commit arrives on this barrier (9.7.13.15.x fence.mbarrier_init)
            e("fence.mbarrier_init.release.cluster;")
        self.thread_sync()
        self.taddr = kb.reg("r")
        e(f"ld.shared.b32 {self.taddr}, [{self.slot}];")
        # This thread's TMEM lane is its thread index: warp w owns lanes 32w..32w+31 (9.7.16.8.3).
        lane_off = kb.reg("r")
        self.twarp = kb.reg("r")
        e(f"shl.b32 {lane_off}, {self.warp}, 21;")      # (32*warp) << 16: the lane field (9.7.16.1)
        e(f"add.u32 {self.twarp}, {self.taddr}, {lane_off};")
        self.sb4w = descriptor_base(kb, self.sbase)
        # Absolute-LBO descriptors (K = 96, bit 52: 9.7.16.3.1.2) hold a second address in the LBO field
        # (bits 16-29, also address >> 4): relocate it as well.
        self.desc_base = {"relative": self.sb4w}
        if any(op.attrs.get("lbo_mode") == "absolute" for op in self.tile.ops("tilec.smem_desc")):
            both = kb.reg("rd")
            e(f"shl.b64 {both}, {self.sb4w}, 16;")
            e(f"or.b64 {both}, {both}, {self.sb4w};")
            self.desc_base["absolute"] = both
        self.p_true = kb.constant_pred(True)
        self.operands_setup()

    def operands_setup(self) -> None:
        """Registers for the idesc values and the optional trailing operands (9.7.16.10.9.1 order:
        {disable-output-lane} masks, scale-input-d immediate, .ws zero-column mask descriptor)."""
        kb, e, spec = self.kb, self.e, self.spec
        idesc_op = self.op("tilec.instr_desc")
        self.idesc_regs = idesc_registers(kb, idesc_op.attrs.get("step_values", (idesc_op.attrs["value"],)))
        zcm_op = self.tile.op("tilec.zero_column_mask")
        self.extra = trailing_operands(kb, spec, None if zcm_op is None else zcm_op.attrs["value"])
        if self.cta_group == 2:
            self.cta_mask = kb.reg("h")
            e(f"mov.b16 {self.cta_mask}, 3;")      # both CTAs of the pair (%cluster_ctarank 0 and 1)
            self.p_issue = kb.reg("p")
            e(f"setp.eq.u32 {self.p_issue}, {self.tid}, 0;")
            e(f"setp.eq.and.u32 {self.p_issue}, {self.rank}, 0, {self.p_issue};")
        else:
            self.p_issue = self.p_t0
        if self.priming:
            self.p_false = kb.constant_pred(False)
            self.scratch = kb.reg("r")
            e(f"add.u32 {self.scratch}, {self.taddr}, {self.plan.scratch};")

    # ---- the K loop ------------------------------------------------------------------------------
    def stage_loop(self) -> None:
        kb, e = self.kb, self.e
        self.kreg, self.phase = kb.regs("r", 2)
        e(f"mov.u32 {self.kreg}, 0;")
        e(f"mov.u32 {self.phase}, 0;")
        loop = kb.label("k_stage")
        kb.put_label(loop)
        for name in ("A", "B"):
            lay_op = self.tile.op("tilec.smem_layout", name)
            if lay_op is not None:
                self.copy_operand(name, lay_op)
        if self.dump:
            e("bar.sync 0;")
            self.dump_smem()
            e("bar.sync 0;")            # the next stage's copy overwrites what this one dumped
        else:
            staged = False
            if self.a_tmem:
                self.stage_a_tmem()
                staged = True
            if self.sparse:
                self.stage_metadata()
                staged = True
            if self.scaled:
                self.stage_scales()
                staged = True
            if staged:
                e("tcgen05.wait::st.sync.aligned;")
            # generic-proxy smem writes -> the MMA's async-proxy reads (9.7.16.6.5); a CTA pair's MMA reads
            # the peer's shared memory too, so the pair fences every state space (9.7.12.4 fence.proxy.async)
            e("fence.proxy.async.shared::cta;" if self.cta_group == 1 else "fence.proxy.async;")
            self.thread_sync()
            self.issue_mmas()
            self.wait_mbarrier()
        kb.count_up(self.kreg, 1, kb.reg("p"), self.n_stages, loop, uni=False)

    def wait_mbarrier(self) -> None:
        kb, e = self.kb, self.e
        wait = kb.label("wait")
        kb.wait_parity(kb.reg("p"), self.mbar, self.phase, wait, uni=False)
        e(f"xor.b32 {self.phase}, {self.phase}, 1;")
        # the MMAs that read this stage's operands are complete; order later TMEM/smem writes after them
        e("tcgen05.fence::after_thread_sync;")

    # ---- global -> shared ------------------------------------------------------------------------
    def copy_operand(self, name: str, lay_op: Op) -> None:
        spec = self.spec
        if name == "A":
            mn0, mn_total = self.m0, self.m_total
        else:
            mn0, mn_total = self.nb0, self.n_total
        _emit_copy(self.kb, spec, name, lay_op, self.gptr[name], self.sbase, self.tid, self.kreg,
                   mn0, mn_total)

    def dump_smem(self) -> None:
        """All threads copy the shared buffer to S + ((ctaid.y*nctaid.x + ctaid.x)*n_stages + stage)*bytes."""
        kb, e = self.kb, self.e
        total = self.smem_bytes // 16
        kb.comment(f"smem-dump: {self.smem_bytes} B of stage images to S")
        bx, by, nx = kb.regs("r", 3)
        e(f"mov.u32 {bx}, %ctaid.x;")
        e(f"mov.u32 {by}, %ctaid.y;")
        e(f"mov.u32 {nx}, %nctaid.x;")
        # image index (ctaid.y * nctaid.x + ctaid.x) * n_stages + stage, and its byte offset, in 64 bits
        off, offw, blk, base = kb.reg("r"), kb.reg("rd"), kb.reg("rd"), kb.reg("rd")
        kb.wide_offset(blk, by, nx, bx)
        e(f"mul.lo.u64 {blk}, {blk}, {self.n_stages};")
        e(f"cvt.u64.u32 {offw}, {self.kreg};")
        e(f"add.u64 {blk}, {blk}, {offw};")
        e(f"mul.lo.u64 {offw}, {blk}, {self.smem_bytes};")
        e(f"add.u64 {base}, {self.gptr['S']}, {offw};")
        with kb.strided_loop("dump", self.tid, total, THREADS) as c:
            e(f"shl.b32 {off}, {c}, 4;")
            sa = kb.reg("r")
            e(f"add.u32 {sa}, {self.sbase}, {off};")
            x = kb.regs("r", 4)
            e(f"ld.shared.v4.b32 {{{', '.join(x)}}}, [{sa}];")
            ga, gw = kb.reg("rd"), kb.reg("rd")
            e(f"cvt.u64.u32 {gw}, {off};")
            e(f"add.u64 {ga}, {base}, {gw};")
            e(f"st.global.v4.b32 [{ga}], {{{', '.join(x)}}};")

    # ---- TMEM staging (tcgen05.st, thread t -> lane t) -------------------------------------------
    def logical_lane(self) -> str:
        """This thread's logical lane (isa.tmem.DataPath.lane_logical). Unused lanes of the half data
        path get a valid row too (their copy is never read), so no thread needs a predicate."""
        kb, e, dp = self.kb, self.e, self.dp
        lam = kb.reg("r")
        if dp.organization == "full":
            e(f"mov.u32 {lam}, {self.tid};")
        elif dp.organization == "half":
            hi, lo = kb.regs("r", 2)
            e(f"shr.u32 {hi}, {self.tid}, 5;")
            e(f"and.b32 {lo}, {self.tid}, 15;")
            e(f"mad.lo.u32 {lam}, {hi}, 16, {lo};")      # 16*(L>>5) + (L&15)
        else:
            e(f"and.b32 {lam}, {self.tid}, {dp.rows - 1};")   # L mod rows: every lane group repeats
        return lam

    def stage_a_tmem(self) -> None:
        """A rows -> TMEM, 8 columns (256 bits) per MMA K step, 12 for K = 96 (isa.tmem.a_columns_per_mma)."""
        from ..isa.tmem import a_columns_per_mma

        kb, e, spec = self.kb, self.e, self.spec
        a = spec.operands["A"]
        cbits = _tmem_container_bits(a.dtype, self.kind)
        k_stored = spec.total_k // 2 if self.sparse else spec.total_k
        pitch = k_stored * cbits // 8
        cols = a_columns_per_mma(self.k96)
        step_bytes = 4 * cols                         # one 32-bit column per 4 bytes of the row
        stage_bytes = self.steps * step_bytes
        kb.comment(f"A -> TMEM columns {self.plan.a}..{self.plan.a + self.plan.a_columns - 1}: "
                   f"{a.dtype} in {cbits}-bit containers, row pitch {pitch} B")
        row = self.logical_lane()
        g, gw, addr = kb.reg("r"), kb.reg("rd"), kb.reg("rd")
        e(f"add.u32 {g}, {self.m0}, {row};")
        e(f"mul.wide.u32 {gw}, {g}, {pitch};")
        e(f"add.u64 {addr}, {self.gptr['A']}, {gw};")
        so = kb.reg("rd")
        e(f"mul.wide.u32 {so}, {self.kreg}, {stage_bytes};")
        e(f"add.u64 {addr}, {addr}, {so};")
        for s in range(self.steps):
            x = kb.regs("r", cols)
            for q in range(0, cols, 4):               # 16-byte loads (rows and steps are 16-byte multiples)
                e(f"ld.global.v4.b32 {{{', '.join(x[q:q + 4])}}}, [{addr}+{step_bytes * s + 4 * q}];")
            _tmem_store(kb, self.twarp, x, self.plan.a + cols * s)

    def stage_metadata(self) -> None:
        """Sparse metadata -> TMEM (isa.tmem.metadata_cell), the stage's MMAs' columns."""
        from ..isa.tmem import metadata_format

        kb, e = self.kb, self.e
        meta = self.tile.facts["tcgen05_metadata"]
        fmt = metadata_format(self.kind)
        words = self.steps * fmt.words_per_mma
        kb.comment(f"sparse metadata ({meta.source}) -> TMEM columns {self.plan.meta}.."
                   f"{self.plan.meta + words - 1}, {fmt.name} format")
        lam = self.logical_lane()
        cells = metadata_cells(kb, meta, fmt, words, lam, self.kreg, self.m0, self.gptr["META"])
        _tmem_store(kb, self.twarp, cells, self.plan.meta)

    def stage_scales(self) -> None:
        """SFA / SFB -> TMEM (isa.tmem.ScaleLayout): 32-row slices in every lane partition. Global memory
        holds each row's factors compactly in K order (nsf per MMA); in TMEM MMA s starts at stream byte
        s * stride, the bytes between (K = 96 block32: the fourth of each word) are zero."""
        spec = self.spec
        sfa, sfb = self.tile.facts["scale_layouts"]
        total_steps = spec.total_k // self.mma_k
        pitch = total_steps * sfa.nsf                 # bytes per row of SFA / SFB in global memory
        stage_bytes = self.steps * sfa.nsf            # global bytes of one stage of a row
        stage_scale_factors(self.kb, (sfa, sfb), self.steps, (spec.m // self.cta_group, spec.n), self.tid, self.kreg,
                            (self.m0, self.n0), (self.gptr["SFA"], self.gptr["SFB"]), (self.plan.sfa, self.plan.sfb),
                            pitch, pitch % 4 == 0 and stage_bytes % 4 == 0, self.twarp)

    # ---- MMA issue -------------------------------------------------------------------------------
    def issue_mmas(self) -> None:
        kb, e, spec = self.kb, self.e, self.spec
        skip = kb.label("mma_done")
        e(f"@!{self.p_issue} bra {skip};")
        p_acc = kb.reg("p")
        e(f"setp.ne.u32 {p_acc}, {self.kreg}, 0;")
        idesc_op = self.op("tilec.instr_desc")
        step_values = idesc_op.attrs.get("step_values", (idesc_op.attrs["value"],) * self.steps)
        da = self.tile.op("tilec.smem_desc", "A")       # None when A is in TMEM
        db_op = self.op("tilec.smem_desc", "B")
        fmt = metadata_format(self.kind) if self.sparse else None
        sfa, sfb = self.tile.facts.get("scale_layouts", (None, None))
        a_cols = a_columns_per_mma(self.k96)

        def a_operand(s: int) -> str:
            if self.a_tmem:
                a = kb.reg("r")
                e(f"add.u32 {a}, {self.taddr}, {self.plan.a + a_cols * s};")
                return a
            assert da is not None
            return descriptor(kb, self.desc_base[da.attrs.get("lbo_mode", "relative")], da.attrs["values"][s])

        def b_operand(s: int) -> str:
            return descriptor(kb, self.desc_base[db_op.attrs.get("lbo_mode", "relative")], db_op.attrs["values"][s])

        def step_operands(s: int) -> dict[str, str]:
            operands = {}
            if fmt is not None:
                _, col = fmt.selector_and_column(s)
                meta = kb.reg("r")
                e(f"add.u32 {meta}, {self.taddr}, {self.plan.meta + col};")
                operands["meta"] = meta
            if sfa is not None:
                acol, _ = sfa.step_position(s)
                sfb_col, _ = sfb.step_position(s)
                ra, rb = kb.regs("r", 2)
                e(f"add.u32 {ra}, {self.taddr}, {self.plan.sfa + acol};")
                e(f"add.u32 {rb}, {self.taddr}, {self.plan.sfb + sfb_col};")
                operands["scale_a"], operands["scale_b"] = ra, rb
            return operands

        primer = None
        if self.priming:
            # fill the collector: same operands, product into the scratch region (see collector_priming)
            buffer = str(self.form.collector).split("::")[0]
            prime = replace(self.form, collector=f"{buffer}::fill", ashift=False, disable_output_lane=False,
                            scale_input_d=False)
            primer = (prime, f"[{self.scratch}]", self.p_false)
        issue_mmas(kb, self.form, f"[{self.taddr}]", self.steps, a_operand=a_operand, b_operand=b_operand,
                   step_operands=step_operands, idesc=lambda s: self.idesc_regs[int(step_values[s])],
                   first_enable=p_acc, enable=self.p_true, extra=self.extra, mbar=self.mbar,
                   cta_mask=self.cta_mask if self.cta_group == 2 else None, primer=primer)
        kb.put_label(skip)

    # ---- epilogue --------------------------------------------------------------------------------
    def epilogue(self) -> None:
        """TMEM -> registers -> global D, 8 columns at a time (tcgen05.ld.32x32b.x8), through the data-path
        layout (isa.tmem.DataPath.lane_d_role)."""
        kb, e, spec, dp = self.kb, self.e, self.spec, self.dp
        kb.comment(f"epilogue: D in data-path layout {dp.layout} ({dp.organization}, {dp.rows} rows per CTA)")
        row, col0 = kb.regs("r", 2)
        p_row = kb.reg("p")
        if dp.organization == "full":
            e(f"mov.u32 {row}, {self.tid};")
            e(f"mov.u32 {col0}, 0;")
            e(f"setp.lt.u32 {p_row}, {self.tid}, {THREADS};")
        elif dp.organization == "half":
            # Layout C / F, lane alignment 0: row i in lane 32*(i>>4) + (i&15), so warp w holds rows
            # 16w..16w+15 in its first 16 lanes; the other 16 lanes hold nothing
            lane = kb.reg("r")
            e(f"and.b32 {lane}, {self.tid}, 31;")
            e(f"mad.lo.u32 {row}, {self.warp}, 16, {lane};")
            e(f"setp.lt.u32 {p_row}, {lane}, 16;")
            e(f"mov.u32 {col0}, 0;")
        else:
            # Layouts B / E / G: lane group g = L / rows holds columns [g*N/folds, (g+1)*N/folds)
            grp = kb.reg("r")
            e(f"and.b32 {row}, {self.tid}, {dp.rows - 1};")
            e(f"shr.u32 {grp}, {self.tid}, {log2(dp.rows)};")
            e(f"mul.lo.u32 {col0}, {grp}, {dp.d_columns(spec.n)};")
            e(f"setp.lt.u32 {p_row}, {self.tid}, {THREADS};")
        esz = self.d_type.bits // 8
        grow, roff = kb.regs("r", 2)
        rofw, dbase = kb.regs("rd", 2)
        e(f"add.u32 {grow}, {self.m0}, {row};")
        e(f"add.u32 {roff}, {self.n0}, {col0};")
        # element grow * n_total + column in 64 bits (m_total x n_total elements can exceed 2^32)
        kb.wide_offset(rofw, grow, self.n_total, roff)
        kb.scale64(rofw, esz, 1)
        e(f"add.u64 {dbase}, {self.gptr['D']}, {rofw};")
        col = kb.reg("r")
        e(f"mov.u32 {col}, 0;")
        top = kb.label("store_d")
        kb.put_label(top)
        ta = kb.reg("r")
        e(f"add.u32 {ta}, {self.twarp}, {col};")
        v = kb.regs("r", 8)
        e(f"tcgen05.ld.sync.aligned.32x32b.x8.b32 {{{', '.join(v)}}}, [{ta}];")
        e("tcgen05.wait::ld.sync.aligned;")
        cw, addr = kb.regs("rd", 2)
        e(f"mul.wide.u32 {cw}, {col}, {esz};")
        e(f"add.u64 {addr}, {dbase}, {cw};")
        if esz == 4:
            e(f"@{p_row} st.global.v4.b32 [{addr}], {{{', '.join(v[:4])}}};")
            e(f"@{p_row} st.global.v4.b32 [{addr}+16], {{{', '.join(v[4:])}}};")
        else:
            # A 16-bit D occupies the low half of its own 32-bit TMEM column (PTX 9.7.16.10.4.1).
            h = kb.regs("h", 8)
            for hi, vi in zip(h, v):
                e(f"cvt.u16.u32 {hi}, {vi};")
            e(f"@{p_row} st.global.v4.b16 [{addr}], {{{', '.join(h[:4])}}};")
            e(f"@{p_row} st.global.v4.b16 [{addr}+8], {{{', '.join(h[4:])}}};")
        kb.count_up(col, 8, kb.reg("p"), dp.d_columns(spec.n), top, uni=False)

    def teardown(self) -> None:
        from ..isa.tcgen05_forms import tcgen05_dealloc

        kb, e = self.kb, self.e
        self.thread_sync()                  # both CTAs of a pair are done with TMEM before it is freed
        skip = kb.label("dealloc_done")
        e(f"@!{self.p_w0} bra {skip};")
        e(tcgen05_dealloc(self.taddr, self.plan.allocated, self.cta_group))
        kb.put_label(skip)
        if self.cta_group == 2:
            self.sync()                     # neither CTA exits while its peer may still reach its memory

    # ---- ABI ------------------------------------------------------------------------------------
    def abi(self) -> dict:
        spec = self.spec
        d_type = self.d_type
        grid_x = f"2 * n_total / {spec.n}" if self.cta_group == 2 else f"n_total / {spec.n}"
        params = [
            {"name": "A", "type": "u64", "layout": _global_layout(spec, "A", self.kind)},
            {"name": "B", "type": "u64", "layout": _global_layout(spec, "B", self.kind)},
            {"name": "D", "type": "u64", "layout": f"[m_total][n_total] {d_type.name} row-major"},
        ]
        if self.scaled:
            sfa, _ = self.tile.facts["scale_layouts"]
            per_row = spec.total_k // self.mma_k * sfa.nsf
            sf_type = self.tile.facts.get("scale_type") or "ue8m0"
            params += [{"name": "SFA", "type": "u64", "layout": f"[m_total][{per_row}] {sf_type}"},
                       {"name": "SFB", "type": "u64", "layout": f"[n_total][{per_row}] {sf_type}"}]
        meta = self.tile.facts.get("tcgen05_metadata")
        if meta is not None and meta.source == "runtime":
            params.append({"name": "META", "type": "u64",
                           "layout": f"[m_total][{meta.words_per_row}] u32, word w of row r = 4-bit codes of "
                                     f"chunks 8w..8w+7 ({meta.chunk} elements per chunk)"})
        if self.dump:
            params.append({"name": "S", "type": "u64",
                           "layout": f"[gridDim.y*gridDim.x][{self.n_stages}][{self.smem_bytes}] bytes"})
        params += [{"name": "m_total", "type": "u32", "constraint": f"multiple of {spec.m}"},
                   {"name": "n_total", "type": "u32", "constraint": f"multiple of {spec.n}"}]
        grid = [grid_x, f"m_total / {spec.m}", "1"]
        abi = {
            "params": params,
            "grid": grid,
            "limits": launch_limits(("m_total", "n_total"), grid),
            "block": [THREADS, 1, 1],
            "k": spec.total_k,
            "k_block": self.k_block,
            "n_stages": self.n_stages,
        }
        if self.cta_group == 2:
            abi["cluster"] = [2, 1, 1]
        if self.dump:
            abi.update({
                "variant": SMEM_DUMP,
                "target": SMEM_DUMP_TARGET,
                "shared_bytes": self.smem_bytes,
                "smem_dump": {
                    "param": "S",
                    "offset": "((blockIdx.y * gridDim.x + blockIdx.x) * n_stages + stage) * smem_bytes",
                    "smem_bytes": self.smem_bytes,
                    "n_stages": self.n_stages,
                    "regions": {op.sym: {"offset": op.attrs["offset"], "size": op.attrs["size"],
                                         "major": op.attrs["major"], "swizzle": op.attrs["swizzle"],
                                         "k_block": op.attrs["k_block"]}
                                for op in self.tile.ops("tilec.smem_layout")},
                },
            })
        else:
            abi.update({"shared_bytes": max(self.smem_bytes, 16) + 12,
                        "tmem_columns": self.plan.allocated,
                        "data_path": self.dp.layout})
        return abi


def emit_tcgen05_kernel(tile: Op, variant: str | None = None) -> tuple[str, dict]:
    """(PTX text of the .entry without the module header, ABI dict) for one tcgen05 tile."""
    return _Kernel(tile, variant).emit()


def stage_scale_factors(kb: PtxBuilder, layouts, steps: int, extents, tid: str, kreg: str, rows, pointers, columns,
                        pitch: int | str, aligned: bool, taddr: str) -> None:
    """SFA / SFB of K stage `kreg` -> TMEM (isa.tmem.ScaleLayout): 32-row slices in every lane partition.
    Global memory holds each row's factors compactly in K order (nsf per MMA, `pitch` bytes a row, a
    register when K comes at run time); in TMEM MMA s starts at stream byte s * stride, the bytes between
    (K = 96 block32: the fourth of each word) are zero. `tid`: the thread's index in the four lane
    quarters (0..127); `rows`: first row of A / B; `columns`: first TMEM column of SFA / SFB; `aligned`:
    rows and stages are whole words. Also used by the warp-specialised kernel's staging warps."""
    e = kb.emit
    sfa, sfb = layouts
    stage_bytes = steps * sfa.nsf            # global bytes of one stage of a row
    groups = -(-sfa.stream_bytes(steps) // 4)
    # global byte (within the row's stage) of each TMEM byte of each group; None = padding
    sources = []
    for g in range(groups):
        row = []
        for b in range(4 * g, 4 * g + 4):
            src = sfa.byte_source(b)
            row.append(None if src is None or src[0] >= steps else src[0] * sfa.nsf + src[1])
        sources.append(row)
    r0 = kb.reg("r")
    e(f"and.b32 {r0}, {tid}, 31;")
    for name, lay, extent, base_row, col0, ptr in zip(("SFA", "SFB"), layouts, extents, rows, columns, pointers):
        kb.comment(f"{name} -> TMEM columns {col0}..{col0 + lay.columns(steps) - 1} "
                   f"({lay.nsf} per MMA{f' every {lay.step_bytes} bytes' if lay.step_bytes != lay.nsf else ''}, "
                   f"{lay.slices} column(s) per 4-byte group)")
        cells: list[list[str]] = [[] for _ in range(groups)]
        for s in range(lay.slices):
            idx = kb.reg("r")
            if lay.halves == 2:
                half = extent // 2
                h = kb.reg("r")
                e(f"add.u32 {idx}, {r0}, {32 * s};")
                e(f"min.u32 {idx}, {idx}, {half - 1};")      # lanes past N/2 hold no column
                e(f"shr.u32 {h}, {tid}, 6;")
                e(f"mad.lo.u32 {idx}, {h}, {half}, {idx};")
            else:
                e(f"add.u32 {idx}, {r0}, {32 * s};")
                e(f"min.u32 {idx}, {idx}, {extent - 1};")    # lanes past the extent hold nothing
            grow = kb.reg("r")
            e(f"add.u32 {grow}, {base_row}, {idx};")
            # row * pitch in 64 bits; the stage's offset within the row (< pitch) in 32
            off, offw, addr = kb.reg("r"), kb.reg("rd"), kb.reg("rd")
            e(f"mul.lo.u32 {off}, {kreg}, {stage_bytes};")
            kb.wide_offset(offw, grow, pitch, off)
            e(f"add.u64 {addr}, {ptr}, {offw};")
            for g, src in enumerate(sources):
                word = kb.reg("r")
                first = src[0]
                if aligned and first is not None and first % 4 == 0 and src == list(range(first, first + 4)):
                    e(f"ld.global.b32 {word}, [{addr}+{first}];")     # word-aligned: one 32-bit load
                    cells[g].append(word)
                    continue
                e(f"mov.b32 {word}, 0;")
                for i, at in enumerate(src):
                    if at is None:
                        continue
                    byte = kb.reg("r")
                    e(f"ld.global.u8 {byte}, [{addr}+{at}];")
                    e(f"bfi.b32 {word}, {byte}, {word}, {8 * i}, 8;")
                cells[g].append(word)
        for g in range(groups):
            _tmem_store(kb, taddr, cells[g], col0 + g * lay.slices)


def metadata_cells(kb: PtxBuilder, meta, fmt, words: int, lam: str, kreg: str, m0: str, meta_ptr: str) -> list[str]:
    """The TMEM cells (one register per column) of logical lane `lam`'s sparse metadata for K stage `kreg`
    of rows from `m0` (isa.tmem.metadata_cell: row8 = the row's words; shared16 = rows m and m+8 share a
    32-bit cell, 9.7.16.10.8.4), loaded from META (runtime) or the embedded table (static). Also used by
    the warp-specialised kernel's staging warps (tcgen05_ws_kernel.py)."""
    e = kb.emit
    w0 = kb.reg("r")
    e(f"mul.lo.u32 {w0}, {kreg}, {words};")      # first word of the stage in a row

    def row_words(row_reg: str) -> list[str]:
        grow = kb.reg("r")
        e(f"add.u32 {grow}, {m0}, {row_reg};")
        base = kb.reg("rd")
        if meta.source == "runtime":
            # word grow * words_per_row + w0 in 64 bits (m_total rows of K/(8*chunk) words)
            iw = kb.reg("rd")
            kb.wide_offset(iw, grow, meta.words_per_row, w0)
            e(f"shl.b64 {iw}, {iw}, 2;")
            e(f"add.u64 {base}, {meta_ptr}, {iw};")
            out = kb.regs("r", words)
            for w in range(words):
                e(f"ld.global.b32 {out[w]}, [{base}+{4 * w}];")
            return out
        # static: the pattern table repeats every period_rows rows and period_words words
        prow, idx = kb.regs("r", 2)
        e(f"rem.u32 {prow}, {grow}, {meta.period_rows};")
        out = kb.regs("r", words)
        for w in range(words):
            col = kb.reg("r")
            e(f"add.u32 {col}, {w0}, {w};")
            e(f"rem.u32 {col}, {col}, {meta.period_words};")
            e(f"mad.lo.u32 {idx}, {prow}, {meta.period_words}, {col};")
            iw, a = kb.reg("rd"), kb.reg("rd")
            e(f"mul.wide.u32 {iw}, {idx}, 4;")
            e(f"add.u64 {a}, {meta_ptr}, {iw};")
            e(f"ld.global.b32 {out[w]}, [{a}];")
        return out

    if fmt.name == "row8":
        cells = row_words(lam)
    else:
        # shared16: rows m = 16*(λ>>4) + (λ&7) and m+8; half j = (λ>>3)&1 selects the 16 bits
        hi, lo, m_lo, m_hi, j, sh = kb.regs("r", 6)
        e(f"shr.u32 {hi}, {lam}, 4;")
        e(f"and.b32 {lo}, {lam}, 7;")
        e(f"mad.lo.u32 {m_lo}, {hi}, 16, {lo};")
        e(f"add.u32 {m_hi}, {m_lo}, 8;")
        e(f"bfe.u32 {j}, {lam}, 3, 1;")
        e(f"shl.b32 {sh}, {j}, 4;")
        lo_words, hi_words = row_words(m_lo), row_words(m_hi)
        cells = kb.regs("r", words)
        for w in range(words):
            t, u = kb.regs("r", 2)
            e(f"shr.b32 {t}, {lo_words[w]}, {sh};")
            e(f"and.b32 {t}, {t}, 0xFFFF;")
            e(f"shr.b32 {u}, {hi_words[w]}, {sh};")
            e(f"shl.b32 {u}, {u}, 16;")
            e(f"or.b32 {cells[w]}, {t}, {u};")
    return cells


def _tmem_container_bits(dtype: str, kind: str) -> int:
    """Bits per element of A in TMEM: fp4/fp6 under f8f6f4/mxf8f6f4 one per byte (PTX 9.7.16.10.4.3),
    packed fp4 under mxf4*, else the type's width."""
    from ..isa.tcgen05_kinds import SUBBYTE_CONTAINER_BITS

    bits = TYPES[dtype].bits
    return max(bits, SUBBYTE_CONTAINER_BITS.get(kind, bits)) if bits < 8 else bits


def _global_layout(spec, name: str, kind: str) -> str:
    o = spec.operands[name]
    mn = "m_total" if name == "A" else "n_total"
    major = o.major or "K"
    k = spec.total_k // 2 if (name == "A" and spec.sparsity is not None) else spec.total_k
    if o.space == "tmem":
        bits = _tmem_container_bits(o.dtype, kind)
        note = "" if bits == TYPES[o.dtype].bits else f", one value per byte (TMEM container)"
        return f"[{mn}][{k}] {o.dtype} row-major (K-major{note})"
    bits = TYPES[o.dtype].bits
    packing = " packed" if bits < 8 else ""
    return (f"[{mn}][{k}] {o.dtype}{packing} row-major (K-major)" if major == "K"
            else f"[{k}][{mn}] {o.dtype}{packing} row-major (MN-major)")


def _emit_copy(kb: PtxBuilder, spec, name, lay_op: Op, gbase, sbase, tid, kreg, mn0, mn_total):
    """Cooperative global -> shared copy of one K stage of operand `name` in 16-byte chunks."""
    lay = lay_op.facts["layout"]
    cm = lay.copy_map()
    e = kb.emit
    total = cm.lines * cm.chunks_per_line
    kb.comment(f"copy {name}: {lay.mn}x{lay.k} {lay.dtype}, {lay.major}-major, swizzle {lay.swizzle}, "
               f"{total} chunks of 16 B ({lay.storage})")
    with kb.strided_loop(f"copy_{name}", tid, total, THREADS) as c:
        line, chunk = kb.regs("r", 2)
        cpl = cm.chunks_per_line
        if is_pow2(cpl):
            e(f"shr.u32 {line}, {c}, {log2(cpl)};")
            e(f"and.b32 {chunk}, {c}, {cpl - 1};")
        else:
            e(f"div.u32 {line}, {c}, {cpl};")
            e(f"rem.u32 {chunk}, {c}, {cpl};")
        coord = {"line": line, "chunk": chunk}
        off = kb.reg("r")
        e(f"mov.u32 {off}, {lay_op.attrs['offset']};")
        for t in cm.terms:
            v = kb.reg("r")
            src = coord[t.coord]
            if t.shift:
                e(f"shr.u32 {v}, {src}, {t.shift};")
                src = v
            if t.width is not None:
                e(f"and.b32 {v}, {src}, {(1 << t.width) - 1};")
                src = v
            e(f"mad.lo.u32 {off}, {src}, {t.stride}, {off};")
        if cm.swizzle_bits:
            # Swizzle<B,M,S> on byte addresses: bits [M,M+B) ^= bits [M+S,M+S+B). Swizzle<B,4,3> for
            # 32B/64B/128B (PTX 9.7.16.3.3); Swizzle<2,5,2> for 128B_base32B (32-byte granules, see
            # compiler/layout.py). The buffer is 1024-B aligned, so swizzling the offset equals swizzling
            # the address.
            s = kb.reg("r")
            e(f"shr.u32 {s}, {off}, {cm.swizzle_shift};")
            e(f"and.b32 {s}, {s}, {((1 << cm.swizzle_bits) - 1) << cm.swizzle_base};")
            e(f"xor.b32 {off}, {off}, {s};")
        # Global address of the chunk. Global memory holds the elements packed at their value width
        # (PTX 5.5.1.1.1: sub-byte tensors are "packed contiguously in the global memory"); a chunk of
        # shared memory holds `data_bytes_per_chunk` of them and, for the padded f8f6f4 formats
        # .b4x16_p64 / .b6x16_p32, zero padding up to 16 bytes (PTX 9.7.16.10.4.4; compiler/layout.py).
        vbits = lay.elem_bits
        data_bytes = lay.data_bytes_per_chunk
        k_stored = spec.total_k // 2 if (name == "A" and spec.sparsity is not None) else spec.total_k
        row_bytes_k = k_stored * vbits // 8
        stage_k_bytes = lay.k * vbits // 8
        # Offsets that grow with m_total / n_total are 64-bit (a row of m_total < 2^31 times its bytes can
        # exceed 2^32); the offset within a row (K-major: kreg*stage bytes + chunk bytes < the row's
        # K*bits/8 bytes, an immediate the IR verifier checks against u32) or within the stage's chunk
        # run (MN-major: chunk*data bytes < 16 * chunks per line) stays 32-bit.
        g, o = kb.regs("r", 2)
        gw, ow, ga = kb.regs("rd", 3)
        if lay.major == "K":
            # element (mn0 + line, kreg*k_block + chunk*T) of a [mn_total][K] row-major array
            e(f"add.u32 {g}, {mn0}, {line};")            # a row < mn_total < 2^31
            e(f"mul.lo.u32 {o}, {kreg}, {stage_k_bytes};")
            e(f"mad.lo.u32 {o}, {chunk}, {data_bytes}, {o};")
            kb.wide_offset(gw, g, row_bytes_k, o, ow)
        else:
            # element (kreg*k_block + line, mn0 + chunk*T) of a [K][mn_total] row-major array (MN-major
            # operands are never sub-byte: PTX 9.7.16.10.1, so value and container widths agree):
            # (krow * mn_total + mn0) elements, then bytes
            krow = kb.reg("r")
            e(f"mad.lo.u32 {krow}, {kreg}, {lay.k}, {line};")     # a K row < the loop K
            kb.wide_offset(gw, krow, mn_total, mn0, ow)
            kb.scale64(gw, vbits, 8)
            e(f"mul.lo.u32 {o}, {chunk}, {data_bytes};")
            e(f"cvt.u64.u32 {ow}, {o};")
            e(f"add.u64 {gw}, {gw}, {ow};")
        e(f"add.u64 {ga}, {gbase}, {gw};")
        x = kb.regs("r", 4)
        _emit_chunk_load(kb, x, ga, data_bytes)
        sa = kb.reg("r")
        e(f"add.u32 {sa}, {sbase}, {off};")
        e(f"st.shared.v4.b32 [{sa}], {{{', '.join(x)}}};")


# 16-byte chunk loads by the bytes of data a chunk holds: 16 (every full-width type, packed fp4),
# 8 (.b4x16_p64: 16 fp4 values; 8-byte aligned since rows are multiples of 16 B) and 12 (.b6x16_p32:
# 16 fp6 values; only 4-byte aligned, chunk * 12). Missing words are the zero padding.
_CHUNK_LOADS = {16: ("v4", 4), 8: ("v2", 2), 12: (None, 3)}


def _emit_chunk_load(kb: PtxBuilder, x: list[str], addr: str, data_bytes: int) -> None:
    vec, words = _CHUNK_LOADS[data_bytes]
    e = kb.emit
    if vec:
        e(f"ld.global.{vec}.b32 {{{', '.join(x[:words])}}}, [{addr}];")
    else:
        for i in range(words):
            e(f"ld.global.b32 {x[i]}, [{addr}+{4 * i}];")
    for reg in x[words:]:
        e(f"mov.b32 {reg}, 0;")
