"""The warp machine: runs a parsed kernel (compiler/emulator/parse.py) over a grid, a cluster of CTAs at a
time, warp by warp with numpy registers of 32 lanes.

Threads, warps, CTAs, clusters: `threads` per CTA in warps of 32; every warp of every CTA of a cluster
interleaves. A warp runs until it blocks (a barrier, a failed `mbarrier.try_wait`, a plain `mbarrier.arrive`
(a release, which lets a waiter run first)) or returns; then the scheduler moves on. Each round
visits the warps in `order`: "forward", "reverse", or "random" (a permutation per round drawn from the
machine's seeded generator), so a protocol bug that depends on interleaving shows in some runs.
Asynchronous work completes by `land` / `late_mma`:
  * cp.async copies (PTX ISA 9.7.9.25) land at issue ("eager") or at the `cp.async.wait_group` that
    retires their group ("lazy");
  * TMA copies (cp.async.bulk.tensor, 9.7.9.25.5) land at issue ("eager") or only when every warp is
    stuck, one at a time in random order ("lazy"), completing their bytes on the mbarrier;
  * bulk copies shared -> global (cp.async.bulk ... .bulk_group, 9.7.9.25.4.1) copy at issue ("eager") or
    when every warp is stuck, at random points, or at the latest at the cp.async.bulk.wait_group(.read)
    that retires their bulk group ("lazy"); their source bytes stay claimed until that wait and must have
    been fenced for the async proxy (fence.proxy.async) by the warps that wrote them;
  * wgmma groups (9.7.15.6) execute at issue or, with `late_mma`, only when `wgmma.wait_group` retires
    them (reading shared memory and registers then); a register such a group owns may not be touched
    in between.
Scheduling policies (`policy=`, POLICIES): "adversarial" makes every asynchronous operation land as late
as the kernel allows (TMA copies and their complete_tx only when no warp can move, cp.async groups and
wgmma groups at the wait_group that retires them, tcgen05.mma / commit in the tcgen05 machine when no
warp can move, in issue order) and interleaves warps 1-8 instructions at a time in a seeded random order;
"random" interleaves the same way and completes a random pending operation at random points. Every
choice comes from the seeded generator, so a run is reproducible from its seed. Pending operations are
`Pending` entries of one list; the oldest of each queue may complete next.

Cluster launch control (PTX 9.7.13.17-18): with `resident` set, that many clusters of the grid run at once
(interleaved like the CTAs of one cluster) and the others wait to start; `clusterlaunchcontrol.try_cancel`
cancels a waiting cluster (under a policy any of them; adversarial: the answer completes only when nothing
else can) or fails when none is left, writing a 16-byte answer (`_clc`) and completing 16 tx bytes on the
mbarrier (with .multicast::cluster::all in every CTA of the cluster); `query_cancel` decodes it. Checks: an
answer read before it landed (the claim of its bytes), 16 bytes that are no answer, a ctaid decoded from a
failed answer, a request after the CTA observed a failure, a multicast answer to an exited CTA, a cluster
exiting with its own asynchronous operations in flight.

Protocol checks, each naming the instruction, its PTX line and warp (CTA rank, warp index):
  * deadlock: every live warp waits and nothing in flight can release it; the report says where each
    warp waits (bar.sync with the threads arrived; try_wait with the mbarrier's phase, missing arrivals
    and tx bytes: a wait on a parity that can never complete shows here);
  * shared memory races: bytes an asynchronous copy (TMA, cp.async) has not landed may not be read (a
    dropped or early mbarrier / wait_group wait), and bytes a wgmma group in flight reads may not be
    written by a copy or a store (a stage refilled before its consumer released it); two copies in flight
    may not write the same bytes;
  * an arrive on an mbarrier whose phase already has all its arrivals (9.7.13.15.13);
  * a register a wgmma group in flight owns, read or written before the wait_group that retires it;
  * shared memory over the target's per-CTA limit (compiler/isa/targets.py).

Instruction families: integer ALU (add/sub/mul/mad/and/or/xor/shl/shr/min/div/rem/bfe/bfi/selp/setp,
cvt/cvta/mov), f16x2/bf16x2 packing cvt, predicates; ld/st (.param, .global, .shared, vectors);
cp.async + commit/wait groups; cp.async.bulk shared -> global + bulk commit/wait groups; ldmatrix (9.7.9.x, m8n8.x4 .b16: lane 4r+c receives word c of row r of
matrix j in register j); mma.sp (compiler/emulator/mma_sp.py); wgmma.mma_async.sp with descriptors
(9.7.15.5.1.2.2) and the Figure 149 accumulator fragment; mbarrier (9.7.13.15: init, arrive,
arrive.expect_tx, try_wait.parity; complete_tx by TMA); TMA with swizzle and multicast; mapa and
shared::cluster addresses; bar.sync with ids and counts; barrier.cluster arrive/wait; fences; griddepcontrol
(one grid: nothing to wait for); divergent
`ret`; branches (a non-uniform `bra.uni` is an error); setmaxnreg (9.7.19: each warp's count from the
kernel's .maxnreg, a per-CTA pool that .dec fills and .inc waits on, the same setmaxnreg by every warp of a
warpgroup).

Shared memory starts as garbage (random bytes) unless told otherwise; the dynamic window can be placed
at an address that is not aligned, to check kernels that round it up. Global memory is
compiler/emulator/memory.py's `FlatMemory`: named buffers with gaps between them; a buffer not marked
writable cannot be stored to, and one not marked loadable only by TMA.

numpy is imported here: this module is for tests and host tools, never on the compile path.
"""
from __future__ import annotations

import re

import numpy as np

from .parse import EmulationError, Kernel, address, vector

M32 = np.uint64(0xFFFFFFFF)
M64 = np.uint64(0xFFFFFFFFFFFFFFFF)
CLUSTER_BIT = 24          # shared::cluster addresses: (rank + 1) << 24 | CTA-local shared address
_INT = re.compile(r"-?(0x[0-9a-fA-F]+|\d+)")


def _bits(type_name: str) -> int:
    """Width of a PTX type name (u16 -> 16, b64 -> 64, pred -> 1)."""
    digits = re.sub(r"\D", "", type_name)
    return int(digits) if digits else 1



def _f32(x) -> np.ndarray:
    return np.asarray(x, np.float64).astype(np.float32)


# f32 instructions of the fused epilogue (compiler/passes/epilogue_lowering.py), on f32 arrays
_F32_OPS = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
    "max": np.fmax, "min": np.fmin, "abs": np.abs,
    "fma": lambda a, b, c: _f32(a.astype(np.float64) * b.astype(np.float64) + c.astype(np.float64)),
    "ex2": lambda a: _f32(np.exp2(a.astype(np.float64))),
    "rcp": lambda a: _f32(1.0 / a.astype(np.float64)),
    "tanh": lambda a: _f32(np.tanh(a.astype(np.float64))),
    "copysign": lambda a, b: np.copysign(b, a),          # copysign d, a, b: b with a's sign (9.7.4.2)
}


def _as_f32(x) -> np.ndarray:
    return (np.asarray(x, np.uint64) & M32).astype(np.uint32).view(np.float32)


def _from_f32(x) -> np.ndarray:
    return np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)


def _rni_s32(x) -> np.ndarray:
    """cvt.rni.s32.f32: nearest integer, ties to even; clamped to the s32 range, NaN -> 0 (PTX ISA 9.7.9.21:
    a float-to-integer conversion saturates by default)."""
    f = np.nan_to_num(np.rint(_as_f32(x).astype(np.float64)), nan=0.0)
    return (np.clip(f, -2.0 ** 31, 2.0 ** 31 - 1).astype(np.int64) & 0xFFFFFFFF).astype(np.uint64)


def _pack_s8(a, b, c) -> np.ndarray:
    """cvt.pack.sat.s8.s32.b32 d, a, b, c: d = c << 16 | sat8(a) << 8 | sat8(b) (PTX ISA 9.7.9.22)."""
    sat = lambda x: (np.clip((x & M32).astype(np.uint32).view(np.int32), -128, 127).astype(np.int64)  # noqa: E731
                     & 0xFF).astype(np.uint64)
    return ((c << np.uint64(16)) | (sat(a) << np.uint64(8)) | sat(b)) & M32


def _e4m3(x) -> np.ndarray:
    """One f32 -> e4m3 byte, round to nearest even, .satfinite: beyond +-448 (the largest finite e4m3)
    -> +-448, NaN -> NaN (PTX ISA 9.7.9.21)."""
    import ml_dtypes

    f = _as_f32(x)
    f = np.where(np.isnan(f), f, np.clip(f, -448.0, 448.0)).astype(np.float32)
    return f.astype(ml_dtypes.float8_e4m3fn).view(np.uint8).astype(np.uint64)


def _f16_to_f32(h) -> np.ndarray:
    return _from_f32((np.asarray(h, np.uint64) & np.uint64(0xFFFF)).astype(np.uint16).view(np.float16)
                     .astype(np.float32))


_CONVERSIONS = {
    "cvt.rn.f32.s32": lambda a: _from_f32((a & M32).astype(np.uint32).view(np.int32).astype(np.float32)),
    "cvt.rni.s32.f32": _rni_s32,
    "cvt.pack.sat.s8.s32.b32": _pack_s8,
    # d, a, b: a into the upper byte (as the f16x2 / bf16x2 forms: a in the upper half)
    "cvt.rn.satfinite.e4m3x2.f32": lambda a, b: (_e4m3(a) << np.uint64(8)) | _e4m3(b),
    "cvt.f32.f16": _f16_to_f32,
}


_ORDERING = ("weak", "relaxed", "acquire", "release", "acq_rel", "volatile")    # memory-model qualifiers
_SCOPES = ("cta", "cluster", "gpu", "sys")


class Deadlock(EmulationError):
    """Every unfinished warp waits and nothing asynchronous is left to complete."""


# Scheduling policies (`policy=`): None keeps the `order` / `land` / `late_mma` choices (eager by default);
# "adversarial" lands every asynchronous operation as late as possible (only when no warp can move) and
# interleaves warps a few instructions at a time in a random order; "random" interleaves the same way and
# completes a random pending operation at random points. Both draw every choice from the seeded generator.
POLICIES = (None, "adversarial", "random")


class Pending:
    """One asynchronous operation in flight: `complete()` makes its effects visible. Operations with the
    same `queue` complete in issue order (one thread's tcgen05 pipe); different queues in any order."""
    __slots__ = ("queue", "complete", "what", "owner")

    def __init__(self, queue, complete, what: str):
        self.queue, self.complete, self.what = queue, complete, what
        self.owner = None               # id of the issuing warp's cluster (its CTA list; WarpMachine._round)


def where(ins, w: "Warp") -> str:
    """`<op> at line N (CTA r warp i)`: the instruction a check names."""
    return f"{ins.op} at line {ins.line} ({w.name()})"


