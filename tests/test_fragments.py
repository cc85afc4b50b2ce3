"""PTX fragments (compiler/ptx/fragment.py, compiler/api.py, `tilec compile --emit func`).

The key check: fragments of different tiles spliced into one hand-written host `.entry` that calls
them with `call` (PTX 9.7.12.5) assemble with ptxas, for sm_100a (tcgen05) and sm_80 (mma.sp).
Descriptor constants are checked against the materialized descriptors of the normal pipeline and
the encodings of PTX 9.7.16.4.1/.2; sparse metadata addressing against PTX ISA 9.7.16.10.8.4, Table 44 sparsity selector.
"""
import json
import os
import re
from dataclasses import replace

import pytest

from compiler import (CompileError, FileSpec, LinkError, OperandSpec, SparsitySpec, SpecError, TileSpec,
                      ZeroColumnsSpec, compile_tile, emit_fragment, emit_fragments, link_fragments, parse_source)
from compiler.cli import main
from compiler.ptxas import assemble


def tcgen05_tile(name, dtype="bf16", d="f32", m=128, n=256, k=16, k_total=64, swizzle="128B", **kw):
    ops = {"A": OperandSpec(dtype, "smem", "K", swizzle), "B": OperandSpec(dtype, "smem", "K", swizzle),
           "D": OperandSpec(d, "tmem")}
    return TileSpec(name, "tcgen05", m, n, k, ops, k_total=k_total, **kw)


def mma_sp_tile(name, ab="f16", cd="f32", k=32, k_total=64, **kw):
    ops = {"A": OperandSpec(ab, "global"), "B": OperandSpec(ab, "global"), "C": OperandSpec(cd, "global"),
           "D": OperandSpec(cd, "global")}
    return TileSpec(name, "mma.sp", 16, 8, k, ops, k_total=k_total, sparsity=kw.pop("sparsity", SparsitySpec("2:4")),
                    **kw)


GEMM = tcgen05_tile("gemm")                                                   # examples/gemm_bf16.tile
WS = tcgen05_tile("wsz", dtype="f16", n=64, k_total=32, swizzle="32B", ws=True,
                  zero_columns=ZeroColumnsSpec(columns=((0, 1, 2, 3),)))       # .ws with a zero-column mask
SPARSE_F16 = tcgen05_tile("sp16", dtype="f16", n=128, k=32, k_total=128, sparsity=SparsitySpec("2:4"))


# ---- tcgen05 fragments --------------------------------------------------------------------------------

def test_tcgen05_fragment_calling_convention():
    f = emit_fragment(GEMM, "sm_100a")
    assert f.name == "tilec_gemm_mma"
    assert [p.name for p in f.params] == ["a_smem", "b_smem", "d_tmem", "mbar", "accumulate"]
    assert all(p.type == "b32" for p in f.params) and f.result is None
    assert (f.requires.ptx_version, f.requires.target) == ((8, 6), "sm_100a")     # Table 60 base tcgen05.mma
    # loop K = 64 in MMAs of K = 16 (Table 39, kind::f16 dense): 4 instructions, one commit
    assert _instructions(f, "tcgen05.mma.cta_group::1.kind::f16 ") == 4
    assert _instructions(f, "tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64") == 1
    assert f.constants["mma_per_call"] == 4 and f.constants["calls_per_tile"] == 1
    assert emit_fragment(GEMM, "sm_100a").text == f.text          # same spec, same bytes


