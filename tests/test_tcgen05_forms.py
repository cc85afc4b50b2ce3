"""tcgen05.mma forms, their PTX version / target table, and the supporting instructions.

The heart of this file assembles, with ptxas (CUDA 13.0), every (form x target) combination the
table in compiler/isa/tcgen05_forms.py calls legal, at exactly the PTX version `infer_ptx_version`
picks, and checks that ptxas rejects what the table rejects, except for the documented cases where
ptxas accepts something PTX forbids (ptxas is looser than the PTX ISA items 6 and 10), which are listed here as tests that
tilec rejects.

References: PTX ISA 9.7.16.10.9.1-4 (syntax groups, operand order, ISA notes), release notes Table 60
and Table 61, PTX ISA 9.7.16.10.9 (syntax, operands, PTX/target ISA notes) and the tcgen05 supporting instructions.
"""
from __future__ import annotations

import os
import re
import shutil
import site
import subprocess
import tempfile
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from compiler.diagnostics import SpecError
from compiler.isa.targets import TARGETS, format_version
from compiler.isa.tcgen05_forms import (
    FEATURES, TCGEN05_TARGETS, Tcgen05Mma, all_forms, check_target, infer_ptx_version,
    tcgen05_alloc, tcgen05_commit, tcgen05_cp, tcgen05_dealloc, tcgen05_fence_after_thread_sync,
    tcgen05_fence_before_thread_sync, tcgen05_ld, tcgen05_ldst_regs, tcgen05_relinquish_alloc_permit,
    tcgen05_st, tcgen05_wait_ld, tcgen05_wait_st,
)

BLACKWELL = ["sm_100a", "sm_100f", "sm_103a", "sm_103f", "sm_110a", "sm_110f"]
PTX_VERSIONS = [(8, 6), (8, 7), (8, 8), (9, 0)]   # the releases that matter for tcgen05 (MAX_PTX = 9.0)
ALL_FORMS = all_forms()


# --------------------------------------------------------------------------------------------------
# ptxas harness

def _find_ptxas() -> str | None:
    env = os.environ.get("PTXAS")
    if env and Path(env).exists():
        return env
    found = shutil.which("ptxas")
    if found:
        return found
    for base in [*site.getsitepackages(), site.getusersitepackages()]:
        wheel = Path(base) / "nvidia" / "cu13" / "bin" / "ptxas"
        if wheel.exists():
            return str(wheel)
    return None


@pytest.fixture(scope="module")
def ptxas() -> str:
    path = _find_ptxas()
    if path is None:
        if os.environ.get("CI"):
            pytest.fail("ptxas not found ($PTXAS, PATH, nvidia-cuda-nvcc wheel) and CI is set")
        pytest.skip("ptxas not found")
    return path


# Plausible operand values: a K-major no-swizzle smem descriptor (PTX ISA 9.7.16.4.1, Table 40 worked value, LBO 128 B,
# SBO 256 B: 8<<16 | 16<<32 | 1<<46 = 0x0000401000080000), a worked Table 42 value idesc 0x08100010, TMEM
# address 0 (lane 0, column 0), enable-input-d false.
PROLOGUE = """\
  .reg .b32 %r<32>;
  .reg .b64 %rd<8>;
  .reg .b16 %rs<2>;
  .reg .pred %p<2>;
  .shared .align 1024 .b8 smem[4096];
  mov.u32 %r0, smem;
  mov.b32 %r1, 0;
  mov.b32 %r2, 64;
  mov.b32 %r3, 0x08100010;
  mov.b32 %r8, 128;
  mov.b32 %r9, 192;
  mov.b32 %r10, 200;
  mov.b64 %rd1, 0x0000401000080000;
  mov.b64 %rd2, 0x0000401000080040;
  mov.b64 %rd3, 0;
  mov.b16 %rs1, 3;
  setp.ne.b32 %p0, %r1, 0;
"""


def render_plain(form: Tcgen05Mma) -> str:
    """The form with fixed register operands (see PROLOGUE)."""
    return form.render(
        "%r1", "%r2" if form.a_in_tmem else "%rd1", "%rd2", "%r3", "%p0",
        meta="%r8" if form.sparse else None,
        scale_a="%r9" if form.block_scale else None, scale_b="%r10" if form.block_scale else None,
        disable_lanes=[f"%r{i}" for i in range(11, 11 + 4 * form.cta_group)]
        if form.disable_output_lane else None,
        scale_input_d=3 if form.scale_input_d else None,
        zcm="%rd3" if form.zero_column_mask else None)


