"""Every tcgen05.mma form tilec claims, written as a DSL tile, compiled into a complete kernel and
assembled by ptxas for every target the form claims.

The forms are `tcgen05_forms.all_forms()` (9.7.16.10.9.1-4: kinds, cta_group, .sp, .ws, A in TMEM,
.block_scale vector sizes, collector usage, .ashift, disable-output-lane, scale-input-d, zero-column
mask, and the K = 96 shape of mxf4/mxf4nvf4: `shape K=96`, sm_103a only, with a loop K of 768 = one
stage of 128-byte swizzle rows, tests/test_tcgen05_k96.py). `.block_scale` without a vector size is the
DSL's bare `block_scale;` (a tile with no block_scale statement at all is rejected: mx_no_block_scale.tile).
The targets of a form
are `form.requirements().targets` (Table 60/61 rows); every other Blackwell target must be rejected with
a diagnostic on the `target` statement.

Each tile varies M over the legal values of its Table 39 row (so every data-path layout of 9.7.16.10.5
appears: A, B, C, D, E, F, G) and the metadata source over static / runtime. The fast tests compile every
(form x target) and assemble a sample; `-m slow` assembles all of them (about 6500 kernels).
"""
from __future__ import annotations

import os
import re
import subprocess
import tempfile
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from compiler.diagnostics import CompileError
from compiler.driver import compile_source
from compiler.isa.tmem import data_path
from compiler.ptxas import find_ptxas
from compiler.isa.tcgen05_forms import TCGEN05_TARGETS, Tcgen05Mma, all_forms, infer_ptx_version
from compiler.passes.layout_selection import k_quantum
from compiler.isa.tcgen05_kinds import mma_k, shape_rule
from compiler.isa.targets import TARGETS, format_version

ALL_FORMS = all_forms()
EXPRESSIBLE = ALL_FORMS                 # every form has a DSL spelling (K = 96 included)
BLACKWELL = sorted(TCGEN05_TARGETS, key=list(TARGETS).index)

# Operand types per kind (Table 39 / Tables 42-44): mixed A/B types where the kind allows them.
TYPES = {"f16": ("bf16", "bf16", "f32"), "tf32": ("tf32", "tf32", "f32"), "f8f6f4": ("e4m3", "e2m1", "f32"),
         "i8": ("s8", "u8", "s32"), "mxf8f6f4": ("e5m2", "e3m2", "f32"), "mxf4": ("e2m1", "e2m1", "f32"),
         "mxf4nvf4": ("e2m1", "e2m1", "f32")}
RATIO = {"f16": "2:4", "tf32": "1:2", "f8f6f4": "2:4", "i8": "2:4", "mxf8f6f4": "2:4", "mxf4": "4:8",
         "mxf4nvf4": "4:8"}                                          # 9.7.16.10.8 granularities
VEC = {"block16": "16", "block32": "32", "scale_vec::1X": "1X", "scale_vec::2X": "2X", "scale_vec::4X": "4X"}
# Table 55: UE4M3 scales only with 16-element vectors; every other vector size here takes UE8M0.
SCALE_TYPE = {"block16": "ue4m3", "scale_vec::4X": "ue4m3"}


def legal_ms(form: Tcgen05Mma) -> tuple[int, ...]:
    ms = shape_rule(form.kind, form.cta_group, form.sparse, form.ws, form.k96).ms
    return tuple(m for m in ms if not form.ashift or m in (128, 256))     # 9.7.16.10.9.1 .ashift M rule