def test_tcgen05_fragment_descriptors_are_relative_to_each_operand_base():
    f = emit_fragment(GEMM, "sm_100a")
    full = compile_tile(GEMM, "sm_100a")
    mat = full.descriptors["gemm"]
    assert f.constants["idesc"] == mat["idesc"]
    tile = full.tiles["gemm"]
    for name in "AB":
        offset = tile.op("tilec.smem_layout", name).attrs["offset"]
        # The kernel keeps A and B in one buffer (B after A); the start-address field (bits 0-13) holds
        # address >> 4 (PTX 9.7.16.4.1), so the fragment's descriptor = the kernel's minus offset >> 4.
        assert f.constants[f"{name}_desc"] == [v - (offset >> 4) for v in mat[f"{name}_desc"]]
    # A's first descriptor with base 0: LBO field 16 >> 4 = 1 at bit 16, SBO 1024 >> 4 = 64 at bit 32,
    # the fixed 0b001 at bit 46, 128B swizzle code 2 at bits 61-63 (PTX ISA 9.7.16.4.1, Table 40).
    assert f.constants["A_desc"][0] == (1 << 16) | (64 << 32) | (1 << 46) | (2 << 61)
    # each K step of 16 bf16 = 32 bytes advances the start address by 32 >> 4 = 2 (inside the 128B atom)
    assert [d - f.constants["A_desc"][0] for d in f.constants["A_desc"]] == [0, 2, 4, 6]


def test_tcgen05_fragment_with_k_stages():
    # A 128x256 + B 256x256 bf16 = 192 KB exceeds layout-selection's 96 KB stage budget: K is staged in
    # halves (k_block 128: 32 KB + 64 KB), so the caller makes two calls of 8 MMAs each.
    f = emit_fragment(tcgen05_tile("big", k_total=256), "sm_100a")
    assert (f.constants["k_per_call"], f.constants["calls_per_tile"], f.constants["mma_per_call"]) == (128, 2, 8)
    assert f.layouts["B"].size_bytes == 256 * 128 * 2


def test_ws_fragment_carries_its_zero_column_mask():
    f = emit_fragment(WS, "sm_100a")
    mat = compile_tile(WS, "sm_100a").descriptors["wsz"]
    assert f.constants["zero_column_mask"] == mat["zero_column_mask"]
    (zcm,) = [ln.split()[1].rstrip(",") for ln in f.text.splitlines()
              if ln.endswith(f", {mat['zero_column_mask']:#018x};")]
    mma = [ln for ln in f.text.splitlines() if ln.startswith("\ttcgen05.mma.ws.cta_group::1.kind::f16 ")]
    # the zero-column mask is the last operand of tcgen05.mma.ws (9.7.16.10.9.3)
    assert len(mma) == 2 and all(ln.endswith(f", {zcm};") for ln in mma)


@pytest.mark.parametrize("tile, columns, selectors", [
    # kind::f16: 32 bits of metadata per row and MMA = one TMEM column; MMA s reads column s, addressed as
    # the even column of its 64-bit granule with the parity in idesc bits 0-1 (PTX ISA 9.7.16.10.8.4, Table 44 sparsity selector)
    (SPARSE_F16, [0, 0, 2, 2], [0, 1, 0, 1]),
    # kind::i8: 64 bits per row and MMA = two columns; every MMA starts a granule, selector 0
    (TileSpec("spi8", "tcgen05", 128, 64, 64, {"A": OperandSpec("s8", "smem"), "B": OperandSpec("s8", "smem"),
                                                "D": OperandSpec("s32", "tmem")},
              k_total=128, sparsity=SparsitySpec("2:4")), [0, 2], [0, 0]),
])
def test_sparse_tcgen05_fragment_addresses_metadata_per_mma(tile, columns, selectors):
    f = emit_fragment(tile, "sm_100a")
    assert [p.name for p in f.params] == ["a_smem", "b_smem", "d_tmem", "meta_tmem", "mbar", "accumulate"]
    base = f.constants["idesc"]
    assert base & 0b111 == 0b100                     # Table 42: bit 2 sparse, bits 0-1 selector 0
    assert f.constants["idesc_per_mma"] == [base | s for s in selectors]
    meta = "%r3"                                     # fourth parameter, loaded into the fourth register
    lines = [ln.strip().rstrip(";") for ln in f.text.splitlines() if ln.startswith("\t")]
    # registers holding meta_tmem + column: `add.u32 REG, %r3, COLUMN`
    column_of = {meta: 0}
    column_of.update({ln.split()[1].rstrip(","): int(ln.split()[3]) for ln in lines
                      if ln.startswith(f"add.u32 ") and ln.split()[2] == f"{meta},"})
    # the [sp-meta-tmem] operand is the second bracketed operand of tcgen05.mma.sp (9.7.16.10.9.2)
    used = [ln.split("[")[2].split("]")[0] for ln in lines if ln.startswith("tcgen05.mma.sp")]
    assert [column_of[reg] for reg in used] == columns


