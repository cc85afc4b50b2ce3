"""README's support matrix is generated from the compiler's tables and must not go stale."""
from pathlib import Path

from compiler.support_matrix import render, splice

README = Path(__file__).resolve().parent.parent / "README.md"


def test_readme_support_matrix_is_current():
    text = README.read_text()
    assert splice(text) == text, "run: python -m compiler.support_matrix --write README.md"


def test_matrix_rows_come_from_the_tables():
    from compiler.isa.mma_sp.forms import FORM_ROWS
    from compiler.isa.tcgen05_forms import FEATURES
    from compiler.isa.tcgen05_kinds import KINDS

    out = render()
    for k in KINDS:
        assert f"\n| {k} |" in out
    for f in FEATURES:
        assert f"\n| {f.name} |" in out
    assert out.count("\n| m16n8k") == len(FORM_ROWS)
    from compiler.isa.wgmma import WGMMA_SP_FORMS

    for t, f in WGMMA_SP_FORMS.items():
        assert f"\n| {t} | m64nNk{f.k} |" in out
