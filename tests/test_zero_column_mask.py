"""Zero-column mask descriptor (PTX ISA 9.7.16.4.3, Table 45): the section's four examples bit for bit,
encoding, the shape rules, the solver (round trip + nearest-mask report) and the explainer.

Mask notation: the seed prints masks MSB first ("0b ... 111 0000"), bit j = column j of the sub-mask,
1 = zeroed column. Its "..." means the pattern continues, so each example test checks the printed low
bits and the whole sub-mask against the periodic pattern written out by hand.
"""
from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compiler.descriptors import ZeroColumnMask
from compiler.descriptors.zero_column_mask import SUB_MASKS, explain_zcm, solve_zero_columns
from compiler.diagnostics import SpecError


def periodic(lsb_first: str, width: int) -> int:
    """An int whose bit j is lsb_first[j % len] - the example patterns written LSB first."""
    return sum(1 << j for j in range(width) if lsb_first[j % len(lsb_first)] == "1")


def as_sets(masks: list[int], width: int) -> list[set[int]]:
    return [{j for j in range(width) if (m >> j) & 1} for m in masks]


# --------------------------------------------------------------------------------------------------
# The four examples of 9.7.16.4.3

def test_example_1_nonzero_mask_off_gives_all_zero():
    # Example 1: M = 128, start counts 0, first spans 0, Non-Zero Mask 0, skip 4, use 3, shift 0
    # -> "Output zero-column mask: 0x0": every column of B used.
    desc = ZeroColumnMask((0, 0, 0, 0), (0, 0, 0, 0), nonzero=False, skip_span=4, use_span=3, shift=0)
    for n in (64, 128, 256):
        assert desc.masks(128, n) == [0]


def test_example_2_m128():
    # Example 2: M = 128, sc0 = 0, fs0 = 0, nonzero 1, skip 2, use 3, shift 0
    # -> mask0 = 0b ... 111 0000 111 0000: runs of 4 used (0) then 3 zeroed (1), starting used.
    desc = ZeroColumnMask((0, 0, 0, 0), (0, 0, 0, 0), True, skip_span=2, use_span=3)
    (mask0,) = desc.masks(128, 128)
    assert mask0 & ((1 << 14) - 1) == 0b111_0000_111_0000
    assert mask0 == periodic("0000111", 128)


def test_example_3_m64():
    # Example 3: M = 64, {sc1, sc0} = {0, 0}, {fs1, fs0} = {0, 1}, skip 2, use 3
    # -> mask0 = 0b ... 111 0000 111 0000 111 (starts in a zeroed run)
    #    mask1 = 0b ... 0000 111 0000 111 0000 (starts in a used run)
    desc = ZeroColumnMask((0, 0, 0, 0), (1, 0, 0, 0), True, skip_span=2, use_span=3)
    mask0, mask1 = desc.masks(64, 128)            # two sub-masks of N/2 = 64 columns
    assert mask0 & ((1 << 17) - 1) == 0b111_0000_111_0000_111
    assert mask1 & ((1 << 18) - 1) == 0b0000_111_0000_111_0000
    assert mask0 == periodic("1110000", 64)
    assert mask1 == periodic("0000111", 64)


def test_example_4_m32_with_shift():
    # Example 4: M = 32, {sc3, sc2, sc1, sc0} = {1, 2, 1, 0}, {fs3, fs2, fs1, fs0} = {0, 0, 1, 1},
    # skip 2, use 3, shift 2; N = 128 -> four sub-masks of 32 columns.
    desc = ZeroColumnMask((0, 1, 2, 1), (1, 1, 0, 0), True, skip_span=2, use_span=3, shift=2)
    m0, m1, m2, m3 = desc.masks(32, 128)
    assert m0 & ((1 << 14) - 1) == 0b0000_111_0000_111        # fs0 = 1, nothing skipped
    assert m1 & ((1 << 13) - 1) == 0b0000_111_0000_11         # fs1 = 1, 1 of the 3 ones skipped
    assert m2 & ((1 << 12) - 1) == 0b111_0000_111_00          # fs2 = 0, 2 of the 4 zeros skipped
    assert m3 & ((1 << 13) - 1) == 0b111_0000_111_000         # fs3 = 0, 1 of the 4 zeros skipped
    assert [m0, m1, m2, m3] == [periodic("1110000", 32), periodic("1100001", 32),
                                periodic("0011100", 32), periodic("0001110", 32)]
    # "If N = 128 then B matrix with columns from 2 to 129 will be used": the shift moves the B
    # columns read, not the mask; the same fields without the shift give the same masks.
    assert ZeroColumnMask((0, 1, 2, 1), (1, 1, 0, 0), True, 2, 3, 0).masks(32, 128) == [m0, m1, m2, m3]