def tile_text(form: Tcgen05Mma, target: str, name: str = "t", variant: int = 0) -> str:
    """The DSL tile whose kernel uses `form`; `variant` rotates M and the metadata source."""
    a, b, d = TYPES[form.kind]
    ms = legal_ms(form)
    m = ms[variant % len(ms)]
    k = mma_k(form.kind, form.sparse, form.k96)
    # K = 96 stages hold whole 128-byte swizzle rows: 8 MMAs of 48 bytes (layout_selection.k_quantum)
    loop = k_quantum(k, 4, True) if form.k96 else 2 * k
    engine = f"engine tcgen05 kind={form.kind} cta_group={form.cta_group}"
    engine += " ws" * form.ws + " ashift" * form.ashift
    if form.collector:
        engine += f" collector={form.collector}"
    lines = [f"target {target};", f"tile {name} {{", f"  {engine};", f"  shape M={m} N=64 K={k};",
             f"  loop K={loop};", f"  A: {a} {'tmem' if form.a_in_tmem else 'smem'};", f"  B: {b} smem;",
             f"  D: {d} tmem;"]
    if form.sparse:
        lines.append(f"  sparsity {RATIO[form.kind]} " + ("pattern=rotate;" if variant % 2 else "metadata=runtime;"))
    if form.block_scale:
        st = SCALE_TYPE.get(form.block_scale, "ue8m0")
        vec = "" if form.block_scale == "implicit" else f" vec={VEC[form.block_scale]}"
        lines += [f"  SFA: {st} tmem;", f"  SFB: {st} tmem;", f"  block_scale{vec};"]
    if form.disable_output_lane:
        lines.append("  disable_output_lane [" + ", ".join(["0x80000001"] * (4 * form.cta_group)) + "];")
    if form.scale_input_d:
        lines.append("  scale_input_d 3;")
    if form.zero_column_mask:
        lines.append("  zero_columns cols=[0..3];")
    return "\n".join(lines + ["}"]) + "\n"


def compile_form(form: Tcgen05Mma, target: str, name: str = "t", variant: int = 0):
    return compile_source(tile_text(form, target, name, variant), f"{name}.tile")


def _variant(i: int) -> int:
    return i


# --------------------------------------------------------------------------------------------------
# The set of forms

def test_every_form_is_expressible_k96_included():
    """No form is left out: the K = 96 forms (Table 39's K = 96 row x block16/block32/omitted size x A
    space x collector usage) are among them, written `shape K=96` (lit tests in tcgen05_forms/k96*.tile)."""
    k96 = [f for f in EXPRESSIBLE if f.k96]
    assert EXPRESSIBLE == ALL_FORMS and len(EXPRESSIBLE) >= 1400
    # mxf4: block32 and the omitted size (= block32); mxf4nvf4: block16, block32 (Tcgen05Mma._check_k96),
    # each with A in smem / TMEM and 5 collector choices (None + a::fill/use/lastuse/discard)
    assert len(k96) == 4 * 2 * 5
    assert {(f.kind, f.block_scale) for f in k96} == {("mxf4", "block32"), ("mxf4", "implicit"),
                                                      ("mxf4nvf4", "block16"), ("mxf4nvf4", "block32")}
    lit = Path(__file__).parent / "lit" / "tcgen05_forms"
    assert (lit / "k96.tile").exists() and (lit / "mx_no_block_scale.tile").exists()


def test_tiles_cover_every_data_path_layout():
    """9.7.16.10.5: layouts A-G all occur among the compiled tiles."""
    seen = set()
    for i, f in enumerate(EXPRESSIBLE):
        m = legal_ms(f)[i % len(legal_ms(f))]
        seen.add(data_path(m, f.cta_group, f.sparse, f.ws).layout)
    assert seen == set("ABCDEFG")


# --------------------------------------------------------------------------------------------------
# Every (form x claimed target) compiles into a kernel that uses the form

_MMA_LINE = re.compile(r"^\s*(tcgen05\.mma\S*) ", re.M)


