"""setmaxnreg (PTX ISA 9.7.19, Miscellaneous Instructions: setmaxnreg; `setmaxnreg.{inc,dec}.sync.aligned.u32
imm-reg-count`): a warpgroup's per-thread register maximum moved to `imm-reg-count`, registers going to
(`.dec`) or coming from (`.inc`, which blocks until the CTA's pool has them) a per-CTA pool.

The facts a kernel plan needs: the count is a constant in 24..256, a multiple of 8; the same setmaxnreg
must be executed by all warps of a warpgroup (else the behaviour is undefined), so registers move between
whole warpgroups only: 4 consecutive warps whose first is a multiple of 4 (the warpgroup of wgmma, PTX
9.7.15.1).
"""
from __future__ import annotations

SETMAXNREG_MIN, SETMAXNREG_MAX, SETMAXNREG_STEP = 24, 256, 8
WARPGROUP_WARPS = 4


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
