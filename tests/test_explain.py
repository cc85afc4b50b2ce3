"""`explain`: field-by-field decoding of the instruction descriptor (PTX 9.7.16.4.2, Tables 42-44) and the
shared-memory descriptor (9.7.16.4.1); violations are reported, never raised."""
import json

import pytest
from hypothesis import given, settings, strategies as st

from compiler.descriptors import InstrDesc, SmemDesc
from compiler.diagnostics import SpecError
from compiler.explain import EXPLAINERS, Explanation, Field, explain_idesc, explain_smem_desc, register
from compiler.layout import smem_descriptors


def by_name(ex):
    return {f.name: f for f in ex.fields}


def test_idesc_worked_example():
    # a worked Table 42 value: 0x08100010 = D F32 (1 << 4) | N 64 >> 3 = 8 at bit 17 | M 128 >> 4 = 8 at bit 24 (Table 42)
    ex = explain_idesc(0x08100010, "f16")
    assert ex.violations == []
    f = by_name(ex)
    assert (f["d_type"].bits, f["d_type"].raw, f["d_type"].meaning) == ("4-5", 1, "D type: f32")
    assert (f["n"].bits, f["n"].raw) == ("17-22", 8) and "N = 64" in f["n"].meaning
    assert (f["m"].bits, f["m"].raw) == ("24-28", 8) and "M = 128" in f["m"].meaning
    assert f["a_type"].meaning == "A type: f16" and f["transpose_b"].meaning.endswith("K-major")
    # Table 42 has 16 rows (13 fields + reserved bits 6, 23, 29), listed in bit order
    assert len(ex.fields) == 16
    text = ex.text()
    assert text.startswith("idesc 0x08100010, kind::f16 (Table 42)")
    assert len(text.splitlines()) == 1 + 16 + 1 and text.rstrip().endswith("no violations")
    assert json.loads(json.dumps(ex.to_json()))["fields"][3] == {"name": "d_type", "bits": "4-5", "raw": 1,
                                                                  "meaning": "D type: f32"}


@pytest.mark.parametrize("value, kind, needle", [
    (0x08100010 | 1 << 6, "f16", "reserved bits 6 are set"),
    (0x08100010 | 1 << 29, "f16", "reserved bits 29 are set"),
    (0x08100010 | 5 << 7, "f16", "bits 7-9 (a_type): code 5 is not valid"),      # E2M1 code, not in kind::f16
    (0x08100000 | 1 << 7 | 1 << 10, "f16", "no bf16 -> f16 form"),                          # bf16 x bf16 -> f16 (D code 0)
    (0x03100010, "f16", "M = 48"),                                                  # M >> 4 = 3
    (0x08000010, "f16", "N = 0"),
    (0x08100010 | 1, "f16", "selector"),                                            # selector without sparsity
    (0x08100010 | 1 << 13, "i8", "code 1 is not valid"),                             # i8 cannot negate ...
    (0x08100010, "i8", "code 1 is not valid"),                                      # ... nor has D code 1
    (0x08100290 | 1 << 3, "f8f6f4", "bits 3 (saturate): code 1 is not valid"),     # saturate is i8 only
])
def test_idesc_violations(value, kind, needle):
    ex = explain_idesc(value, kind)
    assert any(needle in v for v in ex.violations), ex.violations
    assert "violations:" in ex.text()


def test_idesc_block_scaled_kinds():
    # Table 44, mxf4nvf4: E2M1 = 1 at bits 7-9 and 10-11, UE4M3 = 0 at bit 23, M = 256 >> 7 = 2 at 27-28,
    # A scale id 2 at 29-30, K = 96 at bit 31
    value = InstrDesc("mxf4nvf4", "e2m1", "e2m1", "f32", 256, 128, scale_type="ue4m3", a_scale_id=2, k96=True).encode()
    ex = explain_idesc(value, "mxf4nvf4")
    assert ex.violations == [] and "Table 44" in ex.title
    f = by_name(ex)
    assert f["b_type"].bits == "10-11" and f["scale_type"].meaning.endswith("ue4m3")
    assert f["k96"].raw == 1 and f["a_scale_id"].raw == 2 and "M = 256" in f["m"].meaning
    # the same bits under kind::mxf8f6f4 (Table 43): E2M1 is 5 there, code 1 is E5M2; bit 31 is reserved
    assert any("reserved bits 31" in v for v in explain_idesc(value, "mxf8f6f4").violations)


def test_idesc_without_a_kind():
    ex = explain_idesc(0x08100010)
    assert ex.fields == [] and "no kind given" in ex.violations[0]
    assert "'f64' is not a tcgen05 kind" in explain_idesc(0x08100010, "f64").violations[0]


def test_smem_desc_of_a_layout():
    # the first K step of a 128 x 64 f16 K-major 128B tile (test_layout): SBO 1024 B, LBO field 1, code 2
    value = smem_descriptors("f16", "K", "128B", 128, 64, 16, base_address=0x400)[0]
    ex = explain_smem_desc(value)
    assert ex.violations == []
    f = by_name(ex)
    assert f["start_address"].meaning.startswith("matrix start address = 0x400")
    assert f["stride_byte_offset"].raw == 64 and "1024 B" in f["stride_byte_offset"].meaning
    assert f["swizzle"].meaning == "swizzle: 128B" and f["fixed_0b001"].raw == 1
    assert [x.bits for x in ex.fields] == ["0-13", "14-15", "16-29", "30-31", "32-45", "46-48", "49-51", "52",
                                          "53-60", "61-63"]


