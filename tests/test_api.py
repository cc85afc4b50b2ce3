"""The Python API: compile_source / compile_file / compile_spec, CompileResult and CompileError.

Golden values are derived in comments from PTX 9.7.16.4.2 Table 42 (instruction descriptor) and
9.7.16.4.1 / 9.7.16.3 (shared-memory descriptor, canonical layouts).
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

import compiler
from compiler import (CompileError, FileSpec, OperandSpec, TileSpec, compile_file, compile_source, compile_spec,
                      parse_source)

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "gemm_bf16.tile"
SOURCE = EXAMPLE.read_text()

# examples/gemm_bf16.tile: M=128 N=256 K=16, loop K=64, bf16 A/B K-major 128B, f32 D.
# Table 42: dtype F32 1 << 4 = 0x10 | atype BF16 1 << 7 = 0x80 | btype BF16 1 << 10 = 0x400
#           | N >> 3 = 32 << 17 = 0x400000 | M >> 4 = 8 << 24 = 0x8000000
IDESC = 0x10 | 0x80 | 0x400 | 0x400000 | 0x8000000
# 9.7.16.4.1: 128B swizzle code 2 << 61, fixed bit 46, SBO = 8 rows x 128 B = 1024 B -> 64 << 32,
# LBO unused ("assumed 1") -> 1 << 16. K steps of 16 bf16 = 32 B -> start field + 2 per step.
A_BASE = 2 << 61 | 1 << 46 | 64 << 32 | 1 << 16
A_DESCS = [A_BASE | step * 2 for step in range(4)]
# B follows A's 128 x 64 x 2 = 16384 B: start field 16384 >> 4 = 0x400.
B_DESCS = [A_BASE | 0x400 | step * 2 for step in range(4)]


@pytest.fixture(scope="module")
def result():
    return compile_source(SOURCE, "gemm_bf16.tile")


def test_compile_source_gives_ptx_ir_and_tiles(result):
    assert result.ptx.splitlines()[4:6] == [".version 8.6", ".target sm_100a"]
    assert ".visible .entry gemm_bf16(" in result.ptx
    assert list(result.tiles) == ["gemm_bf16"]
    assert result.ir().startswith('tilec.module {target = "sm_100a", ptx_version = "8.6", passes = ["verify", ')
    assert result.spec.target == "sm_100a" and result.spec.tiles[0].total_k == 64


def test_descriptors_are_integers_with_the_derived_values(result):
    d = result.descriptors["gemm_bf16"]
    assert d == {"idesc": IDESC, "A_desc": A_DESCS, "B_desc": B_DESCS}
    assert all(isinstance(v, int) for v in [d["idesc"], *d["A_desc"], *d["B_desc"]])


def test_to_json_is_serialisable_and_hex(result):
    j = json.loads(json.dumps(result.to_json()))
    assert j["target"] == "sm_100a" and j["ptx_version"] == "8.6"
    tile = j["tiles"]["gemm_bf16"]
    # zero-padded to the field width: idesc 32 bits (8 digits), smem descriptors 64 bits (16 digits)
    assert tile["descriptors"] == {"idesc": f"0x{IDESC:08x}", "A_desc": [f"0x{v:016x}" for v in A_DESCS],
                                   "B_desc": [f"0x{v:016x}" for v in B_DESCS]}
    assert tile["engine"] == "tcgen05" and tile["kind"] == "f16"
    k = tile["kernel"]
    assert k["entry"] == "gemm_bf16"
    assert [p["name"] for p in k["params"]] == ["A", "B", "D", "m_total", "n_total"]
    assert k["block"] == [128, 1, 1] and k["grid"] == ["n_total / 256", "m_total / 128", "1"]
    assert k["k"] == 64
    assert k["tmem_columns"] == 256        # N = 256 f32 columns, a power of two >= 32 (9.7.16.7.1)


def test_compile_file_accepts_str_and_path(tmp_path):
    p = tmp_path / "g.tile"
    p.write_text(SOURCE)
    assert compile_file(p).ptx == compile_file(str(p)).ptx == compile_source(SOURCE, str(p)).ptx


def test_compile_file_names_the_file_in_diagnostics(tmp_path):
    p = tmp_path / "bad.tile"
    p.write_text(SOURCE.replace("N=256", "N=260"))
    with pytest.raises(CompileError) as ei:
        compile_file(p)
    (diag,) = ei.value.diagnostics
    # line 7 is `  shape M=128 N=256 K=16;`, N's value starts at column 17 and is 3 characters wide
    assert (diag.loc.file, diag.loc.line, diag.loc.col, diag.loc.end_col) == (str(p), 7, 17, 20)
    assert diag.message == "N = 260 is not valid for kind::f16 cta_group::1; valid N: 8..256 in steps of 8"
    assert ei.value.render().splitlines() == [
        f"{p}:7:17: error: {diag.message}",
        "    shape M=128 N=260 K=16;",
        "                  ^~~",
    ]


def test_compile_error_carries_every_front_end_diagnostic():
    src = ("target sm_100a;\n"
           "tile a { frob; }\n"
           "tile b { engine tcgen05; shape M=128 N=64 K=16 Z=1; }\n")
    with pytest.raises(CompileError) as ei:
        compile_source(src, "two.tile")
    diags = ei.value.diagnostics
    assert [(d.loc.line, d.loc.col, d.message) for d in diags] == [
        (2, 10, "unknown statement 'frob'"),
        (3, 48, "unknown key 'Z' in 'shape'"),
    ]
    assert diags[0].to_json() == {"severity": "error", "message": "unknown statement 'frob'",
                                  "hint": diags[0].hint, "file": "two.tile", "line": 2, "col": 10}
    assert "did you mean" in diags[0].hint or "expected one of" in diags[0].hint


def test_arch_and_ptx_version_keywords():
    r = compile_source(SOURCE, arch="sm_103a")
    # sm_103a needs PTX ISA 8.8 (PTX ISA 9.7.16.10.9 PTX/target ISA notes)
    assert ".version 8.8\n.target sm_103a\n" in r.ptx
    r = compile_source(SOURCE, ptx_version=(8, 7))
    assert ".version 8.7\n.target sm_100a\n" in r.ptx
    with pytest.raises(CompileError, match="needs PTX ISA 8.6"):
        compile_source(SOURCE, ptx_version=(8, 5))
    with pytest.raises(CompileError, match="unknown target 'sm_1'"):
        compile_source(SOURCE, arch="sm_1")


def test_partial_pipeline_and_ir_dumps():
    r = compile_source(SOURCE, passes=["verify", "layout-selection"], print_ir_after={"layout-selection"})
    assert r.ptx is None
    assert r.descriptors == {"gemm_bf16": {}}          # descriptor-materialization did not run
    assert len(r.ir_dumps) == 1
    assert r.ir_dumps[0].startswith("// -----// IR Dump After layout-selection //----- //\n")
    assert "tilec.smem_layout @A" in r.ir_dumps[0]
    r = compile_source(SOURCE, print_ir_after={"*"})
    assert [d.splitlines()[0] for d in r.ir_dumps] == [
        f"// -----// IR Dump After {n} //----- //" for n in
        ("verify", "layout-selection", "sparse-metadata-packing", "descriptor-materialization", "epilogue-lowering",
         "warp-specialization",
         "kernel-selection", "pipeline-planning", "resource-planning", "ptx-emission")]


def test_compile_spec_from_code():
    ops = {"A": OperandSpec("f16", "smem", "K", "32B"), "B": OperandSpec("f16", "smem", "K", "32B"),
           "D": OperandSpec("f32", "tmem")}
    r = compile_spec(FileSpec("sm_100a", [TileSpec(name="api", engine="tcgen05", m=128, n=64, k=16, operands=ops)]))
    # Table 42: F32 1 << 4 | N >> 3 = 8 << 17 | M >> 4 = 8 << 24
    assert r.descriptors["api"]["idesc"] == 0x10 | 8 << 17 | 8 << 24
    # A: K-major 32B, SBO = 8 x 32 B = 256 B -> 16 << 32; code 6; LBO 1; B after A's 128 x 16 x 2 = 4096 B.
    a = 6 << 61 | 1 << 46 | 16 << 32 | 1 << 16
    assert r.descriptors["api"]["A_desc"] == [a] and r.descriptors["api"]["B_desc"] == [a | 4096 >> 4]


def test_compile_spec_errors_without_locations():
    ops = {"A": OperandSpec("f16", "smem"), "B": OperandSpec("f16", "smem"), "D": OperandSpec("f32", "tmem")}
    spec = FileSpec("sm_100a", [TileSpec(name="api", engine="tcgen05", m=128, n=260, k=16, operands=ops)])
    with pytest.raises(CompileError) as ei:
        compile_spec(spec)
    (diag,) = ei.value.diagnostics
    assert diag.loc is None
    assert ei.value.render().startswith("tilec: error: N = 260 is not valid")


def test_parse_source_keeps_locations():
    spec = parse_source(SOURCE, "g.tile")
    tile = spec.tiles[0]
    assert (tile.name, tile.m, tile.n, tile.k, tile.total_k) == ("gemm_bf16", 128, 256, 16, 64)
    assert str(tile.loc("shape.N")) == "g.tile:7:17"
    assert str(tile.loc("A.swizzle")) == "g.tile:9:32"


def test_package_exports_lazily():
    for name in ("compile_source", "compile_file", "compile_spec", "parse_source", "CompileError",
                 "CompileResult", "Diagnostic", "Loc", "SpecError", "FileSpec", "TileSpec", "register_pass"):
        assert name in compiler.__all__ and getattr(compiler, name) is not None
    assert set(compiler.__all__) <= set(dir(compiler))
    with pytest.raises(AttributeError):
        compiler.no_such_name