def module(target: str, version, entries: dict[str, list[str]]) -> tuple[str, dict[int, int]]:
    """PTX text with one .entry per key; returns it and {line number: (entry, index)} of every body line.
    Every tcgen05 instruction of one kernel must use one .cta_group (PTX 9.0 notes), hence entries."""
    lines = [f".version {format_version(version)}", f".target {target}", ".address_size 64"]
    where = {}
    for name, body in entries.items():
        lines += [f".visible .entry {name}()", "{", *PROLOGUE.rstrip("\n").split("\n")]
        for i, text in enumerate(body):
            lines.append("  " + text)
            where[len(lines)] = (name, i)
        lines += ["  ret;", "}"]
    return "\n".join(lines) + "\n", where


def assemble(ptxas: str, target: str, text: str) -> tuple[int, str, set[int]]:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "k.ptx"
        path.write_text(text)
        run = subprocess.run([ptxas, f"-arch={target}", "-o", os.devnull, str(path)],
                             capture_output=True, text=True, timeout=120)
    error_lines = {int(m) for m in re.findall(r"line (\d+); error", run.stderr)}
    return run.returncode, run.stderr, error_lines


def assemble_forms(ptxas, target, version, forms):
    """Assemble `forms` (grouped by cta_group into entries); returns (rc, stderr, failing forms)."""
    entries = defaultdict(list)
    owners = defaultdict(list)
    for form in forms:
        entries[f"k{form.cta_group}"].append(render_plain(form))
        owners[f"k{form.cta_group}"].append(form)
    text, where = module(target, version, entries)
    rc, err, lines = assemble(ptxas, target, text)
    failing = [owners[where[n][0]][where[n][1]] for n in sorted(lines) if n in where]
    return rc, err, failing


# --------------------------------------------------------------------------------------------------
# Every legal (form x target) assembles at the version the table infers.

@pytest.mark.parametrize("target", BLACKWELL)
def test_every_legal_form_assembles_at_inferred_version(ptxas, target):
    legal = [f for f in ALL_FORMS if target in f.requirements().targets]
    groups = defaultdict(list)
    for form in legal:
        groups[infer_ptx_version([form], target)].append(form)
    # The table must allow something on every Blackwell target (Table 60 base rows).
    assert len(legal) >= 800

    def run(item):
        version, forms = item
        rc, err, failing = assemble_forms(ptxas, target, version, forms)
        if rc != 0 and not failing:
            # No line-level error to blame: assemble one form per file to find the culprit(s).
            failing = [f for f in forms if assemble_forms(ptxas, target, version, [f])[0] != 0]
        return version, rc, err, failing

    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(run, groups.items()))
    problems = [f"{format_version(v)}: {[f.opcode() for f in failing][:8]} {err[:400]}"
                for v, rc, err, failing in results if rc != 0]
    assert not problems, f"ptxas rejected forms the table allows on {target}:\n" + "\n".join(problems)


@pytest.mark.parametrize("target", ["sm_100a"])
def test_version_minimum_is_tight(ptxas, target):
    """Forms needing more than the target's own minimum (sm_100a: mxf4nvf4 and scale_vec::4X need 8.7,
    block16/block32/omitted vector size need 8.8) fail one PTX release earlier, each on its own line."""
    late = defaultdict(list)
    for form in ALL_FORMS:
        if target in form.requirements().targets:
            need = infer_ptx_version([form], target)
            if need > TARGETS[target].min_ptx:
                late[PTX_VERSIONS[PTX_VERSIONS.index(need) - 1]].append(form)
    assert set(late) == {(8, 6), (8, 7)}
    for version, forms in late.items():
        for form in forms:
            with pytest.raises(SpecError) as info:
                check_target(form, target, version)
            assert info.value.field == "ptx"
        rc, err, failing = assemble_forms(ptxas, target, version, forms)
        assert rc != 0 and len(failing) == len(forms), (version, err[:400])


# --------------------------------------------------------------------------------------------------
# Every form the table rejects on a target: ptxas rejects it too, except the documented gap.

def _ptxas_accepts_anyway(form: Tcgen05Mma, target: str) -> bool:
    """PTX ISA Table 60 target notes: PTX says `.scale_vec::NX` 'requires sm_100a' (Table 60 lists only sm_100a), but
    ptxas 13.0 also takes it on sm_103a and sm_110a. tilec follows PTX.
    K = 96 (sm_103a only, Table 60) is invisible to ptxas: K lives in the instruction descriptor."""
    others = [f for f in form.features() if target not in f.targets and f.name != "K = 96"]
    if not others:
        return target in TCGEN05_TARGETS
    return all(f.name.startswith("scale_vec") for f in others) and target in ("sm_103a", "sm_110a")