def _check_kernel(result, form: Tcgen05Mma, target: str) -> list[str]:
    problems = []
    ptx = result.ptx
    want_version = format_version(infer_ptx_version([form], target))
    if f".target {target}\n" not in ptx or f".version {want_version}\n" not in ptx:
        problems.append(f"header is not .version {want_version} / .target {target}")
    opcodes = set(_MMA_LINE.findall(ptx))
    if form.opcode() not in opcodes:
        problems.append(f"{form.opcode()} not among the kernel's MMAs {sorted(opcodes)}")
    # Every tcgen05 instruction of a kernel uses the form's cta_group (PTX 9.0 notes, PTX ISA 9.7.16.10.9 operands).
    groups = set(re.findall(r"\.cta_group::(\d)", ptx))
    if groups != {str(form.cta_group)}:
        problems.append(f"cta_group qualifiers {groups}")
    return problems


def test_every_form_compiles_into_a_kernel():
    """Every expressible form becomes a complete kernel (on one of its targets, rotating)."""
    problems = []
    for i, form in enumerate(EXPRESSIBLE):
        targets = sorted(form.requirements().targets, key=list(TARGETS).index)
        target = targets[i % len(targets)]
        try:
            result = compile_form(form, target, variant=_variant(i))
        except CompileError as e:
            problems.append(f"{form.opcode()} on {target}: {str(e).splitlines()[0]}")
            continue
        problems += [f"{form.opcode()} on {target}: {p}" for p in _check_kernel(result, form, target)]
    assert not problems, f"{len(problems)} problems:\n" + "\n".join(problems[:20])


def test_every_claimed_target_verifies_at_the_inferred_version():
    """verify accepts every (form x claimed target) at infer_ptx_version (the full kernels of all pairs
    are built and assembled by the slow test)."""
    problems, count = [], 0
    for i, form in enumerate(EXPRESSIBLE):
        for target in sorted(form.requirements().targets):
            try:
                result = compile_source(tile_text(form, target, "t", _variant(i)), passes=["verify"])
            except CompileError as e:
                problems.append(f"{form.opcode()} on {target}: {str(e).splitlines()[0]}")
                continue
            count += 1
            want = format_version(infer_ptx_version([form], target))
            if result.module.attrs["ptx_version"] != want:
                problems.append(f"{form.opcode()} on {target}: .version {result.module.attrs['ptx_version']}")
    assert not problems, f"{len(problems)} problems:\n" + "\n".join(problems[:20])
    assert count >= 6000


def test_unclaimed_targets_are_rejected_at_the_target():
    """Table 60/61: a form on a Blackwell target outside its requirements fails, blaming `target`."""
    problems, count = [], 0
    for i, form in enumerate(EXPRESSIBLE):
        for target in BLACKWELL:
            if target in form.requirements().targets:
                continue
            count += 1
            try:
                compile_form(form, target, variant=_variant(i))
            except CompileError as e:
                diag = e.diagnostics[0]
                if "not available on" not in diag.message or diag.loc is None or diag.loc.line != 1:
                    problems.append(f"{form.opcode()} on {target}: {diag.message} at {diag.loc}")
            else:
                problems.append(f"{form.opcode()} on {target}: compiled")
    assert not problems, "\n".join(problems[:20])
    assert count > 0


# --------------------------------------------------------------------------------------------------
# ptxas

@pytest.fixture(scope="module")
def ptxas() -> str:
    path = find_ptxas()
    if path is None:
        if os.environ.get("CI"):
            pytest.fail("ptxas not found and CI is set")
        pytest.skip("ptxas not found")
    return path


def _assemble_groups(ptxas: str, cases) -> list[str]:
    """cases: (form, target, variant). One module per (target, version) with one .entry per case."""
    groups = defaultdict(list)
    for n, (form, target, variant) in enumerate(cases):
        result = compile_form(form, target, f"k{n}", variant)
        body = result.ptx.partition(".address_size 64\n")[2]
        groups[(target, result.module.attrs["ptx_version"])].append((form, body))

    def run(item):
        (target, version), entries = item
        text = f".version {version}\n.target {target}\n.address_size 64\n" + "".join(b for _, b in entries)
        with tempfile.TemporaryDirectory() as tmp:
            src = Path(tmp) / "k.ptx"
            src.write_text(text)
            proc = subprocess.run([ptxas, "-O0", f"-arch={target}", "-o", os.devnull, str(src)],
                                  capture_output=True, text=True, timeout=1800)
        if proc.returncode:
            return [f"{target} {version} ({len(entries)} kernels): {proc.stderr[:1500]}"]
        return []

    with ThreadPoolExecutor(max_workers=2) as pool:
        return [p for ps in pool.map(run, groups.items()) for p in ps]


