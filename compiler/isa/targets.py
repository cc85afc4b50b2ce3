"""Targets and PTX ISA versions.

`PTX_RELEASES` lists every PTX ISA version NVIDIA released (PTX ISA 13 "Release Notes", table "PTX Release
History", Table 62 in PTX ISA 9.3); a `.version` outside it is an error, never emitted. Versions are
compared as (major, minor) tuples of released versions only, so "8.48" cannot pass for a version newer
than 8.8.
`min_ptx` is the lowest `.version` that accepts `.target NAME` (the "Supported Targets" column of the same
table; checked with ptxas 13.0). `MAX_PTX` is the newest PTX ISA the pinned CUDA 13.0 ptxas understands.
"""
from __future__ import annotations

from dataclasses import dataclass

Version = tuple[int, int]

MAX_PTX: Version = (9, 0)

# PTX ISA 13 "Release Notes", "PTX Release History" (Table 62 in PTX ISA 9.3): version -> first CUDA release
# (or driver) that shipped it. PTX 3.0 shipped with CUDA 4.1 and 4.2; 8.5 with CUDA 12.5 and 12.6.
PTX_RELEASES: dict[Version, str] = {
    (1, 0): "CUDA 1.0", (1, 1): "CUDA 1.1", (1, 2): "CUDA 2.0", (1, 3): "CUDA 2.1", (1, 4): "CUDA 2.2",
    (1, 5): "driver r190",
    (2, 0): "CUDA 3.0", (2, 1): "CUDA 3.1", (2, 2): "CUDA 3.2", (2, 3): "CUDA 4.0",
    (3, 0): "CUDA 4.1", (3, 1): "CUDA 5.0", (3, 2): "CUDA 5.5",
    (4, 0): "CUDA 6.0", (4, 1): "CUDA 6.5", (4, 2): "CUDA 7.0", (4, 3): "CUDA 7.5",
    (5, 0): "CUDA 8.0",
    (6, 0): "CUDA 9.0", (6, 1): "CUDA 9.1", (6, 2): "CUDA 9.2", (6, 3): "CUDA 10.0", (6, 4): "CUDA 10.1",
    (6, 5): "CUDA 10.2",
    (7, 0): "CUDA 11.0", (7, 1): "CUDA 11.1", (7, 2): "CUDA 11.2", (7, 3): "CUDA 11.3", (7, 4): "CUDA 11.4",
    (7, 5): "CUDA 11.5", (7, 6): "CUDA 11.6", (7, 7): "CUDA 11.7", (7, 8): "CUDA 11.8",
    (8, 0): "CUDA 12.0", (8, 1): "CUDA 12.1", (8, 2): "CUDA 12.2", (8, 3): "CUDA 12.3", (8, 4): "CUDA 12.4",
    (8, 5): "CUDA 12.5", (8, 6): "CUDA 12.7", (8, 7): "CUDA 12.8", (8, 8): "CUDA 12.9",
    (9, 0): "CUDA 13.0", (9, 1): "CUDA 13.1", (9, 2): "CUDA 13.2", (9, 3): "CUDA 13.3",
}


@dataclass(frozen=True)
class Target:
    name: str
    sm: int            # 80, 90, 100, ...
    suffix: str        # "" | "a" (arch-specific) | "f" (family)
    min_ptx: Version

    @property
    def family(self) -> int:
        """The major family: 100 for sm_100/103, 110 for sm_110, 120 for sm_120/121."""
        return self.sm // 10 * 10 if self.sm >= 100 else self.sm


TARGETS: dict[str, Target] = {t.name: t for t in (
    Target("sm_80", 80, "", (7, 0)),
    Target("sm_86", 86, "", (7, 1)),
    Target("sm_87", 87, "", (7, 4)),
    Target("sm_89", 89, "", (7, 8)),
    Target("sm_90", 90, "", (7, 8)),
    Target("sm_90a", 90, "a", (8, 0)),
    Target("sm_100", 100, "", (8, 6)),
    Target("sm_100a", 100, "a", (8, 6)),
    Target("sm_100f", 100, "f", (8, 8)),
    Target("sm_103", 103, "", (8, 8)),
    Target("sm_103a", 103, "a", (8, 8)),
    Target("sm_103f", 103, "f", (8, 8)),
    Target("sm_110", 110, "", (9, 0)),
    Target("sm_110a", 110, "a", (9, 0)),
    Target("sm_110f", 110, "f", (9, 0)),
    Target("sm_120", 120, "", (8, 7)),
    Target("sm_120a", 120, "a", (8, 7)),
    Target("sm_120f", 120, "f", (8, 8)),
    Target("sm_121", 121, "", (8, 8)),
    Target("sm_121a", 121, "a", (8, 8)),
    Target("sm_121f", 121, "f", (8, 8)),
)}