@pytest.mark.parametrize("target", BLACKWELL + ["sm_90a", "sm_100", "sm_120a"])
def test_table_rejections_match_ptxas(ptxas, target):
    rejected = [f for f in ALL_FORMS if target not in f.requirements().targets]
    if target == "sm_100a":
        # sm_100a takes every feature of Table 60 except the K = 96 shape (sm_103a only)
        assert rejected and all(f.k96 for f in rejected)
    # Use the newest PTX the target accepts so that only the target decides.
    version = (9, 0)
    if target not in TCGEN05_TARGETS:
        rejected = rejected[::97]      # a sample: every form fails there
    for form in rejected:
        with pytest.raises(SpecError) as info:
            check_target(form, target)
        assert info.value.field == "target"
    rc, err, failing = assemble_forms(ptxas, target, version, rejected)
    accepted = [f for f in rejected if f not in failing]
    gap = [f for f in rejected if _ptxas_accepts_anyway(f, target)]
    assert accepted == gap, [f.opcode() for f in accepted[:8]]
    assert (rc != 0) == (len(gap) < len(rejected))
    if target in ("sm_103a", "sm_110a"):
        assert gap, "expected the documented scale_vec gap on this target"


# --------------------------------------------------------------------------------------------------
# Combinations Tcgen05Mma itself refuses (PTX syntax groups / rules), each checked against ptxas.
# (kwargs, field blamed, raw PTX line, whether ptxas 13.0 rejects it too)

INVALID = [
    # .ws only with cta_group::1 (9.7.16.10.9.3 syntax)
    (dict(kind="f16", ws=True, cta_group=2), "engine.ws",
     "tcgen05.mma.ws.cta_group::2.kind::f16 [%r1], %rd1, %rd2, %r3, %p0;", True),
    # .ws kinds f16/tf32/f8f6f4/i8 only
    (dict(kind="mxf8f6f4", ws=True, block_scale="block32"), "engine.ws",
     "tcgen05.mma.ws.cta_group::1.kind::mxf8f6f4.block_scale.block32 [%r1], %rd1, %rd2, %r3, [%r9], [%r10], %p0;",
     True),
    # ::bN only on .ws; ::a only on non-ws
    (dict(kind="f16", collector="b1::fill"), "engine.collector",
     "tcgen05.mma.cta_group::1.kind::f16.collector::b1::fill [%r1], %rd1, %rd2, %r3, %p0;", True),
    (dict(kind="f16", ws=True, collector="a::fill"), "engine.collector",
     "tcgen05.mma.ws.cta_group::1.kind::f16.collector::a::fill [%r1], %rd1, %rd2, %r3, %p0;", True),
    # .ashift needs [a-tmem]
    (dict(kind="f16", ashift=True), "engine.ashift",
     "tcgen05.mma.cta_group::1.kind::f16.ashift [%r1], %rd1, %rd2, %r3, %p0;", True),
    # "illegal to specify either of .collector::a::use or .collector::a::fill along with .ashift"
    (dict(kind="f16", ashift=True, a_in_tmem=True, collector="a::fill"), "engine.collector",
     "tcgen05.mma.cta_group::1.kind::f16.ashift.collector::a::fill [%r1], [%r2], %rd2, %r3, %p0;", True),
    (dict(kind="i8", ashift=True, a_in_tmem=True, collector="a::use"), "engine.collector",
     "tcgen05.mma.cta_group::1.kind::i8.ashift.collector::a::use [%r1], [%r2], %rd2, %r3, %p0;", True),
    # .ashift is not in the .ws or block-scale syntax groups
    (dict(kind="f16", ws=True, ashift=True, a_in_tmem=True), "engine.ashift",
     "tcgen05.mma.ws.cta_group::1.kind::f16.ashift [%r1], [%r2], %rd2, %r3, %p0;", True),
    (dict(kind="mxf8f6f4", block_scale="block32", ashift=True, a_in_tmem=True), "engine.ashift",
     "tcgen05.mma.cta_group::1.kind::mxf8f6f4.block_scale.block32.ashift [%r1], [%r2], %rd2, %r3, [%r9], [%r10], %p0;",
     True),
    # disable-output-lane: not with block scale, not on .ws
    (dict(kind="mxf8f6f4", block_scale="block32", disable_output_lane=True), "disable_output_lane.value",
     "tcgen05.mma.cta_group::1.kind::mxf8f6f4.block_scale.block32 [%r1], %rd1, %rd2, %r3, [%r9], [%r10], "
     "{%r11, %r12, %r13, %r14}, %p0;", True),
    (dict(kind="f16", ws=True, disable_output_lane=True), "disable_output_lane.value",
     "tcgen05.mma.ws.cta_group::1.kind::f16 [%r1], %rd1, %rd2, %r3, {%r11, %r12, %r13, %r14}, %p0;", True),
    # scale-input-d only f16/tf32
    (dict(kind="f8f6f4", scale_input_d=True), "scale_input_d.value",
     "tcgen05.mma.cta_group::1.kind::f8f6f4 [%r1], %rd1, %rd2, %r3, %p0, 3;", True),
    # zero-column mask only on .ws: on plain tcgen05.mma a 6th .b64 operand is an argument mismatch
    (dict(kind="f16", zero_column_mask=True), "zero_columns",
     "tcgen05.mma.cta_group::1.kind::f16 [%r1], %rd1, %rd2, %r3, %p0, %rd3;", True),
    # block scale exactly for mx kinds
    (dict(kind="f16", block_scale="block32"), "block_scale.vec",
     "tcgen05.mma.cta_group::1.kind::f16.block_scale.block32 [%r1], %rd1, %rd2, %r3, [%r9], [%r10], %p0;", True),
    (dict(kind="mxf8f6f4"), "block_scale.vec",
     "tcgen05.mma.cta_group::1.kind::mxf8f6f4 [%r1], %rd1, %rd2, %r3, [%r9], [%r10], %p0;", True),
    # mxf4nvf4 needs an explicit vector size
    (dict(kind="mxf4nvf4", block_scale="implicit"), "block_scale.vec",
     "tcgen05.mma.cta_group::1.kind::mxf4nvf4.block_scale [%r1], %rd1, %rd2, %r3, [%r9], [%r10], %p0;", True),
    # Table 54: block16 / 4X only mxf4nvf4; 1X only mxf8f6f4; 2X not mxf8f6f4
    (dict(kind="mxf4", block_scale="block16"), "block_scale.vec",
     "tcgen05.mma.cta_group::1.kind::mxf4.block_scale.block16 [%r1], %rd1, %rd2, %r3, [%r9], [%r10], %p0;", True),
    (dict(kind="mxf8f6f4", block_scale="block16"), "block_scale.vec",
     "tcgen05.mma.cta_group::1.kind::mxf8f6f4.block_scale.block16 [%r1], %rd1, %rd2, %r3, [%r9], [%r10], %p0;",
     True),
    (dict(kind="mxf4", block_scale="scale_vec::4X"), "block_scale.vec",
     "tcgen05.mma.cta_group::1.kind::mxf4.block_scale.scale_vec::4X [%r1], %rd1, %rd2, %r3, [%r9], [%r10], %p0;",
     True),
    (dict(kind="mxf4nvf4", block_scale="scale_vec::1X"), "block_scale.vec",
     "tcgen05.mma.cta_group::1.kind::mxf4nvf4.block_scale.scale_vec::1X [%r1], %rd1, %rd2, %r3, [%r9], [%r10], %p0;",
     True),
    (dict(kind="mxf8f6f4", block_scale="scale_vec::2X"), "block_scale.vec",
     "tcgen05.mma.cta_group::1.kind::mxf8f6f4.block_scale.scale_vec::2X [%r1], %rd1, %rd2, %r3, [%r9], [%r10], %p0;",
     True),
    # ptxas 13.0 ACCEPTS this one (ptxas accepts it; the PTX ISA does not); PTX: scale-input-d "is only valid for .kind::tf32
    # and .kind::f16".
    (dict(kind="i8", scale_input_d=True), "scale_input_d.value",
     "tcgen05.mma.cta_group::1.kind::i8 [%r1], %rd1, %rd2, %r3, %p0, 3;", False),
]