def _sample() -> list:
    """A fast sample: for each (kind, cta_group, ws, sparse, A space, vector size) the form with the most
    options and the plainest one, plus every collector op, each on a rotating claimed target."""
    by_sig = defaultdict(list)
    for i, f in enumerate(EXPRESSIBLE):
        by_sig[(f.kind, f.cta_group, f.ws, f.sparse, f.a_in_tmem, f.block_scale, f.k96)].append((i, f))
    picked = {}
    for group in by_sig.values():
        def options(item):
            f = item[1]
            return (f.ashift, f.disable_output_lane, f.scale_input_d, f.zero_column_mask, f.collector is not None)
        for item in (min(group, key=lambda it: sum(options(it))), max(group, key=lambda it: sum(options(it)))):
            picked[item[0]] = item[1]
        for op in ("use", "lastuse"):
            with_op = [it for it in group if it[1].collector and it[1].collector.endswith(op)]
            if with_op:
                picked[with_op[0][0]] = with_op[0][1]
    cases = []
    for n, (i, f) in enumerate(sorted(picked.items())):
        targets = sorted(f.requirements().targets, key=list(TARGETS).index)
        cases.append((f, targets[n % len(targets)], _variant(i)))
    return cases


def test_sample_of_forms_assembles(ptxas):
    cases = _sample()
    assert len(cases) >= 150
    assert {t for _, t, _ in cases} == set(BLACKWELL)
    problems = _assemble_groups(ptxas, cases)
    assert not problems, "\n".join(problems)


@pytest.mark.slow
def test_every_form_assembles_on_every_claimed_target(ptxas):
    cases = [(f, t, _variant(i)) for i, f in enumerate(EXPRESSIBLE) for t in sorted(f.requirements().targets)]
    for f, t, v in cases:
        problems = _check_kernel(compile_form(f, t, "t", v), f, t)
        assert not problems, (f.opcode(), t, problems)
    problems = _assemble_groups(ptxas, cases)
    assert not problems, "\n".join(problems)


# --------------------------------------------------------------------------------------------------
# The smem-dump variant (sm_90a, tcgen05 instructions left out)

