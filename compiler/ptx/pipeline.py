"""The shared-memory ring of the TMA-fed GEMM kernels: `stages` slots, one *full* and one *empty* mbarrier
per slot, and each step of its protocol emitted with explicit pipeline-state registers. The only ring in
tilec: the sparse wgmma kernel (compiler/ptx/sparse_wgmma_kernel.py) uses it, and so does the
warp-specialised tcgen05 kernel. The `pipeline-planning` pass (compiler/ptx/pipeline_planning.py) plans
it per tile and prints the plan as `tilec.pipeline`; emission reads it back (`RingPlan.from_attrs`).

The ring (RingPlan), relative to its base (a shared address in a register, 1024-byte aligned by the kernel):
  slot s        bytes [s * stage_bytes, (s + 1) * stage_bytes); the kernel places its regions in a slot
  full[s]       mbarrier at barrier_offset + 8 s        (an mbarrier object is 8 bytes, .b64; PTX ISA
  empty[s]      mbarrier at barrier_offset + 8 (stages + s)                  9.7.13.15.1, 8-byte aligned)
  full[s] completes a phase when `full_arrivals` threads arrived (the producer's one
  `mbarrier.arrive.expect_tx`, which also announces `tx_bytes`) and the copy engine completed those bytes
  (`cp.async.bulk.tensor ... .mbarrier::complete_tx::bytes`); empty[s] completes a phase when
  `empty_arrivals` arrivals came: one per consumer warp of every CTA that reads the slot
  (`mbarrier.arrive`, local or through `mapa` to a peer CTA), or a `tcgen05.commit ... .mbarrier::arrive::one`
  per MMA issue when the tensor core is the consumer.

Pipeline state (PipelineState: two u32 registers per role): `stage`, the slot the role works on next, and
`phase`, the parity of the phase of that slot's barrier the role waits for. Both roles start at (0, 0)
and `advance` after each slot: stage + 1, wrapping to 0 with phase ^= 1 (each pass over the ring is one
phase of every barrier; PTX ISA 9.7.13.15 mbarrier phases, `mbarrier.try_wait.parity` waits for the
completion of the phase of the given parity). The consumer waits full[stage] with parity `phase`; the
producer waits empty[stage] with parity `phase ^ 1`: a freshly initialised barrier is in phase 0, and
the phase before it (parity 1) counts as completed, so the first pass over the ring does not wait.
A persistent kernel keeps both registers across output tiles: the ring does not restart per tile.

Protocol steps (RingCode): `init` (one thread: mbarrier.init of every barrier, then the fences that make
the inits visible to the copy engine), `locate` (slot and full-barrier addresses of a stage), producer
`acquire` (wait empty) and `arm` (arrive.expect_tx on full), consumer `wait` (full) and `release` (arrive
on empty, in this CTA or in every CTA of the cluster), `advance`. The copies themselves and the MMAs are
the kernel's: they differ per kernel, the ring does not.
"""
from __future__ import annotations

from dataclasses import dataclass, fields

from ..bits import log2
from ..diagnostics import SpecError

MBARRIER_BYTES = 8              # an mbarrier object is a .b64 in shared memory, 8-byte aligned
# PTX ISA 9.7.13.15.1 (contents of the mbarrier object): the expected arrival count and the tx-count are
# 20-bit quantities, an arrival count in [1, 2^20 - 1], a tx-count in [-(2^20 - 1), 2^20 - 1].
MAX_ARRIVALS = (1 << 20) - 1
MAX_TX_BYTES = (1 << 20) - 1


