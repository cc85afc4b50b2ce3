"""PTX identifiers (PTX ISA 4.4 "Identifiers"): a letter then letters/digits/_/$, or _/$/% followed by at
least one of those; the "Predefined Identifiers" that are plain words are reserved (ptxas rejects an
entry named WARP_SZ). Tile names become `.entry` names, so they must be identifiers; and since host code looks
entries and exported fragments up by name, C identifiers too (C11 6.4.2.1, without universal character names):
`$` and `%` are PTX identifier characters but not C ones."""
from __future__ import annotations

import re

PTX_IDENTIFIER = re.compile(r"[A-Za-z][A-Za-z0-9_$]*|[_$%][A-Za-z0-9_$]+")
PTX_PREDEFINED = ("WARP_SZ",)


C_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def is_ptx_identifier(name: str) -> bool:
    return bool(PTX_IDENTIFIER.fullmatch(name)) and name not in PTX_PREDEFINED


def is_c_identifier(name: str) -> bool:
    return bool(C_IDENTIFIER.fullmatch(name))