class Warp:
    __slots__ = ("cta", "index", "tid", "pc", "lane_pc", "alive", "r", "cp_open", "cp_groups", "open", "groups",
                 "fenced", "bar", "done", "branches", "cluster_gen", "waiting", "bulk_open", "bulk_groups", "regs",
                 "reg_wait", "reg_log")

    def __init__(self, cta, index: int):
        self.cta, self.index = cta, index
        self.tid = np.arange(32) + 32 * index
        self.pc = 0
        self.lane_pc: np.ndarray | None = None      # per-lane pcs while the warp is diverged
        self.alive = np.ones(32, bool)
        self.r: dict[str, np.ndarray] = {}
        self.cp_open: list = []
        self.cp_groups: list = []
        self.open: list = []                 # wgmma ops of the group being built
        self.groups: list = []               # committed wgmma groups
        self.fenced: set[int] = set()
        self.bar: tuple | None = None
        self.done = False
        self.branches = 0
        self.cluster_gen = 0
        self.waiting = None                  # (instruction, mbarrier CTA, address, parity) of a failed try_wait
        self.bulk_open: list = []            # bulk stores (TMA, cp.async.bulk) not committed yet: (CTA, smem claim,
                                             # the Pending of a copy still in flight or None)
        self.bulk_groups: list = []          # committed bulk async-groups, oldest first
        self.regs: int | None = None         # per-thread register count: the launch's (.maxnreg), then setmaxnreg's
        self.reg_wait: tuple | None = None   # (instruction, registers) of a setmaxnreg.inc waiting for the pool
        self.reg_log: list = []              # (line, count) of every setmaxnreg this warp executed

    def name(self) -> str:
        return f"CTA {self.cta.rank} warp {self.index}"


class Cta:
    def __init__(self, rank: int, ctaid: tuple[int, int], smem: np.ndarray, lo: int, symbols: dict[str, int]):
        self.rank, self.ctaid, self.smem, self.lo, self.symbols = rank, ctaid, smem, lo, symbols
        self.mbar: dict[int, dict] = {}
        self.warps: list[Warp] = []
        self.cluster: list[Cta] = [self]        # the CTAs of its cluster, by rank (set when the cluster starts)
        self.clc_failed = False                 # it observed a failed clusterlaunchcontrol.try_cancel answer
        self.reg_pool = 0                    # registers setmaxnreg.dec gave back and no .inc took yet
        # asynchronous claims on shared memory bytes: how many in-flight writers (copies not landed) and
        # readers (wgmma groups not retired) hold each byte, and who they are (for the error message)
        self.writing = np.zeros(len(smem), np.int32)
        self.reading = np.zeros(len(smem), np.int32)
        self.claims: dict[int, tuple[str, np.ndarray, str]] = {}   # id -> ("read" | "write", addresses, who)
        # per byte: 1 + the warp whose generic-proxy store wrote it last and has not executed
        # fence.proxy.async since (0: fenced or never written); a TMA store may read only fenced bytes
        self.unfenced = np.zeros(len(smem), np.int16)

    @property
    def exited(self) -> bool:
        return all(w.done for w in self.warps)