# Statically declared shared memory one entry may use, per target, as ptxas 13.0 enforces it ("Entry function
# uses too much shared data (N bytes, M max)"): generic and family (`f`) targets keep the 48 KB (0xc000)
# static limit of the CUDA programming model, arch-specific (`a`) targets take the SM's whole shared memory
# (0x38c00 = 227 KB on sm_90a/sm_100a/sm_103a/sm_110a, 0x18c00 = 99 KB on sm_120a/sm_121a). Measured by
# assembling a kernel with one `.shared .b8 buf[N]` at the boundary values for every target above.
STATIC_SMEM_GENERIC = 0xC000
STATIC_SMEM_ARCH_SPECIFIC = {90: 0x38C00, 100: 0x38C00, 103: 0x38C00, 110: 0x38C00, 120: 0x18C00, 121: 0x18C00}


def static_smem_limit(target: str) -> int:
    """Bytes of static `.shared` data ptxas accepts in one entry for `target`."""
    t = TARGETS[target]
    return STATIC_SMEM_ARCH_SPECIFIC[t.sm] if t.suffix == "a" else STATIC_SMEM_GENERIC


# Largest dynamic shared memory one block may opt into, per SM version (CUDA C++ Programming Guide,
# "Technical Specifications per Compute Capability": 163 KB on 8.0/8.7, 99 KB on 8.6/8.9/12.x,
# 227 KB on 9.0 and 10.x/11.0). Unknown versions get the smallest figure.
SMEM_PER_BLOCK = {80: 166912, 86: 101376, 87: 166912, 89: 101376, 90: 232448, 100: 232448,
                  103: 232448, 110: 232448, 120: 101376, 121: 101376}
MIN_SMEM_PER_BLOCK = min(SMEM_PER_BLOCK.values())


def dynamic_smem_limit(target: str) -> int:
    """Bytes of shared memory (static + dynamic) one CTA may use on `target` after opting in."""
    t = TARGETS.get(target)
    return SMEM_PER_BLOCK.get(t.sm, MIN_SMEM_PER_BLOCK) if t is not None else MIN_SMEM_PER_BLOCK


# What one SM holds at once, for the CTAs-per-SM count of a resource plan (CUDA C++ Programming Guide,
# "Technical Specifications per Compute Capability", compute capabilities 8.0-12.x): 64 K 32-bit registers,
# allocated per warp in units of 256 (so per thread in multiples of 8); at most 2048 resident threads (1536
# on 8.6/8.7/8.9/12.x) and 32 resident blocks (24 on 12.x, 16 on 8.6/8.9); shared memory per SM = the
# per-block maximum + the 1 KB the system reserves per resident block.
REGISTERS_PER_SM = 65536
REGISTER_UNIT_PER_THREAD = 8
THREADS_PER_SM = {80: 2048, 86: 1536, 87: 1536, 89: 1536, 90: 2048, 100: 2048, 103: 2048, 110: 2048,
                  120: 1536, 121: 1536}
BLOCKS_PER_SM = {80: 32, 86: 16, 87: 32, 89: 16, 90: 32, 100: 32, 103: 32, 110: 32, 120: 24, 121: 24}
SMEM_RESERVED_PER_BLOCK = 1024

def _spelled_version(text: str) -> Version | None:
    """(major, minor) of text spelled "M.N" (ASCII digits), whether or not it was released."""
    parts = text.split(".")
    if len(parts) != 2 or not all(p.isascii() and p.isdigit() for p in parts):
        return None
    return int(parts[0]), int(parts[1])


def version_spelling(text: str) -> Version | None:
    """(major, minor) of `text` spelled exactly as `.version` writes it ("8.6"; not "8.60" or "08.6"), whether
    or not it was released, else None."""
    v = _spelled_version(text)
    return v if v is not None and format_version(v) == text else None


def parse_version(text: str) -> Version | None:
    """The released PTX ISA version `text` spells exactly ("8.6"; not "8.60" or "08.6"), else None."""
    v = version_spelling(text)
    return v if v in PTX_RELEASES else None


def is_released(v: Version) -> bool:
    return v in PTX_RELEASES


def near_versions(v: Version, count: int = 2) -> list[Version]:
    """Up to `count` released versions on each side of `v` (in version order)."""
    releases = sorted(PTX_RELEASES)
    below = [r for r in releases if r < v][-count:]
    above = [r for r in releases if r > v][:count]
    return below + above


def version_problem(text: str) -> tuple[str, str]:
    """(message, hint) saying why `text` is not a PTX ISA version tilec can emit (parse_version is None)."""
    v = _spelled_version(text)
    newest = max(PTX_RELEASES)
    if v is None:
        return (f"PTX version must look like 8.6, found '{text}'",
                f"released PTX ISA versions run from 1.0 to {format_version(newest)}")
    near = ", ".join(format_version(r) for r in near_versions(v))
    if v in PTX_RELEASES:                   # a released version, spelled with extra zeros
        return (f"PTX version '{text}' is spelled with extra zeros", f"write {format_version(v)}")
    minors = [r[1] for r in PTX_RELEASES if r[0] == v[0]]
    if minors:
        why = f"PTX ISA {v[0]}.x runs from {v[0]}.{min(minors)} to {v[0]}.{max(minors)}"
    else:
        why = f"there is no PTX ISA {v[0]}.x"
    return (f"PTX ISA {text} was never released ({why}; PTX Release History)",
            f"released versions near it: {near}")


def format_version(v: Version) -> str:
    return f"{v[0]}.{v[1]}"
