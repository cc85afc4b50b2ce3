"""Words and numbers for the generators, read from the compiler's own tables (nothing typed twice).

Numbers are "interesting" ones: every value a table names, its neighbours (one step in and out of
each legal range), and boundaries of the integer types an encoder might pack them into.
"""
from __future__ import annotations

from functools import lru_cache


@lru_cache(maxsize=None)
def words() -> dict[str, tuple[str, ...]]:
    """Vocabulary by role. Keys: targets, types, engines, spaces, majors, swizzles, ratios,
    metadata, vecs, operands, keywords, tc_kinds, sp_kinds, collectors, patterns."""
    from compiler.frontend.build import (_KEYWORDS, BLOCK_SCALE_VECS, ENGINES, MAJORS, METADATA_SOURCES,
                                         SPACES, SWIZZLES)
    from compiler.isa.sparsity import GRANULARITIES
    from compiler.isa.mma_sp.forms import KINDS as SP_KINDS
    from compiler.isa.mma_sp.metadata import PATTERNS
    from compiler.spec import OPERAND_NAMES
    from compiler.isa.targets import TARGETS
    from compiler.isa.tcgen05_forms import COLLECTOR_BUFFERS, COLLECTOR_OPS
    from compiler.isa.tcgen05_kinds import KINDS as TC_KINDS
    from compiler.isa.types import TYPES

    collectors = tuple(f"{b}::{op}" for bufs in COLLECTOR_BUFFERS.values() for b in bufs for op in COLLECTOR_OPS)
    return {
        "targets": tuple(TARGETS),
        "types": tuple(TYPES),
        "engines": ENGINES,
        "spaces": SPACES,
        "majors": MAJORS,
        "swizzles": SWIZZLES,
        "ratios": tuple(GRANULARITIES),
        "metadata": METADATA_SOURCES,
        "vecs": tuple(BLOCK_SCALE_VECS),
        "operands": OPERAND_NAMES,
        "keywords": tuple(_KEYWORDS),
        "tc_kinds": tuple(TC_KINDS),
        "sp_kinds": SP_KINDS,
        "collectors": collectors,
        "patterns": PATTERNS,
    }


# Keys each statement takes (compiler/frontend/build.py, Builder.split_args calls) and its bare flags.
STATEMENT_KEYS: dict[str, tuple[str, ...]] = {
    "engine": ("cta_group", "kind", "collector"),
    "shape": ("M", "N", "K"),
    "loop": ("K",),
    "sparsity": ("metadata", "pattern", "rows", "selector"),
    "block_scale": ("vec",),
    "zero_columns": ("mask", "cols", "shift"),
    "operand": ("major", "swizzle"),
}
FLAGS = ("ws", "ashift")

# Integer boundaries an encoder may pack a value into (bit fields up to 64 bits) and beyond.
BOUNDARY_INTS = (0, 1, 2, 3, 4, 15, 16, 31, 32, 63, 64, 255, 256, 1023, 1024, 4096, 65535, 65536,
                 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**63 - 1, 2**63, 2**64, 10**30, 10**300)
# Spellings the DSL's integer reader must handle or reject cleanly.
ODD_NUMBERS = ("0x", "0b", "0b2", "0xg", "0x7fffffff", "0xFFFFFFFFFFFFFFFF", "0b1010", "007", "1.5", "1..0",
               "0..3", "3..0", "0..", "..3", "1e3", "1_000", "00", "0X1F", "0B11")


@lru_cache(maxsize=None)
def table_ints() -> tuple[int, ...]:
    """Every M, N, K, selector and cta_group value the tables name, with one step either side."""
    from compiler.isa.mma_sp.forms import FORM_ROWS
    from compiler.isa.tcgen05_kinds import KINDS, SHAPE_RULES

    vals: set[int] = set()
    for rule in SHAPE_RULES:
        vals.update(rule.ms)
        for lo, hi, step in rule.ns.ranges:
            vals.update((lo - step, lo - 1, lo, lo + 1, hi - 1, hi, hi + 1, hi + step))
            if step > 1:
                vals.add(lo + step // 2)
    for k in KINDS.values():
        vals.update((k.dense_k, k.sparse_k, k.dense_k * 3, 96))
    for row in FORM_ROWS:
        vals.update((row.k, row.k // 2, row.k * 2, row.layout.m, row.layout.n))
        vals.update(row.layout.selectors)
    return tuple(sorted(v for v in vals if v >= 0))


@lru_cache(maxsize=None)
def all_numbers() -> tuple[str, ...]:
    return tuple(str(v) for v in table_ints() + BOUNDARY_INTS) + ODD_NUMBERS + tuple(hex(v) for v in BOUNDARY_INTS)


# Text fragments that are not in the vocabulary: near misses, other languages' syntax, unicode.
JUNK_WORDS = ("tile", "target", "ptx", "A", "B", "M", "N", "K", "x", "_", "__", "sm_", "sm_100b", "sm_99",
              "bf61", "f64", "tmem.", "a::", "b9::fill", "kind::f16", "mma.sp.", "...", "_1", "9", "tcgen05.mma")
UNICODE_SNIPPETS = ("é", "\u00a0", "\u200b", "\ufeff", "\u2028", "\u2029", "\x85", "\x0b", "\x0c", "\x1c",
                    "\r", "\t", "\x00", "\x7f", "𝔸", "Ａ", "١٢٣", "²", "™", "\ud7ff", "\U0010ffff", "😀",
                    "ß", "İ", "\u0301")
