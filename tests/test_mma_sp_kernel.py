"""Complete mma.sp kernels (compiler/ptx/mma_sp_kernel.py) assembled by ptxas (CUDA 13.0, PTX <= 9.0).

- every form on every target the form table allows, at the default PTX version (ordered metadata) and
  at the form's minimum version (plain `.sp` below 8.5);
- ptxas rejects each form on every target the table forbids, and one version below the minimum;
- sparsity selectors: the legal ones assemble; tilec rejects the others, and so does ptxas except for
  selector 2/3 of m16n8k32.f32.f16.f16.f32, which ptxas accepts although PTX leaves it undefined
  (seed 9.7.14.6.1, ptxas accepts it; the PTX ISA does not);
- static metadata (immediate / .const table), validation, configuration errors, ABI, determinism.

Many kernels go into one module per target (names k0, k1, ...); ptxas reports every error with its line,
which maps back to the kernel. The `ptxas` fixture (tests/conftest.py) skips without ptxas and fails
when $CI is set.
"""
from __future__ import annotations

import re
import subprocess
import tempfile
from collections import defaultdict
from pathlib import Path

import pytest

from compiler.diagnostics import SpecError
from compiler.isa.mma_sp.forms import FORM_ROWS, ORDERED_METADATA_PTX, Form, all_forms, find_form
from compiler.isa.mma_sp.metadata import pack_metadata, static_metadata
from compiler.ptx.mma_sp_kernel import MmaSpKernelConfig, emit_mma_sp_kernel
from compiler.isa.targets import MAX_PTX, TARGETS, Version, format_version

FORMS = [f for f in all_forms() if f.min_ptx <= MAX_PTX]       # 4X+ue8m0 needs PTX 9.1 (tested below)
ROW_REPRESENTATIVES = [next(f for f in FORMS if f.row is row) for row in FORM_ROWS]


# --------------------------------------------------------------------------------------------------
# harness

def _body(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if not ln.startswith((".version", ".target", ".address_size"))]


def assemble_kernels(ptxas: str, target: str, version: Version, kernels: dict[str, str]
                     ) -> tuple[int, str, dict[str, list[str]]]:
    """Assemble many kernels (full module texts) as one module; returns (returncode, output,
    {kernel name: [error messages on its lines]})."""
    lines = [f".version {format_version(version)}", f".target {target}", ".address_size 64"]
    owner: dict[int, str] = {}
    for name, text in kernels.items():
        for ln in _body(text):
            lines.append(ln)
            owner[len(lines)] = name
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "k.ptx"
        src.write_text("\n".join(lines) + "\n")
        proc = subprocess.run([ptxas, f"-arch={target}", "-o", str(Path(tmp) / "k.cubin"), str(src)],
                              capture_output=True, text=True)
    out = proc.stdout + proc.stderr
    errors: dict[str, list[str]] = defaultdict(list)
    for m in re.finditer(r"line (\d+); error\s*:\s*(.*)", out):
        errors[owner.get(int(m.group(1)), "<module>")].append(m.group(2))
    return proc.returncode, out, dict(errors)


def kernel(form: Form, target: str, name: str, ptx: Version | None = None, **kw) -> str:
    return emit_mma_sp_kernel(MmaSpKernelConfig(name, form, target, ptx, **kw)).text


def default_version(forms, target: str) -> Version:
    need = max(f.requirements(target)[0] for f in forms)
    return max(need, ORDERED_METADATA_PTX)


# --------------------------------------------------------------------------------------------------
# every form x every allowed target

# one target per (generation, suffix) class runs by default; the rest are a slow sweep
_DEFAULT_TARGETS = {"sm_80", "sm_86", "sm_89", "sm_90", "sm_90a", "sm_100a", "sm_100f", "sm_110f", "sm_120",
                    "sm_120a", "sm_120f", "sm_121a"}


@pytest.mark.parametrize("target", [t if t in _DEFAULT_TARGETS else pytest.param(t, marks=pytest.mark.slow)
                                    for t in TARGETS])