@dataclass(frozen=True)
class RingPlan:
    """One ring: its slots, its barriers (full[s] then empty[s] at `barrier_offset`), what completes them."""
    stages: int
    stage_bytes: int
    tx_bytes: int               # bytes the copy engine completes on full[s] per pass
    full_arrivals: int          # arrivals on full[s] besides the bytes (the producer's arrive.expect_tx)
    empty_arrivals: int         # arrivals that free slot s (per consumer warp of each reading CTA, or commits)
    barrier_offset: int         # ring base -> full[0]

    def full(self, s: int) -> int:
        return self.barrier_offset + s * MBARRIER_BYTES

    def empty(self, s: int) -> int:
        return self.barrier_offset + (self.stages + s) * MBARRIER_BYTES

    @property
    def bytes(self) -> int:
        """From the ring base to the end of the last barrier."""
        return self.empty(self.stages)

    def attrs(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_attrs(cls, attrs: dict) -> "RingPlan":
        return cls(**{f.name: attrs[f.name] for f in fields(cls)})

    def check(self) -> None:
        """The plan is a ring the hardware can run (SpecError on the schedule field to change)."""
        if self.stages < 1:
            raise SpecError(f"a ring has at least one stage, not {self.stages}", "schedule.stages")
        if self.tx_bytes > self.stage_bytes:
            raise SpecError(f"the copies of one stage ({self.tx_bytes} B) overflow its slot ({self.stage_bytes} B)",
                            "schedule.cta")
        if self.tx_bytes > MAX_TX_BYTES:
            raise SpecError(f"one stage's copies ({self.tx_bytes} B) exceed an mbarrier's tx-count "
                            f"({MAX_TX_BYTES}, PTX ISA 9.7.13.15.1)", "schedule.cta", "use a smaller cta")
        for what, n in (("full", self.full_arrivals), ("empty", self.empty_arrivals)):
            if not 1 <= n <= MAX_ARRIVALS:
                raise SpecError(f"{what} barriers expect {n} arrivals; an mbarrier counts 1..{MAX_ARRIVALS} "
                                f"(PTX ISA 9.7.13.15.1)", "schedule.warps")
        if self.barrier_offset < self.stages * self.stage_bytes or self.barrier_offset % MBARRIER_BYTES:
            raise SpecError(f"the barriers (offset {self.barrier_offset}) must follow the {self.stages} slots of "
                            f"{self.stage_bytes} B, 8-byte aligned", "schedule.stages")


def ring_plan(tile) -> "RingPlan | None":
    """The RingPlan printed on `tile` (None: the tile's kernel has no ring)."""
    op = tile.op("tilec.pipeline")
    if op is None or "stage_bytes" not in op.attrs:
        return None
    try:
        return RingPlan.from_attrs(op.attrs)
    except KeyError as e:
        raise SpecError(f"tilec.pipeline lacks {e.args[0]}: a ring plan states every field", "schedule") from None


@dataclass(frozen=True)
class PipelineState:
    """The registers (u32) of one role's position in the ring."""
    stage: str
    phase: str


class RingCode:
    """Emits the ring's protocol into a PtxBuilder `b`; `base` is the register holding the ring's shared
    base address. Scratch registers and predicates are the caller's (named per call), so the emitted text
    is the kernel's own register vocabulary."""

    def __init__(self, b, plan: RingPlan, base: str):
        self.b, self.plan, self.base = b, plan, base

    def init(self, pred: str, scratch: str, note: str) -> None:
        """Thread `pred` initialises every barrier (full: full_arrivals, empty: empty_arrivals); the fences
        make the inits visible to the async proxy and the cluster (PTX ISA fence.mbarrier_init,
        fence.proxy.async). The caller synchronises the threads that use the ring afterwards."""
        b, p = self.b, self.plan
        b.ins(f"// {note}")
        for s in range(p.stages):
            b.ins(f"add.u32 {scratch}, {self.base}, {p.full(s)};")
            b.ins(f"@{pred} mbarrier.init.shared::cta.b64 [{scratch}], {p.full_arrivals};")
            b.ins(f"add.u32 {scratch}, {self.base}, {p.empty(s)};")
            b.ins(f"@{pred} mbarrier.init.shared::cta.b64 [{scratch}], {p.empty_arrivals};")
        b.ins("fence.mbarrier_init.release.cluster;          // the inits are visible to the copy engine")
        b.ins("fence.proxy.async.shared::cta;")

    def start(self, state: PipelineState) -> None:
        """Stage 0, phase 0: where every role begins."""
        self.b.ins(f"mov.u32 {state.stage}, 0;")
        self.b.ins(f"mov.u32 {state.phase}, 0;")

    def locate(self, state: PipelineState, slot: str, full: str, scratch: str) -> None:
        """slot = shared address of slot `stage`; full = its full barrier (its empty one is
        full + 8 * stages)."""
        b, p = self.b, self.plan
        b.ins(f"mad.lo.u32 {slot}, {state.stage}, {p.stage_bytes}, {self.base};")
        b.ins(f"shl.b32 {scratch}, {state.stage}, {log2(MBARRIER_BYTES)};")
        b.ins(f"add.u32 {full}, {self.base}, {p.barrier_offset};")
        b.ins(f"add.u32 {full}, {full}, {scratch};")

    def acquire(self, state: PipelineState, full: str, empty: str, parity: str, pred: str,
                scope: str | None = None) -> None:
        """Producer: wait until the consumers released slot `stage` in the previous pass (empty[stage],
        parity phase ^ 1); `full` from `locate`, `empty` and `parity` scratch; `scope` "cluster" when
        consumers of other CTAs release it (acquire at cluster scope)."""
        b = self.b
        b.ins(f"add.u32 {empty}, {full}, {self.plan.stages * MBARRIER_BYTES};    // empty[st]")
        b.ins(f"xor.b32 {parity}, {state.phase}, 1;                          // a fresh barrier counts its "
              f"phase -1 as done")
        self.spin(pred, empty, parity, scope)

    def arm(self, full: str, pred: str) -> None:
        """Producer (thread `pred`): the one arrival on full[stage], announcing the stage's bytes; the
        copies that follow complete them (.mbarrier::complete_tx::bytes on `full`)."""
        self.b.ins(f"@{pred} mbarrier.arrive.expect_tx.shared::cta.b64 _, [{full}], {self.plan.tx_bytes};")

    def produce(self, full: str, pred: str) -> None:
        """Producer whose data threads write themselves (no copy engine, `tx_bytes` 0: e.g. operands staged
        into Tensor Memory): its arrival on full[stage] after its writes, one per arriving thread `pred`
        (`full_arrivals` of them complete the phase)."""
        self.b.ins(f"@{pred} mbarrier.arrive.shared::cta.b64 _, [{full}];")

    def wait(self, state: PipelineState, full: str, pred: str) -> None:
        """Consumer: wait until slot `stage` is filled in this pass (full[stage], parity `phase`)."""
        self.spin(pred, full, state.phase)

    def spin(self, pred: str, bar: str, parity: str, scope: str | None = None) -> None:
        self.b.wait_parity(pred, bar, parity, self.b.label("WAIT"), uni=True, scope=scope)

    def empty_address(self, dst: str, stage: str) -> None:
        """dst = the offset of empty[stage] less the barriers' offset: base + 8 * stage (the caller adds
        `empty_offset`, as an immediate of its arrive or by `add`)."""
        self.b.ins(f"shl.b32 {dst}, {stage}, {log2(MBARRIER_BYTES)};")
        self.b.ins(f"add.u32 {dst}, {dst}, {self.base};")

    @property
    def empty_offset(self) -> int:
        return self.plan.empty(0)

    def release(self, stage: str, pred: str, scratch: str, remote: str, ctas: int = 1,
                scope: str | None = None) -> None:
        """Consumer (threads `pred`, one per arriving warp): arrive on empty[stage]; with `ctas` > 1 on the
        empty[stage] of every CTA of the cluster (`mapa` to rank r, PTX ISA mapa; `mbarrier.arrive
        .shared::cluster`), by default with default semantics (.release at CTA scope), with `scope`
        "cluster" as .release.cluster: a release orders the arriving thread's prior accesses before a
        waiter's acquire only when each one's scope includes the other thread (PTX ISA 8.5 scope, 8.7 morally
        strong operations, 8.8 release and acquire patterns; mbarrier.arrive .sem / .scope, 9.7.13.15.13), so a consumer
        whose releases must order its reads before a producer of another CTA arrives at cluster scope and
        that producer waits at cluster scope (`acquire(..., scope="cluster")`)."""
        b = self.b
        self.empty_address(scratch, stage)
        if ctas == 1:
            b.ins(f"@{pred} mbarrier.arrive.shared::cta.b64 _, [{scratch}+{self.empty_offset}];")
            return
        b.ins(f"add.u32 {scratch}, {scratch}, {self.empty_offset};")
        for r in range(ctas):
            b.ins(f"mapa.shared::cluster.u32 {remote}, {scratch}, {r};")
            sem = f".release.{scope}" if scope else ""
            b.ins(f"@{pred} mbarrier.arrive{sem}.shared::cluster.b64 _, [{remote}];")

    def advance(self, state: PipelineState, pred: str) -> None:
        """Next slot; the phase parity flips when the ring wraps."""
        b = self.b
        b.ins(f"add.u32 {state.stage}, {state.stage}, 1;")
        b.ins(f"setp.eq.u32 {pred}, {state.stage}, {self.plan.stages};")
        b.ins(f"@{pred} mov.u32 {state.stage}, 0;")
        b.ins(f"@{pred} xor.b32 {state.phase}, {state.phase}, 1;")