def test_invalid_forms_rejected_by_tilec_and_ptxas(ptxas):
    for kwargs, field, _, _ in INVALID:
        with pytest.raises(SpecError) as info:
            Tcgen05Mma(**kwargs)
        assert info.value.field == field, kwargs
    text, where = module("sm_100a", (8, 8), {"k1": [line for _, _, line, _ in INVALID if "cta_group::2" not in line],
                                              "k2": [line for _, _, line, _ in INVALID if "cta_group::2" in line]})
    rc, err, lines = assemble(ptxas, "sm_100a", text)
    rejected = {text.split("\n")[n - 1].strip() for n in lines}
    for _, _, line, ptxas_rejects in INVALID:
        assert (line in rejected) == ptxas_rejects, (line, err[:600])


def test_ptxas_accepts_but_tilec_rejects(ptxas):
    """ptxas accepts it; the PTX ISA does not; PTX ISA Table 60 target notes: things ptxas 13.0 takes although PTX forbids them; tilec refuses each."""
    form = Tcgen05Mma("f16")
    ws = Tcgen05Mma("f16", ws=True, zero_column_mask=True)
    cases = [
        # literal 1 as enable-input-d (PTX: a predicate operand)
        (lambda: form.render("%r1", "%rd1", "%rd2", "%r3", "1"),
         "tcgen05.mma.cta_group::1.kind::f16 [%r1], %rd1, %rd2, %r3, 1;", "sm_100a"),
        # an immediate as the 6th operand of .ws (ptxas reads it as the zero-column mask; PTX: .b64 reg)
        (lambda: ws.render("%r1", "%rd1", "%rd2", "%r3", "%p0", zcm="5"),
         "tcgen05.mma.ws.cta_group::1.kind::f16 [%r1], %rd1, %rd2, %r3, %p0, 5;", "sm_100a"),
        # scale-input-d with kind::i8
        (lambda: Tcgen05Mma("i8", scale_input_d=True),
         "tcgen05.mma.cta_group::1.kind::i8 [%r1], %rd1, %rd2, %r3, %p0, 3;", "sm_100a"),
        # .scale_vec::NX outside sm_100a (Target ISA notes: "requires sm_100a")
        (lambda: check_target(Tcgen05Mma("mxf8f6f4", block_scale="scale_vec::1X"), "sm_103a"),
         "tcgen05.mma.cta_group::1.kind::mxf8f6f4.block_scale.scale_vec::1X [%r1], %rd1, %rd2, %r3, [%r9], [%r10], %p0;",
         "sm_103a"),
        (lambda: check_target(Tcgen05Mma("mxf4nvf4", block_scale="scale_vec::4X"), "sm_110a"),
         "tcgen05.mma.cta_group::1.kind::mxf4nvf4.block_scale.scale_vec::4X [%r1], %rd1, %rd2, %r3, [%r9], [%r10], %p0;",
         "sm_110a"),
    ]
    for build, line, target in cases:
        with pytest.raises(SpecError):
            build()
        text, _ = module(target, TARGETS[target].min_ptx, {"k1": [line]})
        rc, err, _ = assemble(ptxas, target, text)
        assert rc == 0, (line, err)      # if this starts failing, ptxas got stricter: good news


