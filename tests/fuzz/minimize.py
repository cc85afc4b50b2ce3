"""Shrink a crashing input while it keeps crashing the same way (delta debugging, bounded).

Pass 1 removes whole lines, pass 2 whole tokens (tokens as mutate.tokens splits them), each by
halving chunk sizes (Zeller's ddmin, complement-only); a final pass blanks runs of spaces. The
predicate is "same crash signature", so a minimized crasher still reproduces the bug it was saved for.
"""
from __future__ import annotations

from typing import Callable

from .mutate import tokens


def _ddmin(parts: list[str], joiner: str, keeps: Callable[[str], bool], budget: list[int]) -> list[str]:
    n = 2
    while len(parts) >= 2 and budget[0] > 0:
        chunk = max(1, len(parts) // n)
        removed = False
        for start in range(0, len(parts), chunk):
            if budget[0] <= 0:
                break
            trial = parts[:start] + parts[start + chunk:]
            budget[0] -= 1
            if trial and keeps(joiner.join(trial)):
                parts = trial
                n = max(n - 1, 2)
                removed = True
                break
        if not removed:
            if chunk == 1:
                break
            n = min(len(parts), n * 2)
    return parts


def minimize(text: str, keeps: Callable[[str], bool], max_tries: int = 1500) -> str:
    """The smallest variant of `text` found for which `keeps(variant)` holds (`keeps(text)` must)."""
    budget = [max_tries]
    text = "\n".join(_ddmin(text.split("\n"), "\n", keeps, budget))
    text = "".join(_ddmin(tokens(text), "", keeps, budget))
    squeezed = " ".join(text.split(" "))
    while "  " in squeezed:
        squeezed = squeezed.replace("  ", " ")
    if squeezed != text and budget[0] > 0 and keeps(squeezed):
        text = squeezed
    return text