def test_every_form_assembles_on_every_allowed_target(ptxas, target):
    forms = [f for f in FORMS if f.requirements(target)[1] is None]
    assert forms, target                  # every target runs at least the sm_80 forms
    version = default_version(forms, target)
    kernels = {f"k{i}": kernel(f, target, f"k{i}", version) for i, f in enumerate(forms)}
    rc, out, errors = assemble_kernels(ptxas, target, version, kernels)
    assert rc == 0 and not errors, out[:2000]
    assert "Advisory" not in out          # ordered metadata: no plain-.sp performance advisory
    assert all("mma.sp::ordered_metadata" in t for t in kernels.values())


def _min_target(form: Form) -> str:
    return form.row.target_rule.targets()[0]


def test_every_form_at_its_minimum_ptx_version(ptxas):
    groups: dict[tuple[str, Version], list[Form]] = defaultdict(list)
    for f in FORMS:
        t = _min_target(f)
        groups[t, f.requirements(t)[0]].append(f)
    # PTX ISA 9.7.14.6.3: sm_80 forms need 7.1 (plain .sp), fp8 without kind 8.4 on sm_89, kinds 8.7 on sm_120a
    assert set(groups) == {("sm_80", (7, 1)), ("sm_89", (8, 4)), ("sm_120a", (8, 7))}
    for (target, version), forms in groups.items():
        kernels = {f"k{i}": kernel(f, target, f"k{i}", version) for i, f in enumerate(forms)}
        rc, out, errors = assemble_kernels(ptxas, target, version, kernels)
        assert rc == 0 and not errors, (target, out[:2000])
        plain = version < ORDERED_METADATA_PTX
        assert all(("mma.sp.sync.aligned" in t) == plain for t in kernels.values())


@pytest.mark.parametrize("form", ROW_REPRESENTATIVES, ids=lambda f: f.name)
def test_one_version_below_minimum_is_rejected(ptxas, form):
    target = _min_target(form)
    need = form.requirements(target)[0]
    below = (need[0], need[1] - 1) if need[1] else (need[0] - 1, 9)
    _, err = form.requirements(target, below)
    assert err is not None and err.field == "ptx"
    text = kernel(form, target, "k0", need).replace(f".version {format_version(need)}",
                                                    f".version {format_version(below)}")
    rc, out, _ = assemble_kernels(ptxas, target, below, {"k0": text})
    assert rc != 0, out


# --------------------------------------------------------------------------------------------------
# forbidden targets: the table and ptxas agree

# ptxas 13.0 accepts sparse `.kind::f8f6f4` with e4m3/e5m2 operands and f32 accumulation on the sm_100 /
# sm_103 / sm_110 arch- and family-specific targets, although PTX lists `.kind::f8f6f4` for the sm_120
# family only (PTX ISA 9.7.14.6.3 table; LLVM tests the form for sm_120a only). fp6/fp4 operands, f16 accumulation
# and every block-scaled kind are rejected there. tilec follows PTX and rejects these too.
_DATACENTER_BLACKWELL = {"sm_100a", "sm_100f", "sm_103a", "sm_103f", "sm_110a", "sm_110f"}
PTXAS_ACCEPTS_FORBIDDEN = {(f"m16n8k64.kind::f8f6f4.f32.{a}.{b}.f32", t)
                           for a in ("e4m3", "e5m2") for b in ("e4m3", "e5m2") for t in _DATACENTER_BLACKWELL}


def test_forbidden_targets_rejected_by_ptxas(ptxas):
    accepted = set()
    checked = 0
    for target in TARGETS:
        forbidden = [f for f in FORMS if not f.row.target_rule.allows(TARGETS[target])]
        if not forbidden:
            continue
        kernels = {}
        for i, f in enumerate(forbidden):
            _, err = f.requirements(target)
            assert err is not None and err.field == "target" and "runs on" in err.message
            home = _min_target(f)
            kernels[f"k{i}"] = kernel(f, home, f"k{i}", f.requirements(home)[0])
        version = max(max(f.requirements(_min_target(f))[0] for f in forbidden), TARGETS[target].min_ptx)
        _, out, errors = assemble_kernels(ptxas, target, version, kernels)
        assert "<module>" not in errors, out[:2000]
        accepted |= {(f.name, target) for i, f in enumerate(forbidden) if f"k{i}" not in errors}
        checked += len(forbidden)
    # fp8-without-kind on sm_80/86/87 (4 forms x 3) + the sm_120-only kinds on 17 or 19 other targets
    assert checked > 1000
    assert accepted == PTXAS_ACCEPTS_FORBIDDEN