# --------------------------------------------------------------------------------------------------
# Spelling and operand order (no ptxas needed).

def test_opcode_spellings():
    # Qualifier order of 9.7.16.10.9.1 (".kind.block_scale{.scale_vectorsize}.collector_usage",
    # ".kind{.ashift}.collector_usage") and PTX ISA 9.7.16.10.9 syntax (accepted by ptxas).
    cases = {
        Tcgen05Mma("mxf8f6f4", sparse=True, block_scale="block32", collector="a::fill"):
            "tcgen05.mma.sp.cta_group::1.kind::mxf8f6f4.block_scale.block32.collector::a::fill",
        Tcgen05Mma("f16", ashift=True, a_in_tmem=True, collector="a::discard"):
            "tcgen05.mma.cta_group::1.kind::f16.ashift.collector::a::discard",
        Tcgen05Mma("i8", ws=True, sparse=True, collector="b2::use"):
            "tcgen05.mma.ws.sp.cta_group::1.kind::i8.collector::b2::use",
        Tcgen05Mma("mxf4", cta_group=2, block_scale="implicit"):
            "tcgen05.mma.cta_group::2.kind::mxf4.block_scale",
        Tcgen05Mma("tf32"): "tcgen05.mma.cta_group::1.kind::tf32",
    }
    for form, text in cases.items():
        assert form.opcode() == text


def test_render_operand_order():
    # [d], A, b-desc, [sp-meta], idesc, [scale-A], [scale-B], {disable-output-lane}, enable-input-d,
    # scale-input-d, zero-column-mask (9.7.16.10.9.1-4 syntax).
    sp = Tcgen05Mma("f16", sparse=True, a_in_tmem=True, disable_output_lane=True, scale_input_d=True,
                    cta_group=2)
    assert sp.render("%d", "%a", "%b", "%i", "%p", meta="%m", disable_lanes=[f"%l{i}" for i in range(8)],
                     scale_input_d=15) == (
        "tcgen05.mma.sp.cta_group::2.kind::f16 [%d], [%a], %b, [%m], %i, "
        "{%l0, %l1, %l2, %l3, %l4, %l5, %l6, %l7}, %p, 15;")
    bs = Tcgen05Mma("mxf4nvf4", sparse=True, block_scale="block16")
    assert bs.render("%d", "%ad", "%b", "%i", "%p", meta="%m", scale_a="%sa", scale_b="%sb") == (
        "tcgen05.mma.sp.cta_group::1.kind::mxf4nvf4.block_scale.block16 [%d], %ad, %b, [%m], %i, [%sa], [%sb], %p;")
    ws = Tcgen05Mma("tf32", ws=True, sparse=True, zero_column_mask=True)
    assert ws.render("%d", "%ad", "%b", "%i", "%p", meta="%m", zcm="%z") == (
        "tcgen05.mma.ws.sp.cta_group::1.kind::tf32 [%d], %ad, %b, [%m], %i, %p, %z;")


