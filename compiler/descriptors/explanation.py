"""The report `tilec explain` prints for one descriptor: its fields, and what is wrong with it.

Below compiler/explain.py (the explainers' registry) and the descriptor modules that build explanations
(zero_column_mask.py), so neither imports the other.

`violations` break the PTX ISA (exit status 1); `warnings` are values the ISA does not list but NVIDIA's
own code issues (exit status 0), e.g. K = 96 with cta_group::1 (compiler/isa/tcgen05_kinds.py, K96).
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Field:
    name: str
    bits: str          # "17-22", or a single bit "46"
    raw: int
    meaning: str


@dataclass
class Explanation:
    fields: list[Field]
    violations: list[str] = field(default_factory=list)
    title: str = ""
    warnings: list[str] = field(default_factory=list)

    def text(self) -> str:
        lines = [self.title] if self.title else []
        width = max((len(f.name) for f in self.fields), default=0)
        for f in self.fields:
            lines.append(f"  bits {f.bits:>5}  {f.name:<{width}}  {f.raw:#x}  {f.meaning}")
        if self.warnings:
            lines.append("warnings:")
            lines.extend(f"  - {w}" for w in self.warnings)
        if self.violations:
            lines.append("violations:")
            lines.extend(f"  - {v}" for v in self.violations)
        else:
            lines.append("no violations")
        return "\n".join(lines) + "\n"

    def to_json(self) -> dict:
        return {"title": self.title,
                "fields": [{"name": f.name, "bits": f.bits, "raw": f.raw, "meaning": f.meaning} for f in self.fields],
                "violations": list(self.violations), "warnings": list(self.warnings)}
