"""Cluster launch control (PTX ISA 9.7.13.17 `clusterlaunchcontrol.try_cancel`, 9.7.13.18
`clusterlaunchcontrol.query_cancel`; PTX ISA 8.6, sm_100 and later): the instruction facts and spellings
tilec emits, in one place.

  try_cancel   asks the hardware to cancel the launch of a cluster that has not started yet. The request is
               asynchronous: a 16-byte opaque response is written to a naturally aligned 16-byte location
               in shared::cta, and its completion is a complete-tx of 16 bytes on an mbarrier in shared::cta
               (`.mbarrier::complete_tx::bytes`, tracked at cluster scope). The issuing thread's CTA arms the
               barrier itself (an arrive with expect_tx of RESPONSE_BYTES). With `.multicast::cluster::all`
               the response is written to the same offset in every CTA of the requesting cluster and each
               CTA's barrier at the barrier's offset receives the complete-tx of its copy; the behaviour is
               undefined if any CTA of the cluster has exited. A success names the first CTA of the
               canceled cluster, and no other successful response of the grid names it again. Once a CTA
               has observed a failed response, a further try_cancel from it is undefined: a failure means
               "no cluster is left to cancel".
  query_cancel decodes a response loaded into a .b128 register (`ld.shared.b128`): `.is_canceled.pred`,
               and on success `.get_first_ctaid::x` (or `.y`, `.z`, or `.v4` of all three and an unspecified
               fourth) of the canceled cluster's first CTA. Decoding a failed response's ctaid is undefined.
  The response is written by the async proxy and read by the generic one: the readers finish with
  `fence.proxy.async.shared::cta` before they let the location be written again (the PTX ISA example of
  9.7.13.17 does so before signalling "done reading").

Targets (`requirement(multicast)`): the base forms on every target of SM 100 and later (libcu++'s
cuda::ptx table: "PTX ISA 86, SM_100"; ptxas 13.0 agrees, and rejects sm_90a). `.multicast::cluster::all`:
libcu++ lists "SM_100a, SM_110a"; ptxas 13.0 also takes the family targets and sm_103a / sm_120a, which no
document states, so only the two listed are allowed here (as compiler/isa/tcgen05_forms.py treats ptxas
leniency).
"""
from __future__ import annotations

from dataclasses import dataclass

from .targets import TARGETS, Version

MIN_PTX: Version = (8, 6)           # 9.7.13.17 / 9.7.13.18 PTX ISA notes: introduced in PTX ISA 8.6
MIN_SM = 100                        # Target ISA notes: sm_100 or higher
RESPONSE_BYTES = 16                 # the opaque response: 16 bytes, naturally aligned, in shared::cta
RESPONSE_ALIGN = 16
MULTICAST_TARGETS = frozenset({"sm_100a", "sm_110a"})   # libcu++ "SM_100a, SM_110a" (see the module docstring)


@dataclass(frozen=True)
class Requirement:
    min_ptx: Version
    targets: frozenset[str]

    def min_ptx_on(self, target: str) -> Version:
        return max(self.min_ptx, TARGETS[target].min_ptx)


def requirement(multicast: bool = False) -> Requirement:
    """Where try_cancel (and query_cancel) assemble: `multicast` for the form that answers every CTA of a
    cluster."""
    if multicast:
        return Requirement(MIN_PTX, MULTICAST_TARGETS)
    return Requirement(MIN_PTX, frozenset(t.name for t in TARGETS.values() if t.sm >= MIN_SM))


def target_problem(target: str, multicast: bool) -> str | None:
    """Why `target` cannot run cluster launch control (with the multicast form), or None."""
    req = requirement(multicast)
    if target in req.targets:
        return None
    if multicast:
        return (f"clusterlaunchcontrol.try_cancel.multicast::cluster::all (the answer to both CTAs of a pair) is "
                f"documented for {', '.join(sorted(MULTICAST_TARGETS))} only, not {target}")
    return f"clusterlaunchcontrol.try_cancel needs sm_{MIN_SM} or later, not {target}"


def try_cancel(response: str, mbar: str, multicast: bool = False) -> str:
    """Request the cancellation of a not-yet-launched cluster; the 16-byte answer lands at [response] (each
    CTA's, with `multicast`) and completes 16 tx bytes on [mbar] (each CTA's)."""
    qualifier = ".multicast::cluster::all" if multicast else ""
    return (f"clusterlaunchcontrol.try_cancel.async.shared::cta.mbarrier::complete_tx::bytes{qualifier}.b128 "
            f"[{response}], [{mbar}];")


def load_response(dst: str, response: str) -> str:
    """The response into a .b128 register (what query_cancel decodes)."""
    return f"ld.shared.b128 {dst}, [{response}];"


def is_canceled(pred: str, response: str) -> str:
    return f"clusterlaunchcontrol.query_cancel.is_canceled.pred.b128 {pred}, {response};"


def first_ctaid_x(dst: str, response: str) -> str:
    """%ctaid.x of the canceled cluster's first CTA (undefined for a failed response: guard it)."""
    return f"clusterlaunchcontrol.query_cancel.get_first_ctaid::x.b32.b128 {dst}, {response};"