def test_example_4_encoding():
    # Table 45 positions: sc0..3 at bits 0/8/16/24 -> 0 | 1<<8 | 2<<16 | 1<<24 = 0x01020100;
    # fs0, fs1 at bits 32, 33 and non-zero at bit 39 -> (0b11 | 0x80) << 32 = 0x83 << 32;
    # skip 2 << 40, use 3 << 48, shift 2 << 56 -> 0x02_03_02_83_01_02_01_00.
    desc = ZeroColumnMask((0, 1, 2, 1), (1, 1, 0, 0), True, skip_span=2, use_span=3, shift=2)
    assert desc.encode() == 0x0203028301020100
    assert ZeroColumnMask.decode(0x0203028301020100) == desc


# --------------------------------------------------------------------------------------------------
# Encoding, decoding, shape rules

@pytest.mark.parametrize("bit", [36, 37, 38, 62, 63])
def test_decode_rejects_reserved_bits(bit):
    # Table 45: bits 36-38 reserved; 62-63 are not defined (the table stops at bit 61)
    with pytest.raises(SpecError, match="reserved bits"):
        ZeroColumnMask.decode(1 << bit)


def test_constructor_rejects_fields_that_do_not_fit():
    for kwargs in [dict(start_counts=(256, 0, 0, 0)), dict(first_spans=(2, 0, 0, 0)), dict(skip_span=256),
                   dict(use_span=-1), dict(shift=64), dict(start_counts=(0, 0, 0))]:
        with pytest.raises(SpecError):
            ZeroColumnMask(**kwargs)


def test_shift_limits_per_m():
    # Table 45 "Column Shift": max 16 for M = 32, 32 otherwise
    for m, limit in [(32, 16), (64, 32), (128, 32)]:
        ZeroColumnMask(shift=limit).check(m, 128)
        with pytest.raises(SpecError, match="exceeds the maximum") as info:
            ZeroColumnMask(shift=limit + 1).masks(m, 128)
        assert info.value.field == "zero_columns.shift"


def test_shape_rules():
    with pytest.raises(SpecError) as info:
        ZeroColumnMask().masks(256, 128)          # .ws M is 32, 64 or 128
    assert info.value.field == "shape.M"
    with pytest.raises(SpecError) as info:
        ZeroColumnMask().masks(32, 66)            # 66 does not split into 4 sub-masks
    assert info.value.field == "shape.N"


def test_sub_mask_coverage_join():
    # Coverage table: M = 64 mask1 covers columns [N/2, N-1]; column_mask places it there.
    desc = ZeroColumnMask((0, 0, 0, 0), (1, 0, 0, 0), True, 0, 63)    # 1 zeroed column, 64 used
    assert desc.masks(64, 128) == [1, 0]
    assert desc.column_mask(64, 128) == 1
    desc = ZeroColumnMask((0, 0, 0, 0), (0, 1, 0, 0), True, 0, 63)
    assert desc.column_mask(64, 128) == 1 << 64


@given(st.integers(0, (1 << 64) - 1))
def test_decode_encode_round_trip(value):
    try:
        desc = ZeroColumnMask.decode(value)
    except SpecError:
        assert value & (0b111 << 36 | 0b11 << 62)       # only reserved bits make decode fail
        return
    assert desc.encode() == value