def test_sparse_fragment_rejects_a_selector():
    tile = tcgen05_tile("sel", dtype="f16", n=128, k=32, k_total=128, sparsity=SparsitySpec("2:4", selector=1))
    with pytest.raises(CompileError, match="selector"):   # verify or the fragment emitter refuses it
        emit_fragment(tile, "sm_100a")


def test_fragment_modules_assemble(ptxas):
    for tile in (GEMM, WS, SPARSE_F16):
        f = emit_fragment(tile, "sm_100a")
        verdict = assemble(f.module(), "sm_100a", ptxas, extra=["-c"])
        assert verdict.ok, verdict.output


# The host: one CTA of 128 threads. Warp 0 allocates all 512 TMEM columns; thread 0 inits the mbarrier
# for two arrivals (one tcgen05.commit per fragment), calls both fragments with the shared buffers,
# waits on phase 0, and warp 0 frees TMEM (PTX 9.7.16.7.1, 9.7.16.12.1, PTX ISA 9.7.16 tcgen05 instructions).
TCGEN05_HOST = """
.visible .entry host()
.reqntid 128, 1, 1
{{
	.reg .pred %p<3>;
	.reg .b32 %r<12>;
	.shared .align 1024 .b8 host_a0[{a0}];
	.shared .align 1024 .b8 host_b0[{b0}];
	.shared .align 1024 .b8 host_a1[{a1}];
	.shared .align 1024 .b8 host_b1[{b1}];
	.shared .align 8 .b64 host_mbar;
	.shared .align 4 .b32 host_slot;

	mov.u32 %r0, %tid.x;
	shr.u32 %r1, %r0, 5;
	setp.eq.u32 %p0, %r1, 0;
	setp.eq.u32 %p1, %r0, 0;
	@!%p0 bra ALLOCATED;
	tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [host_slot], 512;
	tcgen05.relinquish_alloc_permit.cta_group::1.sync.aligned;
ALLOCATED:
	@%p1 mbarrier.init.shared::cta.b64 [host_mbar], 2;
	// ... the threads write A and B in the fragments' canonical layouts here ...
	fence.proxy.async.shared::cta;
	tcgen05.fence::before_thread_sync;
	bar.sync 0;
	tcgen05.fence::after_thread_sync;
	ld.shared.b32 %r2, [host_slot];
	@!%p1 bra ISSUED;
	mov.u32 %r3, host_a0;
	mov.u32 %r4, host_b0;
	mov.u32 %r5, host_mbar;
	call.uni {f0}, (%r3, %r4, %r2, %r5, 0);
	mov.u32 %r6, host_a1;
	mov.u32 %r7, host_b1;
	add.u32 %r8, %r2, {d1_column};
	call.uni {f1}, (%r6, %r7, %r8, %r5, 0);
ISSUED:
	mbarrier.try_wait.parity.shared::cta.b64 %p2, [host_mbar], 0;
	@!%p2 bra ISSUED;
	tcgen05.fence::after_thread_sync;
	tcgen05.fence::before_thread_sync;
	bar.sync 0;
	@!%p0 bra FREED;
	tcgen05.dealloc.cta_group::1.sync.aligned.b32 %r2, 512;
FREED:
	ret;
}}
"""