def test_smem_desc_absolute_mode():
    ex = explain_smem_desc(SmemDesc(0x1000, 0x5000, 1024, "128B", 0, "absolute").encode())
    assert ex.violations == [] and "absolute LBO address = 0x5000" in by_name(ex)["leading_byte_offset"].meaning


@pytest.mark.parametrize("value, needle", [
    ((1 << 46) | (3 << 61), "swizzle code 3 is invalid"),
    ((1 << 46) | (5 << 61), "swizzle code 5 is invalid"),
    ((1 << 46) | (7 << 61), "swizzle code 7 is invalid"),
    (0, "fixed constant 0b001"),
    ((1 << 46) | (1 << 15), "reserved bits 14-15"),
    ((1 << 46) | (1 << 55), "reserved bits 53-60"),
    ((1 << 46) | (1 << 52) | (4 << 61), "absolute LBO mode requires 128B"),
    (1 << 64, "not a 64-bit"),
    (-5, "not a 64-bit"),
])
def test_smem_desc_violations(value, needle):
    assert any(needle in v for v in explain_smem_desc(value).violations)


@settings(max_examples=300)
@given(st.integers(-(1 << 70), 1 << 70), st.sampled_from([None, "bogus", "tf32", "f16", "f8f6f4", "i8",
                                                          "mxf8f6f4", "mxf4", "mxf4nvf4"]))
def test_explainers_never_raise(value, kind):
    for ex in (explain_idesc(value, kind), explain_smem_desc(value)):
        assert isinstance(ex, Explanation) and isinstance(ex.text(), str)
        json.dumps(ex.to_json())


@settings(max_examples=300)
@given(st.integers(0, (1 << 32) - 1), st.sampled_from(["tf32", "f16", "f8f6f4", "i8", "mxf8f6f4", "mxf4", "mxf4nvf4"]))
def test_idesc_violations_agree_with_decode(value, kind):
    ex = explain_idesc(value, kind)
    try:
        InstrDesc.decode(value, kind)
        decodes = True
    except SpecError:
        decodes = False
    # A descriptor decodes exactly when its explanation is clean: no violation, and no warning that the ISA
    # does not list it (NVIDIA's one-SM K = 96 decodes field by field, yet tilec never builds one).
    assert decodes == (ex.violations == [] and ex.warnings == [])


def test_one_sm_k96_is_a_warning_naming_both_sources():
    """CUTLASS's SM103_MXF4_ULTRA_SS_VS idesc: K = 96 (bit 31), M = 128 (bits 27-28 = 1), N = 128 (bits 17-22 = 16),
    e2m1 A/B (code 1 at bits 7-9 and 10-11), ue4m3 scales (bit 23 = 0, kind::mxf4nvf4 only):
    0x80000000 + 0x08000000 + (16 << 17 = 0x200000) + (1 << 10 = 0x400) + (1 << 7 = 0x80) = 0x88200480."""
    ex = explain_idesc(0x88200480, "mxf4nvf4")
    assert ex.violations == []
    assert len(ex.warnings) == 1
    w = ex.warnings[0]
    assert "Table 39" in w and "cta_group::2, M = 256" in w                 # the ISA, tilec's contract
    assert "SM103_MXF4_ULTRA_SS_VS" in w and "cta_group::1, M = 128" in w   # NVIDIA's own one-SM use
    assert "warnings:" in ex.text() and ex.to_json()["warnings"] == ex.warnings
    # the same value is never accepted for compiling: the descriptor constructor keeps the ISA's contract
    with pytest.raises(SpecError, match="SM103_MXF4_ULTRA_SS_VS"):
        InstrDesc.decode(0x88200480, "mxf4nvf4")


@pytest.mark.parametrize("value,kind,needle", [
    (0x88200484, "mxf4nvf4", "K = 96 with sparse A and M = 128"),   # bit 2: sparse; no sparse K = 96 anywhere
    (0x88200480, "mxf4", "bits 23 (scale_type)"),                    # kind::mxf4 has no ue4m3 code
])
def test_other_k96_mismatches_stay_violations(value, kind, needle):
    ex = explain_idesc(value, kind)
    assert ex.warnings == [] and any(needle in v for v in ex.violations), ex.violations


def test_cli_exit_status_follows_violations_not_warnings(capsys):
    from compiler.cli import main

    assert main(["explain", "idesc", "0x88200480", "--kind", "mxf4nvf4"]) == 0
    assert main(["explain", "idesc", "0x88200484", "--kind", "mxf4nvf4"]) == 1
    capsys.readouterr()


@settings(max_examples=300)
@given(st.one_of(st.integers(0, (1 << 64) - 1), st.integers(0, (1 << 14) - 1).map(lambda v: (1 << 46) | v << 32)))
def test_smem_violations_agree_with_decode(value):
    try:
        SmemDesc.decode(value)
        decodes = True
    except SpecError:
        decodes = False
    assert decodes == (explain_smem_desc(value).violations == [])


def test_registry_is_pluggable():
    assert {"idesc", "smem-desc", "zcm"} <= set(EXPLAINERS)
    ex = EXPLAINERS["zcm"](0)                 # the zero-column-mask explainer, loaded lazily
    assert isinstance(ex, Explanation)
    register("test-const", lambda value: Explanation([Field("all", "0-7", value & 0xFF, "a byte")]))
    try:
        assert EXPLAINERS["test-const"](0x1234).fields[0].raw == 0x34
    finally:
        del EXPLAINERS["test-const"]
