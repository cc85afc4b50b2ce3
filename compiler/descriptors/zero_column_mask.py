"""The tcgen05 zero-column mask descriptor (PTX ISA 9.7.16.4.3, Table 45), a solver and an explainer.

The descriptor is the optional last operand of `tcgen05.mma.ws{.sp}`. It generates an N-bit mask
over the columns of B: bit j = 1 means column j of B is read as zeros, 0 means it is used.

Layout (Table 45):

    bits  0-7, 8-15, 16-23, 24-31   start count sc0..sc3
    bits 32, 33, 34, 35             first span fs0..fs3
    bits 36-38                      reserved (0)
    bit  39                         non-zero mask (0: the mask is all zeros)
    bits 40-47                      "skip span": (length of a run of ZEROED columns) - 1
    bits 48-55                      "use span":  (length of a run of USED columns) - 1
    bits 56-61                      column shift (max 16 for M = 32, 32 otherwise)
    bits 62-63                      not listed in Table 45: treated as reserved (0)

Bits 40-47 / 48-55: Table 45's *descriptions* say the opposite (skip span = used columns - 1, use span
= zeroed columns - 1), but the section's own Examples 2-4 (skip 2 / use 3 -> runs of three 1-bits and
four 0-bits) and CUTLASS's `MaskAndShiftB` comments agree with the layout above; we follow the
examples (checked with ptxas 13.0).

Generation rule, worked out from Examples 1-4 (the tests reproduce all four bit for bit):
- Non-zero mask = 0: every sub-mask is 0, whatever the other fields say (Example 1).
- Otherwise the pattern is a periodic sequence of runs: Z = skip span + 1 ones (zeroed columns),
  U = use span + 1 zeros (used columns), alternating. Sub-mask i starts with a run of value fs_i
  (fs_i = 1: starts in a zeroed run, Examples 3/4; fs_i = 0: starts in a used run, Example 2) and
  skips its first sc_i positions: bit j of sub-mask i (LSB = its first column) = pattern_i[sc_i + j].
  Example 4: fs1 = 1, sc1 = 1 gives 11 0000 111 ... (one of the three 1-bits skipped); fs2 = 0,
  sc2 = 2 gives 00 111 0000 ... (two of the four 0-bits skipped).
  Start counts beyond the first run continue into the periodic pattern (the natural reading of
  "the LSBs that must be skipped"; the examples only use sc < first run length, and the solver only
  produces such values).
- Sub-masks (table "Zero-Column Mask breakup"): M = 128 one sub-mask over columns [0, N); M = 64 two
  over [0, N/2) and [N/2, N); M = 32 four of N/4 columns. Sub-mask i uses sc_i and fs_i; the spans
  are shared.
- Column shift does not change the mask: Example 4 has shift 2 and masks fully explained by sc/fs.
  It moves which B columns are read ("If N = 128 then B matrix with columns from 2 to 129 will be
  used"): mask bit j applies to MMA column j, which reads B column j + shift.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ..diagnostics import SpecError

# Table "Zero-Column Mask breakup": M -> number of sub-masks.
SUB_MASKS = {128: 1, 64: 2, 32: 4}
# Table 45 "Column Shift": "Max shift amount = 16 for M=32, Max shift amount = 32 otherwise".
SHIFT_LIMIT = {32: 16, 64: 32, 128: 32}
MAX_N = 256                          # the widest tcgen05 N (Table 39)

# Table 45, one row per field: (name, lsb, width). Drives encode, decode and explain.
LAYOUT: tuple[tuple[str, int, int], ...] = (
    ("sc0", 0, 8), ("sc1", 8, 8), ("sc2", 16, 8), ("sc3", 24, 8),
    ("fs0", 32, 1), ("fs1", 33, 1), ("fs2", 34, 1), ("fs3", 35, 1),
    ("reserved", 36, 3),
    ("nonzero", 39, 1),
    ("skip_span", 40, 8),
    ("use_span", 48, 8),
    ("shift", 56, 6),
    ("reserved_hi", 62, 2),          # not in Table 45 (which ends at bit 61)
)
RESERVED_FIELDS = ("reserved", "reserved_hi")
_FIELD = "zero_columns"


def _bits(lsb: int, width: int) -> str:
    return str(lsb) if width == 1 else f"{lsb}-{lsb + width - 1}"


def _fits(value: object, width: int) -> bool:
    return isinstance(value, int) and 0 <= value < (1 << width)


@dataclass(frozen=True)
class ZeroColumnMask:
    """Raw field values exactly as the seed's example tables write them (skip_span 2 = a run of 3)."""

    start_counts: tuple[int, int, int, int] = (0, 0, 0, 0)
    first_spans: tuple[int, int, int, int] = (0, 0, 0, 0)
    nonzero: bool = True
    skip_span: int = 0
    use_span: int = 0
    shift: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "start_counts", tuple(self.start_counts))
        object.__setattr__(self, "first_spans", tuple(int(f) for f in self.first_spans))
        object.__setattr__(self, "nonzero", bool(self.nonzero))
        if len(self.start_counts) != 4 or len(self.first_spans) != 4:
            raise SpecError("a zero-column mask has four start counts and four first spans", _FIELD)
        raw = self._raw()
        for name, lsb, width in LAYOUT:
            if name not in RESERVED_FIELDS and not _fits(raw[name], width):
                raise SpecError(f"zero-column mask field {name} = {raw[name]!r} does not fit bits "
                                f"{_bits(lsb, width)}", f"{_FIELD}.shift" if name == "shift" else _FIELD)

    def _raw(self) -> dict[str, int]:
        raw = {f"sc{i}": v for i, v in enumerate(self.start_counts)}
        raw.update({f"fs{i}": v for i, v in enumerate(self.first_spans)})
        raw.update(reserved=0, reserved_hi=0, nonzero=int(self.nonzero), skip_span=self.skip_span,
                   use_span=self.use_span, shift=self.shift)
        return raw

    @property
    def zero_run(self) -> int:
        """Columns in one run of zeroed columns (bits 40-47 + 1)."""
        return self.skip_span + 1

    @property
    def use_run(self) -> int:
        """Columns in one run of used columns (bits 48-55 + 1)."""
        return self.use_span + 1

    def encode(self) -> int:
        raw = self._raw()
        return sum(raw[name] << lsb for name, lsb, _ in LAYOUT)

    @classmethod
    def decode(cls, value: int) -> ZeroColumnMask:
        if not _fits(value, 64):
            raise SpecError(f"a zero-column mask descriptor is a 64-bit value, not {value!r}", _FIELD)
        raw = {name: (value >> lsb) & ((1 << width) - 1) for name, lsb, width in LAYOUT}
        for name in RESERVED_FIELDS:
            if raw[name]:
                lsb, width = next((lsb, w) for n, lsb, w in LAYOUT if n == name)
                raise SpecError(f"zero-column mask 0x{value:016x} sets reserved bits {_bits(lsb, width)}",
                                _FIELD, hint="Table 45: bits 36-38 are reserved; bits 62-63 are not defined")
        return cls(tuple(raw[f"sc{i}"] for i in range(4)), tuple(raw[f"fs{i}"] for i in range(4)),
                   bool(raw["nonzero"]), raw["skip_span"], raw["use_span"], raw["shift"])

    def check(self, m: int, n: int) -> None:
        """The rules that depend on the MMA shape: M in {32, 64, 128} (.ws), N split evenly into the
        sub-masks, column shift within its limit for M."""
        _parts(m, n)
        if self.shift > SHIFT_LIMIT[m]:
            raise SpecError(f"zero-column mask column shift {self.shift} exceeds the maximum "
                            f"{SHIFT_LIMIT[m]} for M = {m}", f"{_FIELD}.shift")

    def masks(self, m: int, n: int) -> list[int]:
        """The generated sub-masks (bit j = column j of that sub-mask's range; 1 = zeroed)."""
        self.check(m, n)
        parts = SUB_MASKS[m]
        width = n // parts
        if not self.nonzero:
            return [0] * parts
        return [_window(self.zero_run, self.use_run, _phase(self.zero_run, fs, sc), width)
                for fs, sc in zip(self.first_spans[:parts], self.start_counts[:parts])]

    def column_mask(self, m: int, n: int) -> int:
        """All sub-masks joined into one N-bit mask over the MMA's columns (sub-mask i at i * N/parts)."""
        width = n // SUB_MASKS[m]
        return sum(mask << (i * width) for i, mask in enumerate(self.masks(m, n)))


