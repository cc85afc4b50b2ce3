"""setmaxnreg (PTX ISA 9.7.19, Miscellaneous Instructions: setmaxnreg; `setmaxnreg.{inc,dec}.sync.aligned.u32
imm-reg-count`): a warpgroup's per-thread register maximum moved to `imm-reg-count`, registers going to
(`.dec`) or coming from (`.inc`, which blocks until the CTA's pool has them) a per-CTA pool.

The facts a kernel plan needs: the count is a constant in 24..256, a multiple of 8; `.dec` lowers the
count from its current value (so the new one is at most that), `.inc` raises it (at least that); the same
setmaxnreg must be executed by all warps of a warpgroup (else the behaviour is undefined), so registers
move between whole warpgroups only: 4 consecutive warps whose first is a multiple of 4 (the warpgroup of
wgmma, PTX 9.7.15.1). Every warp starts with the kernel's launch count (its `.maxnreg`), and the pool holds
only what the CTA was launched with: registers the `.inc` warpgroups take must first be given back by
`.dec` ones, or the `.inc` waits for ever. sm_90a and PTX ISA 8.0 on.
"""
from __future__ import annotations

from dataclasses import dataclass

SETMAXNREG_MIN, SETMAXNREG_MAX, SETMAXNREG_STEP = 24, 256, 8
WARPGROUP_WARPS = 4
WARPGROUP_THREADS = 32 * WARPGROUP_WARPS


def warpgroup_problems(warps: int, role_of: dict[int, str]) -> list[str]:
    """Why setmaxnreg cannot give each role its own register count: the warpgroups of a CTA of `warps`
    warps that are incomplete or hold warps of more than one role (`role_of`: warp -> role). Empty: every
    warpgroup is whole and of one role."""
    out = []
    for first in range(0, warps, WARPGROUP_WARPS):
        present = [w for w in range(first, first + WARPGROUP_WARPS) if w < warps]
        group = f"warpgroup {first // WARPGROUP_WARPS} (warps {first}-{first + WARPGROUP_WARPS - 1})"
        roles = sorted({role_of[w] for w in present})
        if len(present) < WARPGROUP_WARPS:
            out.append(f"{group} has {len(present)} of its {WARPGROUP_WARPS} warps")
        if len(roles) > 1:
            out.append(f"{group} holds the {' and '.join(roles)} roles")
    return out


@dataclass(frozen=True)
class RegisterSplit:
    """The per-thread register counts of a CTA of `giving` + `taking` whole warpgroups that trade
    registers through setmaxnreg: every warp starts with `launch` (the kernel's .maxnreg); the giving
    warpgroups (a TMA producer) execute `setmaxnreg.dec` to `low`, the taking ones (the MMA consumers)
    `setmaxnreg.inc` to `high`."""
    launch: int
    giving: int
    taking: int
    low: int
    high: int

    @property
    def pool(self) -> int:
        """Registers of the CTA (what it was launched with): all the counts together may not exceed it."""
        return self.launch * WARPGROUP_THREADS * (self.giving + self.taking)

    @property
    def used(self) -> int:
        return WARPGROUP_THREADS * (self.giving * self.low + self.taking * self.high)

    def problems(self) -> list[str]:
        """Why this split is not a legal use of setmaxnreg (empty: it is)."""
        out = []
        if self.launch % SETMAXNREG_STEP:
            out.append(f"the launch count {self.launch} is not a multiple of {SETMAXNREG_STEP} (registers are "
                       f"allocated in steps of {SETMAXNREG_STEP} a thread: the pool would not be what the counts say)")
        for what, n in (("setmaxnreg.dec", self.low), ("setmaxnreg.inc", self.high)):
            if not (SETMAXNREG_MIN <= n <= SETMAXNREG_MAX and n % SETMAXNREG_STEP == 0):
                out.append(f"{what} {n}: the count is a multiple of {SETMAXNREG_STEP} in "
                           f"{SETMAXNREG_MIN}..{SETMAXNREG_MAX}")
        if self.low > self.launch:
            out.append(f"setmaxnreg.dec {self.low} would raise the launch count {self.launch}")
        if self.high < self.launch:
            out.append(f"setmaxnreg.inc {self.high} would lower the launch count {self.launch}")
        if self.used > self.pool:
            out.append(f"{self.giving} x 128 x {self.low} + {self.taking} x 128 x {self.high} = {self.used} "
                       f"registers exceed the CTA's {self.pool} ({self.launch} a thread at launch): the "
                       "setmaxnreg.inc would wait for ever")
        return out

    def describe(self, giver: str = "giving", taker: str = "taking") -> str:
        """One line: who executes which count, and the sum against the CTA's pool."""
        def group(n: int, role: str) -> str:
            return f"{n} {role} warpgroup{'s' if n > 1 else ''}"
        return (f"{group(self.giving, giver)} setmaxnreg.dec {self.low}, {group(self.taking, taker)} setmaxnreg.inc "
                f"{self.high} (launch {self.launch} a thread): {self.giving} x 128 x {self.low} + {self.taking} x "
                f"128 x {self.high} = {self.used} of the CTA's {self.pool} registers")


def split_registers(launch: int, giving: int, taking: int) -> RegisterSplit:
    """The split that gives the taking warpgroups the most: the largest count in steps of 8 (at most 256)
    that fits the CTA's pool with the giving warpgroups at the minimum 24; then the giving warpgroups get
    back what is left, up to their launch count. Check the result with `problems()` (a CTA launched with
    256 a thread has nothing to move)."""
    pool_per_thread = launch * (giving + taking)          # registers of the pool / 128 threads
    high = min(SETMAXNREG_MAX, (pool_per_thread - giving * SETMAXNREG_MIN) // taking
               // SETMAXNREG_STEP * SETMAXNREG_STEP)
    low = min(launch, (pool_per_thread - taking * high) // giving // SETMAXNREG_STEP * SETMAXNREG_STEP)
    return RegisterSplit(launch, giving, taking, low, high)