def test_two_tcgen05_fragments_link_into_a_host_kernel(ptxas):
    f0, f1 = emit_fragment(GEMM, "sm_100a"), emit_fragment(WS, "sm_100a")
    host = TCGEN05_HOST.format(a0=f0.layouts["A"].size_bytes, b0=f0.layouts["B"].size_bytes,
                               a1=f1.layouts["A"].size_bytes, b1=f1.layouts["B"].size_bytes,
                               f0=f0.name, f1=f1.name, d1_column=GEMM.n)     # D1 after D0's 256 columns
    ptx = link_fragments([f0, f1], host)
    assert ptx.count("\n.version ") == 1 and "\n.target sm_100a\n" in ptx
    verdict = assemble(ptx, "sm_100a", ptxas)
    assert verdict.ok, verdict.output + ptx


# ---- mma.sp fragments ----------------------------------------------------------------------------------

def test_mma_sp_fragment_calling_convention():
    f = emit_fragment(mma_sp_tile("spf16"), "sm_80")
    # m16n8k32 f16 -> f32 (PTX ISA 9.7.14.6.3): A 4, B 4, C/D 4 registers; loop K 64 = 2 K steps, one metadata
    # word each: 4 + 2 * (4 + 4 + 1) = 22 parameters.
    assert len(f.params) == 4 + 2 * (4 + 4 + 1)
    assert [p.name for p in f.params[:5]] == ["c0", "c1", "c2", "c3", "a0_0"]
    # C holds f32 values but is declared `.param .b32`, as nvcc declares a float parameter (nvlink compares
    # prototypes type for type: tests/test_fragment_link.py); D comes back as a float4 (16 B, align 16)
    assert [(p.type, p.value, p.cpp_type) for p in f.params[:4]] == [("b32", "f32", "float")] * 4
    assert {p.type for p in f.params} == {"b32"} and "\tld.param.f32 %f0, [tilec_spf16_mma_param_c0];" in f.text
    assert (f.result.count, f.result.type, f.result.bytes, f.result.align) == (4, "f32", 16, 16)
    assert f.result.cpp_type == "float4"
    j = f.to_json()
    assert j["params"][0] == {"name": "c0", "ptx_param": "tilec_spf16_mma_param_c0", "type": "b32", "value_type": "f32",
                              "cpp_type": "float", "meaning": j["params"][0]["meaning"]}
    assert j["result"]["cpp_type"] == "float4"
    assert j["cpp_declaration"].startswith('extern "C" __device__ float4 tilec_spf16_mma(float c0, float c1, ')
    assert f.requires.ptx_version == (8, 5)            # .sp::ordered_metadata (PTX ISA 9.7.14.6.3)
    mma = [ln for ln in f.text.splitlines() if ln.strip().startswith("mma.sp")]
    assert len(mma) == 2 and mma[0].endswith(", 0;")  # selector 0 as an immediate
    # the second K step accumulates into the first one's D
    assert mma[1].split("}, {")[3].split("}")[0] == mma[1].split(" {")[1].split("}")[0]


def test_mma_sp_fragment_static_metadata_constant():
    tile = mma_sp_tile("st", sparsity=SparsitySpec("2:4", "static", pattern="first_two"))
    f = emit_fragment(tile, "sm_80")
    words = f.constants["static_metadata"]
    # "first_two" keeps elements 0,1 of every chunk: nibble 0b0100, so every word is 0x44444444
    # (compiler/isa/mma_sp/metadata.py docstring; eight nibbles per 32-bit word)
    assert {w for row in words for ks in row for w in ks} == {0x44444444}