def _parts(m: int, n: int) -> int:
    if m not in SUB_MASKS:
        raise SpecError(f"a zero-column mask needs M = 32, 64 or 128 (tcgen05.mma.ws), not {m}", "shape.M")
    parts = SUB_MASKS[m]
    if not (isinstance(n, int) and 0 < n <= MAX_N and n % parts == 0):
        raise SpecError(f"N = {n} does not split into {parts} zero-column sub-mask(s)", "shape.N")
    return parts


def _phase(zero_run: int, first_span: int, start_count: int) -> int:
    """Position in the canonical pattern (zero-run first, then use-run) of a sub-mask's first bit."""
    return start_count if first_span else zero_run + start_count


def _window(zero_run: int, use_run: int, phase: int, width: int) -> int:
    """`width` bits of the periodic pattern (zero_run ones, use_run zeros, ...) starting at `phase`."""
    period = zero_run + use_run
    out = 0
    for j in range(width):
        if (phase + j) % period < zero_run:
            out |= 1 << j
    return out


def _runs(mask: int, width: int) -> list[tuple[int, int]]:
    """Run-length encoding from the LSB: [(bit value, length), ...]."""
    runs: list[tuple[int, int]] = []
    for j in range(width):
        bit = (mask >> j) & 1
        if runs and runs[-1][0] == bit:
            runs[-1] = (bit, runs[-1][1] + 1)
        else:
            runs.append((bit, 1))
    return runs


