"""Budgets on generated code (compiler/passes/limits.py) and module-scope symbols (compiler/passes/symbols.py),
both checked by `verify` before any PTX is written."""
from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from compiler import CompileError, compile_source
from compiler.passes.limits import MAX_REGISTERS, MAX_UNROLLED_MMA, mma_sp_budget

ROOT = Path(__file__).resolve().parent.parent
SPARSE_GEMM = (ROOT / "examples" / "sparse_gemm_f16.tile").read_text()
WGMMA = (ROOT / "examples" / "sparse_wgmma_f16.tile").read_text()


def with_schedule(schedule: str, source: str = SPARSE_GEMM, cd: str = "f32") -> str:
    text = re.sub(r"^  schedule [^;\n]*;", f"  schedule {schedule};", source, flags=re.M)
    assert f"schedule {schedule};" in text
    return text.replace("C: f32", f"C: {cd}").replace("D: f32", f"D: {cd}")


def error_of(source: str) -> CompileError:
    with pytest.raises(CompileError) as ei:
        compile_source(source, "t.tile")
    return ei.value


# -- the budget is the emitters' own count ---------------------------------------------------------

def _declared(ptx: str, names) -> int:
    """Registers of the vectors `%name<N>` the kernel declares (.reg lines)."""
    return sum(int(m.group(1)) for n in names for m in re.finditer(r"%" + n + r"<(\d+)>", ptx))


CASES = [(SPARSE_GEMM, "f32"),                                        # pipelined 128x256x64, 2x4 warps
         (WGMMA, "f32"),
         (with_schedule("cta=64x64x64 warps=2x2 stages=3"), "f32"),
         (with_schedule("cta=64x128x32 warps=2x2 stages=2"), "f32"),
         (with_schedule("cta=128x128x128 warps=2x2 stages=3"), "f32"),
         (with_schedule("cta=128x128x64 warps=4x1 stages=2 mma=wgmma"), "f32"),
         (with_schedule("cta=256x128x64 warps=8x1 stages=4 mma=wgmma"), "f32"),
         (with_schedule("cta=128x64x64 warps=2x2 stages=3", cd="f16"), "f16"),       # f16 C/D: 1-tile kernel
         (with_schedule("cta=256x256x64 warps=2x4 stages=3", cd="f16"), "f16"),
         (with_schedule("cta=32x32x32 warps=1x1 stages=1"), "f32"),                  # 1 stage: 1-tile kernel
         ((ROOT / "examples" / "sparse_f16.tile").read_text(), "f32")]


@pytest.mark.parametrize("source, cd", CASES)
def test_budget_counts_what_the_emitters_write(source, cd):
    """mma_sp_budget predicts, before generation, the MMA instructions and the accumulator and fragment
    registers the kernel then declares (acc; a/b/e, ra/rb/re or meta; %sa/%sb)."""
    from compiler.driver import parse_source, run_passes

    r = compile_source(source, "t.tile")
    module = run_passes(parse_source(source, "t.tile"), ("verify",), None, source=source)
    (tile,) = module.ops("tilec.tile")
    from compiler.passes.derive import mma_form, tile_spec

    b = mma_sp_budget(tile_spec(tile), mma_form(tile))
    mmas = len(re.findall(r"^\s*(?:mma\.sp|wgmma\.mma_async)", r.ptx, re.M))
    assert (b.mmas, b.accumulators) == (mmas, _declared(r.ptx, ["acc"]))
    assert b.fragments == _declared(r.ptx, ["a", "b", "e", "ra", "rb", "re", "meta"]) + 2 * ("%sa" in r.ptx)
    assert b.registers <= MAX_REGISTERS and b.mmas <= MAX_UNROLLED_MMA


# -- the limits --------------------------------------------------------------------------------------