def test_two_mma_sp_fragments_link_into_a_host_kernel(ptxas):
    f0 = emit_fragment(mma_sp_tile("spf16"), "sm_80")
    f1 = emit_fragment(mma_sp_tile("sps8", ab="s8", cd="s32", k=32), "sm_80")   # m16n8k32 s8 -> s32
    n0, n1 = len(f0.params), len(f1.params)
    # Hand-written host: every argument register is set from %tid.x so nothing folds away; the first call
    # is written out, the second uses Fragment.call.
    args0 = ", ".join(f"%a{i}" for i in range(n0))
    host = "\n".join([
        ".visible .entry host_sp(.param .u64 host_sp_param_out)",
        "{",
        f"\t.reg .b32 %a<{n0}>;", f"\t.reg .b32 %b<{n1}>;", "\t.reg .f32 %d<4>;", "\t.reg .b32 %s<4>;",
        "\t.reg .b32 %t;", "\t.reg .b64 %out;",
        "\tmov.u32 %t, %tid.x;",
        *(f"\tadd.u32 %a{i}, %t, {i};" for i in range(n0)),
        *(f"\tadd.u32 %b{i}, %t, {i};" for i in range(n1)),
        "\t{",
        "\t.param .align 16 .b8 ret0[16];",
        f"\tcall.uni (ret0), {f0.name}, ({args0});",
        "\tld.param.v4.f32 {%d0, %d1, %d2, %d3}, [ret0];",
        "\t}",
        f1.call([f"%b{i}" for i in range(n1)], ["%s0", "%s1", "%s2", "%s3"]),
        "\tld.param.u64 %out, [host_sp_param_out];",
        "\tcvta.to.global.u64 %out, %out;",
        "\tst.global.v4.f32 [%out], {%d0, %d1, %d2, %d3};",
        "\tst.global.v4.b32 [%out+16], {%s0, %s1, %s2, %s3};",
        "\tret;",
        "}",
    ])
    ptx = link_fragments([f0, f1], host)
    verdict = assemble(ptx, "sm_80", ptxas)
    assert verdict.ok, verdict.output + ptx


def test_block_scaled_mma_sp_fragment_takes_scale_registers(ptxas):
    """Block-scaled fragments take this lane's scale-a-data / scale-b-data per K step as .b32 parameters
    (32-bit scalars, as nvcc declares them) and read them with {byte-id 0, thread-id 0} (PTX 9.7.14.3)."""
    sf = OperandSpec("ue8m0", "reg")
    tile = mma_sp_tile("mx", ab="e4m3", k=64, k_total=128, kind="mxf8f6f4", block_scale="scale_vec::1X")
    tile.operands.update(SFA=sf, SFB=sf)
    f = emit_fragment(tile, "sm_120a")
    names = [p.name for p in f.params]
    assert names[4 + 11:] == [*(f"a1_{j}" for j in range(4)), *(f"b1_{j}" for j in range(4)), "e1", "sa1", "sb1"]
    assert [p.type for p in f.params if p.name in ("sa0", "sb0", "sa1", "sb1")] == ["b32"] * 4
    # C 4 + 2 K steps x (A 4 + B 4 + e + sa + sb)
    assert len(f.params) == 4 + 2 * (4 + 4 + 3)
    assert ".block_scale.scale_vec::1X.f32.e4m3.e4m3.f32.ue8m0" in f.text and ", {0, 0};" in f.text
    verdict = assemble(link_fragments([f]), "sm_120a", ptxas, extra=["-c"])
    assert verdict.ok, verdict.output + f.text


# ---- linking, naming, CLI -------------------------------------------------------------------------------

def test_link_fragments_checks_targets_names_and_versions():
    # LinkError, not SpecError (issue 15 item 12): no tile field is wrong when fragments do not fit together
    a = emit_fragment(GEMM, "sm_100a")
    with pytest.raises(LinkError, match="at least one fragment"):
        link_fragments([])
    with pytest.raises(LinkError, match="different targets"):
        link_fragments([a, emit_fragment(GEMM, "sm_100f")])
    with pytest.raises(LinkError, match="two fragments are named 'tilec_gemm_mma'"):
        link_fragments([a, emit_fragment(GEMM, "sm_100a")])
    b = emit_fragment(GEMM, "sm_100a", prefix="lib2_")
    assert b.name == "lib2_gemm_mma"
    assert "\n.version 8.6\n" in link_fragments([a, b])
    assert "\n.version 8.8\n" in link_fragments([a, b], ptx_version=(8, 8))
    with pytest.raises(LinkError, match="too old") as too_old:
        link_fragments([a], ptx_version=(8, 5))
    assert not isinstance(too_old.value, SpecError) and too_old.value.hint
    # a newer fragment raises the module's version: mma.sp at PTX 8.5 next to one pinned to 8.7
    sp = emit_fragment(mma_sp_tile("x"), "sm_100a")
    pinned = emit_fragment(GEMM, "sm_100a", ptx_version="8.7")
    assert "\n.version 8.7\n" in link_fragments([sp, pinned])