def _fmt(mask: int, width: int) -> str:
    return "0b" + format(mask, f"0{width}b")


# --------------------------------------------------------------------------------------------------
# Solver


def solve_zero_columns(m: int, n: int, zeroed: Sequence[Iterable[int]], shift: int = 0) -> ZeroColumnMask:
    """Fields generating exactly the wanted zeroed columns.

    `zeroed`: one collection of column indices per sub-mask (indices local to the sub-mask, 0 ..
    N/parts - 1, i.e. the bit positions of `masks()`), or a single collection of MMA columns 0 .. N-1
    which is split over the sub-masks (coverage table of 9.7.16.4.3).

    Every representable request is solved: the pattern has one zero-run length Z and one use-run
    length U shared by all sub-masks, so every run strictly inside a sub-mask fixes Z or U, and a run
    touching a sub-mask's edge only bounds them from below; the smallest Z and U meeting those
    constraints work, and each sub-mask's first run then fixes fs_i and sc_i (< its run length).
    Otherwise SpecError shows the nearest representable mask: the fewest columns differing in total
    over all sub-masks (Hamming distance), ties broken by the shortest period Z + U, then the shortest Z.
    """
    wanted = _wanted_masks(m, n, zeroed)
    parts = len(wanted)
    width = n // parts
    result = _solve_exact(wanted, width, shift)
    if result is None:
        near, distance = _nearest(wanted, width, shift)
        got = near.masks(m, n)
        lines = [f"mask{i}: wanted {_fmt(w, width)}, nearest {_fmt(g, width)}"
                 for i, (w, g) in enumerate(zip(wanted, got))]
        raise SpecError(
            "these zeroed columns are not representable by a zero-column mask descriptor (one run "
            "length of zeroed columns and one of used columns, shared by all sub-masks); nearest "
            f"representable mask differs in {distance} column(s): descriptor 0x{near.encode():016x}\n  "
            + "\n  ".join(lines), f"{_FIELD}.cols",
            hint="nearest = fewest differing columns over all sub-masks (bit j = column j, LSB first)")
    result.check(m, n)
    return result