def test_render_rejects_missing_extra_and_bad_operands():
    plain = Tcgen05Mma("f16")
    with pytest.raises(SpecError, match="needs the sparse-metadata"):
        Tcgen05Mma("f16", sparse=True).render("%d", "%a", "%b", "%i", "%p")
    with pytest.raises(SpecError, match="takes no scale-A"):
        plain.render("%d", "%a", "%b", "%i", "%p", scale_a="%s", scale_b="%s")
    lanes = Tcgen05Mma("f16", disable_output_lane=True)     # cta_group::1 takes 4 registers
    with pytest.raises(SpecError, match="needs 4 registers"):
        lanes.render("%d", "%a", "%b", "%i", "%p", disable_lanes=["%x"] * 8)
    sid = Tcgen05Mma("tf32", scale_input_d=True)
    for bad in (16, -1, True, "3"):                          # [0, 15] immediate
        with pytest.raises(SpecError, match=r"\[0, 15\]"):
            sid.render("%d", "%a", "%b", "%i", "%p", scale_input_d=bad)


def test_unknown_values_rejected():
    for kwargs, field in [(dict(kind="f32"), "engine.kind"), (dict(kind="f16", cta_group=4), "engine.cta_group"),
                          (dict(kind="f16", collector="a::keep"), "engine.collector"),
                          (dict(kind="mxf4", block_scale="block64"), "block_scale.vec")]:
        with pytest.raises(SpecError) as info:
            Tcgen05Mma(**kwargs)
        assert info.value.field == field


def test_k96_rules():
    # Table 39 (PTX ISA 9.7.16.2.1, Table 39): K = 96 only for dense mxf4/mxf4nvf4, cta_group::2, M = 256; block16/32 only
    Tcgen05Mma("mxf4nvf4", cta_group=2, block_scale="block16", k96=True)
    Tcgen05Mma("mxf4", cta_group=2, block_scale="implicit", k96=True)      # omitted size = block32
    for kwargs, field in [(dict(kind="mxf8f6f4", cta_group=2, block_scale="block32"), "shape.K"),
                          (dict(kind="mxf4", block_scale="block32"), "shape.K"),
                          (dict(kind="mxf4", cta_group=2, sparse=True, block_scale="block32"), "shape.K"),
                          (dict(kind="mxf4nvf4", cta_group=2, block_scale="scale_vec::2X"), "block_scale.vec")]:
        with pytest.raises(SpecError) as info:
            Tcgen05Mma(k96=True, **kwargs)
        assert info.value.field == field
    # Table 60 "K shape value 96: 8.8 sm_103a"
    form = Tcgen05Mma("mxf4", cta_group=2, block_scale="block32", k96=True)
    assert infer_ptx_version([form], "sm_103a") == (8, 8)
    with pytest.raises(SpecError, match="K = 96 is not available on sm_100a; use sm_103a"):
        check_target(form, "sm_100a")


def test_ashift_m_rule():
    # "Qualifier .ashift is only allowed with M = 128 or M = 256" (9.7.16.10.9.1)
    form = Tcgen05Mma("f16", ashift=True, a_in_tmem=True)
    form.check_ashift_m(128)
    form.check_ashift_m(256)
    with pytest.raises(SpecError) as info:
        form.check_ashift_m(64)
    assert info.value.field == "shape.M"


# --------------------------------------------------------------------------------------------------
# The version / target table.

def test_target_messages_name_a_target_that_can():
    with pytest.raises(SpecError) as info:
        check_target(Tcgen05Mma("i8"), "sm_103a")
    assert str(info.value) == "kind::i8 is not available on sm_103a; use sm_100a or sm_110a"
    assert info.value.field == "target"
    with pytest.raises(SpecError) as info:
        check_target(Tcgen05Mma("f16", scale_input_d=True), "sm_110f")
    assert str(info.value) == ("scale-input-d is not available on sm_110f; "
                               "use sm_100a, sm_100f, sm_103a or sm_103f")
    with pytest.raises(SpecError) as info:
        check_target(Tcgen05Mma("mxf4", block_scale="scale_vec::2X"), "sm_100f")
    assert "use sm_100a" in str(info.value) and "block32" in info.value.hint
    with pytest.raises(SpecError) as info:
        check_target(Tcgen05Mma("mxf4nvf4", sparse=True, block_scale="block32"), "sm_110f")
    assert str(info.value) == ("sparse kind::mxf4/mxf4nvf4 is not available on sm_110f; "
                               "use sm_100a, sm_103a or sm_110a")
    with pytest.raises(SpecError, match="tcgen05.mma is not available on sm_90a"):
        check_target(Tcgen05Mma("f16"), "sm_90a")
    with pytest.raises(SpecError, match="unknown target"):
        check_target(Tcgen05Mma("f16"), "sm_999")