def test_bad_prefix_is_a_diagnostic():
    with pytest.raises(CompileError, match="not a PTX identifier"):
        emit_fragment(GEMM, "sm_100a", prefix="my-lib.")


def test_fragment_json_and_call_helper():
    f = emit_fragment(GEMM, "sm_100a")
    j = json.loads(json.dumps(f.to_json()))
    assert j["requires"] == {"ptx_version": "8.6", "target": "sm_100a"}
    assert j["constants"]["idesc"] == "0x8400490"
    assert j["layouts"]["A"]["sbo"] == 1024 and j["layouts"]["B"]["size_bytes"] == 256 * 64 * 2
    assert [p["name"] for p in j["params"]][-1] == "accumulate"
    assert f.call(["%r1", "%r2", "%r3", "%r4", "1"]) == "call.uni tilec_gemm_mma, (%r1, %r2, %r3, %r4, 1);\n"
    with pytest.raises(SpecError, match="takes 5 arguments"):
        f.call(["%r1"])
    assert f.declaration(extern=True).startswith(".extern .func tilec_gemm_mma(")


def test_emit_fragments_of_a_file_are_located(tmp_path):
    text = ("target sm_100a;\ntile ok { engine tcgen05; shape M=128 N=64 K=16; A: f16 smem; B: f16 smem;"
            " D: f32 tmem; }\ntile bad { engine tcgen05; shape M=96 N=64 K=16; A: f16 smem; B: f16 smem;"
            " D: f32 tmem; }\n")
    with pytest.raises(CompileError) as e:
        emit_fragments(parse_source(text, "two.tile"), source=text)
    assert str(e.value.diagnostics[0].loc) == "two.tile:3:36"     # bad's M=96


def test_cli_emit_func(tmp_path, capsys, ptxas):
    src = tmp_path / "two.tile"
    src.write_text("target sm_100a;\n\n" + "\n".join(
        t.replace("target sm_100a;\n\n", "") for t in (_print(GEMM), _print(WS))))
    out = tmp_path / "two.ptx"
    assert main(["compile", str(src), "--emit", "func", "-o", str(out)]) == 0
    ptx = out.read_text()
    assert ptx.count(".visible .func ") == 2 and ".entry" not in ptx
    verdict = assemble(ptx, "sm_100a", ptxas, extra=["-c"])
    assert verdict.ok, verdict.output
    assert main(["compile", str(src), "--emit", "func", "--arch", "sm_80"]) == 1
    assert "tcgen05.mma is not available on sm_80" in capsys.readouterr().err


def _instructions(fragment, opcode):
    return sum(1 for ln in fragment.text.splitlines() if ln.startswith("\t" + opcode))


def _print(tile):
    from compiler import print_file
    return print_file(FileSpec("sm_100a", [tile]))