def _wanted_masks(m: int, n: int, zeroed: Sequence[Iterable[int]]) -> list[int]:
    parts = _parts(m, n)
    width = n // parts
    sets = [set(z) for z in zeroed]
    if len(sets) == 1 and parts > 1:
        # one collection of MMA columns: split per the sub-mask coverage table
        columns = sets[0]
        bad = sorted(c for c in columns if not (isinstance(c, int) and 0 <= c < n))
        if bad:
            raise SpecError(f"zeroed columns {bad} are outside [0, {n})", f"{_FIELD}.cols")
        sets = [{c - i * width for c in columns if i * width <= c < (i + 1) * width} for i in range(parts)]
    if len(sets) != parts:
        raise SpecError(f"M = {m} has {parts} zero-column sub-mask(s); got {len(sets)} column lists",
                        f"{_FIELD}.cols", hint="give one list per sub-mask, or one list of columns 0..N-1")
    masks = []
    for i, cols in enumerate(sets):
        bad = sorted(c for c in cols if not (isinstance(c, int) and 0 <= c < width))
        if bad:
            raise SpecError(f"sub-mask {i} covers {width} columns; {bad} are outside [0, {width})",
                            f"{_FIELD}.cols")
        masks.append(sum(1 << c for c in cols))
    return masks


def _solve_exact(wanted: list[int], width: int, shift: int) -> ZeroColumnMask | None:
    if not any(wanted):
        return ZeroColumnMask(nonzero=False, shift=shift)
    exact: dict[int, set[int]] = {0: set(), 1: set()}     # run value -> lengths of inner runs
    lower = {0: 1, 1: 1}                                   # run value -> lower bound on its length
    for mask in wanted:
        runs = _runs(mask, width)
        for k, (bit, length) in enumerate(runs):
            if 0 < k < len(runs) - 1:
                exact[bit].add(length)
            else:
                lower[bit] = max(lower[bit], length)
    spans = {}
    for bit in (0, 1):
        if len(exact[bit]) > 1:
            return None
        if exact[bit]:
            (length,) = exact[bit]
            if length < lower[bit]:
                return None
            spans[bit] = length
        else:
            spans[bit] = lower[bit]
    zero_run, use_run = spans[1], spans[0]
    starts, firsts = [0, 0, 0, 0], [0, 0, 0, 0]
    for i, mask in enumerate(wanted):
        bit, length = _runs(mask, width)[0]
        firsts[i] = bit
        # a sub-mask that is one run starts at its run's beginning; else its first run is a run tail
        starts[i] = 0 if length == width else spans[bit] - length
    desc = ZeroColumnMask(tuple(starts), tuple(firsts), True, zero_run - 1, use_run - 1, shift)
    generated = [_window(zero_run, use_run, _phase(zero_run, fs, sc), width)
                 for fs, sc in zip(firsts[:len(wanted)], starts)]
    return desc if generated == wanted else None


def _nearest(wanted: list[int], width: int, shift: int) -> tuple[ZeroColumnMask, int]:
    """Exhaustive nearest search. Run lengths above the sub-mask width change nothing visible (every
    run longer than the window touches an edge), so Z, U <= width suffice. Pattern bit of column j
    at phase p (canonical pattern: Z ones then U zeros, period T) is 1 iff (p + j) % T < Z, so
    dist(p, Z) = popcount(want) + sum over those columns of (1 - 2 want_j); sub-masks choose their
    phases independently and share Z, U."""
    import numpy as np

    parts = len(wanted)
    bits = np.array([[(w >> j) & 1 for j in range(width)] for w in wanted], dtype=np.int64)
    weight = 1 - 2 * bits                                   # +1 where the column is wanted used
    base = bits.sum(axis=1)
    best = (int(base.sum()), 0, 0, None)                    # nonzero = 0: every wanted 1 differs
    cols = np.arange(width)
    for period in range(2, 2 * width + 1):
        z_lo, z_hi = max(1, period - width), min(width, period - 1)
        if z_lo > z_hi:
            continue
        runs = np.arange(z_lo, z_hi + 1)
        # The residue of column j at phase p is (p + j) % period, so the sum over residues r < Z is a
        # circular window of the per-residue sums S[q] = sum of weights of columns j = q (mod period),
        # starting at (-p) % period: one cumulative sum of S repeated twice gives every window.
        start = (-np.arange(period)) % period
        totals = np.zeros(len(runs), dtype=np.int64)
        choice = []
        for i in range(parts):
            per_residue = np.bincount(cols % period, weights=weight[i], minlength=period)
            twice = np.concatenate(([0], np.cumsum(np.concatenate((per_residue, per_residue)))))
            dist = base[i] + twice[start[:, None] + runs[None, :]] - twice[start][:, None]   # [p, Z]
            choice.append(dist.argmin(axis=0))
            totals += dist.min(axis=0).astype(np.int64)
        k = int(totals.argmin())
        if totals[k] < best[0]:
            best = (int(totals[k]), period, z_lo + k, [int(c[k]) for c in choice])
    distance, period, zero_run, phase = best
    if phase is None:
        return ZeroColumnMask(nonzero=False, shift=shift), distance
    firsts = [1 if p < zero_run else 0 for p in phase] + [0] * (4 - parts)
    starts = [p if p < zero_run else p - zero_run for p in phase] + [0] * (4 - parts)
    return ZeroColumnMask(tuple(starts), tuple(firsts), True, zero_run - 1, period - zero_run - 1, shift), distance