# --------------------------------------------------------------------------------------------------
# Solver

descriptors = st.builds(
    ZeroColumnMask,
    st.tuples(*[st.integers(0, 255)] * 4), st.tuples(*[st.integers(0, 1)] * 4), st.booleans(),
    st.integers(0, 255), st.integers(0, 255), st.integers(0, 16))


@settings(max_examples=300, deadline=None)
@given(descriptors, st.sampled_from(sorted(SUB_MASKS)), st.sampled_from([64, 128, 256]))
def test_solve_regenerates_any_generated_mask(desc, m, n):
    masks = desc.masks(m, n)
    width = n // SUB_MASKS[m]
    solved = solve_zero_columns(m, n, as_sets(masks, width), shift=desc.shift)
    assert solved.masks(m, n) == masks
    assert solved.shift == desc.shift
    # canonical output: each used start count stays inside its first run (the range the examples use)
    if solved.nonzero:
        for fs, sc in list(zip(solved.first_spans, solved.start_counts))[:SUB_MASKS[m]]:
            assert sc < (solved.zero_run if fs else solved.use_run)
    # the same request as one list of MMA columns 0..N-1
    columns = {j for j in range(n) if (desc.column_mask(m, n) >> j) & 1}
    assert solve_zero_columns(m, n, [columns], shift=desc.shift).masks(m, n) == masks


def test_solve_simple_requests():
    # every 4th column zeroed, M = 128: zero-run 1 (skip_span 0), use-run 3 (use_span 2), starting zeroed
    desc = solve_zero_columns(128, 64, [set(range(0, 64, 4))])
    assert (desc.skip_span, desc.use_span, desc.first_spans[0], desc.start_counts[0]) == (0, 2, 1, 0)
    # nothing zeroed -> Non-Zero Mask 0 (Example 1's form)
    assert solve_zero_columns(64, 128, [set(), set()]).nonzero is False
    # whole sub-mask zeroed: one run as long as the sub-mask
    assert solve_zero_columns(64, 128, [set(range(64)), set()]).masks(64, 128) == [(1 << 64) - 1, 0]


def _claimed(err: SpecError) -> tuple[int, int]:
    text = str(err)
    distance = int(re.search(r"differs in (\d+) column", text).group(1))
    value = int(re.search(r"descriptor (0x[0-9a-f]+)", text).group(1), 16)
    return distance, value


def _hamming(a: list[int], b: list[int]) -> int:
    return sum(bin(x ^ y).count("1") for x, y in zip(a, b))


def _brute_force_nearest(wanted: list[int], width: int) -> int:
    """Smallest Hamming distance over every (Z, U) up to 2x the sub-mask width (beyond the solver's
    own Z, U <= width cut) and every phase - an independent check of the solver's search."""
    best = sum(bin(w).count("1") for w in wanted)       # Non-Zero Mask = 0
    full = (1 << width) - 1
    for zero_run in range(1, 2 * width + 1):
        for use_run in range(1, 2 * width + 1):
            period = zero_run + use_run
            pattern = 0
            for j in range(period + width):
                if j % period < zero_run:
                    pattern |= 1 << j
            windows = [(pattern >> p) & full for p in range(period)]
            best = min(best, sum(min(bin(w ^ x).count("1") for x in windows) for w in wanted))
    return best