def test_infer_ptx_version_examples():
    f16 = Tcgen05Mma("f16")
    # base tcgen05.mma: 8.6 (PTX ISA notes); sm_100a's own minimum is 8.6 -> 8.6
    assert infer_ptx_version([f16], "sm_100a") == (8, 6)
    # same form on sm_103a: the target needs 8.8 (targets.py) -> 8.8
    assert infer_ptx_version([f16], "sm_103a") == (8, 8)
    # sm_110a exists from 9.0 -> 9.0
    assert infer_ptx_version([f16], "sm_110a") == (9, 0)
    # mxf4nvf4 introduced in 8.7 -> max(8.6, 8.7) = 8.7 on sm_100a
    nvf4 = Tcgen05Mma("mxf4nvf4", block_scale="scale_vec::2X")
    assert infer_ptx_version([f16, nvf4], "sm_100a") == (8, 7)
    # omitted vector size reads as .block32 (8.8) -> 8.8
    assert infer_ptx_version([Tcgen05Mma("mxf8f6f4", block_scale="implicit")], "sm_100a") == (8, 8)
    # explicit scale_vec::1X is 8.6 -> 8.6
    assert infer_ptx_version([Tcgen05Mma("mxf8f6f4", block_scale="scale_vec::1X")], "sm_100a") == (8, 6)
    with pytest.raises(SpecError):
        infer_ptx_version([Tcgen05Mma("i8")], "sm_100f")
    assert infer_ptx_version([], "sm_100f") == (8, 8)


def test_feature_table_rows_match_table_60():
    by_name = {f.name: f for f in FEATURES}
    # Table 60 "tcgen05.mma Base variant: 8.6 sm_100a, 8.8 sm_100f, 9.0 sm_110f" (family -> a and f,
    # later SMs of the family)
    assert by_name["tcgen05.mma"].targets == frozenset(BLACKWELL)
    # "Kind .kind::i8: 8.6 sm_100a, 9.0 sm_110a"
    assert by_name["kind::i8"].targets == {"sm_100a", "sm_110a"}
    # "Argument scale-input-d: 8.6 sm_100a, 8.8 sm_100f"
    assert by_name["scale-input-d"].targets == {"sm_100a", "sm_100f", "sm_103a", "sm_103f"}
    # "Qualifiers .scale_vec::1X/2X/4X: 8.6 sm_100a"
    assert all(by_name[n].targets == {"sm_100a"} for n in ("scale_vec::1X", "scale_vec::2X", "scale_vec::4X"))
    # "Qualifiers .block16, .block32: 8.8 sm_100f, sm_110f"
    assert by_name["block16"].targets == frozenset(BLACKWELL) and by_name["block16"].min_ptx == (8, 8)
    # "tcgen05.mma.sp Kind .kind::mxf4nvf4 and .kind::mxf4: 8.6 sm_100a, 8.8 sm_103a, 9.0 sm_110a"
    assert by_name["sparse kind::mxf4/mxf4nvf4"].targets == {"sm_100a", "sm_103a", "sm_110a"}
    # every row names its source
    assert all(f.source for f in FEATURES)


def test_all_forms_covers_every_syntax_group():
    opcodes = {f.opcode() for f in ALL_FORMS}
    # one representative per syntax group of 9.7.16.10.9.1-4 (groups 1-6 of .mma/.sp, 1-2 of .ws/.ws.sp)
    for text in ["tcgen05.mma.cta_group::2.kind::f8f6f4",
                 "tcgen05.mma.cta_group::1.kind::mxf4.block_scale.scale_vec::2X",
                 "tcgen05.mma.sp.cta_group::2.kind::tf32.ashift.collector::a::lastuse",
                 "tcgen05.mma.cta_group::1.kind::mxf4nvf4.block_scale.block16.collector::a::use",
                 "tcgen05.mma.sp.cta_group::1.kind::i8",
                 "tcgen05.mma.cta_group::2.kind::i8.ashift",
                 "tcgen05.mma.ws.cta_group::1.kind::f8f6f4.collector::b3::lastuse",
                 "tcgen05.mma.ws.sp.cta_group::1.kind::i8.collector::b0::fill"]:
        assert text in opcodes
    # 7 kinds; no duplicate forms
    assert len(set(ALL_FORMS)) == len(ALL_FORMS)
    assert {f.kind for f in ALL_FORMS} == {"f16", "tf32", "f8f6f4", "i8", "mxf8f6f4", "mxf4", "mxf4nvf4"}