# --------------------------------------------------------------------------------------------------
# selectors

# ptxas accepts it; the PTX ISA does not; PTX ISA 9.7.14.6.3: the one place ptxas accepts selectors PTX calls undefined
PTXAS_ACCEPTS_UNDEFINED = {("m16n8k32.f32.f16.f16.f32", 2), ("m16n8k32.f32.f16.f16.f32", 3)}


def _with_selector(text: str, sel: int) -> str:
    out, n = re.subn(r"(%e\d+), \d+(;|, %sa)", lambda m: f"{m.group(1)}, {sel}{m.group(2)}", text)
    assert n >= 1
    return out


@pytest.mark.parametrize("ordered", [True, False], ids=["ordered", "plain"])
def test_selectors_against_ptxas(ptxas, ordered):
    by_target: dict[str, dict[str, str]] = defaultdict(dict)
    what: dict[str, tuple[Form, int]] = {}
    for f in FORMS:
        if not ordered and f.row.ordered_only:
            continue
        target = _min_target(f)
        version = max(f.requirements(target)[0], ORDERED_METADATA_PTX) if ordered else f.requirements(target)[0]
        base = kernel(f, target, "KNAME", version)
        for sel in range(5):
            name = f"k{len(what)}"
            if sel in f.selectors:
                f.check_selector(sel)            # legal: tilec's own check passes
            else:
                with pytest.raises(SpecError):
                    f.check_selector(sel)
                with pytest.raises(SpecError):
                    emit_mma_sp_kernel(MmaSpKernelConfig(name, f, target, version, selector=sel))
            by_target[target][name] = _with_selector(base.replace("KNAME", name), sel)
            what[name] = (f, sel)
    accepted_undefined = set()
    for target, kernels in by_target.items():
        version = max(what[n][0].requirements(target)[0] for n in kernels)
        if ordered:
            version = max(version, ORDERED_METADATA_PTX)
        kernels = {n: re.sub(r"^\.version .*$", f".version {format_version(version)}", t, flags=re.M)
                   for n, t in kernels.items()}
        _, out, errors = assemble_kernels(ptxas, target, version, kernels)
        for name in kernels:
            f, sel = what[name]
            if sel in f.selectors:
                assert name not in errors, (f.name, sel, errors.get(name))
            elif name not in errors:
                accepted_undefined.add((f.name, sel))
            else:
                assert any(re.search(r"out of range|expected to be 0", e) for e in errors[name]), errors[name]
    assert accepted_undefined == PTXAS_ACCEPTS_UNDEFINED


# --------------------------------------------------------------------------------------------------
# static metadata

def test_static_metadata_kernels(ptxas):
    f16 = find_form("m16n8k16", "f16", "f16", "f32", "f32")
    s4 = find_form("m16n8k128", "u4", "s4", "s32", "s32", satfinite=True)
    tf32 = find_form("m16n8k8", "tf32", "tf32", "f32", "f32")
    cases = {
        # every nibble 0b0100 -> one word 0x44444444 for all lanes: an immediate, no table
        "k0": (f16, "first_two", "mov.b32 %e0, 0x44444444;"),
        # rotate: period 3 tiles x 3 k-steps -> a [3][3][32] table walked along K
        "k1": (f16, "rotate", ".const .align 4 .b32 k1_metadata[288]"),
        # explicit rows: a [1][1][32] table read once (one word per lane)
        "k2": (s4, [[(0, 1, 2, 3)], [(4, 5, 6, 7)]], ".const .align 4 .b32 k2_metadata[32]"),
        "k3": (tf32, "alternate", "mov.b32 %e0, 0x"),
    }
    kernels = {}
    for name, (form, pattern, expect) in cases.items():
        table = static_metadata(form.layout, pattern)
        text = kernel(form, "sm_80", name, None, static_metadata=table, tiles_m=2, warps_n=2)
        assert expect in text
        assert "a_metadata" not in text
        kernels[name] = text
    rc, out, errors = assemble_kernels(ptxas, "sm_80", ORDERED_METADATA_PTX, kernels)
    assert rc == 0 and not errors, out[:2000]