def test_unrepresentable_request_reports_nearest():
    # M = 32, N = 64 (four 16-column sub-masks): sub-mask 0 has an inner zeroed run of 1 and sub-mask 1
    # an inner zeroed run of 2 - one shared zero-run length cannot make both.
    wanted = [0b0000_0000_0100_0000, 0b0000_0011_0000_0000, 0, 0]
    with pytest.raises(SpecError, match="not representable") as info:
        solve_zero_columns(32, 64, as_sets(wanted, 16))
    assert info.value.field == "zero_columns.cols"
    distance, value = _claimed(info.value)
    nearest = ZeroColumnMask.decode(value).masks(32, 64)
    assert _hamming(nearest, wanted) == distance
    assert distance == _brute_force_nearest(wanted, 16) == 1


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(0, (1 << 16) - 1), min_size=4, max_size=4))
def test_solver_exact_or_provably_nearest(wanted):
    try:
        desc = solve_zero_columns(32, 64, as_sets(wanted, 16))
    except SpecError as err:
        distance, value = _claimed(err)
        assert _hamming(ZeroColumnMask.decode(value).masks(32, 64), wanted) == distance
        assert distance == _brute_force_nearest(wanted, 16) > 0
    else:
        assert desc.masks(32, 64) == wanted


def test_solver_rejects_bad_columns():
    with pytest.raises(SpecError, match="outside"):
        solve_zero_columns(64, 128, [{64}, set()])       # sub-mask columns are 0..63
    with pytest.raises(SpecError, match="outside"):
        solve_zero_columns(64, 128, [{128}])              # MMA columns are 0..127
    with pytest.raises(SpecError, match="sub-mask"):
        solve_zero_columns(32, 128, [set(), set()])       # M = 32 has four sub-masks


# --------------------------------------------------------------------------------------------------
# Explainer

def _parts(ex):
    if isinstance(ex, dict):
        return [(f["name"], f["bits"], f["raw"], f["meaning"]) for f in ex["fields"]], ex["violations"]
    return [(f.name, f.bits, f.raw, f.meaning) for f in ex.fields], ex.violations


def test_explain_example_4():
    fields, violations = _parts(explain_zcm(0x0203028301020100, 32, 128))
    by_name = {name: (bits, raw, meaning) for name, bits, raw, meaning in fields}
    assert violations == []
    assert by_name["sc2"][:2] == ("16-23", 2) and by_name["fs1"][:2] == ("33", 1)
    assert by_name["skip_span"][:2] == ("40-47", 2) and "3 zeroed" in by_name["skip_span"][2]
    assert by_name["use_span"][:2] == ("48-55", 3) and "4 used" in by_name["use_span"][2]
    assert by_name["shift"][:2] == ("56-61", 2)
    # generated masks in binary, MSB first (sub-mask 1 of Example 4: ... 0000 111 0000 11)
    assert by_name["mask1"][1] == periodic("1100001", 32)
    assert by_name["mask1"][2].startswith("columns 32-63: 0b" + format(periodic("1100001", 32), "032b"))


def test_explain_reports_violations_without_raising():
    # reserved bit 37 set and shift 20 > 16 for M = 32
    fields, violations = _parts(explain_zcm(1 << 37 | 20 << 56 | 1 << 39, 32, 64))
    assert any("reserved bits 36-38" in v for v in violations)
    assert any("exceeds the maximum 16" in v for v in violations)
    _, violations = _parts(explain_zcm(0, 256, 64))
    assert any("M = 256" in v for v in violations)


@given(st.integers(0, (1 << 64) - 1), st.sampled_from([None, 32, 64, 128, 7]), st.sampled_from([None, 64, 100]))
def test_explain_never_raises(value, m, n):
    fields, _ = _parts(explain_zcm(value, m, n))
    assert fields[0][0] == "sc0"


@settings(max_examples=200, deadline=None)
@given(descriptors, st.sampled_from(sorted(SUB_MASKS)), st.sampled_from([64, 128, 256]))
def test_agrees_with_the_independent_sim_model(desc, m, n):
    """compiler/sim/tcgen05.py decodes the descriptor on its own (another engineer's reading of the
    same section); both must give the same N zeroed-column flags and shift."""
    sim = pytest.importorskip("compiler.sim.tcgen05")
    zeroed, shift = sim.zero_column_mask_bits(desc.encode(), m, n)
    assert shift == desc.shift
    column_mask = desc.column_mask(m, n)
    assert [bool((column_mask >> j) & 1) for j in range(n)] == [bool(z) for z in zeroed]