# --------------------------------------------------------------------------------------------------
# Supporting instructions (PTX ISA 9.7.16 tcgen05 instructions).

def _support_lines(cta_group: int) -> list[str]:
    regs4 = ["%r4", "%r5", "%r6", "%r7"]
    return [
        tcgen05_alloc("%r0", 64, cta_group),
        tcgen05_relinquish_alloc_permit(cta_group),
        tcgen05_cp("%r1", "%rd1", "128x256b", cta_group),
        tcgen05_cp("%r1", "%rd1", "32x128b", cta_group, multicast="warpx4"),
        tcgen05_cp("%r1", "%rd1", "64x128b", cta_group, multicast="warpx2::01_23", decompress="b8x16.b4x16_p64"),
        tcgen05_cp("%r1", "%rd1", "4x256b", cta_group, decompress="b8x16.b6x16_p32"),
        tcgen05_commit("%r0", cta_group) if cta_group == 1 else tcgen05_commit("%r0", 2, cta_mask="%rs1"),
        tcgen05_fence_after_thread_sync(),
        tcgen05_ld(regs4, "%r1", "32x32b", 4),
        tcgen05_ld(regs4, "%r1", "16x256b", 1),
        tcgen05_ld(["%r4", "%r5"], "%r1", "16x32bx2", 2, pack_16b=True, half_split_offset=16),
        tcgen05_wait_ld(),
        tcgen05_st("%r1", regs4, "16x128b", 2, unpack_16b=True),
        tcgen05_wait_st(),
        tcgen05_fence_before_thread_sync(),
        tcgen05_dealloc("%r1", 64, cta_group),
    ]


def test_support_spellings():
    # 9.7.16.7.1 / .12.1 / .8.3 syntax; PTX ISA 9.7.16.7.1 tcgen05.alloc-8.4 (CUTLASS/TRITON emit these exact commit strings)
    assert tcgen05_alloc("%r0", 128) == "tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [%r0], 128;"
    assert tcgen05_commit("%r0") == \
        "tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64 [%r0];"
    assert tcgen05_commit("%r0", 2, "%rs1") == \
        "tcgen05.commit.cta_group::2.mbarrier::arrive::one.shared::cluster.multicast::cluster.b64 [%r0], %rs1;"
    assert tcgen05_cp("%t", "%s", "32x128b", multicast="warpx4") == "tcgen05.cp.cta_group::1.32x128b.warpx4 [%t], %s;"
    # registers per thread, table "num x shape": 16x256b.x1 = 4, 16x128b.x2 = 4, 32x32b.x64 = 64
    assert [tcgen05_ldst_regs(s, n) for s, n in [("16x256b", 1), ("16x128b", 2), ("32x32b", 64)]] == [4, 4, 64]


def test_support_rejections():
    with pytest.raises(SpecError, match="power of two"):
        tcgen05_alloc("%r0", 48)                   # ptxas: "value must be power of 2"
    with pytest.raises(SpecError, match="power of two"):
        tcgen05_dealloc("%r0", 1024)               # ptxas: "out of range [32..512]"
    with pytest.raises(SpecError, match="x32"):
        tcgen05_ldst_regs("16x256b", 64)           # ptxas: ".x64 not allowed ... '.16x256b'"
    with pytest.raises(SpecError, match="moves 4 registers"):
        tcgen05_ld(["%r1"], "%r0", "16x256b", 1)   # ptxas: "Argument vector size mismatch"
    with pytest.raises(SpecError, match="immHalfSplitoff"):
        tcgen05_ld(["%r1"], "%r0", "16x32bx2", 1)
    with pytest.raises(SpecError, match="multicast"):
        tcgen05_cp("%t", "%s", "64x128b")          # ptxas: "Modifier '.warptype' require ..."
    with pytest.raises(SpecError, match="multicast"):
        tcgen05_cp("%t", "%s", "128x256b", multicast="warpx4")


@pytest.mark.parametrize("target", BLACKWELL)
def test_support_instructions_assemble(ptxas, target):
    text, _ = module(target, TARGETS[target].min_ptx, {"k1": _support_lines(1), "k2": _support_lines(2)})
    rc, err, _ = assemble(ptxas, target, text)
    assert rc == 0, err[:800]


@pytest.mark.parametrize("target", ["sm_90a", "sm_120a"])
def test_support_instructions_rejected_off_blackwell(ptxas, target):
    # PTX ISA 9.7.16 tcgen05 instructions: rejected for sm_90a / sm_120a; every line fails
    body = _support_lines(1)
    text, where = module(target, (8, 8), {"k1": body})
    rc, err, lines = assemble(ptxas, target, text)
    assert rc != 0 and len(lines & set(where)) == len(body), err[:400]