def test_smem_dump_variant_assembles_for_sm90a(ptxas):
    """One tile per (kind, cta_group, ws, sparse, A space): `.target sm_90a`, `.version 8.0` (the first
    PTX with sm_90a), no tcgen05 instruction, the shared buffer written to S after each stage."""
    seen, texts = set(), []
    for i, f in enumerate(EXPRESSIBLE):
        sig = (f.kind, f.cta_group, f.ws, f.sparse, f.a_in_tmem)
        if sig in seen:
            continue
        seen.add(sig)
        target = sorted(f.requirements().targets)[0]
        result = compile_source(tile_text(f, target, f"d{i}", i), options={"variant": "smem-dump"})
        ptx = result.ptx
        assert ".target sm_90a\n" in ptx and ".version 8.0\n" in ptx
        assert "tcgen05" not in ptx.replace(f"d{i}", "")
        abi = result.to_json()["tiles"][f"d{i}"]["kernel"]
        assert [p["name"] for p in abi["params"]][-3:] == ["S", "m_total", "n_total"]
        dump = abi["smem_dump"]
        assert dump["n_stages"] * abi["k_block"] == abi["k"]
        assert set(dump["regions"]) == ({"B"} if f.a_in_tmem else {"A", "B"})
        texts.append(ptx.partition(".address_size 64\n")[2])
    text = ".version 8.0\n.target sm_90a\n.address_size 64\n" + "".join(texts)
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "d.ptx"
        src.write_text(text)
        proc = subprocess.run([ptxas, "-O0", "-arch=sm_90a", "-o", os.devnull, str(src)],
                              capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[:2000]
    assert len(texts) >= 40


# --------------------------------------------------------------------------------------------------
# The kernels compute D: run on the CPU emulator (compiler/emulator/tcgen05.py) against a layout-free reference

def _emulate(text: str, m_tiles: int = 1, n_tiles: int = 1, seed: int = 0):
    import numpy as np

    from compiler.emulator.tcgen05 import host_problem, reference_d, run_problem

    result = compile_source(text, "e.tile")
    problem = host_problem(result, m_tiles=m_tiles, n_tiles=n_tiles, seed=seed)
    got = run_problem(result.ptx, problem)
    want = reference_d(problem)
    bad = np.argwhere(got != want)
    return result, bad, got, want


def _tile(engine: str, shape: str, a: str, b: str, d: str, *extra: str, loop: int, target: str = "sm_100a") -> str:
    body = "\n".join(f"  {x}" for x in (f"engine tcgen05 {engine};", shape, f"loop K={loop};", f"A: {a};",
                                         f"B: {b};", f"D: {d};", *extra))
    return f"target {target};\ntile e {{\n{body}\n}}\n"


# One tile per feature; the comment names the layout or rule the run exercises.
EMULATED = {
    # layout D (9.7.16.10.5), 128B swizzle K-major, two K stages of MMAs
    "f16_d": _tile("kind=f16", "shape M=128 N=32 K=16;", "bf16 smem swizzle=128B", "bf16 smem", "f32 tmem", loop=64),
    # layout F (M=64 half data path), MN-major B (Table 49), f16 D in the low half of a column (9.7.16.10.4.1)
    "f16_f_mn": _tile("kind=f16", "shape M=64 N=64 K=16;", "f16 smem", "f16 smem major=MN", "f16 tmem", loop=32),
    # tf32 MN-major A needs 128B_base32B (9.7.16.10.1)
    "tf32_base32b": _tile("kind=tf32", "shape M=128 N=32 K=8;", "tf32 smem major=MN", "tf32 smem", "f32 tmem",
                          loop=32),
    # padded fp6 / fp4 in shared memory (.b6x16_p32 / .b4x16_p64), packed in global memory
    "f8f6f4_padded": _tile("kind=f8f6f4", "shape M=128 N=32 K=32;", "e3m2 smem", "e2m1 smem", "f32 tmem", loop=64),
    # i8 with saturate off, negate not allowed; s8 x u8
    "i8": _tile("kind=i8", "shape M=128 N=48 K=32;", "s8 smem", "u8 smem", "s32 tmem", loop=64),
    # sparse f16: rows m, m+8 share a metadata cell, selector = column parity (PTX ISA 9.7.16.10.8.4, Table 44 sparsity selector)
    "sp_f16_runtime": _tile("kind=f16", "shape M=128 N=32 K=32;", "f16 smem", "f16 smem", "f32 tmem",
                            "sparsity 2:4 metadata=runtime;", loop=128),
    # sparse tf32 1:2 on the half data path (M=64)
    "sp_tf32_m64": _tile("kind=tf32", "shape M=64 N=32 K=16;", "tf32 smem", "tf32 smem", "f32 tmem",
                         "sparsity 1:2 pattern=alternate;", loop=32),
    # sparse i8 static pattern: two metadata columns per MMA
    "sp_i8_rotate": _tile("kind=i8", "shape M=128 N=32 K=64;", "s8 smem", "s8 smem", "s32 tmem",
                          "sparsity 2:4 pattern=rotate;", loop=128),
    # A in TMEM (8 columns per MMA) with disable-output-lane and scale-input-d
    "a_tmem_dol_sid": _tile("kind=f16", "shape M=128 N=32 K=16;", "bf16 tmem", "bf16 smem", "f32 tmem",
                            "disable_output_lane [0x1, 0x0, 0x80000000, 0x0];", "scale_input_d 1;", loop=48),
    # A in TMEM, fp4 under f8f6f4: one value per byte (9.7.16.10.4.3)
    "a_tmem_fp4": _tile("kind=f8f6f4", "shape M=128 N=32 K=32;", "e2m1 tmem", "e4m3 smem", "f32 tmem", loop=64),
    # .ws M=64 (layout E, 2x2) and M=32 (layout G, 1x4) with a zero-column mask (9.7.16.4.3)
    "ws_e": _tile("kind=f16 ws collector=b1::use", "shape M=64 N=64 K=16;", "f16 smem", "f16 smem", "f32 tmem",
                  "zero_columns cols=[0..3, 40..43];", loop=32),
    "ws_g_sparse": _tile("kind=i8 ws", "shape M=32 N=64 K=64;", "s8 tmem", "s8 smem", "s32 tmem",
                         "sparsity 2:4 metadata=runtime;", loop=128),
    # block scaling: SF IDs step through the bytes of a column (9.7.16.10.7)
    "mxf8f6f4_1x": _tile("kind=mxf8f6f4", "shape M=128 N=32 K=32;", "e4m3 smem", "e2m3 smem", "f32 tmem",
                         "block_scale vec=1X;", loop=128),
    "mxf4nvf4_block16": _tile("kind=mxf4nvf4", "shape M=128 N=64 K=64;", "e2m1 smem", "e2m1 smem", "f32 tmem",
                              "SFA: ue4m3 tmem;", "SFB: ue4m3 tmem;", "block_scale vec=16;", loop=128,
                              target="sm_100f"),
    "sp_mxf4": _tile("kind=mxf4", "shape M=128 N=32 K=128;", "e2m1 smem", "e2m1 smem", "f32 tmem",
                     "block_scale vec=2X;", "sparsity 4:8 metadata=runtime;", loop=256),
    # cta_group::2: layout A (M=256) and layout B (M=128 dense, 2x2), layout C (M=128 sparse, half)
    "cta2_a": _tile("kind=f16 cta_group=2", "shape M=256 N=32 K=16;", "f16 smem", "f16 smem", "f32 tmem", loop=32),
    "cta2_b_scaled": _tile("kind=mxf8f6f4 cta_group=2", "shape M=128 N=64 K=32;", "e5m2 smem", "e5m2 smem",
                           "f32 tmem", "block_scale vec=32;", loop=64, target="sm_100f"),
    "cta2_c_sparse": _tile("kind=f16 cta_group=2", "shape M=128 N=32 K=32;", "bf16 smem", "bf16 smem", "f32 tmem",
                           "sparsity 2:4 metadata=runtime;", loop=64),
    # collector reuse: a ::fill MMA into scratch TMEM, then ::use (9.7.16.10.9.1)
    "collector_use": _tile("kind=tf32 collector=a::use", "shape M=128 N=16 K=8;", "tf32 smem", "tf32 smem",
                           "f32 tmem", loop=32),
}


@pytest.mark.parametrize("name", sorted(EMULATED))
def test_kernel_computes_d_on_the_emulator(name):
    """The whole kernel (copies, descriptors, TMEM staging, MMA issue, epilogue) on a 2 x 1 or 1 x 2 grid
    gives exactly D = (A*sA)(B*sB)^T of the host operands (small exact values: no rounding differences)."""
    index = sorted(EMULATED).index(name)
    result, bad, got, want = _emulate(EMULATED[name], m_tiles=1 + index % 2, n_tiles=2 - index % 2, seed=index)
    assert not len(bad), f"{len(bad)} of {got.size} elements differ, first {bad[:3].tolist()}: " \
                         f"{got[tuple(bad[0])]} != {want[tuple(bad[0])]}"


def test_emulated_tiles_cover_the_layouts():
    from compiler.isa.tmem import data_path

    seen = set()
    for text in EMULATED.values():
        tile = compile_source(text, "e.tile", passes=["verify"]).tiles["e"].payload
        seen.add(data_path(tile.m, tile.cta_group, tile.sparsity is not None, tile.ws).layout)
    assert seen == set("ABCDEFG")


def test_multi_stage_kernel_on_the_emulator():
    """A tile whose A+B exceed layout-selection's 96 KB stage budget is copied in two K stages
    (k_block = 128 of 256); D still matches."""
    text = _tile("kind=f16", "shape M=128 N=256 K=16;", "bf16 smem", "bf16 smem", "f32 tmem", loop=256)
    result, bad, _, _ = _emulate(text)
    assert result.tiles["e"].facts["k_block"] == 128
    assert not len(bad)


ASHIFT = {
    # as examples/tcgen05_a_tmem.tile: M = 128, cta_group::1 (layout D), ::lastuse after a priming ::fill
    "m128": _tile("kind=f16 ashift collector=a::lastuse", "shape M=128 N=64 K=16;", "bf16 tmem", "bf16 smem",
                  "f32 tmem", loop=64),
    # M = 256, cta_group::2 (layout A): each CTA shifts its own 128 rows
    "m256_cta2": _tile("kind=f16 cta_group=2 ashift", "shape M=256 N=32 K=16;", "f16 tmem", "f16 smem", "f32 tmem",
                       loop=32),
    # tf32 (one value per column), sparse: the shift covers the K/2 kept values
    "sp_tf32": _tile("kind=tf32 ashift", "shape M=128 N=32 K=16;", "tf32 tmem", "tf32 smem", "f32 tmem",
                     "sparsity 1:2 metadata=runtime;", loop=32),
}


@pytest.mark.parametrize("name", sorted(ASHIFT))
def test_ashift_kernel_on_the_emulator_equals_the_reference_model(name):
    """.ashift (PTX ISA 9.7.16.10.9.1: A's rows in Tensor Memory move down one row, all but the last;
    M = 128 / 256, A in TMEM): the emulated kernel computes D = A B (the MMA reads A before the shift), and
    after every .ashift MMA each CTA's TMEM A columns equal the reference model's `ashift_rows` of what
    they held before it (the emulator finds rows through its own data-path layouts)."""
    import numpy as np

    from compiler.emulator.tcgen05 import host_problem, reference_d, run_kernel
    from compiler.sim.tcgen05 import ashift_rows

    result = compile_source(ASHIFT[name], "e.tile")
    spec = result.tiles["e"].payload
    problem = host_problem(result, m_tiles=2, n_tiles=1, seed=11)
    machine = run_kernel(result.ptx, problem.args, problem.grid, problem.entry, record_ashift=True)
    d_type = {"f32": np.float32}[problem.d_type]
    got = machine.gmem.array("D").view(d_type).reshape(problem.args["m_total"], problem.args["n_total"])
    np.testing.assert_array_equal(got, reference_d(problem))
    log = machine.tmem_log
    mmas = spec.total_k // problem.mma_k
    # one entry per .ashift MMA and CTA, for each of the 2 tiles the grid runs
    assert len(log) == 2 * mmas * spec.cta_group
    kind, a_type = result.tiles["e"].attrs["kind"], spec.operands["A"].dtype
    k_a = problem.mma_k // 2 if spec.sparsity is not None else problem.mma_k
    for entry in log:
        want = ashift_rows(entry["before"], spec.m, spec.cta_group, kind, a_type, k_a)
        np.testing.assert_array_equal(entry["after"], want)
    assert any(not np.array_equal(e["before"], e["after"]) for e in log)     # the shift moved data


@pytest.mark.parametrize("mutation", ["descriptor", "metadata_shift", "scale_byte"])
def test_emulator_detects_wrong_kernels(mutation):
    """The check is not vacuous: a kernel with one wrong constant computes a different D."""
    import numpy as np

    from compiler.emulator.tcgen05 import host_problem, reference_d, run_problem

    text = {"descriptor": EMULATED["f16_d"], "metadata_shift": EMULATED["sp_f16_runtime"],
            "scale_byte": EMULATED["mxf8f6f4_1x"]}[mutation]
    result = compile_source(text, "e.tile")
    ptx = result.ptx
    if mutation == "descriptor":      # step 1's A descriptor start address off by 16 bytes
        lines = [ln for ln in ptx.splitlines() if ln.strip().startswith("add.u64") and ", 0x40004040" in ln]
        ptx = ptx.replace(lines[1], lines[1][:-2] + "3;")
    elif mutation == "metadata_shift":   # pick the K half of a shared16 cell from lane bit 4, not bit 3
        ptx, n = re.subn(r"(bfe\.u32 %r\d+, %r\d+), 3, 1;", r"\1, 4, 1;", ptx, count=1)
        assert n == 1
    else:                                # the second MMA's scale-factor IDs point at another byte
        values = [int(v, 16) for v in re.findall(r"mov\.b32 %r\d+, (0x[0-9a-f]{8});", ptx)]
        step1 = next(v for v in values if (v >> 29) & 3 == 1)      # Table 43 bits 29-30: SFA ID 1
        ptx = ptx.replace(f"{step1:#010x};", f"{step1 ^ (3 << 29):#010x};", 1)
    problem = host_problem(result, seed=3)
    got = run_problem(ptx, problem)
    assert not np.array_equal(got, reference_d(problem))


@pytest.mark.slow
def test_every_form_computes_d_on_the_emulator():
    """Every expressible form (.ashift included: it shifts A in TMEM after the product, so D is A B) on a
    2 x 2 grid."""
    problems = []
    for i, form in enumerate(EXPRESSIBLE):
        target = sorted(form.requirements().targets)[0]
        _, bad, _, _ = _emulate(tile_text(form, target, "e", i), m_tiles=1 + i % 2, n_tiles=1 + i // 2 % 2, seed=i)
        if len(bad):
            problems.append(f"{form.opcode()} (variant {i}): {len(bad)} elements differ")
    assert not problems, "\n".join(problems[:20])


@pytest.mark.parametrize("name", ["f16_d", "f8f6f4_padded", "sp_i8_rotate", "tf32_base32b", "cta2_a",
                                  "a_tmem_fp4"])
def test_smem_dump_variant_matches_the_kernels_shared_memory(name):
    """The sm_90a smem-dump kernel (run on the emulator) writes, per CTA and stage, exactly the shared
    memory the tcgen05 kernel's MMAs read in that stage (whose D is checked above) at
    S + ((ctaid.y * nctaid.x + ctaid.x) * n_stages + stage) * smem_bytes."""
    import numpy as np

    from compiler.emulator.tcgen05 import host_problem, run_kernel

    text = EMULATED[name]
    real = compile_source(text, "e.tile")
    dump = compile_source(text, "e.tile", options={"variant": "smem-dump"})
    problem = host_problem(real, m_tiles=2, n_tiles=1, seed=5)
    machine = run_kernel(real.ptx, problem.args, problem.grid, "e")
    abi = dump.to_json()["tiles"]["e"]["kernel"]
    size, stages = abi["smem_dump"]["smem_bytes"], abi["smem_dump"]["n_stages"]
    gx, gy = problem.grid
    args = dict(problem.args, S=np.zeros(gx * gy * stages * size, dtype=np.uint8))
    images = run_kernel(dump.ptx, args, problem.grid, "e").gmem.array("S").reshape(gy * gx, stages, size)
    seen = {}
    for (x, y), smem in machine.smem_snapshots:
        stage = seen.get((x, y), 0)
        seen[(x, y)] = stage + 1
        assert np.array_equal(images[y * gx + x, stage], smem[:size]), (x, y, stage)
    assert len(seen) == gx * gy and set(seen.values()) == {stages}