def test_every_mma_sp_form_has_a_fragment_that_assembles(ptxas):
    """Every non-block-scaled row of the mma.sp form table (compiler/isa/mma_sp/forms.py, PTX ISA 9.7.14.6.3) as a
    two-K-step fragment with its largest legal selector (9.7.14.6.1), linked per target into one module."""
    from compiler.isa.mma_sp.forms import all_forms

    by_target: dict[str, list] = {}
    for i, form in enumerate(f for f in all_forms() if f.block_scale is None):
        target = form.row.target_rule.targets()[0]
        tile = mma_sp_tile("t", ab=form.a_type, cd=form.c_type, k=form.k, k_total=2 * form.k, kind=form.kind,
                           saturate=form.satfinite,
                           sparsity=SparsitySpec(form.granularity.name, selector=max(form.selectors)))
        tile.operands["B"] = OperandSpec(form.b_type, "global")
        fragment = emit_fragment(tile, target, prefix=f"form{i}_")
        assert fragment.result.count == form.d_regs and len(fragment.params) == form.c_regs + 2 * (
            form.a_regs + form.b_regs + 1)
        by_target.setdefault(target, []).append(fragment)
    assert set(by_target) == {"sm_80", "sm_89", "sm_120a"}
    for target, fragments in by_target.items():
        verdict = assemble(link_fragments(fragments), target, ptxas, extra=["-c"])
        assert verdict.ok, f"{target}: {verdict.output[:3000]}"


TCGEN05_SWEEP = [
    # (dtype, D, M, N, K, loop K, swizzle, majors (A, B), extra spec fields): kinds of Table 39 with their
    # instruction K (dense / sparse), both majors, every swizzle, M = 64, .ws, options of 9.7.16.10.9.1
    ("f16", "f16", 128, 128, 16, 32, "64B", ("K", "K"), {}),
    ("bf16", "f32", 64, 64, 16, 64, "128B", ("MN", "MN"), {"negate_a": True}),
    ("tf32", "f32", 128, 64, 8, 32, "128B", ("K", "K"), {"scale_input_d": 3}),
    ("e4m3", "f32", 128, 128, 32, 64, "none", ("K", "K"), {"disable_output_lane": (0, 1, 2, 3)}),
    ("e2m1", "f16", 128, 64, 32, 64, "64B", ("K", "K"), {}),
    ("s8", "s32", 128, 64, 32, 64, "32B", ("K", "MN"), {"saturate": True}),
    ("f16", "f32", 128, 64, 16, 32, "32B", ("K", "K"), {"ws": True, "zero_columns": ZeroColumnsSpec(value=0)}),
    ("f16", "f32", 128, 64, 16, 32, "32B", ("K", "K"), {"collector": "a::fill"}),
    ("tf32", "f32", 128, 128, 16, 64, "128B", ("K", "K"), {"sparsity": SparsitySpec("1:2")}),
    ("f16", "f32", 128, 64, 32, 128, "auto", ("K", "K"), {"sparsity": SparsitySpec("2:4")}),
]


def test_tcgen05_fragment_sweep_assembles_in_one_module(ptxas):
    fragments = []
    for i, (dtype, d, m, n, k, k_total, swizzle, majors, extra) in enumerate(TCGEN05_SWEEP):
        tile = tcgen05_tile("t", dtype=dtype, d=d, m=m, n=n, k=k, k_total=k_total, swizzle=swizzle, **extra)
        for name, major in zip("AB", majors):
            tile.operands[name] = OperandSpec(dtype, "smem", major, swizzle)
        fragment = emit_fragment(tile, "sm_100a", prefix=f"sweep{i}_")
        assert _instructions(fragment, "tcgen05.mma") == k_total // k
        fragments.append(fragment)
    verdict = assemble(link_fragments(fragments), "sm_100a", ptxas, extra=["-c"])
    assert verdict.ok, verdict.output[:3000]


@pytest.mark.parametrize("extra, field", [
    ({"cta_group": 2, "m": 256}, "cta_group"),
    ({"collector": "a::use"}, "collector"),
])
def test_tcgen05_fragment_limits_are_diagnostics(extra, field):
    tile = tcgen05_tile("lim", dtype="f16", n=128, swizzle="64B", k_total=32)
    with pytest.raises(CompileError) as e:
        emit_fragment(replace(tile, **extra), "sm_100a")
    assert field in e.value.diagnostics[0].message      # from layout-selection or the fragment emitter