def test_static_metadata_validation():
    f = find_form("m16n8k32", "f16", "f16", "f32", "f32")
    lay = f.layout
    good = pack_metadata(lay, [[0b0100] * 8] * 16)
    bad = list(good)
    bad[0] = (bad[0] & ~0xF00) | (0b1010 << 8)     # lane 0, nibble 2 = row 0, chunk 2 (PTX ISA 9.7.14.6.2 (metadata fragments))
    bad[2] = bad[0]                                 # keep the t / t^2 copies consistent
    with pytest.raises(SpecError, match="row 0, chunk 2") as e:
        emit_mma_sp_kernel(MmaSpKernelConfig("k", f, "sm_80", static_metadata=((tuple(bad),),)))
    assert e.value.field == "sparsity.metadata"
    # a decreasing code (0b0001 = indices 1, 0) is valid for plain .sp only
    dec = [(w & ~0xF) | 0b0001 for w in good]
    emit_mma_sp_kernel(MmaSpKernelConfig("k", f, "sm_80", (7, 1), static_metadata=((tuple(dec),),)))
    with pytest.raises(SpecError, match="decreasing"):
        emit_mma_sp_kernel(MmaSpKernelConfig("k", f, "sm_80", (8, 5), static_metadata=((tuple(dec),),)))
    with pytest.raises(SpecError, match=r"\[pm\]\[pk\]\[32\]"):
        emit_mma_sp_kernel(MmaSpKernelConfig("k", f, "sm_80", static_metadata=((tuple(good[:31]),),)))
    huge = tuple(tuple(tuple(good) for _ in range(64)) for _ in range(9))   # 9*64*128 B > 64 KB
    with pytest.raises(SpecError, match="64 KB"):
        emit_mma_sp_kernel(MmaSpKernelConfig("k", f, "sm_80", static_metadata=huge))


# --------------------------------------------------------------------------------------------------
# configuration, ABI, determinism

def test_config_errors():
    f = find_form("m16n8k16", "f16", "f16", "f32", "f32")
    # 8 x 8 warps = 2048 threads > 1024: blamed on the DSL's `schedule ... warps=` (a field with a source
    # location; issue 15 item 7), not on the tile name
    for kw, field in (({"warps_m": 0}, "tile.warps_m"), ({"tiles_n": -1}, "tile.tiles_n"),
                      ({"warps_m": 8, "warps_n": 8}, "schedule.warps"), ({"selector": 4}, "sparsity.selector")):
        with pytest.raises(SpecError) as e:
            emit_mma_sp_kernel(MmaSpKernelConfig("k", f, "sm_80", **kw))
        assert e.value.field == field
    with pytest.raises(SpecError) as e:
        emit_mma_sp_kernel(MmaSpKernelConfig("1bad", f, "sm_80"))
    assert e.value.field == "name"
    fp8 = find_form("m16n8k64", "e4m3", "e4m3", "f32", "f32")
    with pytest.raises(SpecError) as e:
        emit_mma_sp_kernel(MmaSpKernelConfig("k", fp8, "sm_86"))
    assert e.value.field == "target" and "sm_89" in e.value.message
    with pytest.raises(SpecError) as e:
        emit_mma_sp_kernel(MmaSpKernelConfig("k", fp8, "sm_89", (8, 3)))
    assert e.value.field == "ptx"
    nv = find_form("m16n8k128", "e2m1", "e2m1", "f32", "f32", "mxf4nvf4", scale_vec="4X", scale_type="ue8m0")
    with pytest.raises(SpecError, match="9.1"):
        emit_mma_sp_kernel(MmaSpKernelConfig("k", nv, "sm_120a"))


