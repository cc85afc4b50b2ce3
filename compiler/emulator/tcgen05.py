"""Run a tilec tcgen05 kernel on the CPU: the tcgen05 kernel's machine over the one PTX parser
(compiler/emulator/parse.py), with Tensor Memory, mbarriers and `tcgen05.mma` itself delegated to the
reference model (compiler/sim).

For tests (no Blackwell GPU here): the global->shared copies, the descriptors, the TMEM staging of A,
metadata and scale factors, the MMA issue loop and the epilogue are all executed as emitted; only the
MMA's arithmetic comes from `compiler.sim.tcgen05.mma`, which reads shared memory through the
descriptors and the sparse metadata through its own (PTX-ISA-derived) rules. The emulator's own readers
of Tensor Memory (D through the data-path layouts, scale factors) are written from the PTX / CUTLASS
text independently of compiler/isa/tmem.py.

Checks the hardware would make or that PTX demands: a warp touches only its TMEM lane quarter
(9.7.16.8.3), tcgen05.st/ld addresses stay inside the allocation, `::use` / `::lastuse` collector reads
follow a `::fill` with the same operand (9.7.16.10.9.1), every tcgen05 op of a kernel uses one
cta_group, scale factors are repeated in all four lane partitions (9.7.16.10.7).

Execution: the warp machine of compiler/emulator/warp.py (warps of a cluster interleaved, divergent
branches, bar.sync, barrier.cluster, mbarrier phases) with Tensor Memory per CTA and the tcgen05 family
added here. By default an MMA is performed when it is issued and `tcgen05.commit` arrives at once; under a
scheduling policy of the warp machine ("adversarial", "random") both are queued in issue order and
complete later (`_issue_mma`: the operands in registers are read at issue, shared memory at completion,
and a change of those bytes in between is an error), D's TMEM columns are pending until then
(`tcgen05.ld` / `st` of them fails: the wait on the commit's mbarrier is missing), and allocation past
512 columns fails (9.7.16.7.1). `.ashift` shifts A's rows in TMEM after the product (`Machine._ashift`). Not
modelled: data-path layouts the reference model lacks for A in TMEM / metadata (it raises SpecError).

numpy is imported here: this module is for tests and host tools, never on the compile path.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from .memory import FlatMemory
from .parse import EmulationError, Kernel, address, parse_kernel, vector
from .warp import Cta, Pending, Warp, WarpMachine

THREADS = 128
TMEM_LANES, TMEM_COLS = 128, 512


# --------------------------------------------------------------------------------------------------
# Memory

@dataclass(frozen=True)
class _Issued:
    """The opcode and operands of an instruction one thread issues (what the MMA reads)."""
    op: str
    args: tuple


class _Lane:
    """One thread of a warp, for the instructions one thread issues (tcgen05.mma, tcgen05.commit).
    `frozen`: the thread's register operands as they were at issue (an MMA completing later reads those,
    not what the registers hold by then)."""
    __slots__ = ("w", "lane", "cta", "frozen")

    def __init__(self, w: Warp, lane: int, frozen: dict | None = None):
        self.w, self.lane, self.cta, self.frozen = w, lane, w.cta, frozen


_REG = re.compile(r"%[\w.]+")


def _qualifier(op: str, name: str) -> str:
    m = re.search(rf"{name}::(\w+)", op)
    if m is None:
        raise EmulationError(f"{op} has no .{name}")
    return m.group(1)


class Machine(WarpMachine):
    """The warp machine (compiler/emulator/warp.py) with Tensor Memory and the tcgen05 family. `args` maps
    the kernel's parameter names (without the `<kernel>_param_` prefix) to arrays (u64 parameters: global
    buffers; D and S writable) or integers (u32 parameters, and u64 sizes such as batch_stride_c)."""

    def __init__(self, kernel: Kernel, args: dict[str, np.ndarray | int], grid: tuple[int, int],
                 sim_options: dict | None = None, shared_base: int = 0, record_ashift: bool = False,
                 order: str = "forward", seed: int = 0, policy: str | None = None, dynamic_smem: int = 0,
                 dynamic_at: int | None = None, tensor_maps: list[dict] | None = None, resident: int | None = None):
        mem = FlatMemory()
        params: dict[str, int] = {}
        # operands read through tensor maps (TMA) only: no thread may load them
        tma_only = {t["operand"] for t in tensor_maps or ()}
        for name in tma_only:             # D: written through its tensor map (the TMA store) only
            mem.add(name, np.asarray(args[name]), loadable=False, writable=name == "D")
        for full, ptype in kernel.params:
            name = kernel.param_short(full)
            value = args[name]
            if ptype == "bytes":        # by value (the tensor maps): an address the host laid out, never loadable
                params[full] = mem.add(name, np.asarray(value, np.uint8), loadable=False)
            elif ptype == "u64" and not isinstance(value, (int, np.integer)):     # a buffer (an int: a u64 size)
                params[full] = mem.add(name, np.asarray(value), writable=name in ("D", "S"),
                                       loadable=name != "tensor_maps")
            else:
                params[full] = int(value)
        # TMA reads take the parameters the runtime gives cuTensorMapEncodeTiled (dims, strides, box,
        # swizzle) and the operand's address, not the opaque 128 bytes of each map; maps in a by-value
        # parameter (.param space) need no fence.proxy.tensormap, maps in global memory do (PTX 9.7.9.25.5.1)
        in_param = any(kernel.param_short(full) == "tensor_maps" and ptype == "bytes" for full, ptype in kernel.params)
        tmaps = {}
        for i, t in enumerate(tensor_maps or ()):
            tmaps[mem.address("tensor_maps") + 128 * i] = {
                **t, "address": mem.address(t["operand"]), "elem_bytes": {0: 1, 1: 2, 2: 4}[t["data_type"]],
                "swizzle": {0: "none", 1: "32B", 2: "64B", 3: "128B"}[t["swizzle"]], "param": in_param}
        threads = kernel.reqntid[0] if kernel.reqntid else THREADS
        # shared address of the first .shared symbol: 0 by default; a nonzero base (e.g. 1024, past the
        # reserved shared memory of sm_90+ parts) checks that addresses baked into descriptors are relocated
        super().__init__(kernel, mem, params, grid, threads, order=order, rng=seed, shared_base=shared_base,
                         garbage_smem=False, policy=policy, dynamic_smem=dynamic_smem, dynamic_at=dynamic_at,
                         tensor_maps=tmaps, resident=resident)
        self.gmem = mem
        self.sim_options = sim_options or {}
        self.cta_groups: set[int] = set()
        self.collector: dict[str, tuple | None] = {}
        self.mma_count = 0
        # (ctaid, shared memory) of every CTA the MMAs of a stage read, at the stage's commit
        self.smem_snapshots: list[tuple[tuple[int, int], np.ndarray]] = []
        # with record_ashift: every .ashift's TMEM A columns before and after it, per CTA (for tests)
        self.tmem_log: list[dict] | None = [] if record_ashift else None

    # ---- CTAs with Tensor Memory ------------------------------------------------------------------
    def new_cta(self, rank, ctaid, smem, lo, symbols) -> Cta:
        cta = super().new_cta(rank, ctaid, smem, lo, symbols)
        cta.tmem = np.zeros((TMEM_LANES, TMEM_COLS), dtype=np.uint64)
        cta.allocated = 0
        cta.tmem_pending = {}           # id -> (first column, end column, who): D of MMAs not completed
        cta.tmem_reading = {}           # id -> (first column, end column, who): TMEM operands of those MMAs
        return cta

    def cluster_done(self, ctas) -> None:
        super().cluster_done(ctas)
        for c in ctas:
            if c.allocated:
                raise EmulationError(f"CTA {c.ctaid} exited with {c.allocated} TMEM columns allocated")

    # ---- one thread's operands ---------------------------------------------------------------------
    def _lval(self, th: _Lane, a: str) -> int:
        if th.frozen is not None and a in th.frozen:
            return th.frozen[a]
        return int(self.val(th.w, a)[th.lane])

    def _laddr(self, th: _Lane, a: str) -> int:
        if th.frozen is not None:
            base, off = address(a)
            if base in th.frozen:
                return th.frozen[base] + off
        return int(self.addr(th.w, a)[th.lane])

    def _freeze(self, w: Warp, lane: int, ops) -> dict:
        """The register operands of one thread's instruction, read now (at issue)."""
        out = {}
        for x in ops:
            for name in _REG.findall(x):
                if name in w.r or name.startswith("%"):
                    try:
                        out[name] = int(self.val(w, name)[lane])
                    except EmulationError:
                        pass
        return out

    # ---- tcgen05 -------------------------------------------------------------------------------
    def execute(self, w: Warp, op: str, ops, act) -> None:
        if not op.startswith("tcgen05."):
            super().execute(w, op, ops, act)
            return
        what = op.split(".")[1]
        cta = w.cta
        if what.startswith("fence") or what.startswith("wait") or what == "relinquish_alloc_permit":
            if "cta_group::" in op:
                self._cta_group(op)
        elif what == "alloc":                      # .sync.aligned: the warp allocates once
            self._cta_group(op)
            ncols = int(self.val(w, ops[1])[act][0])
            # 9.7.16.7.1: a power of 2 from 32 to 512 columns; the CTA's allocations share 512 columns
            if ncols < 32 or ncols > TMEM_COLS or ncols & (ncols - 1):
                raise EmulationError(f"tcgen05.alloc of {ncols} columns (a power of 2, 32..{TMEM_COLS})")
            if cta.allocated + ncols > TMEM_COLS:
                raise EmulationError(f"TMEM over-allocation: {ncols} columns on top of {cta.allocated} allocated "
                                     f"exceed the {TMEM_COLS} columns of the CTA's Tensor Memory")
            # the TMEM address (lane 0, first free column) goes to shared memory
            self.swrite(cta, int(self.addr(w, ops[0])[act][0]),
                        np.array([cta.allocated], np.uint32).view(np.uint8))
            cta.allocated += ncols
        elif what == "dealloc":
            self._cta_group(op)
            if cta.tmem_pending:
                raise EmulationError("tcgen05.dealloc while " + next(iter(cta.tmem_pending.values()))[2] +
                                     " still writes the columns")
            cta.allocated -= int(self.val(w, ops[1])[act][0])
        elif what in ("st", "ld"):
            self._tmem_move(w, op, ops, act, store=what == "st")
        elif what == "mma":
            self._cta_group(op)
            for lane in np.flatnonzero(act):
                if self.policy is None:
                    self._mma(_Lane(w, int(lane)), _Issued(op, ops))
                else:
                    self._issue_mma(_Lane(w, int(lane), self._freeze(w, int(lane), ops)), _Issued(op, ops))
        elif what == "cp":
            self._cta_group(op)
            for lane in np.flatnonzero(act):
                if self.policy is None:
                    self._cp(_Lane(w, int(lane)), _Issued(op, ops))
                else:
                    self._issue_cp(_Lane(w, int(lane), self._freeze(w, int(lane), ops)), _Issued(op, ops))
        elif what == "commit":
            self._cta_group(op)
            for lane in np.flatnonzero(act):
                th = _Lane(w, int(lane))
                for c in (cta.cluster if "cta_group::2" in op else [cta]):
                    self.smem_snapshots.append((c.ctaid, c.smem.copy()))
                addr = self._laddr(th, ops[0])
                targets = [cta]
                if "multicast" in op:
                    mask = self._lval(th, ops[1])
                    targets = [c for c in cta.cluster if mask >> c.rank & 1]
                if self.policy is None:
                    for c in targets:
                        self.bar_arrive(c, addr)
                else:
                    # the mbarrier tracks the completion of every earlier async tcgen05 op of the thread
                    # (9.7.16.11.1): it arrives when the pipe reaches it, after the MMAs before it
                    who = self._who()

                    def arrive(targets=targets, addr=addr, who=who):
                        try:
                            for c in targets:
                                self.bar_arrive(c, addr)
                        except EmulationError as e:
                            raise EmulationError(f"{who}: {e}") from None
                    self.pending.append(Pending(("tcgen05", id(cta)), arrive, who))
        else:
            raise EmulationError(f"unsupported tcgen05 instruction {op}")

    def _tmem_move(self, w: Warp, op: str, ops, act, store: bool) -> None:
        """tcgen05.st / .ld .32x32b (9.7.16.8.3-4): lane t of the warp moves its registers to / from TMEM
        lane (lane field of the address) + t; a warp reaches only its own lane quarter."""
        parts = op.split(".")
        shape = next(p for p in parts if re.fullmatch(r"\d+x\d+b\w*", p))
        if shape != "32x32b":
            raise EmulationError(f"tcgen05 shape {shape} not modelled")
        addrs = self.addr(w, ops[0] if store else ops[1])[act]
        if not (addrs == addrs[0]).all():
            raise EmulationError("tcgen05.st/ld address not uniform across the warp")
        addr = int(addrs[0])
        regs = vector(ops[1] if store else ops[0])
        lane0, col0 = addr >> 16, addr & 0xFFFF
        for first, end, who in (w.cta.tmem_reading.values() if store else ()):
            if col0 < end and first < col0 + len(regs):
                raise EmulationError(f"tcgen05.st writes TMEM columns {col0}..{col0 + len(regs) - 1} that {who} still "
                                     f"reads (metadata / scale factors): the MMA was issued before this write, or the "
                                     f"write "
                                     f"comes before the wait on the MMA's tcgen05.commit")
        for first, end, who in w.cta.tmem_pending.values():
            if col0 < end and first < col0 + len(regs):
                raise EmulationError(f"tcgen05.{'st writes' if store else 'ld reads'} TMEM columns {col0}.."
                                     f"{col0 + len(regs) - 1} that {who} has not finished writing: the wait on "
                                     f"the mbarrier its tcgen05.commit arrives on is missing")
        warp = int(w.tid[0]) // 32
        if lane0 != 32 * (warp % 4):
            raise EmulationError(f"warp {warp} addresses TMEM lanes from {lane0} (9.7.16.8.3: only "
                                 f"{32 * (warp % 4)}..{32 * (warp % 4) + 31})")
        if col0 + len(regs) > w.cta.allocated:
            raise EmulationError(f"TMEM columns {col0}..{col0 + len(regs) - 1} outside the "
                                 f"{w.cta.allocated} allocated")
        lanes = lane0 + np.flatnonzero(act)
        tmem = w.cta.tmem
        for j, reg in enumerate(regs):
            if store:
                tmem[lanes, col0 + j] = self.val(w, reg)[act] & np.uint64(0xFFFFFFFF)
            else:
                full = np.zeros(32, np.uint64)
                full[act] = tmem[lanes, col0 + j]
                self.setr(w, reg, full, act)

    # ---- tcgen05 -------------------------------------------------------------------------------
    def _cta_group(self, op: str) -> None:
        m = re.search(r"cta_group::(\d)", op)
        if m:
            self.cta_groups.add(int(m.group(1)))
            if len(self.cta_groups) > 1:
                raise EmulationError("tcgen05 instructions with different cta_group in one kernel")

    # ---- tcgen05.cp (9.7.16.8.2) ---------------------------------------------------------------
    # rows of the shared-memory source, TMEM lane replicas and 32-bit columns of the shapes modelled:
    # .128x128b row i -> lane i, 4 columns; .128x256b the same, 8 columns (two 16-byte chunks of each row, in
    # K order); .32x128b.warpx4 row i -> lanes i, 32 + i, 64 + i, 96 + i (the four lane quarters)
    _CP = {("128x128b", None): (128, (0,), 4), ("128x256b", None): (128, (0,), 8),
           ("32x128b", "warpx4"): (32, (0, 32, 64, 96), 4)}

    def _cp_target(self, th: _Lane, ins: _Issued) -> tuple[int, int, int, tuple[int, ...], int]:
        """(first lane, first column, source rows, lane replicas, descriptor) of a tcgen05.cp, checked; the
        columns it writes are `_cp_columns(ins)`."""
        q = ins.op.split(".")
        shape = next(p for p in q if re.fullmatch(r"\d+x\d+b", p))
        multicast = next((p for p in q if p.startswith("warpx")), None)
        if (shape, multicast) not in self._CP or any(p.startswith("b8x16") for p in q):
            raise EmulationError(f"tcgen05.cp .{shape}{'.' + multicast if multicast else ''} not modelled")
        rows, replicas, width = self._CP[(shape, multicast)]
        taddr = self._laddr(th, ins.args[0])
        lane0, col0 = taddr >> 16, taddr & 0xFFFF
        if lane0:
            raise EmulationError("tcgen05.cp: the TMEM address's lane field must be 0 for these shapes")
        if col0 % 4:
            raise EmulationError(f"tcgen05.cp to column {col0}: 128-bit columns start at a multiple of 4")
        if col0 + width > th.cta.allocated:
            raise EmulationError(f"tcgen05.cp to TMEM columns {col0}..{col0 + width - 1} outside the "
                                 f"{th.cta.allocated} allocated")
        return lane0, col0, rows, replicas, self._lval(th, ins.args[1])

    def _cp_columns(self, ins: _Issued) -> int:
        q = ins.op.split(".")
        shape = next(p for p in q if re.fullmatch(r"\d+x\d+b", p))
        return self._CP[(shape, next((p for p in q if p.startswith("warpx")), None))][2]

    def _cp_source(self, cta: Cta, desc: int, rows: int, width: int = 4) -> np.ndarray:
        """The source's rows (rows x width u32, `width` / 4 16-byte chunks per row, in K order) read through
        its descriptor (compiler/sim/smem.py: a K-major canonical layout)."""
        from ..sim.smem import chunk_addresses

        try:
            at = chunk_addresses(desc, "K", rows, width // 4)
        except Exception as e:
            raise EmulationError(f"tcgen05.cp source descriptor {desc:#018x}: {e}") from None
        if not (self.in_shared(cta, int(at.min())) and self.in_shared(cta, int(at.max()) + 15)):
            raise EmulationError("tcgen05.cp source outside the CTA's shared memory")
        a = at[:, :, None] + np.arange(16)
        if cta.writing[a].any():
            self.check_shared(cta, a.reshape(-1), "read", self._who())
        return cta.smem[a.reshape(rows, -1)].copy().view(np.uint32).reshape(rows, width)

    def _cp_check(self, cta: Cta, col0: int, who: str, width: int = 4) -> None:
        """At issue: no MMA issued before may still read the columns (the MMAs issued after read them)."""
        for first, end, reader in cta.tmem_reading.values():
            if col0 < end and first < col0 + width:
                raise EmulationError(f"{who} overwrites TMEM columns {col0}..{col0 + width - 1} that {reader} still "
                                     "reads: tcgen05.mma -> tcgen05.cp is not a pipelined pair (9.7.16.6.2); wait on "
                                     "the MMA's tcgen05.commit first")

    @staticmethod
    def _cp_write(cta: Cta, col0: int, replicas, words: np.ndarray) -> None:
        rows, width = words.shape
        for r0 in replicas:
            cta.tmem[r0:r0 + rows, col0:col0 + width] = words.astype(np.uint64)

    def _cp_ctas(self, th: _Lane, ins: _Issued) -> list:
        """The CTAs a copy writes: .cta_group::2 copies in both CTAs of the pair, each from its own shared
        memory at the descriptor's address into its own TMEM (9.7.16.8.2)."""
        return th.cta.cluster if "cta_group::2" in ins.op else [th.cta]

    def _cp(self, th: _Lane, ins: _Issued) -> None:
        _, col0, rows, replicas, desc = self._cp_target(th, ins)
        width = self._cp_columns(ins)
        for cta in self._cp_ctas(th, ins):
            self._cp_check(cta, col0, self._who(), width)
            self._cp_write(cta, col0, replicas, self._cp_source(cta, desc, rows, width))

    def _issue_cp(self, th: _Lane, ins: _Issued) -> None:
        """An asynchronous tcgen05.cp (the scheduling policies): it joins the thread's tcgen05 queue, so it
        completes before a later tcgen05.mma of the thread (tcgen05.cp -> tcgen05.mma is a pipelined pair,
        9.7.16.6.2) and before a later tcgen05.commit arrives; it reads shared memory when it completes, and
        a change of those bytes since the issue is an error (the slot refilled before the commit's wait)."""
        _, col0, rows, replicas, desc = self._cp_target(th, ins)
        width = self._cp_columns(ins)
        who, ctas = self._who(), self._cp_ctas(th, ins)
        issued = []
        token = object()
        for cta in ctas:
            self._cp_check(cta, col0, who, width)
            issued.append(self._cp_source(cta, desc, rows, width))
            cta.tmem_pending[id(token)] = (col0, col0 + width, who)

        def complete():
            for cta, then in zip(ctas, issued):
                cta.tmem_pending.pop(id(token))
                now = self._cp_source(cta, desc, rows, width)
                if not np.array_equal(now, then):
                    raise EmulationError(f"{who}: the shared memory it copies (CTA {cta.rank}) changed between its "
                                         "issue and its completion: a stage overwritten before the wait on its "
                                         "tcgen05.commit")
                self._cp_write(cta, col0, replicas, now)
        self.pending.append(Pending(("tcgen05", id(th.cta)), complete, who))

    # ---- the MMA -------------------------------------------------------------------------------
    def _issue_mma(self, th: _Lane, ins: _Issued) -> None:
        """An asynchronous tcgen05.mma (the scheduling policies): D's columns are pending in every CTA of
        the group until the MMA completes, in issue order, at a point the scheduler picks. It reads shared
        memory when it completes; if those bytes changed since the issue (a stage refilled before the
        commit was waited on) the result would depend on timing: that is an error."""
        from ..sim.tcgen05 import decode_instr_desc

        op = ins.op
        cta_group = int(_qualifier(op, "cta_group"))
        ctas = th.cta.cluster if cta_group == 2 else [th.cta]
        args = list(ins.args)
        d_col = self._laddr(th, args[0]) & 0xFFFF
        idesc = self._lval(th, args[4 if "sp" in op.split(".") else 3])
        f = decode_instr_desc(idesc, _qualifier(op, "kind"))
        n = f.n
        who = self._who()
        token = object()
        # the columns D takes (a folded data path, .ws M = 64 / 32: N / groups)
        d_end = d_col + DataPathLayout(f.m, cta_group, "sp" in op.split("."), "ws" in op.split(".")).columns(n)
        for c in ctas:
            c.tmem_pending[id(token)] = (d_col, d_end, who)
        snapshots = [c.smem.copy() for c in ctas]
        in_flight = [c.writing > 0 for c in ctas]        # bytes an asynchronous copy (TMA) had not landed yet
        # its sparse metadata is read from TMEM at completion too: the 64-bit granule at the metadata address
        # (PTX 9.7.16.10.8.4) may not be written until then
        reads = []
        sparse = "sp" in op.split(".")
        if sparse:
            meta_col = self._laddr(th, args[3]) & 0xFFFF
            reads.append((meta_col, meta_col + 2))
        if args[1].startswith("["):
            # A in TMEM: this MMA's K elements of A, read at completion too (a tcgen05.cp may not overwrite them
            # before the commit's wait)
            from ..sim.numerics import tmem_element_slots

            a_col = self._laddr(th, args[1]) & 0xFFFF
            k_a = f.k // 2 if f.sparse else f.k
            reads.append((a_col, a_col + -(-k_a // tmem_element_slots(f.a_type, _qualifier(op, "kind"))[1])))
        if "block_scale" in op:
            # scale factors: one column per 32 rows of A (M) / columns of B (N) at each address (9.7.16.10.7)
            at = 5 if sparse else 4
            rows = {"sfa": 128, "sfb": n}
            for i, name in enumerate(("sfa", "sfb")):
                col = self._laddr(th, args[at + i]) & 0xFFFF
                reads.append((col, col + -(-rows[name] // 32)))
        for i, (first, end) in enumerate(reads):
            for c in ctas:
                c.tmem_reading[(id(token), i)] = (first, end, who)

        def complete():
            for c in ctas:
                c.tmem_pending.pop(id(token))
                for key in [k for k in c.tmem_reading if k[0] == id(token)]:
                    del c.tmem_reading[key]
            try:
                changed = [c for c, snap in zip(ctas, snapshots) if not np.array_equal(c.smem, snap)]
                if changed:
                    now = [(c.smem, c.tmem.copy()) for c in ctas]
                    for c, snap in zip(ctas, snapshots):
                        c.smem = snap
                    self._mma(th, ins)
                    meant = [c.tmem.copy() for c in ctas]
                    for c, (smem, tmem) in zip(ctas, now):
                        c.smem = smem
                        c.tmem[:] = tmem
                    self._mma(th, ins)
                    self.mma_count -= 1
                    if any(not np.array_equal(c.tmem, m) for c, m in zip(ctas, meant)):
                        late = [c for c, snap, busy in zip(ctas, snapshots, in_flight) if (busy & (c.smem != snap)).any()]
                        if late:
                            raise EmulationError(f"it was issued while a copy into the shared memory it reads (CTA "
                                                 f"{late[0].rank}) had not finished writing: a wait on the copy's "
                                                 f"completion (the slot's full mbarrier) is missing")
                        raise EmulationError(f"shared memory it reads (CTA {changed[0].rank}) changed between its "
                                             f"issue and its completion: a stage overwritten before the wait on "
                                             f"its tcgen05.commit")
                else:
                    self._mma(th, ins)
            except EmulationError as e:
                raise EmulationError(f"{who}: {e}") from None
        self.pending.append(Pending(("tcgen05", id(th.cta)), complete, who))

    def _mma(self, th, ins) -> None:
        from ..sim.tcgen05 import decode_instr_desc

        op = ins.op
        q = op.split(".")
        kind = _qualifier(op, "kind")
        cta_group = int(_qualifier(op, "cta_group"))
        ws, sparse = "ws" in q, "sp" in q
        ashift = "ashift" in q
        vec_q = re.search(r"block_scale(?:\.(block16|block32|scale_vec::\dX))?", op)
        args = list(ins.args)
        d_addr = self._laddr(th, args.pop(0))
        a_arg = args.pop(0)
        b_desc = self._lval(th, args.pop(0))
        meta_addr = self._laddr(th, args.pop(0)) if sparse else None
        idesc = self._lval(th, args.pop(0))
        f = decode_instr_desc(idesc, kind)
        sfa_addr = sfb_addr = None
        if vec_q:
            sfa_addr, sfb_addr = self._laddr(th, args.pop(0)), self._laddr(th, args.pop(0))
        disable = None
        if args and args[0].startswith("{"):
            disable = [self._lval(th, x) for x in vector(args.pop(0))]
        enable = bool(self._lval(th, args.pop(0)))
        scale_input_d = int(args.pop(0), 0) if args and not args[0].startswith("%") else 0
        zcm = self._lval(th, args.pop(0)) if args else None
        ctas = th.cta.cluster if cta_group == 2 else [th.cta]
        # collector bookkeeping (9.7.16.10.9.1 .collector_usage)
        coll = re.search(r"collector::(\w+)::(\w+)", op)
        if coll:
            buffer, use = coll.groups()
            if buffer == "a":       # the A operand: its descriptor, or its TMEM address
                key = ("tmem", self._laddr(th, a_arg)) if a_arg.startswith("[") else ("desc", self._lval(th, a_arg))
            else:                   # .ws buffers hold B
                key = ("desc", b_desc)
            if use == "fill":
                self.collector[buffer] = key
            elif use in ("use", "lastuse"):
                if self.collector.get(buffer) != key:
                    raise EmulationError(f"collector::{buffer}::{use} without a ::fill of the same operand")
                if use == "lastuse":
                    self.collector[buffer] = None
        dl = DataPathLayout(f.m, cta_group, sparse, ws)
        d_col = d_addr & 0xFFFF
        if d_addr >> 16:
            raise EmulationError("d-tmem lane field must be 0 (lane alignment 0)")
        prev = np.concatenate([dl.read(c.tmem, d_col, f.n, f.d_type) for c in ctas], axis=0)
        scale_a = scale_b = None
        if vec_q:
            scale_vec = {"block16": "block16", "block32": "block32", "scale_vec::1X": "1X", "scale_vec::2X": "2X",
                         "scale_vec::4X": "4X", None: None}[vec_q.group(1)]
            scale_a, scale_b = self._scales(ctas, f, kind, scale_vec, sfa_addr, sfb_addr, idesc, dl)
        result = self._mma_math(ctas, f, kind, dl, a_arg, th, b_desc, meta_addr, prev, enable, scale_input_d,
                                zcm, scale_a, scale_b, disable, ws)
        rows = f.m // cta_group
        for i, c in enumerate(ctas):
            dl.write(c.tmem, d_col, result[i * rows:(i + 1) * rows], f.d_type)
        if ashift:
            self._ashift(ctas, f, kind, dl, self._laddr(th, a_arg) & 0xFFFF, ins)
        self.mma_count += 1

    def _ashift(self, ctas, f, kind, dl, a_col: int, ins) -> None:
        """`.ashift` (PTX 9.7.16.10.9.1): after the product, the rows of this MMA's A move down by one row
        in every CTA's Tensor Memory, all but the last (whose old contents are overwritten); row 0 keeps
        its contents (the reading compiler.sim.tcgen05.ashift_rows documents). Rows are found through
        the data-path layout; only the columns holding this MMA's K elements of A change."""
        from ..sim.numerics import tmem_element_slots

        if not ins.args[1].startswith("["):
            raise EmulationError(".ashift needs A in Tensor Memory (PTX 9.7.16.10.9.1)")
        if f.m not in (128, 256):
            raise EmulationError(f".ashift with M = {f.m} (PTX 9.7.16.10.9.1: M = 128 or 256 only)")
        k_a = f.k // 2 if f.sparse else f.k
        per_word = tmem_element_slots(f.a_type, kind)[1]
        cols = slice(a_col, a_col + -(-k_a // per_word))
        if dl.organization == "folded":         # every lane group holds a copy of the rows: shift each
            copies = [np.arange(dl.rows) + dl.rows * g for g in range(128 // dl.rows)]
        else:
            copies = [np.array([dl.row_lane(i) for i in range(dl.rows)])]
        for c in ctas:
            before = c.tmem[:, cols].copy()
            for lanes in copies:
                c.tmem[lanes[1:], cols] = before[lanes[:-1]]
            if self.tmem_log is not None:
                self.tmem_log.append({"op": ins.op, "cta": c.rank, "columns": (cols.start, cols.stop),
                                      "before": before, "after": c.tmem[:, cols].copy()})

    def _mma_math(self, ctas, f, kind, dl, a_arg, th, b_desc, meta_addr, prev, enable, scale_input_d, zcm,
                  scale_a, scale_b, disable, ws) -> np.ndarray:
        """D of one MMA with the reference model's readers: shared memory through the descriptors
        (sim.smem.read_operand_bits), sparse metadata by the M = 128 rule (sim.decode_sparse_metadata, on
        a logical-lane image gathered here through the data-path layout), numerics (sim.numerics)."""
        from ..sim.numerics import decode, round_to, smem_element_slots, tmem_element_slots
        from ..sim.smem import read_operand_bits
        from ..sim.tcgen05 import KINDS, decode_sparse_metadata, expand_sparse, zero_column_mask_bits
        from ..isa.types import TYPES

        spec = KINDS[kind]
        rows = dl.rows
        n_cta = f.n // len(ctas)
        k_a = f.k // 2 if f.sparse else f.k
        shift, zero_cols = 0, np.zeros(f.n, dtype=bool)
        if zcm is not None:
            zero_cols, shift = zero_column_mask_bits(zcm, f.m, f.n)
        a_parts, b_parts = [], []
        for c in ctas:
            if a_arg.startswith("["):
                col = self._laddr(th, a_arg) & 0xFFFF
                image = dl.logical_image(c.tmem[:, col:], "A")
                container, per_word, lsb = tmem_element_slots(f.a_type, kind)
                kk = np.arange(k_a)
                words = image[:rows][:, kk // per_word]
                a_codes = (words >> ((kk % per_word) * container + lsb).astype(np.uint64)) & \
                    np.uint64((1 << TYPES[f.a_type].bits) - 1)
            else:
                a_codes = read_operand_bits(c.smem, self._lval(th, a_arg), f.a_type, f.a_major, rows, k_a, kind=kind)
            a_vals = decode(a_codes, f.a_type)
            if f.sparse:
                col = meta_addr & 0xFFFF
                image = dl.logical_image(c.tmem[:, col:], "metadata")
                codes = np.asarray(decode_sparse_metadata(image, kind, 128, selector=f.selector))[:rows]
                a_vals = expand_sparse(a_vals, codes, spec.granularity)
            a_parts.append(a_vals)
            granule = smem_element_slots(f.b_type, kind)[1] if f.b_major == "MN" else 8
            b_rows = -(-(n_cta + shift) // granule) * granule
            b_codes = read_operand_bits(c.smem, b_desc, f.b_type, f.b_major, b_rows, f.k, kind=kind)
            b_parts.append(decode(b_codes, f.b_type)[shift:shift + n_cta])
        a_full = np.concatenate(a_parts, axis=0).astype(np.float64 if kind != "i8" else np.int64)
        b_full = np.concatenate(b_parts, axis=0).astype(np.float64 if kind != "i8" else np.int64)
        b_full = np.where(zero_cols[:, None], 0, b_full)
        if scale_a is not None:
            sa, sb = decode(scale_a, f.scale_type), decode(scale_b, f.scale_type)
            a_full = a_full * np.repeat(sa, f.k // sa.shape[1], axis=1)
            b_full = b_full * np.repeat(sb.T, f.k // sb.shape[0], axis=1)
        if kind != "i8":
            if f.negate_a:
                a_full = -a_full
            if f.negate_b:
                b_full = -b_full
        product = a_full @ b_full.T
        if enable:
            if kind == "i8":
                total = product + prev.astype(np.int64)
            else:
                total = product + prev.astype(np.float64) * 2.0 ** -scale_input_d
        else:
            total = product
        result = round_to(total, f.d_type, saturate=f.saturate)
        if disable is not None:
            # bit i of word j = TMEM lane 32j + i of each CTA (9.7.16.10.9.1); a row keeps its old value
            # when the (first) lane holding it is disabled
            keep = []
            for ci in range(len(ctas)):
                words = disable[4 * ci:4 * ci + 4]
                for i in range(rows):
                    lane = dl.row_lane(i)
                    keep.append(bool(words[lane // 32] >> (lane % 32) & 1))
            result = np.where(np.asarray(keep)[:, None], prev, result)
        return result

    def _scales(self, ctas, f, kind, scale_vec, sfa_addr, sfb_addr, idesc, dl):
        """Scale-factor matrices (M x S, S x N raw codes) from TMEM: row r = r0 + 32*r1 of A in lane r0 of
        every 32-lane partition, column r1, bytes SF_ID.. SF_ID+S-1 (9.7.16.10.7.2; CUTLASS tmem_sf_frg);
        SFB of the 2x2 data path: N halves in lane halves. K = 96 (idesc bit 31): S = 3 (block32) or 6
        (block16) factors (9.7.16.10.7.2.4-.5); past byte 3 of its word a row's factors continue in the
        next 4-byte group, i.e. `slices` columns on (the reading compiler/isa/tmem.ScaleLayout
        documents; PTX shows it only in figures)."""
        if f.k96:
            nsf = {"block16": 6, "block32": 3, None: 3}[scale_vec]
        else:
            nsf = {"1X": 1, "2X": 2, "4X": 4, "block16": 4, "block32": 1 if kind == "mxf8f6f4" else 2,
                   None: 1 if kind == "mxf8f6f4" else 2}[scale_vec]
        a_id, b_id = (idesc >> 29) & 3, (idesc >> 4) & 3
        if not f.k96 and (a_id + nsf > 4 or b_id + nsf > 4):
            raise EmulationError(f"scale factor ID {a_id}/{b_id} with {nsf} factors leaves the 32-bit word")

        def byte(tmem, lane, col, b, slices):
            word, b = divmod(b, 4)
            return (int(tmem[lane, col + word * slices]) >> (8 * b)) & 0xFF

        sa = []
        a_slices = -(-dl.rows // 32)
        for c in ctas:
            col = sfa_addr & 0xFFFF
            for r in range(dl.rows):
                vals = []
                for s in range(nsf):
                    copies = {byte(c.tmem, r % 32 + 32 * p, col + r // 32, a_id + s, a_slices) for p in range(4)}
                    if len(copies) != 1:
                        raise EmulationError(f"SFA row {r} differs between lane partitions (9.7.16.10.7)")
                    vals.append(copies.pop())
                sa.append(vals)
        col = sfb_addr & 0xFFFF
        sb = []
        b_slices = -(-(f.n // 2 if dl.organization == "folded" else f.n) // 32)
        for n in range(f.n):
            vals = []
            for s in range(nsf):
                if dl.organization == "folded":
                    half = f.n // 2
                    h, rest = divmod(n, half)
                    lanes = [rest % 32 + 64 * h + 32 * p for p in range(2)]
                    column = col + rest // 32
                else:
                    lanes = [n % 32 + 32 * p for p in range(4)]
                    column = col + n // 32
                copies = {byte(c.tmem, lane, column, b_id + s, b_slices) for c in ctas for lane in lanes}
                if len(copies) != 1:
                    raise EmulationError(f"SFB column {n} differs between lane partitions / CTAs")
                vals.append(copies.pop())
            sb.append(vals)
        return np.asarray(sa, dtype=np.uint8), np.asarray(sb, dtype=np.uint8).T


class DataPathLayout:
    """D in TMEM (PTX 9.7.16.10.5): M=128 ::1 and M=256 ::2 (layouts D, A): row i in lane i. M=64 non-ws
    and M=128 ::2 sparse (F, C): lane 32*(i>>4) + (i&15). .ws M=64/32 and M=128 ::2 dense (E, G, B):
    the rows repeat in 128/rows lane groups, group g holding columns [g*N/groups, (g+1)*N/groups)."""

    def __init__(self, m: int, cta_group: int, sparse: bool, ws: bool):
        self.rows = m // cta_group
        if self.rows == 128:
            self.organization = "full"
        elif ws or (cta_group == 2 and not sparse):
            self.organization = "folded"
        else:
            self.organization = "half"

    def columns(self, n: int) -> int:
        """TMEM columns an N-wide D takes: N, or N / groups for a folded layout."""
        return n // (128 // self.rows) if self.organization == "folded" else n

    def cells(self, n: int):
        """(row, col, lane, column offset) of every element of D."""
        out = []
        groups = 128 // self.rows if self.organization == "folded" else 1
        per = n // groups
        for i in range(self.rows):
            for j in range(n):
                if self.organization == "full":
                    out.append((i, j, i, j))
                elif self.organization == "half":
                    out.append((i, j, 32 * (i >> 4) + (i & 15), j))
                else:
                    out.append((i, j, i + self.rows * (j // per), j % per))
        return out

    _NP = {"f32": np.float32, "f16": np.float16, "s32": np.int32}

    def row_lane(self, i: int) -> int:
        """The (first) TMEM lane of row i."""
        return 32 * (i >> 4) + (i & 15) if self.organization == "half" else i

    def logical_image(self, tmem_cols: np.ndarray, what: str) -> np.ndarray:
        """A / metadata cells by logical lane (the M = 128 rule's lane): half data path lane
        32*(λ>>4) + (λ&15); folded layouts repeat the rows in every lane group, which must agree."""
        out = np.zeros_like(tmem_cols)
        for lam in range(self.rows):
            if self.organization == "folded":
                copies = [tmem_cols[lam + self.rows * g] for g in range(128 // self.rows)]
                for other in copies[1:]:
                    if not np.array_equal(other, copies[0]):
                        raise EmulationError(f"{what} of logical lane {lam} differs between lane groups "
                                             f"(layout with {self.rows} rows repeats them)")
                out[lam] = copies[0]
            else:
                out[lam] = tmem_cols[self.row_lane(lam)]
        return out

    def read(self, tmem, col0: int, n: int, d_type: str) -> np.ndarray:
        raw = np.zeros((self.rows, n), dtype=np.uint32)
        for i, j, lane, c in self.cells(n):
            raw[i, j] = tmem[lane, col0 + c]
        if d_type == "f16":
            return (raw & 0xFFFF).astype(np.uint16).view(np.float16)
        return raw.view(self._NP[d_type])

    def write(self, tmem, col0: int, values: np.ndarray, d_type: str) -> None:
        values = np.asarray(values).astype(self._NP[d_type])
        if d_type == "f16":
            raw = values.view(np.uint16).astype(np.uint64)          # low 16 bits (9.7.16.10.4.1)
        else:
            raw = values.view(np.uint32).astype(np.uint64)
        for i, j, lane, c in self.cells(values.shape[1]):
            tmem[lane, col0 + c] = raw[i, j]


def run_kernel(ptx: str, args: dict, grid: tuple[int, int], entry: str | None = None,
               shared_base: int = 0, record_ashift: bool = False, policy: str | None = None,
               seed: int = 0) -> Machine:
    """Parse and run one kernel; returns the machine (`machine.gmem.array(name)` reads a buffer back).
    `policy`: None (every tcgen05 op completes at issue) or a scheduling policy of
    compiler/emulator/warp.py ("adversarial", "random"; MMAs and commits complete later), seeded by `seed`."""
    machine = Machine(parse_kernel(ptx, entry), args, grid, shared_base=shared_base, record_ashift=record_ashift,
                      policy=policy, seed=seed)
    machine.run()
    return machine


# --------------------------------------------------------------------------------------------------
# Host data in the kernel ABI (compiler/ptx/tcgen05_kernel.py module docstring) and the reference D

@dataclass
class HostProblem:
    """Logical operands of one tile problem and the kernel arguments that encode them."""
    args: dict
    grid: tuple[int, int]
    a: np.ndarray                 # M_total x K dense values (zeros where sparsity drops them)
    b: np.ndarray                 # N_total x K
    sfa: np.ndarray | None        # M_total x (K / vec) decoded scale factors
    sfb: np.ndarray | None
    d_type: str
    entry: str
    zero_columns: np.ndarray | None = None    # per N tile: True = B column read as zero (.ws mask)
    negate: tuple[bool, bool] = (False, False)
    mma_k: int = 0                            # dense K of one MMA
    scale_input_d: int = 0                    # D = A*B + D * 2^-s after the first MMA
    disabled_rows: np.ndarray | None = None   # per M tile: True = row never written (stays 0 in TMEM)


def _pack_codes(codes: np.ndarray, bits: int) -> np.ndarray:
    """Rows of `bits`-wide codes packed little-endian (element t at bit t*bits of its row)."""
    rows, n = codes.shape
    if (n * bits) % 8:
        raise EmulationError("a packed row must fill whole bytes")
    # each code's bits, least significant first, one row's codes after another: a little-endian bit stream
    stream = (np.asarray(codes, dtype=np.uint64)[:, :, None] >> np.arange(bits, dtype=np.uint64)) & 1
    return np.packbits(stream.reshape(rows, n * bits).astype(np.uint8), axis=1, bitorder="little")


def _store_codes(codes: np.ndarray, type_name: str, container_bits: int) -> np.ndarray:
    """Element codes as the bytes of a row-major array with `container_bits` per element (sub-byte fp4/fp6
    in a byte: e2m1 in bits 5:2, e3m2/e2m3 in bits 5:0, PTX 9.7.14.5.14 / the reference model)."""
    from ..isa.types import TYPES

    bits = TYPES[type_name].bits
    if container_bits == bits:
        if bits < 8:
            return _pack_codes(codes, bits)
        dtype = {8: np.uint8, 16: np.uint16, 32: np.uint32}[bits]
        return codes.astype(dtype).view(np.uint8).reshape(codes.shape[0], -1)
    shift = 2 if bits == 4 else 0
    return (codes.astype(np.uint8) << shift).astype(np.uint8)


def host_problem(result, tile_name: str | None = None, m_tiles: int = 1, n_tiles: int = 1,
                 seed: int = 0, k: int | None = None) -> HostProblem:
    """Random operands with exactly representable small values (every partial sum exact in f32) for the
    kernel of `result` (a CompileResult), encoded in its ABI; `k`: the problem's K (default the tile's loop
    K; a scheduled kernel takes any K of its `requires`: sparse A's codes cover K / chunk chunks, the natural
    META words' nibbles past them 0, the scale factors one per vector of K)."""
    from ..sim.numerics import decode, encode
    from ..sim.tcgen05 import compress_sparse, expand_sparse
    from ..isa.tcgen05_kinds import mma_k
    from ..isa.types import TYPES
    from ..ptx.tcgen05_kernel import _tmem_container_bits
    from ..isa.tmem import METADATA_CHUNK, pack_metadata_words, scale_factors_per_mma

    tile = result.tiles[tile_name] if tile_name else next(iter(result.tiles.values()))
    spec = tile.payload
    kind = tile.attrs["kind"]
    rng = np.random.default_rng(seed)
    m_total, n_total, k = spec.m * m_tiles, spec.n * n_tiles, spec.total_k if k is None else k
    a_op, b_op, d_op = (spec.operands[x] for x in "ABD")

    def values(type_name, shape):
        if TYPES[type_name].is_int:
            return rng.integers(-3 if TYPES[type_name].signed else 0, 4, size=shape).astype(np.float64)
        return rng.integers(-3, 4, size=shape) * 0.5

    a = values(a_op.dtype, (m_total, k))
    b = values(b_op.dtype, (n_total, k))
    args = {}
    sparse = spec.sparsity is not None
    if sparse:
        from ..isa.mma_sp.forms import GRANULARITIES
        from ..isa.tcgen05_kinds import kind_info

        gran = kind_info(kind).sparsity
        meta = tile.facts["tcgen05_metadata"]
        chunk = METADATA_CHUNK[kind]
        if meta.source == "static":
            codes = np.array([[(meta.word(r, c // 8) >> 4 * (c % 8)) & 0xF for c in range(k // chunk)]
                              for r in range(m_total)], dtype=np.uint64)
        else:
            # a random legal pattern: compress a random dense matrix with zeros placed per granularity
            g = GRANULARITIES[gran]
            mask = np.zeros((m_total, k), dtype=bool)
            for r in range(m_total):
                for c in range(k // g.chunk):
                    groups = rng.choice(g.chunk // g.group, size=g.keep, replace=False)
                    for gr in groups:
                        mask[r, c * g.chunk + gr * g.group:c * g.chunk + (gr + 1) * g.group] = True
            a = np.where(mask, a, 0.0)
            codes = None
        if codes is not None:
            kept = a.reshape(m_total, -1)[:, :k // 2]
            dense = expand_sparse(kept, codes, gran)
            a = dense
        else:
            kept, codes = compress_sparse(a, gran)
            a = expand_sparse(kept, codes, gran)
        if meta.source == "runtime":
            # the natural layout's last word may hold chunks past K (K a multiple of the chunk, not of 8 of
            # them): nibble 0, no legal code, which the kernel's image must never pass on (tmem_image pads)
            tail = -len(codes[0]) % 8
            words = np.array([pack_metadata_words([int(x) for x in row] + [0] * tail) for row in codes],
                             dtype=np.uint32)
            args["META"] = words
        a_stored = kept
    else:
        a_stored = a
    a_codes = encode(a_stored, a_op.dtype)
    a = decode(encode(a, a_op.dtype), a_op.dtype).astype(np.float64) if not TYPES[a_op.dtype].is_int else a
    b_codes = encode(b, b_op.dtype)
    if a_op.space == "tmem":
        args["A"] = _store_codes(a_codes, a_op.dtype, _tmem_container_bits(a_op.dtype, kind))
    elif (a_op.major or "K") == "K":
        args["A"] = _store_codes(a_codes, a_op.dtype, TYPES[a_op.dtype].bits)
    else:
        args["A"] = _store_codes(a_codes.T.copy(), a_op.dtype, TYPES[a_op.dtype].bits)
    if (b_op.major or "K") == "K":
        args["B"] = _store_codes(b_codes, b_op.dtype, TYPES[b_op.dtype].bits)
    else:
        args["B"] = _store_codes(b_codes.T.copy(), b_op.dtype, TYPES[b_op.dtype].bits)
    sfa = sfb = None
    if tile.facts["form"].block_scale is not None:
        form = tile.facts["form"]
        nsf = scale_factors_per_mma(kind, form.block_scale, form.k96)
        per_row = k * nsf // mma_k(kind, sparse, form.k96)     # one factor per vector (K whole vectors)
        st = tile.facts["scale_type"]
        choices = encode(np.array([0.5, 1.0, 2.0]), st)
        sfa_codes = rng.choice(choices, size=(m_total, per_row))
        sfb_codes = rng.choice(choices, size=(n_total, per_row))
        args["SFA"], args["SFB"] = sfa_codes.astype(np.uint8), sfb_codes.astype(np.uint8)
        sfa, sfb = decode(sfa_codes, st), decode(sfb_codes, st)
    d_bytes = TYPES[d_op.dtype].bits // 8
    args["D"] = np.full(m_total * n_total * d_bytes, 0x5A, dtype=np.uint8)
    args["m_total"], args["n_total"] = m_total, n_total
    grid = (n_tiles * spec.cta_group, m_tiles)
    zero_columns = None
    zcm_op = tile.op("tilec.zero_column_mask")
    if zcm_op is not None:
        from ..sim.tcgen05 import zero_column_mask_bits

        zero_columns, shift = zero_column_mask_bits(int(zcm_op.attrs["value"]), spec.m, spec.n)
        if shift:
            raise EmulationError("the reference D does not model a zero-column mask's column shift")
    disabled = None
    if spec.disable_output_lane is not None:
        dl = DataPathLayout(spec.m, spec.cta_group, sparse, spec.ws)
        words = spec.disable_output_lane
        disabled = np.array([bool(words[4 * cta + dl.row_lane(i) // 32] >> (dl.row_lane(i) % 32) & 1)
                             for cta in range(spec.cta_group) for i in range(dl.rows)])
    return HostProblem(args, grid, a, b, sfa, sfb, d_op.dtype, tile.sym, zero_columns,
                       (spec.negate_a, spec.negate_b), mma_k(kind, sparse, tile.facts["form"].k96),
                       spec.scale_input_d or 0, disabled)


def _scaled_operands(problem: HostProblem) -> tuple[np.ndarray, np.ndarray]:
    """A and B (f64, M x K and N x K) as the MMAs multiply them: masked columns, scale factors, negation."""
    a, b = problem.a.astype(np.float64), problem.b.astype(np.float64)
    negate_a, negate_b = problem.negate
    if problem.zero_columns is not None:
        tiles = b.shape[0] // len(problem.zero_columns)
        b = np.where(np.tile(problem.zero_columns, tiles)[:, None], 0.0, b)
    if problem.sfa is not None and problem.sfb is not None:
        k = a.shape[1]
        a = a * np.repeat(problem.sfa, k // problem.sfa.shape[1], axis=1)
        b = b * np.repeat(problem.sfb, k // problem.sfb.shape[1], axis=1)
    if negate_a:
        a = -a
    if negate_b:
        b = -b
    return a, b


def reference_d(problem: HostProblem) -> np.ndarray:
    """D = (A * scale_A) (B * scale_B)^T from the logical operands (no layouts involved)."""
    a, b = _scaled_operands(problem)
    np_type = {"f32": np.float32, "f16": np.float16, "s32": np.int32}[problem.d_type]
    if problem.scale_input_d:
        # each MMA after the first scales the accumulator by 2^-s (9.7.16.10.9.1); rounded per MMA
        d = np.zeros((a.shape[0], b.shape[0]))
        for k0 in range(0, a.shape[1], problem.mma_k):
            part = a[:, k0:k0 + problem.mma_k] @ b[:, k0:k0 + problem.mma_k].T
            d = (part if k0 == 0 else part + d * 2.0 ** -problem.scale_input_d).astype(np_type).astype(np.float64)
    else:
        d = a @ b.T
    d = d.astype(np_type)
    if problem.disabled_rows is not None:
        tiles = d.shape[0] // len(problem.disabled_rows)
        d = np.where(np.tile(problem.disabled_rows, tiles)[:, None], np.zeros((), dtype=np_type), d)
    return d


def run_problem(ptx: str, problem: HostProblem, shared_base: int = 0, policy: str | None = None,
                seed: int = 0) -> np.ndarray:
    """Run the kernel on the problem's arguments; D as an M_total x N_total array."""
    machine = run_kernel(ptx, problem.args, problem.grid, problem.entry, shared_base=shared_base, policy=policy,
                         seed=seed)
    raw = machine.gmem.array("D")
    np_type = {"f32": np.float32, "f16": np.float16, "s32": np.int32}[problem.d_type]
    return raw.view(np_type).reshape(problem.args["m_total"], problem.args["n_total"])


# --------------------------------------------------------------------------------------------------
# The warp-specialised persistent kernel (compiler/ptx/tcgen05_ws_kernel.py)

@dataclass
class WsHost:
    """Random problems of the warp-specialised kernel, as both the emulator and `tilec run` on the GPU take
    them: `problems` (host_problem's operands, one per batch), `args` (every ABI buffer but the tensor maps,
    as the bytes of its global-memory image with rows as stored, [batch][rows][bytes] when batched, D
    poisoned; C, the fused epilogue's bias; alpha / beta as their f32 values), the reference D (batch x M x N,
    or M x N for one problem), and the absolute tolerance of a fused epilogue (None: D is exact)."""
    problems: list
    args: dict
    ref: np.ndarray
    atol: np.ndarray | None

    @property
    def problem(self) -> HostProblem:
        return self.problems[0]


def ws_host(result, tile: str, abi: dict, m: int, n: int, k: int, seed: int = 0, batch: int = 1) -> WsHost:
    """`host_problem`'s operands (dense or sparse, few significant bits: every partial sum is exact in f32)
    in the warp-specialised kernel's ABI for `batch` problems of M x N x K (any sizes >= 1 for dense tiles:
    operands are drawn for whole tiles and cut to M, N), with the reference D."""
    from dataclasses import replace as dc_replace

    from ..isa.types import TYPES

    spec = result.tiles[tile].payload
    m_tiles, n_tiles = -(-m // spec.m), -(-n // spec.n)
    problems = [host_problem(result, tile, m_tiles=m_tiles, n_tiles=n_tiles, seed=seed + 7919 * i, k=k)
                for i in range(batch)]
    first = problems[0]
    args = {name: v for name, v in first.args.items() if name not in ("m_total", "n_total", "A", "B", "D")}

    def stacked(parts):
        return parts[0] if batch == 1 else np.stack(parts)

    for name, rows in (("A", m), ("B", n)):
        args[name] = stacked([np.ascontiguousarray(np.asarray(p.args[name])[:rows]) for p in problems])
    d_type = spec.operands["D"].dtype
    args["D"] = np.full(((batch,) if batch > 1 else ()) + (m, n * TYPES[d_type].bits // 8), 0x5A, np.uint8)
    # the per-K-block TMEM operands (META, SFA, SFB) as the kernel's tcgen05.cp reads them: each problem's
    # images, one after another, from its natural layout (drawn for whole tiles: tmem_image pads the rows past
    # M / N with its legal values, not these)
    from ..ptx.tcgen05_ws_kernel import tmem_image

    for name, spec_ in abi.get("tmem_images", {}).items():
        image = [v for p in problems
                 for v in tmem_image(spec_, np.asarray(p.args[name]).tolist(), n if name == "SFB" else m, k)]
        args[name] = np.array(image, np.uint32 if name == "META" else np.uint8)
    desc = abi.get("epilogue")
    bias = scalars = cs = None
    if desc is not None:              # the fused epilogue's C, bias and f32 scalars
        from .. import sparse
        from .sparse_host import epilogue_inputs

        rng = np.random.default_rng(seed + 1)
        bias, scalars = epilogue_inputs(desc, m, n, rng)
        if bias is not None:
            args["bias"] = bias
        args.update({key: float(scalars[key]) for key in ("alpha", "beta") if desc[key] == "param"})
        if desc["c"] == "epilogue":
            cs = [sparse.random_values(rng, (m, n), "f16").astype(np.float32) for _ in range(batch)]
            args["C"] = stacked(cs)
            args["batch_stride_c"] = m * n            # elements: each problem's dense C after the previous one
    refs, tols = [], []
    for i, problem in enumerate(problems):
        sub = dc_replace(problem, a=problem.a[:m], b=problem.b[:n],
                         sfa=None if problem.sfa is None else problem.sfa[:m],
                         sfb=None if problem.sfb is None else problem.sfb[:n])
        if desc is None:
            refs.append(reference_d(sub))
            continue
        from types import SimpleNamespace

        from .sparse_host import epilogue_atol, epilogue_reference

        a, b = _scaled_operands(sub)
        # a and b carry their scale factors already (the sparse host's scaling is not applied: sfa = sfb = None)
        ref, bound, pre = epilogue_reference(None, SimpleNamespace(a=a, b=b.T, c=None if cs is None else cs[i],
                                                                   sfa=None, sfb=None), d_type, desc, bias, scalars)
        refs.append(ref)
        tols.append(epilogue_atol(bound, pre, desc["act"], d_type))
    return WsHost(problems, args, stacked(refs), stacked(tols) if tols else None)


def run_ws_problem(result, tile: str, ptx: str, abi: dict, m: int, n: int, k: int, *, ctas: int, seed: int = 0,
                   policy: str | None = None, dynamic_at: int | None = None, batch: int = 1):
    """`ws_host`'s problems run on `ctas` persistent CTAs; returns (D, reference D, machine), batch x M x N
    (M x N for one problem). A kernel scheduled by cluster launch control (ABI `persistent` "clc") is
    launched with its ABI grid (a CTA, or pair, per tile) of which `ctas` CTAs run at once: the others wait
    to start, and the running ones cancel them (clusterlaunchcontrol.try_cancel) and take their tiles. A, B and D are reached by TMA only, through the tensor-map parameters
    `tensor_map_args` gives the driver's encoder; their rows are 16 bytes further apart than their bytes
    rounded up to 16 (a pitch that is not the packed size), and D's padding is poisoned and must stay so.
    The dynamic window starts at `dynamic_at` (default: a 16-byte offset the kernel must round up to
    1024)."""
    from ..ptx.tcgen05_ws_kernel import tensor_map_args

    host = ws_host(result, tile, abi, m, n, k, seed, batch)
    args = dict(host.args)
    for key in ("alpha", "beta"):     # f32 parameters reach the machine as their bits
        if key in args:
            args[key] = int(np.float32(args[key]).view(np.uint32))
    pitches = {}
    for name, rows in (("A", m), ("B", n), ("D", m)):
        part = np.asarray(args[name]).reshape(batch, rows, -1)
        pitches[name] = -(-part.shape[2] // 16) * 16 + 16
        padded = np.full((batch, rows, pitches[name]), 0xA5 if name != "D" else 0x5A, np.uint8)
        padded[:, :, :part.shape[2]] = part
        args[name] = padded
    d_row = np.asarray(host.args["D"]).shape[-1]
    args.update({"tensor_maps": np.zeros(128 * len(abi["tensor_maps"]), np.uint8), "M": m, "N": n, "K": k,
                 "batch": batch})
    grid, resident = (ctas, 1), None
    if abi.get("persistent") == "clc":
        from ..runtime.abi import grid_blocks

        cluster = abi.get("cluster", [1])[0]
        grid, resident = (grid_blocks(abi, m, n, k, batch=batch)[0], 1), max(1, ctas // cluster)
    machine = Machine(parse_kernel(ptx, abi["entry"]), args, grid, seed=seed, policy=policy,
                      dynamic_smem=abi["dynamic_smem_bytes"], dynamic_at=16 if dynamic_at is None else dynamic_at,
                      tensor_maps=tensor_map_args(abi, m, n, k, batch, row_bytes=pitches), resident=resident)
    machine.run()
    raw = machine.gmem.array("D").reshape(batch, m, pitches["D"])
    if (raw[:, :, d_row:] != 0x5A).any():
        raise EmulationError("the kernel wrote D's row padding (past column N): the TMA store must clip at N")
    if host.atol is not None:
        machine.stats["atol"] = host.atol
    d = np.ascontiguousarray(raw[:, :, :d_row]).view(host.ref.dtype)
    return (d[0] if batch == 1 else d), host.ref, machine