def test_a_huge_cta_is_a_located_error_before_generation():
    """Issue 14: `schedule cta=1048576x256x64` wrote 152 MB of PTX (16777216: a MemoryError after 28 s).
    With f16 C/D the one-instruction-tile kernel serves it: a 1048576/2 x 256/4 warp tile is
    32768 x 8 mma tiles, all unrolled in the K loop's body."""
    for m in (1048576, 16777216):
        src = with_schedule(f"cta={m}x256x64 warps=2x4 stages=3", cd="f16")
        t0 = time.perf_counter()
        e = error_of(src)
        assert time.perf_counter() - t0 < 5
        (d,) = e.diagnostics
        mmas = m // (16 * 2) * (256 // (8 * 4))
        assert d.message == (f"this schedule unrolls {mmas} MMA instructions in one kernel (mma.sp, a "
                             f"{m // 2}x64 warp tile); tilec writes at most {MAX_UNROLLED_MMA}")
        # the `  schedule cta=...;` line of the example: the cta value starts at column 16
        line = next(n for n, text in enumerate(src.splitlines(), 1) if text.lstrip().startswith("schedule"))
        assert (d.loc.line, d.loc.col) == (line, 16)


def test_a_register_hungry_schedule_is_rejected_naming_the_numbers():
    """cta=512x256 over 2x4 warps with f16 C/D (mma.sp m16n8k32 f16: 2 A... see PTX 9.7.14.6 fragments:
    A 4 x .b32, B 4 x .b32 (f16: k32 -> 2 elements per register), C/D 2 x .f16x2, 1 metadata word):
    a 256x64 warp tile is 16 x 8 mma tiles -> 128 * 2 = 256 accumulators, 16*4 + 8*4 + 16 = 112 fragment
    registers: 368 > 255."""
    src = with_schedule("cta=512x256x64 warps=2x4 stages=3", cd="f16")
    e = error_of(src)
    (d,) = e.diagnostics
    line = next(n for n, text in enumerate(src.splitlines(), 1) if text.lstrip().startswith("schedule"))
    assert d.message == ("a 256x64 warp tile needs 256 accumulator + 112 fragment registers = 368 per thread "
                         "(mma.sp); a thread has at most 255")
    assert (d.loc.line, d.loc.col) == (line, 16)


def test_the_pipelined_kernels_double_buffers_count():
    """cta=64x256 over 2x2 warps: a 32x128 warp tile = 2 x 16 mma tiles, 128 f32 accumulators (within
    the kernel's own 128), but two fragment buffers of 2*4 A + 16*4 B + 2 metadata = 74: 128 + 148 = 276."""
    e = error_of(with_schedule("cta=64x256x64 warps=2x2 stages=3"))
    assert e.diagnostics[0].message == ("a 32x128 warp tile needs 128 accumulator + 148 fragment registers = "
                                        "276 per thread (pipelined mma.sp); a thread has at most 255")


def test_within_budget_still_compiles():
    # 256x256 over 2x4 warps, f16 C/D: 8 x 8 mma tiles, 64 * 2 + 8*4 + 8*4 + 8 = 200 registers, 64 MMAs
    r = compile_source(with_schedule("cta=256x256x64 warps=2x4 stages=3", cd="f16"), "t.tile")
    assert len(re.findall(r"^\s*mma\.sp", r.ptx, re.M)) == 64


# -- module-scope symbols ----------------------------------------------------------------------------

def _two_tiles(source: str, first: str, second: str) -> str:
    """The example's tile twice, renamed `first` and `second` (the header line stays once)."""
    start = re.search(r"^tile (\w+) \{", source, re.M)
    head, body, name = source[:start.start()], source[start.start():], start.group(1)
    return head + body.replace(name, first) + "\n" + body.replace(name, second)


def test_a_tile_named_like_another_tiles_smem_array_is_a_located_error():
    """Issue 14: tiles `g` and `g_smem` made ptxas die (exit 139) on the entry `g_smem` redefining the
    pipelined kernel's `.extern .shared g_smem[]`."""
    src = _two_tiles(SPARSE_GEMM, "g", "g_smem")
    e = error_of(src)
    (d,) = e.diagnostics
    assert d.message == ("tile name 'g_smem' is the name of the dynamic shared memory array (.extern .shared) "
                         "tilec declares for tile 'g' (PTX module scope)")
    line = src.split("\n").index("tile g_smem {") + 1
    assert (d.loc.line, d.loc.col) == (line, 6)             # the name after `tile `