class WarpMachine:
    """Runs one kernel over a grid (see the module docstring)."""

    def __init__(self, kernel: Kernel, memory, params: dict[str, int], grid: tuple[int, int], threads: int, *,
                 order: str = "forward", land: str = "eager", late_mma: bool = False,
                 rng: np.random.Generator | int | None = None, dynamic_smem: int = 0,
                 dynamic_at: int | None = None, shared_base: int = 0, tensor_maps: dict | None = None,
                 garbage_smem: bool = True, max_rounds: int = 100_000, policy: str | None = None,
                 smem_limit: int | None = None, fp8_acc_bits: int | None = None, resident: int | None = None):
        if order not in ("forward", "reverse", "random"):
            raise ValueError(f"order {order!r}")
        if land not in ("eager", "lazy"):
            raise ValueError(f"land {land!r}")
        if policy not in POLICIES:
            raise ValueError(f"policy {policy!r}")
        if policy is not None:                 # every asynchronous operation completes late, warps interleave
            order, land, late_mma = "random", "lazy", True
        self.policy = policy
        # clusters running at once (None: one after another); the clusters of the grid not started yet
        self.resident = resident
        self.unlaunched: list[tuple[int, int]] = []
        self.k, self.mem, self.params = kernel, memory, params
        self.grid, self.threads = grid, threads
        self.order, self.land, self.late_mma = order, land, late_mma
        self.rng = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)
        self.dynamic_smem, self.dynamic_at, self.shared_base = dynamic_smem, dynamic_at, shared_base
        self.tmaps = tensor_maps or {}
        # by-value parameters (a kernel's tensor maps): their value in `params` is the address that `mov` of the
        # symbol gives and `cvta.param` keeps (a generic address the host side laid out, never loadable)
        self.param_bytes = {full for full, ptype in kernel.params if ptype == "bytes"}
        self.garbage_smem, self.max_rounds = garbage_smem, max_rounds
        # a model of fp8 wgmma's reduced-precision sums (None: exact f32, the default): each fp8 wgmma's
        # result keeps this many significant bits, the rest truncated toward zero (the DeepSeek-V3 report's
        # "about 14 bits retained" on Hopper; PTX specifies nothing: compiler/isa/wgmma.py PROMOTED_A_TYPES)
        self.fp8_acc_bits = fp8_acc_bits
        self.stats = {"cp.async": 0, "ldmatrix": 0, "mma": 0, "tma": 0, "wgmma": 0, "arrive": 0, "multicast": 0,
                      "async": 0}                                # operations completed after their issue
        self.pending: list[Pending] = []
        self.ctas: list[Cta] = []
        self.smem_limit = smem_limit if smem_limit is not None else self._target_smem_limit(kernel)
        self.ins = None                        # the instruction being executed and its warp (for checks)
        self.warp: Warp | None = None
        self._forms: dict[str, object] = {}
        # module-scope `.global` / `.const` tables (static metadata) live in global memory
        self.global_syms = {name: memory.add(name, np.asarray(words, np.uint32))
                            for name, words in kernel.globals_.items()}

    # -- running ---------------------------------------------------------------------------------------
    def run(self) -> None:
        """Clusters run one after another: in grid order, or under a scheduling policy in a seeded random
        order (CTAs of one launch may run in any order: a protocol between them, such as split-K's "the
        last CTA of a tile reduces", must not depend on it). With `resident` clusters at once (the machine's
        `resident`), a cluster starts whenever one of those has exited, in the same launch order: the
        clusters not started yet are what `clusterlaunchcontrol.try_cancel` may cancel (`_try_cancel`)."""
        gx, gy = self.grid
        size = self.k.cluster_size
        if gx % size:
            raise EmulationError(f"grid x = {gx} is not a multiple of the cluster size {size}")
        clusters = [(x0, y) for y in range(gy) for x0 in range(0, gx, size)]
        if self.policy is not None:
            clusters = [clusters[i] for i in self.rng.permutation(len(clusters))]
        self.unlaunched = clusters
        if self.resident is not None:
            self._run_resident(size)
            return
        while self.unlaunched:
            x0, y = self.unlaunched.pop(0)
            self.run_cluster([(x0 + r, y) for r in range(size)])

    def _layout_shared(self) -> tuple[dict[str, int], int, int]:
        symbols, at = {}, self.shared_base
        for decl in self.k.shared:
            if decl.extern:
                continue
            at = -(-at // decl.align) * decl.align
            symbols[decl.name] = at
            at += decl.size
        lo, static_end = self.shared_base, at
        externs = [d for d in self.k.shared if d.extern]
        if externs:
            # every `.extern .shared` array names the one dynamic window (a module of several tiles declares
            # one per kernel, all visible to each): they share its start, aligned for the strictest of them
            if self.dynamic_at is not None:
                where = self.dynamic_at
                if where < static_end:
                    raise EmulationError("the dynamic shared window overlaps the static shared variables")
            else:
                align = max(d.align for d in externs)
                where = -(-static_end // align) * align
            for decl in externs:
                symbols[decl.name] = where
            if static_end == self.shared_base:
                lo = where
            at = where + self.dynamic_smem
        return symbols, lo, at

    def _new_cluster(self, ids) -> tuple[list[Cta], list[Warp]]:
        symbols, lo, hi = self._layout_shared()
        # a launch's dynamic bytes count whether or not the kernel declares the window
        self._check_smem_size(hi - self.shared_base + (0 if any(d.extern for d in self.k.shared) else self.dynamic_smem))
        ctas = []
        for rank, cid in enumerate(ids):
            smem = (self.rng.integers(0, 256, hi, dtype=np.uint8) if self.garbage_smem
                    else np.zeros(hi, np.uint8))
            ctas.append(self.new_cta(rank, cid, smem, lo, dict(symbols)))
        for cta in ctas:
            cta.cluster = ctas
        self.ctas = ctas
        warps = []
        for cta in ctas:
            cta.warps = [Warp(cta, i) for i in range(self.threads // 32)]
            for w in cta.warps:
                w.regs = self.k.maxnreg
            warps += cta.warps
        return ctas, warps

    def run_cluster(self, ids) -> None:
        ctas, warps = self._new_cluster(ids)
        self.pending = []
        self.cluster_arrived, self.cluster_generation = 0, 0
        rounds = 0
        while not all(w.done for w in warps):
            rounds += 1
            if rounds > self.max_rounds:
                raise EmulationError("runaway: the kernel does not finish")
            progressed = self._round(warps)
            progressed |= self._release_barriers(warps)
            if self.policy == "random" and self.pending and self.rng.random() < 0.25:
                self.complete_one()
            elif not progressed or self._every_live_warp_stuck(warps):
                if not self.pending:
                    raise Deadlock(self._deadlock_report(ids, warps))
                self.complete_one()
        if self.pending:
            raise EmulationError("asynchronous operations still in flight when every warp has exited: "
                                 + "; ".join(p.what for p in self.pending))
        self._finish_cluster(ctas, warps)

    def _round(self, warps) -> bool:
        """One round: every warp that can run, in the round's order, until it blocks or its budget ends."""
        if self.order == "forward":
            order = warps
        elif self.order == "reverse":
            order = warps[::-1]
        else:
            order = [warps[i] for i in self.rng.permutation(len(warps))]
        progressed = False
        for w in order:
            if w.done or w.bar is not None:
                continue
            budget = int(self.rng.integers(1, 9)) if self.policy else None
            issued = len(self.pending)
            state, moved = self.step_warp(w, budget)
            for p in self.pending[issued:]:         # step_warp only appends: these are the warp's cluster's
                p.owner = id(w.cta.cluster)
            progressed |= moved
            w.done = state == "ret"
        return progressed

    def _finish_cluster(self, ctas, warps) -> None:
        self.cluster_done(ctas)
        for w in warps:
            if w.groups or w.open:
                raise EmulationError("wgmma in flight at exit")
            if w.cp_groups or w.cp_open:
                pending = sum(len(g) for g in w.cp_groups) + len(w.cp_open)
                if pending:
                    raise EmulationError("cp.async copies in flight at exit")
            if any(w.bulk_groups) or w.bulk_open:
                raise EmulationError(f"{w.name()} exits with TMA stores still reading its shared memory: a "
                                     "cp.async.bulk.wait_group after the last commit_group is missing")

    def _run_resident(self, size: int) -> None:
        """`resident` clusters run at once, interleaved warp by warp like the CTAs of one cluster; when every
        warp of one has exited, the next cluster not yet started (and not canceled) starts. Each
        asynchronous operation belongs to the cluster whose warp issued it; a cluster may not exit with
        one of its own in flight."""
        live: list[tuple[list, list[Cta], list[Warp]]] = []

        def launch() -> None:
            x0, y = self.unlaunched.pop(0)
            ids = [(x0 + r, y) for r in range(size)]
            ctas, warps = self._new_cluster(ids)
            live.append((ids, ctas, warps))
            self.stats["launched"] = self.stats.get("launched", 0) + 1

        self.pending = []
        while self.unlaunched and len(live) < self.resident:
            launch()
        rounds, limit = 0, self.max_rounds * max(1, len(self.unlaunched) + len(live))
        while live:
            rounds += 1
            if rounds > limit:
                raise EmulationError("runaway: the kernel does not finish")
            warps = [w for _, _, ws in live for w in ws]
            progressed = self._round(warps)
            for _, _, ws in live:
                progressed |= self._release_barriers(ws)
            for entry in [c for c in live if all(w.done for w in c[2])]:
                ids, ctas, ws = entry
                mine = [p.what for p in self.pending if p.owner == id(ctas)]
                if mine:
                    raise EmulationError(f"asynchronous operations of CTAs {ids} still in flight when every warp "
                                         "of their cluster has exited: " + "; ".join(mine))
                self._finish_cluster(ctas, ws)
                live.remove(entry)
                progressed = True
            while self.unlaunched and len(live) < self.resident:
                launch()
                progressed = True
            if self.policy == "random" and self.pending and self.rng.random() < 0.25:
                self.complete_one()
            elif not progressed or self._every_live_warp_stuck([w for _, _, ws in live for w in ws]):
                if not self.pending:
                    raise Deadlock(self._deadlock_report([i for ids, _, _ in live for i in ids],
                                                         [w for _, _, ws in live for w in ws]))
                self.complete_one()
        if self.pending:
            raise EmulationError("asynchronous operations still in flight when every warp has exited: "
                                 + "; ".join(p.what for p in self.pending))

    def _every_live_warp_stuck(self, warps) -> bool:
        """Every live warp waits at a barrier or on an mbarrier phase that is still incomplete after this
        round. A spin loop that does register work between its try_waits (e.g. recomputing the parity)
        counts as executed instructions, so `progressed` alone would call it progress and the run would only
        end at `max_rounds`; only an asynchronous completion can move such a CTA on."""
        live = False
        for w in warps:
            if w.done:
                continue
            live = True
            if w.bar is not None:
                continue
            if w.waiting is None:
                return False
            _, cta, a, parity = w.waiting
            b = cta.mbar.get(a)
            if b is None or b["phase"] % 2 != parity:
                return False
        return live

    def complete_one(self) -> None:
        """Complete one pending operation the seeded generator picks among those whose turn it is (the
        oldest of each queue). Under the adversarial policy a cluster-launch-control answer comes last: only
        when nothing else in flight can complete (the readers that skip its wait then read it early)."""
        heads: dict = {}
        for i, p in enumerate(self.pending):
            heads.setdefault(p.queue, i)
        if self.policy == "adversarial" and any(q[0] == "clc" for q in heads) and any(q[0] != "clc" for q in heads):
            heads = {q: i for q, i in heads.items() if q[0] != "clc"}
        pick = sorted(heads.values())[int(self.rng.integers(len(heads)))]
        self.stats["async"] += 1
        self.pending.pop(pick).complete()

    def _deadlock_report(self, ids, warps) -> str:
        """Every live warp waits and no pending completion can help: where each one waits."""
        lines = []
        for w in warps:
            if w.done:
                continue
            if w.bar is not None:
                key = w.bar[:2]
                n = sum(32 for x in warps if x.bar is not None and x.bar[:2] == key)
                what = ("barrier.cluster" if key[0] == "cluster" else f"bar.sync {key[1]}") + \
                    f" ({n} of {w.bar[2] or 'all'} threads arrived)"
                lines.append(f"{w.name()} at line {self.k.code[w.pc - 1].line}: {what}")
            elif w.reg_wait is not None:
                ins, need = w.reg_wait
                lines.append(f"{w.name()} at line {ins.line}: {ins.op} waits for {need} registers; the CTA's pool "
                             f"holds {w.cta.reg_pool} (the other warpgroups' setmaxnreg.dec did not give enough)")
            elif w.waiting is not None:
                ins, cta, a, parity = w.waiting
                b = cta.mbar[a]
                lines.append(f"{w.name()} at line {ins.line}: {ins.op} waits for parity {parity} of the mbarrier "
                             f"at {a:#x} (CTA {cta.rank}), whose phase {b['phase']} (parity {b['phase'] % 2}) "
                             f"still misses {b['pending']} of {b['count']} arrivals and {b['tx']} tx bytes")
            else:
                lines.append(f"{w.name()} at pc {w.pc}")
        return f"deadlock in CTAs {ids}: every live warp waits and nothing in flight can release it:\n  " + \
            "\n  ".join(lines)

    @staticmethod
    def _target_smem_limit(kernel) -> int | None:
        """Shared memory one CTA may use on the module's target: the SM's whole shared memory for the
        targets compiler/isa/targets.py measures it for (STATIC_SMEM_ARCH_SPECIFIC, which is also the
        dynamic opt-in maximum of those SMs), else none known."""
        from ..isa.targets import STATIC_SMEM_ARCH_SPECIFIC, TARGETS

        t = TARGETS.get(getattr(kernel, "target", None) or "")
        return None if t is None else STATIC_SMEM_ARCH_SPECIFIC.get(t.sm)

    def _check_smem_size(self, used: int) -> None:
        from ..isa.targets import TARGETS, static_smem_limit

        target = getattr(self.k, "target", None)
        static = sum(d.size for d in self.k.shared if not d.extern)
        if target in TARGETS and static > static_smem_limit(target):
            raise EmulationError(f"{static} B of static shared memory: over {target}'s limit of "
                                 f"{static_smem_limit(target)} B")
        if self.smem_limit is not None and used > self.smem_limit:
            raise EmulationError(f"{used} B of shared memory (static + {self.dynamic_smem} B dynamic) per CTA: "
                                 f"over the limit of {self.smem_limit} B" + (f" on {target}" if target else ""))

    # -- asynchronous claims on shared memory -----------------------------------------------------------
    def claim(self, cta: Cta, addrs: np.ndarray, kind: str, who: str) -> int:
        """An asynchronous reader or writer takes `addrs` until `release`: a write (copy in flight) may not
        meet a reader that has not finished nor another write; a read may not meet a write in flight."""
        addrs = np.unique(np.asarray(addrs, np.int64))
        self.check_shared(cta, addrs, kind, who)
        (cta.writing if kind == "write" else cta.reading)[addrs] += 1
        token = id(addrs)
        cta.claims[token] = (kind, addrs, who)
        return token

    def release(self, cta: Cta, token: int) -> None:
        kind, addrs, _ = cta.claims.pop(token)
        (cta.writing if kind == "write" else cta.reading)[addrs] -= 1

    def check_shared(self, cta: Cta, addrs: np.ndarray, kind: str, who: str) -> None:
        """A read of bytes an asynchronous copy has not landed yet, or a write of bytes an asynchronous
        reader (wgmma group) still reads or a copy is still writing, is a race: raise, naming both sides."""
        hit = cta.writing[addrs].any() or (kind == "write" and cta.reading[addrs].any())
        if not hit:
            return
        for other, theirs, them in cta.claims.values():
            if other == "read" and kind == "read":
                continue
            if np.intersect1d(theirs, addrs).size:
                if other == "write":
                    raise EmulationError(f"{who} {'reads' if kind == 'read' else 'writes'} shared memory "
                                         f"(CTA {cta.rank}, {int(addrs.min()):#x}..) that {them} has not finished "
                                         f"writing: a wait on its completion (mbarrier / wait_group) is missing")
                if "bulk_group" in them:
                    raise EmulationError(f"{who} overwrites shared memory (CTA {cta.rank}, {int(addrs.min()):#x}..) "
                                         f"that {them} may still read: no cp.async.bulk.wait_group.read retired "
                                         "its bulk group")
                raise EmulationError(f"{who} overwrites shared memory (CTA {cta.rank}, {int(addrs.min()):#x}..) "
                                     f"that {them} still reads: a stage refilled before its consumer released it")

    def new_cta(self, rank: int, ctaid: tuple[int, int], smem: np.ndarray, lo: int, symbols: dict[str, int]) -> Cta:
        """A CTA of the cluster being started (a family with per-CTA state, e.g. Tensor Memory, adds it)."""
        return Cta(rank, ctaid, smem, lo, symbols)

    def setmaxnreg(self, w: Warp, ins, op: str, count: int) -> bool:
        """setmaxnreg.{inc,dec}.sync.aligned.u32 `count` (PTX ISA 9.7.19) by the whole warp `w`: the count a
        multiple of 8 in 24..256; .dec gives the registers above `count` to the CTA's pool, .inc takes those up
        to `count` from it, or returns False (the warp waits: a deadlock if no .dec ever fills the pool). The
        count at launch is the kernel's .maxnreg (needed: without it the count at entry is unknown)."""
        from ..isa.setmaxnreg import SETMAXNREG_MAX, SETMAXNREG_MIN, SETMAXNREG_STEP

        action = op.split(".")[1]
        if op != f"setmaxnreg.{action}.sync.aligned.u32" or action not in ("inc", "dec"):
            raise EmulationError(f"line {ins.line}: unsupported form {op}")
        if not (SETMAXNREG_MIN <= count <= SETMAXNREG_MAX and count % SETMAXNREG_STEP == 0):
            raise EmulationError(f"line {ins.line}: {op} {count}: the count is a multiple of {SETMAXNREG_STEP} in "
                                 f"{SETMAXNREG_MIN}..{SETMAXNREG_MAX}")
        if w.regs is None:
            raise EmulationError(f"line {ins.line}: {op} in a kernel without .maxnreg: the register count at entry "
                                 "is unknown")
        if count != w.regs and (action == "dec") != (count < w.regs):
            raise EmulationError(f"line {ins.line}: {op} {count} from {w.regs} registers ({w.name()}): .dec lowers "
                                 "the count, .inc raises it")
        delta = 32 * (count - w.regs)
        if delta > w.cta.reg_pool:
            w.reg_wait = (ins, delta)
            return False
        w.cta.reg_pool -= delta
        w.regs, w.reg_wait = count, None
        w.reg_log.append((ins.line, count))
        return True

    def cluster_done(self, ctas: list[Cta]) -> None:
        """Checks when every warp of a cluster has returned: every warp of a warpgroup executed the same
        setmaxnreg instructions (PTX ISA 9.7.19: else the behaviour is undefined)."""
        for cta in ctas:
            for first in range(0, len(cta.warps), 4):
                logs = {tuple(w.reg_log) for w in cta.warps[first:first + 4]}
                if len(logs) > 1:
                    raise EmulationError(f"CTA {cta.rank} warpgroup {first // 4}: its warps executed different "
                                         f"setmaxnreg instructions (line, count): {sorted(logs)}")

    def _release_barriers(self, warps) -> bool:
        """Release a group once `count` threads wait on the same (CTA, id) / the cluster barrier."""
        released = False
        for key in {w.bar[:2] for w in warps if w.bar is not None}:
            waiting = [w for w in warps if w.bar is not None and w.bar[:2] == key]
            counts = {w.bar[2] for w in waiting}
            if len(counts) != 1:
                raise EmulationError("bar.sync with different thread counts")
            count = counts.pop()
            if count is None:                  # no count: every thread of the CTA that has not exited
                cta = waiting[0].cta
                count = 32 * sum(1 for x in cta.warps if not x.done)
            if 32 * len(waiting) == count:
                for w in waiting:
                    w.bar = None
                released = True
        return released

    # -- values ----------------------------------------------------------------------------------------
    def val(self, w: Warp, x: str) -> np.ndarray:
        r = w.r.get(x)
        if r is not None:
            if w.groups or w.open:
                self.check_free(w, x)
            return r
        if x[0] == "%":
            if x == "%tid.x":
                return w.tid.astype(np.uint64)
            special = {"%ctaid.x": w.cta.ctaid[0], "%ctaid.y": w.cta.ctaid[1], "%nctaid.x": self.grid[0],
                       "%nctaid.y": self.grid[1], "%cluster_ctarank": w.cta.rank, "%laneid": None}
            if x == "%laneid":
                return np.arange(32, dtype=np.uint64)
            if x in special:
                return np.full(32, special[x], np.uint64)
            raise EmulationError(f"read of unset register {x}")
        if x.startswith("0f"):
            return np.full(32, int(x[2:], 16), np.uint64)
        if _INT.fullmatch(x):
            return np.full(32, int(x, 0) & 0xFFFFFFFFFFFFFFFF, np.uint64)
        if x in w.cta.symbols:
            return np.full(32, w.cta.symbols[x], np.uint64)
        if x in self.param_bytes:          # `mov` of a by-value parameter's symbol: its (param-space) address
            return np.full(32, self.params[x], np.uint64)
        if x in self.global_syms:
            return np.full(32, self.global_syms[x], np.uint64)
        raise EmulationError(f"unknown operand {x}")

    def check_free(self, w: Warp, reg: str) -> None:
        """A register a pending wgmma reads or writes may not be touched (9.7.15.5.2: wait first)."""
        for grp in w.groups + [w.open]:
            for op in grp:
                if reg in op["busy"]:
                    raise EmulationError(f"{reg} accessed while its wgmma is in flight (issued by {op['who']}; "
                                         f"no wgmma.wait_group retired it yet)")

    def setr(self, w: Warp, name: str, value: np.ndarray, act: np.ndarray) -> None:
        if w.groups or w.open:
            self.check_free(w, name)
        old = w.r.get(name)
        if value.dtype == bool:
            w.r[name] = np.where(act, value, old if old is not None else False)
        else:
            w.r[name] = np.where(act, value, old if old is not None else np.uint64(0)).astype(np.uint64)

    def addr(self, w: Warp, x: str) -> np.ndarray:
        base, off = address(x)
        return self.val(w, base).astype(np.int64) + off

    # -- shared memory ---------------------------------------------------------------------------------
    def in_shared(self, cta: Cta, a: int, n: int = 1) -> bool:
        return cta.lo <= a and a + n <= len(cta.smem)

    def sread(self, cta: Cta, a: int, n: int) -> np.ndarray:
        if not self.in_shared(cta, a, n):
            raise EmulationError(f"shared read {a:#x}+{n} outside the CTA's shared memory")
        if cta.writing[a:a + n].any():
            self.check_shared(cta, np.arange(a, a + n), "read", self._who())
        return cta.smem[a:a + n]

    def swrite(self, cta: Cta, a: int, data: np.ndarray) -> None:
        if not self.in_shared(cta, a, len(data)):
            raise EmulationError(f"shared write {a:#x}+{len(data)} outside the CTA's shared memory")
        if cta.writing[a:a + len(data)].any() or cta.reading[a:a + len(data)].any():
            self.check_shared(cta, np.arange(a, a + len(data)), "write", self._who())
        cta.smem[a:a + len(data)] = data
        if self.warp is not None and self.warp.cta is cta:
            cta.unfenced[a:a + len(data)] = self.warp.index + 1

    def _who(self) -> str:
        return where(self.ins, self.warp) if self.ins is not None else "a shared access"

    def cluster_target(self, w: Warp, a: int) -> tuple[Cta, int]:
        """(CTA, local address) of a shared::cluster address (a plain shared address is the own CTA's)."""
        rank, local = divmod(int(a), 1 << CLUSTER_BIT)
        cta = w.cta.cluster[rank - 1] if rank else w.cta
        if cta.exited:
            raise EmulationError("shared::cluster access to a CTA that has exited")
        return cta, local

    # -- mbarriers (9.7.13.15) -------------------------------------------------------------------------
    @staticmethod
    def bar_state(cta: Cta, a: int) -> dict:
        if a % 8 or a not in cta.mbar:
            raise EmulationError(f"mbarrier at {a:#x} not initialised")
        return cta.mbar[a]

    def bar_arrive(self, cta: Cta, a: int, tx: int = 0) -> None:
        b = self.bar_state(cta, a)
        b["tx"] += tx
        b["pending"] -= 1
        if b["pending"] < 0:
            raise EmulationError(f"more arrivals than expected on mbarrier {a:#x} (CTA {cta.rank}): its phase "
                                 f"{b['phase']} already has all {b['count']} arrivals and waits for {b['tx'] - tx} "
                                 f"tx bytes")
        self.bar_check(b)
        self.stats["arrive"] += 1

    def bar_complete_tx(self, cta: Cta, a: int, nbytes: int) -> None:
        b = self.bar_state(cta, a)
        b["tx"] -= nbytes                        # may go negative first: a peer's bytes before our expect_tx
        self.bar_check(b)

    @staticmethod
    def bar_check(b: dict) -> None:
        if b["pending"] == 0 and b["tx"] == 0:
            b["phase"] += 1
            b["pending"] = b["count"]

    # -- TMA (cp.async.bulk.tensor) --------------------------------------------------------------------
    def tma(self, w: Warp, dst: int, tm: int, coords: tuple[int, ...], bar: int, mask: int | None = None,
            peer_barrier: bool = False) -> None:
        """One box. The bytes complete on the mbarrier at `bar` in the CTA the data lands in; with
        .cta_group::2 (`peer_barrier`, 9.7.9.25.5.1) `bar` may be a shared::cluster address of the pair's
        other CTA (a CTA pair's loads complete on the leader's barrier)."""
        bar_cta = None
        if bar >= 1 << CLUSTER_BIT:
            if not peer_barrier:
                raise EmulationError("TMA completing on another CTA's mbarrier needs .cta_group::2")
            bar_cta, bar = self.cluster_target(w, bar)
        if tm not in w.fenced and not self.tmaps.get(tm, {}).get("param"):
            # a map in global memory needs the fence; one in a kernel parameter does not (PTX 9.7.9.25.5.1)
            raise EmulationError("tensor map used before fence.proxy.tensormap")
        spec = self.tmaps[tm]
        if len(coords) != len(spec["dims"]):
            raise EmulationError(f"a rank-{len(spec['dims'])} tensor map with {len(coords)} coordinates")
        x, y = coords[:2]
        inner, rows = spec["box"][:2]
        if len(coords) == 3 and spec["box"][2] != 1:
            raise EmulationError("TMA boxes here are one batch deep")
        z = coords[2] if len(coords) == 3 else 0
        base = spec["address"] + z * (spec["strides"][1] if len(coords) == 3 else 0)
        batch_in = len(coords) == 2 or 0 <= z < spec["dims"][2]
        eb = spec["elem_bytes"]
        if dst % 128 or dst >= 1 << CLUSTER_BIT:
            raise EmulationError("TMA destination: a 128-byte aligned local address")
        if any(s % 16 for s in spec["strides"]) or spec["address"] % 16:
            raise EmulationError("tensor map: global address and strides must be multiples of 16 bytes")
        # elements of the box outside the tensor's dims are filled with zeros (OOB fill NONE): the edges of
        # M, N and the K tail; only the elements inside are read, so a box may hang over the last row
        stride = spec["strides"][0]
        dims = spec["dims"]
        row_bytes = inner * eb
        x0, x1 = min(max(x, 0), dims[0]), min(max(x + inner, 0), dims[0])
        data = []
        for r in range(rows):
            row = np.zeros(row_bytes, np.uint8)
            if batch_in and 0 <= y + r < dims[1] and x1 > x0:
                src = base + (y + r) * stride + x0 * eb
                row[(x0 - x) * eb:(x1 - x) * eb] = self.mem.read_bytes(src, (x1 - x0) * eb, spec["operand"])
            data.append(row)
        self.stats["tma_oob_bytes"] = self.stats.get("tma_oob_bytes", 0) + rows * row_bytes - sum(
            (x1 - x0) * eb for r in range(rows) if batch_in and 0 <= y + r < dims[1])
        block = np.concatenate(data)
        logical = dst + np.arange(block.size)
        xor_bits = {"none": 0, "32B": 1, "64B": 2, "128B": 3}[spec["swizzle"]]
        phys = logical ^ (((logical >> 7) & ((1 << xor_bits) - 1)) << 4)
        # multicast: the same offsets (data and mbarrier) in every CTA of the mask
        targets = [w.cta] if mask is None else [c for c in w.cta.cluster if mask >> c.rank & 1]
        self.stats["tma"] += 1
        self.stats["multicast"] += mask is not None
        who = where(self.ins, w) if self.ins is not None else "cp.async.bulk.tensor"
        for cta in targets:
            if not (self.in_shared(cta, int(phys.min())) and self.in_shared(cta, int(phys.max()))):
                raise EmulationError("TMA copy outside the CTA's shared memory")
            if self.land == "eager":
                self.check_shared(cta, phys, "write", who)
                self.land_copy((cta, phys, block, bar, None, bar_cta))
            else:
                token = self.claim(cta, phys, "write", who)
                copy = (cta, phys, block, bar, token, bar_cta)
                self.pending.append(Pending(("tma", len(self.pending), id(copy)), lambda c=copy: self.land_copy(c),
                                            f"{who} into CTA {cta.rank}"))

    def tma_store(self, w: Warp, src: int, tm: int, coords: tuple[int, ...]) -> None:
        """One box from shared memory to the tensor (cp.async.bulk.tensor .global.shared::cta.bulk_group,
        PTX 9.7.9.25.5.1): the elements inside the tensor's extents are written, the rest of the box is
        dropped (clipped). The global bytes are written at issue; the source bytes are claimed as read until
        a cp.async.bulk.wait_group(.read) retires the store's bulk group, so a thread that writes them
        earlier is caught (the engine may still be reading them)."""
        if tm not in w.fenced and not self.tmaps.get(tm, {}).get("param"):
            # a map in global memory needs the fence; one in a kernel parameter does not (PTX 9.7.9.25.5.1)
            raise EmulationError("tensor map used before fence.proxy.tensormap")
        spec = self.tmaps[tm]
        if len(coords) != len(spec["dims"]):
            raise EmulationError(f"a rank-{len(spec['dims'])} tensor map with {len(coords)} coordinates")
        if src % 128 or src >= 1 << CLUSTER_BIT:
            raise EmulationError("TMA store source: a 128-byte aligned local shared address")
        inner, rows = spec["box"][:2]
        if len(coords) == 3 and spec["box"][2] != 1:
            raise EmulationError("TMA boxes here are one batch deep")
        eb = spec["elem_bytes"]
        row_bytes = inner * eb
        logical = src + np.arange(rows * row_bytes)
        xor_bits = {"none": 0, "32B": 1, "64B": 2, "128B": 3}[spec["swizzle"]]
        phys = logical ^ (((logical >> 7) & ((1 << xor_bits) - 1)) << 4)
        cta = w.cta
        if not (self.in_shared(cta, int(phys.min())) and self.in_shared(cta, int(phys.max()))):
            raise EmulationError("TMA store from outside the CTA's shared memory")
        who = where(self.ins, w) if self.ins is not None else "cp.async.bulk.tensor"
        self.check_shared(cta, phys, "read", who)
        self._check_fenced(cta, phys, who)
        block = cta.smem[phys].reshape(rows, row_bytes)
        x, y = coords[:2]
        z = coords[2] if len(coords) == 3 else 0
        dims, strides = spec["dims"], spec["strides"]
        if len(coords) == 2 or 0 <= z < dims[2]:
            base = spec["address"] + (z * strides[1] if len(coords) == 3 else 0)
            x0, x1 = min(max(x, 0), dims[0]), min(max(x + inner, 0), dims[0])
            for r in range(rows):
                if 0 <= y + r < dims[1] and x1 > x0:
                    self.mem.write_bytes(base + (y + r) * strides[0] + x0 * eb,
                                         block[r, (x0 - x) * eb:(x1 - x) * eb].copy())
        self.stats["tma_store"] = self.stats.get("tma_store", 0) + 1
        w.bulk_open.append((cta, self.claim(cta, phys, "read", who), None))

    @staticmethod
    def _check_fenced(cta: Cta, phys: np.ndarray, who: str) -> None:
        """The async proxy reads only bytes whose generic-proxy writers executed fence.proxy.async since."""
        stale = cta.unfenced[phys]
        if stale.any():
            raise EmulationError(f"{who} reads shared memory (CTA {cta.rank}, {int(phys[stale != 0].min()):#x}..) that "
                                 f"warp {int(stale[stale != 0][0]) - 1} wrote with generic-proxy stores and no "
                                 "fence.proxy.async.shared::cta since: the TMA engine (async proxy) may not see them")

    def bulk_store(self, w: Warp, dst: int, src: int, size: int) -> None:
        """`size` bytes of the CTA's shared memory at `src` to global `dst` (cp.async.bulk.global.shared::cta
        .bulk_group, PTX 9.7.9.25.4.1: both addresses 16-byte aligned, the size a multiple of 16). The
        source is claimed as read until a cp.async.bulk.wait_group(.read) retires the copy's bulk group, and
        must be fenced for the async proxy (like a TMA store). Eagerly the copy happens at issue; under a
        policy ("lazy") it is a pending operation that reads the shared bytes and writes global memory when
        it completes: when no warp can move, at a random point, or at the latest at the wait_group(.read)
        that retires its group (the global write then too: nothing in a kernel reads what it copies out, and
        a kernel may exit after a .read wait)."""
        if size <= 0 or size % 16 or src % 16 or dst % 16:
            raise EmulationError(f"cp.async.bulk of {size} B from {src:#x} to {dst:#x}: both addresses 16-byte "
                                 "aligned and the size a positive multiple of 16 (PTX 9.7.9.25.4.1)")
        cta = w.cta
        if src >= 1 << CLUSTER_BIT or not self.in_shared(cta, src, size):
            raise EmulationError(f"cp.async.bulk source {src:#x}+{size} outside the CTA's shared memory")
        who = where(self.ins, w) if self.ins is not None else "cp.async.bulk"
        phys = np.arange(src, src + size)
        self.check_shared(cta, phys, "read", who)
        self._check_fenced(cta, phys, who)
        token = self.claim(cta, phys, "read", who)
        self.stats["bulk_store"] = self.stats.get("bulk_store", 0) + 1

        def complete() -> None:
            self.mem.write_bytes(dst, cta.smem[src:src + size].copy())

        if self.land == "eager":
            complete()
            w.bulk_open.append((cta, token, None))
            return
        pending = Pending(("bulk", id(phys)), complete, f"{who} to global {dst:#x}")
        self.pending.append(pending)
        w.bulk_open.append((cta, token, pending))

    def bulk_wait(self, w: Warp, allowed: int) -> None:
        """cp.async.bulk.wait_group(.read) N: the thread's bulk groups but the newest N have completed (their
        sources are free to be overwritten; a pending bulk copy completes here)."""
        while len(w.bulk_groups) > allowed:
            for cta, token, pending in w.bulk_groups.pop(0):
                if pending is not None and any(p is pending for p in self.pending):
                    self._complete_pending(pending)
                self.release(cta, token)

    def _complete_pending(self, pending: Pending) -> None:
        self.pending.remove(pending)
        self.stats["async"] += 1
        pending.complete()

    def land_copy(self, copy) -> None:
        cta, phys, block, bar, token, bar_cta = copy
        if token is not None:
            self.release(cta, token)
        cta.smem[phys] = block
        self.bar_complete_tx(bar_cta or cta, bar, block.size)

    # -- wgmma (9.7.15.6) ------------------------------------------------------------------------------
    def read_operand(self, cta: Cta, desc: int, rows: int, row_bytes: int, row0: int) -> np.ndarray:
        """Bytes [rows][row_bytes] of a K-major operand from its descriptor, rows row0.. (9.7.15.5.1.2)."""
        a = self.operand_addresses(cta, desc, rows, row_bytes, row0)
        if cta.writing[a].any():
            self.check_shared(cta, a.reshape(-1), "read", self._who())
        return cta.smem[a]

    def operand_addresses(self, cta: Cta, desc: int, rows: int, row_bytes: int, row0: int) -> np.ndarray:
        """The shared addresses [rows][row_bytes] `read_operand` reads."""
        start = (desc & 0x3FFF) << 4
        sbo = ((desc >> 32) & 0x3FFF) << 4
        lbo = ((desc >> 16) & 0x3FFF) << 4
        base_offset = (desc >> 49) & 7
        swz = {0: "none", 1: "128B", 2: "64B", 3: "32B"}[desc >> 62]
        if desc & ~((0x3FFF) | (0x3FFF << 16) | (0x3FFF << 32) | (7 << 49) | (3 << 62)):
            raise EmulationError("wgmma descriptor: unused bits set")
        r = np.arange(row0, row0 + rows)[:, None]
        b = np.arange(row_bytes)[None, :]
        if swz == "none":        # core matrices 8 rows x 16 B; LBO between K-adjacent ones, SBO between 8-row groups
            a = start + (r // 8) * sbo + (r % 8) * 16 + (b // 16) * lbo + b % 16
        else:                    # rows W bytes apart inside an 8-row atom, SBO between atoms
            width = {"32B": 32, "64B": 64, "128B": 128}[swz]
            if row_bytes > width:
                raise EmulationError("wgmma descriptor: a row wider than the swizzle atom")
            bits = {"32B": 1, "64B": 2, "128B": 3}[swz]
            a = start + (r // 8) * sbo + (r % 8) * width + b
            a = a ^ ((((a >> 7) - base_offset) & ((1 << bits) - 1)) << 4)
        if not (self.in_shared(cta, int(a.min())) and self.in_shared(cta, int(a.max()))):
            raise EmulationError("wgmma descriptor read outside the CTA's shared memory")
        return a

    def _wgmma_form(self, op: str):
        """The mma.sp form whose sparse layout a `wgmma.mma_async.sp...mMnNkK.D.A.B` step uses (same
        A types, K and metadata layout: 9.7.15.6.1 restates the mma.sp sparse storage)."""
        form = self._forms.get(op)
        if form is None:
            from ..isa.mma_sp.forms import find_form

            parts = op.split(".")
            shape = next(p for p in parts if p.startswith("m64n"))
            k = int(shape.split("k")[1])
            d_type, a_type, b_type = parts[parts.index(shape) + 1:parts.index(shape) + 4]
            form = find_form(f"m16n8k{k}", a_type, b_type, d_type, d_type)
            self._forms[op] = form
        return form

    def run_wgmma(self, w: Warp, op: dict) -> None:
        from .. import sparse
        from ..isa.mma_sp.fragments import metadata_suppliers

        form = self._wgmma_form(op["op"])
        warp = (int(w.tid[0]) // 32) % 4
        storage = sparse._np_dtype(form.a_type), sparse._np_dtype(form.b_type)
        comp = self.read_operand(w.cta, op["a"], 16, 32, 16 * warp).view(storage[0])     # 16 rows x K/2
        bt = self.read_operand(w.cta, op["b"], op["n"], 64, 0).view(storage[1])           # N rows x K
        words = w.r[op["meta"]].astype(np.uint32)
        sup = metadata_suppliers(form.layout, op["sel"])
        lane = np.arange(32)
        # the hardware reads the selected threads only: lane (g, t) plays supplier 2*sel + (t & 1) (pairs)
        src = (lane & ~3) + (np.array(sup)[lane % len(sup)] if len(sup) < 4 else lane % 4)
        dense = sparse.decompress(comp, words[src].reshape(1, 1, 32), form.a_type, form.shape)
        with np.errstate(invalid="ignore", over="ignore"):   # inf / NaN operands give IEEE results, as on the GPU
            prod = dense.astype(np.float64) @ bt.astype(np.float64).T               # 16 x N
        g, t = lane // 4, lane % 4
        for i, reg in enumerate(op["acc"]):
            row = g + 8 * ((i >> 1) & 1)                                            # Figure 149
            col = 8 * (i >> 2) + 2 * t + (i & 1)
            old = w.r[reg] if op["scale_d"] else np.zeros(32, np.uint64)
            if form.c_type == "f32":
                v = old.astype(np.uint32).view(np.float32).astype(np.float64) + prod[row, col]
                bits = v.astype(np.float32).view(np.uint32)
                if self.fp8_acc_bits is not None and form.a_type in ("e4m3", "e5m2"):
                    bits = bits & np.uint32(~((1 << (24 - self.fp8_acc_bits)) - 1) & 0xFFFFFFFF)
                w.r[reg] = bits.astype(np.uint64)
            else:
                v = old.astype(np.uint32).view(np.int32).astype(np.int64) + np.rint(prod[row, col]).astype(np.int64)
                w.r[reg] = (v & 0xFFFFFFFF).astype(np.uint64)
        self.stats["wgmma"] += 1

    # -- mma.sp ----------------------------------------------------------------------------------------
    def _mma_sp_form(self, op: str):
        form = self._forms.get(op)
        if form is None:
            from ..isa.mma_sp.forms import find_form

            parts = op.split(".")
            shape = next(p for p in parts if re.fullmatch(r"m16n8k\d+", p))
            kind = next((p.removeprefix("kind::") for p in parts if p.startswith("kind::")), None)
            types = [p for p in parts[parts.index(shape) + 1:] if p not in ("row", "col")]
            types = [p for p in types if not p.startswith(("kind::", "block_scale", "scale_vec"))]
            kw = {"satfinite": "satfinite" in parts}
            types = [p for p in types if p != "satfinite"]
            if "block_scale" in parts:          # ...block_scale.scale_vec::NX.D.A.B.C.stype (9.7.14.6.3 syntax)
                kw["scale_type"] = types.pop()
                vec = next((p for p in parts if p.startswith("scale_vec::")), None)
                if vec:
                    kw["scale_vec"] = vec.removeprefix("scale_vec::")
            d_type, a_type, b_type, c_type = types[-4:]
            form = find_form(shape, a_type, b_type, c_type, d_type, kind, **kw)
            self._forms[op] = form
        return form

    def _selectors(self, w: Warp, op: str) -> tuple[int, int]:
        """{byte-id, thread-id}: immediates or .b16 registers; one value for the warp."""
        out = []
        for x in vector(op):
            if x.startswith("%"):
                v = np.unique(self.val(w, x) & np.uint64(0xFFFF))
                if len(v) != 1:
                    raise EmulationError(f"mma.sp scale selector {x} differs between lanes")
                out.append(int(v[0]))
            else:
                out.append(int(x, 0))
        return out[0], out[1]

    def _mma_sp(self, w: Warp, op: str, ops, act) -> None:
        from .mma_sp import mma_sp_warp

        if not (act.all() and w.alive.all()):
            raise EmulationError("mma.sp by part of a warp (.sync.aligned)")
        form = self._mma_sp_form(op)
        regs = lambda x: [self.val(w, r) for r in vector(x)]          # noqa: E731
        scales = None
        if form.block_scale is not None:
            # operands: d, a, b, c, e, selector, scale-a-data, {byte-id-a, thread-id-a}, scale-b-data, {..}
            sel = [self._selectors(w, ops[i]) for i in (7, 9)]
            scales = (self.val(w, ops[6]), sel[0], self.val(w, ops[8]), sel[1])
        d = mma_sp_warp(form, regs(ops[1]), regs(ops[2]), regs(ops[3]), self.val(w, ops[4]), int(ops[5], 0),
                        scales)
        for i, r in enumerate(vector(ops[0])):
            w.r[r] = d[i]
        self.stats["mma"] += 1

    # -- one warp until it blocks -----------------------------------------------------------------------
    def step_warp(self, w: Warp, budget: int | None = None):
        """Run until ret / a barrier / a failed try_wait / a release, or `budget` executed instructions
        (the interleaving policies); returns (state, progressed).

        Divergence: while every live lane is at the same instruction the warp runs as one (`w.pc`); a
        branch that only some lanes take gives each lane its own pc (`w.lane_pc`), and the lanes at the
        lowest pc run first, so they catch up with the others and the warp reconverges where the paths
        meet. `bra.uni` must be uniform (PTX ISA 9.7.12.1); barriers need the whole warp converged."""
        code, labels = self.k.code, self.k.labels
        progressed = False
        while True:
            if w.lane_pc is None:
                pc = w.pc
                here = w.alive
            else:
                pc = int(w.lane_pc[w.alive].min())
                here = w.alive & (w.lane_pc == pc)
            ins = code[pc]
            self.ins, self.warp = ins, w
            self._advance(w, here, pc + 1)
            op, ops = ins.op, ins.args
            act = here.copy()
            if ins.pred is not None:
                act &= w.r[ins.pred].astype(bool) ^ ins.negate
            if op == "bra.uni" or op == "bra":
                taken = act.any()
                if taken and not act[here].all():
                    if op == "bra.uni":
                        raise EmulationError(f"line {ins.line}: non-uniform branch: {ins.text}")
                    if w.lane_pc is None:
                        w.lane_pc = np.full(32, w.pc, np.int64)
                    w.lane_pc[act] = labels[ops[0]]
                elif taken:
                    self._advance(w, here, labels[ops[0]])
                w.branches += 1
                self._reconverge(w)
                continue
            if not act.any():
                self._reconverge(w)
                continue
            if op == "ret":
                w.alive &= ~act
                if not w.alive.any():
                    return "ret", True
                self._reconverge(w)
                continue
            if op == "bar.sync" or op.startswith("barrier.cluster.arrive"):
                if not (act.all() and w.alive.all() and w.lane_pc is None):
                    raise EmulationError(f"line {ins.line}: {op} by part of a warp")
                if op == "bar.sync":
                    w.bar = (w.cta.rank, int(self.val(w, ops[0])[0]), int(ops[1]) if len(ops) > 1 else None)
                else:                              # arrive + the wait that follows: the whole cluster
                    w.bar = ("cluster", 0, self.threads * len(w.cta.cluster))
                return "bar", True
            if op.startswith("setmaxnreg."):
                if not (act.all() and w.alive.all() and w.lane_pc is None):
                    raise EmulationError(f"line {ins.line}: {op} by part of a warp (.sync.aligned)")
                if not self.setmaxnreg(w, ins, op, int(ops[0], 0)):
                    self._advance(w, here, pc)           # .inc blocks until the pool has the registers
                    return "spin", progressed
                progressed = True
                continue
            if op.startswith("mbarrier.try_wait"):
                a = self.addr(w, ops[1])[act]
                parity = self.val(w, ops[2])[act]
                # the phase of parity P is complete when the current phase's parity differs from P
                ok = np.array([self.bar_state(w.cta, int(x))["phase"] % 2 != int(p) for x, p in zip(a, parity)])
                full = np.zeros(32, bool)
                full[act] = ok
                self.setr(w, ops[0], full, act)
                if not ok.all():
                    i = int(np.flatnonzero(~ok)[0])
                    w.waiting = (ins, w.cta, int(a[i]), int(parity[i]))
                    return "spin", progressed
                w.waiting = None
                continue
            try:
                self.execute(w, op, ops, act)
            except EmulationError as e:
                if str(e).startswith("line ") or where(ins, w) in str(e):
                    raise                    # already names the instruction, its line and warp
                raise type(e)(f"line {ins.line}: {e} ({ins.text}; {w.name()})") from None
            progressed = True
            if op.startswith("mbarrier.arrive.shared"):
                return "yield", True             # a release: whoever waits on it may run before this warp goes on
            # the interleaving policies switch warps after `budget` executed instructions; branches and
            # instructions no lane executes are free, so a warp spinning on a try_wait loop never counts
            # as progress and a deadlock is still found
            if budget is not None:
                budget -= 1
                if budget == 0:
                    return "yield", True

    # -- cluster launch control (PTX ISA 9.7.13.17 try_cancel, 9.7.13.18 query_cancel) -----------------
    # The 16-byte answer is opaque in PTX; here it is word 0 = CLC_MAGIC | canceled, words 1-3 = the
    # canceled cluster's first ctaid (x, y, 0). A query of 16 bytes without the magic is an error: they are
    # not an answer (the wait for it was skipped, or the slot is not the one written).
    CLC_MAGIC = 0xC1C0_0000
    _TRY_CANCEL = re.compile(r"clusterlaunchcontrol\.try_cancel\.async\.shared::cta\.mbarrier::complete_tx::bytes"
                             r"(\.multicast::cluster::all)?\.b128")

    def _clc(self, w: Warp, op: str, ops, act) -> None:
        cta = w.cta
        if op == "ld.shared.b128":                     # the answer into a 128-bit register: two u64 per lane
            a = self.addr(w, ops[1])
            old = w.r.get(ops[0])
            value = np.zeros((32, 2), np.uint64) if old is None or old.ndim != 2 else old.copy()
            for lane in np.flatnonzero(act):
                if int(a[lane]) % 16:
                    raise EmulationError("ld.shared.b128 of an address that is not 16-byte aligned")
                value[lane] = self.sread(cta, int(a[lane]), 16).copy().view(np.uint64)
            w.r[ops[0]] = value
            return
        if op.startswith("clusterlaunchcontrol.try_cancel"):
            m = self._TRY_CANCEL.fullmatch(op)
            if m is None:
                raise EmulationError(f"unsupported try_cancel form {op}")
            for lane in np.flatnonzero(act):
                self._try_cancel(w, int(self.addr(w, ops[0])[lane]), int(self.addr(w, ops[1])[lane]),
                                 multicast=m.group(1) is not None)
            return
        answer = w.r.get(ops[1])
        if answer is None or answer.ndim != 2:
            raise EmulationError(f"{ops[1]} holds no 16-byte value (ld.shared.b128 of the answer first)")
        words = answer.view(np.uint32).reshape(32, 4)
        lanes = np.flatnonzero(act)
        bad = [i for i in lanes if int(words[i, 0]) & ~1 != self.CLC_MAGIC]
        if bad:
            raise EmulationError(f"clusterlaunchcontrol.query_cancel of 16 bytes that are no try_cancel answer "
                                 f"(lane {bad[0]}: {words[bad[0]].tolist()}): read before its mbarrier completed, "
                                 "or from the wrong slot")
        canceled = (words[:, 0] & 1).astype(bool)
        if op == "clusterlaunchcontrol.query_cancel.is_canceled.pred.b128":
            if (~canceled[lanes]).any():
                cta.clc_failed = True                  # observed: a later try_cancel from this CTA is undefined
            self.setr(w, ops[0], canceled, act)
            return
        m = re.fullmatch(r"clusterlaunchcontrol\.query_cancel\.get_first_ctaid(?:::([xyz])\.b32|\.v4\.b32)\.b128", op)
        if m is None:
            raise EmulationError(f"unsupported query_cancel form {op}")
        if (~canceled[lanes]).any():
            raise EmulationError("clusterlaunchcontrol.query_cancel.get_first_ctaid of a failed answer (undefined, "
                                 "PTX 9.7.13.18): guard it with is_canceled")
        dims = "xyz".index(m.group(1)) if m.group(1) else None
        if dims is not None:
            self.setr(w, ops[0], words[:, 1 + dims].astype(np.uint64), act)
            return
        for i, reg in enumerate(vector(ops[0])[:3]):
            if reg != "_":
                self.setr(w, reg, words[:, 1 + i].astype(np.uint64), act)

    def _try_cancel(self, w: Warp, at: int, bar: int, multicast: bool) -> None:
        """One try_cancel: the answer (16 bytes at `at`, and a complete-tx of 16 on the mbarrier at `bar`; with
        multicast in every CTA of the cluster at the same offsets) is decided and written when the request
        completes: eagerly at issue, or under a policy when the machine completes it (adversarially late).
        It cancels a cluster not started yet (under a policy any of them, else the next one), or fails when
        none is left. Checks: 16-byte aligned shared::cta addresses, an initialised mbarrier, no request from
        a CTA that observed a failure (undefined, 9.7.13.17), no multicast answer to an exited CTA."""
        cta = w.cta
        who = where(self.ins, w) if self.ins is not None else "clusterlaunchcontrol.try_cancel"
        if at % 16 or at >= 1 << CLUSTER_BIT or bar >= 1 << CLUSTER_BIT:
            raise EmulationError("try_cancel: the answer needs a 16-byte aligned shared::cta address and the "
                                 "mbarrier a shared::cta one")
        if cta.clc_failed:
            raise EmulationError("try_cancel from a CTA that already observed a failed answer: undefined "
                                 "(PTX 9.7.13.17); stop requesting after the first failure")
        targets = cta.cluster if multicast else [cta]
        for c in targets:
            self.bar_state(c, bar)
            if not self.in_shared(c, at, 16):
                raise EmulationError("try_cancel answer outside the CTA's shared memory")
        self.stats["clc_requests"] = self.stats.get("clc_requests", 0) + 1

        def complete(tokens) -> None:
            if multicast and any(c.exited for c in targets):
                raise EmulationError(f"{who}: a multicast answer to a cluster with an exited CTA (undefined, "
                                     "PTX 9.7.13.17)")
            if self.unlaunched:
                pick = int(self.rng.integers(len(self.unlaunched))) if self.policy else 0
                x0, y = self.unlaunched.pop(pick)
                words = np.array([self.CLC_MAGIC | 1, x0, y, 0], np.uint32)
                self.stats["clc_canceled"] = self.stats.get("clc_canceled", 0) + 1
            else:
                words = np.array([self.CLC_MAGIC, 0, 0, 0], np.uint32)
            for c, token in zip(targets, tokens):
                if token is not None:
                    self.release(c, token)
                c.smem[at:at + 16] = words.view(np.uint8)
                self.bar_complete_tx(c, bar, 16)

        if self.land == "eager":
            for c in targets:
                self.check_shared(c, np.arange(at, at + 16), "write", who)
            complete([None] * len(targets))
            return
        tokens = [self.claim(c, np.arange(at, at + 16), "write", who) for c in targets]
        self.pending.append(Pending(("clc", id(tokens)), lambda: complete(tokens), who))

    def _land_cp(self, cta: Cta, group) -> None:
        self.stats["async"] += len(group)
        for d, data, token in group:
            self.release(cta, token)
            cta.smem[d:d + len(data)] = data

    @staticmethod
    def _advance(w: Warp, lanes: np.ndarray, pc: int) -> None:
        if w.lane_pc is None:
            w.pc = pc
        else:
            w.lane_pc[lanes] = pc

    @staticmethod
    def _reconverge(w: Warp) -> None:
        if w.lane_pc is not None:
            live = w.lane_pc[w.alive]
            if (live == live[0]).all():
                w.pc = int(live[0])
                w.lane_pc = None

    def execute(self, w: Warp, op: str, ops, act) -> None:
        v = lambda x: self.val(w, x)                      # noqa: E731
        parts = op.split(".")
        base = parts[0]
        cta = w.cta
        if base in ("ld", "st") and parts[1] in _ORDERING:
            # ld/st .relaxed/.acquire/.release with a scope (PTX ISA 8 memory consistency model): one CTA
            # runs at a time here, so a strong access is an ordinary one
            parts = [parts[0]] + [p for p in parts[1:] if p not in _ORDERING and p not in _SCOPES]
        if base == "clusterlaunchcontrol" or op == "ld.shared.b128":
            self._clc(w, op, ops, act)
            return
        if base == "ld" and parts[1] == "param":
            name = ops[1].strip("[]")
            if name not in self.params:
                raise EmulationError(f"no value for parameter {name}")
            self.setr(w, ops[0], np.full(32, self.params[name], np.uint64), act)
        elif base == "mov" and (ops[0].startswith("{") or ops[1].startswith("{")):
            # mov.b32 {lo, hi}, w / mov.b32 w, {lo, hi}: two 16-bit halves of a 32-bit register, lo the low
            # half (PTX ISA 9.7.9.1 mov, vector operands)
            if ops[0].startswith("{"):
                w32 = v(ops[1])
                for i, r in enumerate(vector(ops[0])):
                    self.setr(w, r, (w32 >> np.uint64(16 * i)) & np.uint64(0xFFFF), act)
            else:
                lo, hi = (v(r) & np.uint64(0xFFFF) for r in vector(ops[1]))
                self.setr(w, ops[0], (hi << np.uint64(16)) | lo, act)
        elif op in _CONVERSIONS:
            # the fused epilogue's conversions (compiler/isa/epilogue_outputs.py; PTX ISA 9.7.9.21 cvt,
            # 9.7.9.22 cvt.pack), modelled from the ISA's text on numpy values
            self.setr(w, ops[0], _CONVERSIONS[op](*(v(o) for o in ops[1:])), act)
        elif base in ("mov", "cvta") or (base == "cvt" and parts[1][0] in "usb"):
            # integer moves and conversions keep the destination's width (cvt: the first type)
            bits = _bits(parts[1] if base == "cvt" else parts[-1])
            value = v(ops[1])
            self.setr(w, ops[0], value & np.uint64((1 << bits) - 1) if bits < 64 else value, act)
        elif base == "bfe":                                # unsigned bit-field extract (9.7.1.x bfe)
            x, pos, ln = (v(o) for o in ops[1:4])
            self.setr(w, ops[0], (x >> pos) & ((np.uint64(1) << ln) - np.uint64(1)), act)
        elif base == "bfi":
            x, y, pos, ln = (v(o) for o in ops[1:5])
            field = ((np.uint64(1) << ln) - np.uint64(1)) << pos
            self.setr(w, ops[0], ((y & ~field) | ((x << pos) & field)) & M32, act)
        elif op == "and.pred":
            self.setr(w, ops[0], v(ops[1]).astype(bool) & v(ops[2]).astype(bool), act)
        elif op == "or.pred":
            self.setr(w, ops[0], v(ops[1]).astype(bool) | v(ops[2]).astype(bool), act)
        elif parts[-1] == "f32" and base in _F32_OPS:
            # f32 arithmetic of the fused epilogue (PTX ISA 9.7.4), on f32 numpy values: fma rounds once (its
            # f64 product of two f32 is exact; the sum rounds to f64, then to f32); the .approx functions
            # are modelled by the exact function rounded to f32 (the hardware's error bounds are the
            # tolerance of tests that compare them: tests/test_epilogue.py)
            x = [v(o).astype(np.uint32).view(np.float32) for o in ops[1:]]
            with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
                r = _F32_OPS[base](*x)
            if ".ftz" in op:              # .ftz: subnormal results flush to sign-preserving zero
                r = np.where(np.abs(r) < np.float32(2.0 ** -126), np.copysign(np.float32(0), r), r)
            self.setr(w, ops[0], np.asarray(r, np.float32).view(np.uint32).astype(np.uint64), act)
        elif base in ("and", "or", "shr", "shl", "add", "sub", "xor", "min", "max", "div", "rem"):
            a, b = v(ops[1]), v(ops[2])
            bits = 64 if parts[-1].endswith("64") else 32
            mask = M64 if bits == 64 else M32
            if base in ("shl", "shr"):
                b = np.minimum(b, np.uint64(bits))
                r = (a << b) if base == "shl" else (a >> b)
                r = np.where(b >= bits, np.uint64(0), r)
            elif base in ("min", "max") and parts[-1].startswith("s"):
                # signed: compare the values sign-extended from their width (PTX ISA min / max .s32 / .s64)
                sa, sb = ((x.astype(np.int64) << (64 - bits)) >> (64 - bits) for x in (a, b))
                r = (np.minimum if base == "min" else np.maximum)(sa, sb).astype(np.uint64)
            else:
                r = {"and": lambda: a & b, "or": lambda: a | b, "add": lambda: a + b, "sub": lambda: a - b,
                     "xor": lambda: a ^ b, "min": lambda: np.minimum(a, b), "max": lambda: np.maximum(a, b),
                     "div": lambda: a // b, "rem": lambda: a % b}[base]()
            self.setr(w, ops[0], r & mask, act)
        elif op in ("mul.lo.u32", "mad.lo.u32", "mul.lo.s32", "mad.lo.s32"):
            r = v(ops[1]) * v(ops[2]) + (v(ops[3]) if base == "mad" else np.uint64(0))
            self.setr(w, ops[0], r & M32, act)
        elif op in ("mul.lo.u64", "mad.lo.u64"):
            r = v(ops[1]) * v(ops[2]) + (v(ops[3]) if base == "mad" else np.uint64(0))
            self.setr(w, ops[0], r, act)
        elif op in ("mul.wide.u32", "mad.wide.u32"):
            r = (v(ops[1]) & M32) * (v(ops[2]) & M32) + (v(ops[3]) if base == "mad" else np.uint64(0))
            self.setr(w, ops[0], r, act)
        elif base == "setp":
            # setp.CmpOp{.BoolOp}.type d, a, b{, c} (9.7.3.x setp)
            a, b = v(ops[1]), v(ops[2])
            if parts[-1].startswith("s"):
                width = int(parts[-1][1:])
                a = (a.astype(np.int64) << (64 - width)) >> (64 - width)
                b = (b.astype(np.int64) << (64 - width)) >> (64 - width)
            r = {"gt": a > b, "lt": a < b, "ge": a >= b, "le": a <= b, "ne": a != b, "eq": a == b}[parts[1]]
            if len(parts) == 4:
                c = v(ops[3]).astype(bool)
                r = {"and": r & c, "or": r | c, "xor": r ^ c}[parts[2]]
            self.setr(w, ops[0], r, act)
        elif base == "selp":
            self.setr(w, ops[0], np.where(v(ops[3]).astype(bool), v(ops[1]), v(ops[2])), act)
        elif base in ("fence", "prefetch"):
            if op.startswith("fence.proxy.tensormap"):
                w.fenced.update(int(x) for x in self.addr(w, ops[0])[act])
            elif op.startswith("fence.proxy.async"):   # this warp's generic stores become visible to the async proxy
                cta.unfenced[cta.unfenced == w.index + 1] = 0
        elif op.startswith("barrier.cluster.wait"):
            pass                                            # folded into the arrive (step_warp)
        elif base == "griddepcontrol":
            pass      # one grid emulated: no grid before it to wait for, none after it to launch (9.7.13)
        elif op == "mapa.shared::cluster.u32":
            if not (v(ops[1]) < 1 << CLUSTER_BIT).all():
                raise EmulationError("mapa of an address that is not CTA-local")
            self.setr(w, ops[0], ((v(ops[2]) + np.uint64(1)) << np.uint64(CLUSTER_BIT)) | v(ops[1]), act)
        elif op == "mbarrier.init.shared::cta.b64":
            for a in self.addr(w, ops[0])[act]:
                if int(a) in cta.mbar:
                    raise EmulationError("mbarrier initialised twice")
                count = int(v(ops[1])[0])
                cta.mbar[int(a)] = {"count": count, "pending": count, "tx": 0, "phase": 0}
        elif op.startswith("mbarrier.arrive"):
            tx = int(ops[2], 0) if "expect_tx" in op else 0
            for a in self.addr(w, ops[1])[act]:
                target, local = self.cluster_target(w, a) if ".shared::cluster" in op else (cta, int(a))
                self.bar_arrive(target, local, tx)
        elif re.match(r"cp\.async\.bulk\.tensor\.[23]d\.shared::cluster\.global\.mbarrier::complete_tx::bytes", op):
            m = re.fullmatch(r"\[(%\w+), \{(%\w+), (%\w+)(?:, (%\w+))?\}\]", ops[1])
            if (m.group(4) is None) != (".2d." in op):
                raise EmulationError(f"{op}: {'3' if '.3d.' in op else '2'} coordinates expected")
            dst, bar = self.addr(w, ops[0]), self.addr(w, ops[2])
            tm, cx, cy = (v(m.group(i)) for i in (1, 2, 3))
            cz = v(m.group(4)) if m.group(4) else None
            mask = v(ops[3]) if op.endswith(".multicast::cluster") else None
            for lane in np.flatnonzero(act):
                coords = (int(cx[lane]), int(cy[lane])) + (() if cz is None else (int(cz[lane]),))
                self.tma(w, int(dst[lane]), int(tm[lane]), coords, int(bar[lane]),
                         None if mask is None else int(mask[lane]), peer_barrier=".cta_group::2" in op)
        elif re.fullmatch(r"cp\.async\.bulk\.tensor\.[23]d\.global\.shared::cta\.bulk_group", op):
            m = re.fullmatch(r"\[(%\w+), \{(%\w+), (%\w+)(?:, (%\w+))?\}\]", ops[0])
            if (m.group(4) is None) != (".2d." in op):
                raise EmulationError(f"{op}: {'3' if '.3d.' in op else '2'} coordinates expected")
            src = self.addr(w, ops[1])
            tm, cx, cy = (v(m.group(i)) for i in (1, 2, 3))
            cz = v(m.group(4)) if m.group(4) else None
            for lane in np.flatnonzero(act):
                signed = lambda r: (int(r[lane]) & 0xFFFFFFFF) - ((int(r[lane]) >> 31 & 1) << 32)  # noqa: E731 (s32)
                coords = (signed(cx), signed(cy)) + (() if cz is None else (signed(cz),))
                self.tma_store(w, int(src[lane]), int(tm[lane]), coords)
        elif op == "cp.async.bulk.commit_group":
            w.bulk_groups.append(w.bulk_open)
            w.bulk_open = []
        elif op == "cp.async.bulk.global.shared::cta.bulk_group":
            dst, src, size = self.addr(w, ops[0]), self.addr(w, ops[1]), v(ops[2])
            for lane in np.flatnonzero(act):
                self.bulk_store(w, int(dst[lane]), int(src[lane]), int(size[lane]))
        elif op in ("cp.async.bulk.wait_group", "cp.async.bulk.wait_group.read"):
            self.bulk_wait(w, int(ops[0]))
        elif op == "bar.warp.sync":
            if not (act.all() and w.alive.all() and w.lane_pc is None):
                raise EmulationError("bar.warp.sync with a full mask by a diverged or partial warp")
        elif op.startswith("wgmma.mma_async.sp"):
            if not (act.all() and w.alive.all()):
                raise EmulationError("wgmma by part of a warp")
            acc = vector(ops[0])
            da, db = v(ops[1]), v(ops[2])                     # descriptors are read at issue
            if not ((da == da[0]).all() and (db == db[0]).all()):
                raise EmulationError("descriptor not uniform across the warp")
            n = int(re.search(r"\.m64n(\d+)k", op).group(1))
            rec = {"op": op, "acc": acc, "a": int(da[0]), "b": int(db[0]), "n": n, "meta": ops[3],
                   "sel": int(ops[4], 0), "scale_d": bool(v(ops[5]).astype(bool).all()),
                   "busy": set(acc) | {ops[3]}, "who": self._who()}
            if self.late_mma:
                # the group reads its operands any time before wait_group retires it: claim them until then
                warp = (int(w.tid[0]) // 32) % 4
                a = self.operand_addresses(cta, rec["a"], 16, 32, 16 * warp).reshape(-1)
                b = self.operand_addresses(cta, rec["b"], n, 64, 0).reshape(-1)
                rec["claim"] = self.claim(cta, np.concatenate([a, b]), "read", rec["who"])
                w.open.append(rec)
            else:
                self.run_wgmma(w, rec)
        elif op == "wgmma.fence.sync.aligned":
            pass
        elif op == "wgmma.commit_group.sync.aligned":
            w.groups.append(w.open)
            w.open = []
        elif op == "wgmma.wait_group.sync.aligned":
            while len(w.groups) > int(ops[0]):
                grp = w.groups.pop(0)
                for rec in grp:
                    rec["busy"] = set()
                    self.release(cta, rec.pop("claim"))
                    self.run_wgmma(w, rec)
        elif op == "cp.async.cg.shared.global":
            if ops[2] != "16":
                raise EmulationError("cp.async.cg copies 16 bytes")
            dst, src = self.addr(w, ops[0]), self.addr(w, ops[1])
            # src-size (PTX ISA 9.7.9.25.3): only that many bytes are read, the rest of the 16 zero-filled;
            # larger than cp-size is undefined
            size = self.val(w, ops[3]) & 0xFFFFFFFF if len(ops) > 3 else np.full(32, 16, np.uint64)
            copies = []
            for lane in np.flatnonzero(act):
                d, n = int(dst[lane]), int(size[lane])
                if not self.in_shared(cta, d, 16):
                    raise EmulationError("cp.async destination outside the CTA's shared memory")
                if n > 16:
                    raise EmulationError(f"cp.async src-size {n} exceeds cp-size 16 (undefined behaviour)")
                data = np.zeros(16, np.uint8)
                if n:
                    data[:n] = self.mem.read_bytes(int(src[lane]), n)
                copies.append((d, data))
            self.stats["cp.async"] += len(copies)
            if self.land == "eager":
                for d, x in copies:
                    self.swrite(cta, d, x)
            else:                     # in flight until the wait_group that retires its group
                who = self._who()
                w.cp_open.extend((d, x, self.claim(cta, np.arange(d, d + 16), "write", who)) for d, x in copies)
        elif op == "cp.async.commit_group":
            w.cp_groups.append(w.cp_open)
            w.cp_open = []
        elif op == "cp.async.wait_group":
            while len(w.cp_groups) > int(ops[0]):
                self._land_cp(cta, w.cp_groups.pop(0))
        elif op == "cp.async.wait_all":
            w.cp_groups.append(w.cp_open)
            w.cp_open = []
            while w.cp_groups:
                self._land_cp(cta, w.cp_groups.pop(0))
        elif op == "ldmatrix.sync.aligned.m8n8.x4.shared.b16":
            if not act.all():
                raise EmulationError("ldmatrix by part of a warp")
            a = self.addr(w, ops[1])
            rows = np.stack([self.sread(cta, int(x), 16) for x in a]).view(np.uint32)   # [lane][4 words]
            lane = np.arange(32)
            # matrix j: rows from lanes 8j..8j+7; lane 4r+c gets word c of row r
            for j, reg in enumerate(vector(ops[0])):
                self.setr(w, reg, rows[8 * j + lane // 4, lane % 4].astype(np.uint64), act)
            self.stats["ldmatrix"] += 1
        elif base.startswith("mma"):
            self._mma_sp(w, op, ops, act)
        elif base == "ld" and parts[1] in ("shared", "global", "const"):
            regs = vector(ops[0])
            size = int(re.sub(r"\D", "", parts[-1])) // 8
            a = self.addr(w, ops[1])
            full = [np.zeros(32, np.uint64) for _ in regs]
            for lane in np.flatnonzero(act):
                at = int(a[lane])
                data = self.sread(cta, at, size * len(regs)) if parts[1] == "shared" \
                    else self.mem.read_bytes(at, size * len(regs))
                words = np.frombuffer(data.tobytes(), {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[size])
                for i in range(len(regs)):
                    full[i][lane] = words[i]
            for reg, x in zip(regs, full):
                self.setr(w, reg, x, act)
        elif base == "st" and parts[1] in ("shared", "global"):
            size = int(re.sub(r"\D", "", parts[-1])) // 8
            dt = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[size]
            a = self.addr(w, ops[0])
            words = np.stack([v(r).astype(dt) for r in vector(ops[1])], -1)
            for lane in np.flatnonzero(act):
                data = words[lane].view(np.uint8)
                if parts[1] == "shared":
                    self.swrite(cta, int(a[lane]), data)
                else:
                    self.mem.write_bytes(int(a[lane]), data)
        elif base == "atom":
            # atom{.sem}{.scope}.global.add.u32 d, [a], b (9.7.13.x atom): lane by lane, the old value to d
            rest = [p for p in parts[1:] if p not in _ORDERING and p not in _SCOPES]
            if rest != ["global", "add", "u32"]:
                raise EmulationError(f"unsupported atom form {op}")
            a, add = self.addr(w, ops[1]), v(ops[2])
            old = np.zeros(32, np.uint64)
            for lane in np.flatnonzero(act):
                at = int(a[lane])
                x = int(np.frombuffer(self.mem.read_bytes(at, 4).tobytes(), np.uint32)[0])
                old[lane] = x
                self.mem.write_bytes(at, np.array([(x + int(add[lane])) & 0xFFFFFFFF], np.uint32).view(np.uint8))
            self.setr(w, ops[0], old, act)
        elif op in ("cvt.rn.f16x2.f32", "cvt.rn.bf16x2.f32"):
            import ml_dtypes
            dt = ml_dtypes.bfloat16 if "bf16" in op else np.float16
            hi, lo = (v(x).astype(np.uint32).view(np.float32).astype(dt).view(np.uint16).astype(np.uint64)
                      for x in ops[1:3])
            self.setr(w, ops[0], (hi << np.uint64(16)) | lo, act)
        else:
            raise EmulationError(f"unsupported instruction {op}")