def test_abi_and_launch_geometry():
    f = find_form("m16n8k64", "s8", "u8", "s32", "s32")
    k = emit_mma_sp_kernel(MmaSpKernelConfig("gemm", f, "sm_90", warps_m=2, warps_n=2, tiles_m=2, tiles_n=3))
    abi = k.abi
    assert [p["name"] for p in abi["params"]] == ["a_values", "a_metadata", "b", "c", "d", "M", "N", "K"]
    assert [p["type"] for p in abi["params"]] == ["u64"] * 5 + ["u32"] * 3
    # CTA tile = (16 * tiles_m * warps_m) x (8 * tiles_n * warps_n) = 64 x 48, K step 64
    assert (abi["tile_m"], abi["tile_n"], abi["tile_k"]) == (64, 48, 64)
    assert k.block == (128, 1, 1) and abi["block"] == [128, 1, 1]
    assert k.grid(128, 96, 256) == (2, 2, 1)
    with pytest.raises(SpecError) as e:
        k.grid(100, 96, 256)
    assert e.value.field == "shape.M"
    assert abi["buffers"]["a_metadata"]["shape"] == ["M/16", "K/64", 32]
    assert abi["instruction"] == "mma.sp::ordered_metadata.sync.aligned.m16n8k64.row.col.s32.s8.u8.s32"
    assert abi["ptx_version"] == "8.5" and ".version 8.5\n.target sm_90\n" in k.text
    static = emit_mma_sp_kernel(MmaSpKernelConfig("g2", f, "sm_90",
                                                  static_metadata=static_metadata(f.layout, "last_two")))
    assert "a_metadata" not in [p["name"] for p in static.abi["params"]]
    assert static.abi["metadata"] == "static"


def test_deterministic_output():
    for f in ROW_REPRESENTATIVES:
        target = _min_target(f)
        cfg = MmaSpKernelConfig("k", f, target, tiles_m=2, tiles_n=2,
                                static_metadata=static_metadata(f.layout, "rotate"))
        assert emit_mma_sp_kernel(cfg).text == emit_mma_sp_kernel(cfg).text


def test_block_scaled_kernels_read_sfa_sfb():
    """Block-scaled forms take SFA/SFB buffers (PTX 9.7.14.3): per k-step each lane loads the `vector`
    scale bytes of its row (SFA row m0 + 16i + g + 8*(t&1), SFB row n0 + 8q + g) in one load of vector
    bytes, and the instruction reads them with {byte-id 0, thread-id 0}."""
    mx = find_form("m16n8k64", "e4m3", "e2m1", "f32", "f32", "mxf8f6f4")                       # 1X
    nv4 = find_form("m16n8k128", "e2m1", "e2m1", "f32", "f32", "mxf4nvf4", scale_type="ue4m3")  # 4X
    nv2 = find_form("m16n8k128", "e2m1", "e2m1", "f32", "f32", "mxf4nvf4", scale_vec="2X")
    for form, load, blk in ((mx, "ld.global.u8", 64), (nv2, "ld.global.u16", 64), (nv4, "ld.global.b32", 32)):
        k = emit_mma_sp_kernel(MmaSpKernelConfig("k", form, "sm_120a", tiles_m=2, tiles_n=2))
        assert [p["name"] for p in k.abi["params"]][:7] == ["a_values", "a_metadata", "b", "c", "d", "sfa", "sfb"]
        # blk = K step / vector: 64 / 1, 128 / 2, 128 / 4 (Table 35: scale_A is M x vector)
        assert k.abi["buffers"]["sfa"]["shape"] == ["M", f"K/{blk}"]
        assert k.abi["buffers"]["sfb"]["shape"] == ["N", f"K/{blk}"]
        assert k.abi["buffers"]["sfa"]["element"] == form.block_scale.scale_type
        assert f"{load} %sa1, [%psa1];" in k.text and f"{load} %sb1, [%psb1];" in k.text
        assert ", %sa1, {0, 0}, %sb0, {0, 0};" in k.text
        assert "0x7f7f7f7f" not in k.text and "0x38383838" not in k.text     # no unit scales left


def test_hw_check_host_side_dry_run():
    """tests/gpu/harness/mma_sp_hw.py without a GPU: kernels emitted, data compressed and packed, static
    tables checked against the data, references computed (keeps the GPU proof from rotting in CI)."""
    from tests.gpu.harness import mma_sp_hw as mod
    assert len(mod.runnable_forms(90)) == 44 and len(mod.runnable_forms(80)) == 40    # fp8 needs sm_89
    lines = []
    results = mod.run_checks(quick=True, name_filter="m16n8k32.f32.", dry_run=True, log=lines.append)
    assert {r.form for r in results} == {"m16n8k32.f32.f16.f16.f32", "m16n8k32.f32.bf16.bf16.f32"}
    assert all(r.cases and not r.failures for r in results) and len(lines) == 2