def test_emit_json_adds_the_fragment_beside_the_kernel(capsys):
    """`--emit json` keeps each tile's kernel object and adds `fragment` (Fragment.to_json(), the same as the
    Python API gives); a tile without a fragment gets null and the reason."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    path = root / "examples" / "sparse_f16.tile"
    assert main(["compile", str(path), "--emit", "json"]) == 0
    tile = json.loads(capsys.readouterr().out)["tiles"]["sparse_f16"]
    assert tile["kernel"]["entry"] == "sparse_f16" and tile["kernel"]["params"]
    spec = parse_source(path.read_text())
    assert tile["fragment"] == json.loads(json.dumps(emit_fragment(spec.tiles[0], spec.target).to_json()))
    assert [p["type"] for p in tile["fragment"]["params"]] == ["b32"] * 22
    assert tile["fragment"]["operands"]["A"] == {"dtype": "f16", "declared_space": "global",
                                                 "passed_as": "registers a{s}_0.. per K step (compressed; lanes.a)"}
    assert len(tile["fragment"]["lanes"]["a"]) == 32
    assert main(["compile", str(root / "examples" / "tcgen05_2cta.tile"), "--emit", "json"]) == 0
    (pair,) = json.loads(capsys.readouterr().out)["tiles"].values()
    assert pair["kernel"] is not None and pair["fragment"] is None and "cta_group::1" in pair["fragment_error"]


def test_link_fragments_merges_module_headers_or_says_why_not():
    """Code pieces given with their own module directives (PTX ISA 11.1: .version, .target, .address_size):
    the newest version wins, the target must hold every piece (an arch-specific sm_100a fragment cannot go
    into an sm_90a module, nor the other way), 32-bit addressing is refused, and a piece that defines a
    fragment's name is refused."""
    a = emit_fragment(GEMM, "sm_100a")                       # PTX 8.6, sm_100a
    newer = ".version 8.8\n.target sm_100a\n.address_size 64\n.visible .entry host() { ret; }\n"
    ptx = link_fragments([a], ("host.ptx", newer))
    assert re.findall(r"^\.(version|target|address_size) (\S+)$", ptx, flags=re.M) == [
        ("version", "8.8"), ("target", "sm_100a"), ("address_size", "64")]
    with pytest.raises(LinkError, match="host.ptx is PTX for sm_90a, the fragments for sm_100a: no target holds both"):
        link_fragments([a], ("host.ptx", newer.replace("sm_100a", "sm_90a")))
    with pytest.raises(LinkError, match="address_size 32"):
        link_fragments([a], newer.replace("64", "32"))
    with pytest.raises(LinkError, match="code\\[0\\] defines 'tilec_gemm_mma'"):
        link_fragments([a], ".visible .func tilec_gemm_mma() { ret; }\n")
    with pytest.raises(LinkError, match="host.ptx needs PTX ISA 8.8; 8.6 is too old"):
        link_fragments([a], ("host.ptx", newer), ptx_version=(8, 6))
    # a family target's code fits a later member's arch-specific module: sm_100f code beside sm_100a fragments
    assert "\n.target sm_100a\n" in link_fragments([a], newer.replace("sm_100a", "sm_100f"))


def test_a_scheduled_tile_fragment_has_no_fixed_call_count():
    # a tile with a `schedule` is a whole GEMM of the runtime's K: its fragment is one K block of the
    # schedule's cta K (64 here: 4 MMAs of K 16), called ceil(K / 64) times; its `shape` K (16) is the
    # instruction's, so "0 call(s) cover the tile's K 16" (what it said before) was wrong
    path = os.path.join(os.path.dirname(__file__), "..", "examples", "tcgen05_gemm_f16.tile")
    with open(path) as f:
        spec = parse_source(f.read(), path)
    (frag,) = emit_fragments(spec)
    assert "one call = 4 MMA(s) = K 64; one call per K block of the schedule (cta K 64)" in frag.text
    assert "cover the tile's K" not in frag.text and "calls_per_tile" not in frag.constants
