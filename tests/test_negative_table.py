"""The negative table (tests/fuzz/negative.py): every illegal combination class the legality tables
define, each compiled through the whole pipeline, must fail with its first diagnostic on the token
that makes it illegal (computed from the tile text, not from the compiler's locations) and a message
naming the offending value.

Classes and their tables: Table 39 kinds/types, M, N and K (tcgen05_kinds.KINDS / SHAPE_RULES);
Tables 49/50 majors, swizzles, negate (check_major, KINDS); Table 42 saturate; 9.7.16.10.9 forms and
Table 54 vector sizes (tcgen05_forms.KIND_FORMS); Tables 60/61 targets and PTX versions
(tcgen05_forms.FEATURES); 9.7.14.6 mma.sp forms, selectors, targets and versions (mma_sp.forms);
the front end's word lists. Cases whose diagnostic points at the wrong token are xfail (strict) with
the reason, and reported to the owner.
"""
from __future__ import annotations

import collections

import pytest

from fuzz import negative

CASES = negative.all_cases()
BY_CLASS: dict[str, list] = collections.defaultdict(list)
for _case in CASES:
    if _case.wrong_location is None:
        BY_CLASS[_case.klass].append(_case)
WRONG_LOCATION = [c for c in CASES if c.wrong_location is not None]


@pytest.mark.parametrize("klass", sorted(BY_CLASS))
def test_class_blames_the_offending_token(klass):
    problems = []
    for case in BY_CLASS[klass]:
        r = negative.check_case(case)
        if r.problem:
            problems.append(f"{case.id}: {r.problem}\n{r.text}")
    assert not problems, f"{len(problems)} of {len(BY_CLASS[klass])} cases:\n" + "\n".join(problems[:5])


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id, marks=pytest.mark.xfail(strict=True, reason=c.wrong_location))
                                  for c in WRONG_LOCATION])
def test_known_wrong_location(case):
    r = negative.check_case(case)
    assert r.problem is None, r.problem


def test_every_base_tile_is_legal():
    """Each case is one field away from a base tile; the base itself must pass `verify`, or a case
    could fail for a reason other than its own."""
    from compiler.driver import compile_source

    bases = [negative.tcgen05_base(kind, rule.cta_group, sparse, rule.ws) for kind, rule, sparse in negative._shape_variants()]
    bases += [negative._tile_for_form(form) for _, form in negative.feature_classes()]
    bases += [negative.sp_tile(form) for form in negative.expressible_sp_forms()]
    for tile in bases:
        text, _ = tile.render()
        compile_source(text, "base.tile", passes=["verify"])


def test_table_covers_every_row():
    """Every kind, every Table 39 row (but K = 96), every FEATURES row the DSL can write and every
    mma.sp form row has cases, so a new table row cannot go untested."""
    from compiler.isa.mma_sp.forms import FORM_ROWS
    from compiler.isa.tcgen05_forms import FEATURES
    from compiler.isa.targets import TARGETS
    from compiler.isa.tcgen05_kinds import KINDS, SHAPE_RULES

    ids = [c.id for c in CASES]
    for kind in KINDS:
        assert any(i.startswith(f"tcgen05-type/{kind}/") for i in ids), kind
    for rule in SHAPE_RULES:
        if not rule.k96:
            for kind in rule.kinds:
                prefix = f"{kind}-cg{rule.cta_group}"
                assert any(i.startswith((f"tcgen05-M/{prefix}", f"tcgen05-N/{prefix}")) for i in ids), (kind, rule)
    # the two rows the DSL cannot write: K = 96 (no K=96 syntax) and an omitted block-scale vector size
    inexpressible = {"K = 96", "block_scale without a vector size (= block32)"}
    covered = {name for names, _ in negative.feature_classes() for name in names}
    assert {f.name for f in FEATURES} - inexpressible <= covered
    for row in FORM_ROWS:
        if any(not row.target_rule.allows(t) for t in TARGETS.values()):
            assert any(c.klass == "mma.sp target" and c.tile.k == row.k and c.tile.kind == row.kind
                       and c.tile.operand("A").dtype in row.a_types for c in CASES), row.describe()


def test_lit_suite_is_current():
    """tests/lit/negative is generated from this table (tests/lit/negative/gen.py); it must match."""
    from fuzz import negative_lit

    stale = negative_lit.stale_files()
    assert not stale, f"regenerate with: python tests/lit/negative/gen.py ({', '.join(stale[:5])})"