def test_the_order_of_the_tiles_does_not_matter():
    e = error_of(_two_tiles(SPARSE_GEMM, "g_smem", "g"))
    assert "tile name 'g_smem' is the name of the dynamic shared memory array" in e.diagnostics[0].message


def test_names_that_declare_nothing_at_module_scope_stay_legal():
    """tcgen05 kernels keep their shared memory, mbarrier and TMEM slot inside the entry (function scope):
    `g` and `g_smem` side by side assemble (tests/test_goldens.py keeps the PTX itself unchanged)."""
    gemm = (ROOT / "examples" / "gemm_bf16.tile").read_text()
    r = compile_source(_two_tiles(gemm, "g", "g_smem"), "t.tile")
    assert ".visible .entry g(" in r.ptx and ".visible .entry g_smem(" in r.ptx


def test_fragment_names_must_be_c_identifiers():
    """Exported names are named from C/C++ host code: `$` is a PTX identifier character, not a C one."""
    from compiler import emit_fragment
    from compiler.driver import parse_source

    gemm = (ROOT / "examples" / "gemm_bf16.tile").read_text()
    spec = parse_source(gemm, "g.tile").tiles[0]
    assert emit_fragment(spec, "sm_100a").name == "tilec_gemm_bf16_mma"
    with pytest.raises(CompileError, match=r"fragment name 'my\$gemm_bf16_mma' is not a C identifier"):
        emit_fragment(spec, "sm_100a", prefix="my$")


def test_a_tile_named_like_a_tcgen05_static_metadata_table_is_a_located_error():
    """Static tcgen05 metadata is a `.global <tile>_meta[]` table at module scope; ptxas rejects an entry of
    the same name ("Inconsistent redefinition of symbol 'g_meta'")."""
    src = "\n".join(["target sm_100a;",
                     "tile g {", "  engine tcgen05;", "  shape M=128 N=64 K=32;", "  loop K=64;",
                     "  A: f16 smem;", "  B: f16 smem;", "  D: f32 tmem;", "  sparsity 2:4 pattern=first_two;", "}",
                     "tile g_meta {", "  engine tcgen05;", "  shape M=128 N=64 K=16;",
                     "  A: f16 smem;", "  B: f16 smem;", "  D: f32 tmem;", "}", ""])
    (d,) = error_of(src).diagnostics
    assert d.message == ("tile name 'g_meta' is the name of the static metadata table (.global) tilec declares "
                         "for tile 'g' (PTX module scope)")
    assert (d.loc.line, d.loc.col) == (11, 6)
    assert ".global .align 4 .b32 g_meta[" in compile_source(src.replace("g_meta", "h"), "t.tile").ptx


@pytest.mark.parametrize("name", ["a$b", "$x", "gemm$"])
def test_an_entry_name_is_a_c_identifier_from_ir_text_too(name):
    """Issue 14: exported names stay C identifiers. The DSL's grammar has no `$`, but IR text (compile_ir,
    `tilec opt`) named a tile `a$b` and got `.visible .entry a$b(`: a PTX identifier (PTX ISA 4.4) that no
    C or C++ host code can name."""
    from compiler.driver import compile_ir

    gemm = (ROOT / "examples" / "gemm_bf16.tile").read_text()
    ir = compile_source(gemm, "g.tile", passes=[]).ir()
    with pytest.raises(CompileError) as e:
        compile_ir(ir.replace("@gemm_bf16", f"@{name}"), "g.ir")
    (d,) = e.value.diagnostics
    assert d.message == f"tile name '{name}' is not a C identifier (host code looks the kernel's .entry up by name)"
    assert (d.loc.file, d.loc.line, d.loc.col) == ("g.tile", 5, 6)        # the name in the tile's source
    assert ".visible .entry gemm_bf16(" in compile_ir(ir, "g.ir").ptx