# --------------------------------------------------------------------------------------------------
# Explainer (`tilec explain zcm 0xVALUE --m M --n N`)

_MEANING = {
    "reserved": "reserved (Table 45), must be 0",
    "reserved_hi": "not defined by Table 45 (which ends at bit 61), must be 0",
}


def explain_zcm(value: int, m: int | None = None, n: int | None = None):
    """Field-by-field decoding plus the generated masks (when M and N are given); never raises.
    Returns `compiler.explain.Explanation` when that module exists, else a dict of the same content."""
    fields: list[tuple[str, str, int, str]] = []
    violations: list[str] = []
    if not _fits(value, 64):
        violations.append(f"{value!r} is not a 64-bit value")
        value = value & ((1 << 64) - 1) if isinstance(value, int) else 0
    raw = {name: (value >> lsb) & ((1 << width) - 1) for name, lsb, width in LAYOUT}
    parts = SUB_MASKS.get(m) if m is not None else None
    zero_run, use_run = raw["skip_span"] + 1, raw["use_span"] + 1
    for name, lsb, width in LAYOUT:
        r = raw[name]
        if name in _MEANING:
            meaning = _MEANING[name]
            if r:
                violations.append(f"reserved bits {_bits(lsb, width)} are set (0x{r:x})")
        elif name.startswith(("sc", "fs")):
            i = int(name[2])
            if name.startswith("sc"):
                meaning = f"sub-mask {i} skips the first {r} position(s) of the pattern"
            else:
                meaning = f"sub-mask {i} starts in a run of {'zeroed' if r else 'used'} columns"
            if parts is not None and i >= parts:
                meaning += f" (unused for M = {m})"
        elif name == "nonzero":
            meaning = "generate the mask" if r else "mask is all zeros: every column of B is used"
        elif name == "skip_span":
            meaning = f"runs of {zero_run} zeroed column(s) (field + 1; per the section's examples)"
        elif name == "use_span":
            meaning = f"runs of {use_run} used column(s) (field + 1; per the section's examples)"
        else:   # shift
            meaning = f"MMA column j reads B column j + {r}"
            if m in SHIFT_LIMIT and r > SHIFT_LIMIT[m]:
                violations.append(f"column shift {r} exceeds the maximum {SHIFT_LIMIT[m]} for M = {m}")
        fields.append((name, _bits(lsb, width), r, meaning))
    if m is not None and n is not None:
        if parts is None:
            violations.append(f"M = {m}: a zero-column mask needs M = 32, 64 or 128")
        elif not (isinstance(n, int) and 0 < n <= MAX_N and n % parts == 0):
            violations.append(f"N = {n} does not split into {parts} sub-mask(s)")
        else:
            width = n // parts
            for i in range(parts):
                mask = 0 if not raw["nonzero"] else _window(
                    zero_run, use_run, _phase(zero_run, raw[f"fs{i}"], raw[f"sc{i}"]), width)
                fields.append((f"mask{i}", "-", mask, f"columns {i * width}-{(i + 1) * width - 1}: "
                               f"{_fmt(mask, width)} (MSB = column {(i + 1) * width - 1}; 1 = zeroed)"))
    title = f"zero-column mask 0x{value:016x}" + (f", M = {m}" if m is not None else "") \
        + (f", N = {n}" if n is not None else "")
    return _explanation(title, fields, violations)


def _explanation(title, fields, violations):
    from .explanation import Explanation, Field

    return Explanation(fields=[Field(*f) for f in fields], violations=violations, title=title)
