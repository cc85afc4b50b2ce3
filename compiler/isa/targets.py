"""Targets and PTX ISA versions.

`min_ptx` is the lowest `.version` that accepts `.target NAME` (PTX ISA "Release notes" /
target tables; checked with ptxas 13.0, see ../shared/reference/ptx-digest.md §2.3).
`MAX_PTX` is the newest PTX ISA the pinned CUDA 13.0 ptxas understands.
"""
from __future__ import annotations

from dataclasses import dataclass

Version = tuple[int, int]

MAX_PTX: Version = (9, 0)


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


def parse_version(text: str) -> Version | None:
    parts = text.split(".")
    if len(parts) != 2 or not all(p.isdigit() for p in parts):
        return None
    return int(parts[0]), int(parts[1])


def format_version(v: Version) -> str:
    return f"{v[0]}.{v[1]}"
