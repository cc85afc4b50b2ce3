"""K = 96 tcgen05 MMAs end to end: dense kind::mxf4 / mxf4nvf4 of a CTA pair (M = 256), sm_103a only.

Facts checked (PTX ISA 9.0/9.1 sections):
- Table 39 (9.7.16.2.1): K = 96 is its own row, dense mxf4 / mxf4nvf4, cta_group::2, M = 256, N = 16..256/16;
  Table 60: "K shape value 96: 8.8 sm_103a"; Table 44 bit 31 "K Dimension" = 1 selects it.
- 9.7.16.3.1.2: a 48-byte K step "would overflow the 128B shared memory boundary if the data is packed
  contiguously"; the absolute-address LBO mode (descriptor bit 52) splits it in two chunks "laid out within
  the aligned 128-byte address boundary", LBO = the address of the second; 9.7.16.3.1.2.1: 128B swizzle
  (16-byte atomicity), K-major, base offset 0 only.
- 9.7.16.10.7.2.4-.5 / .3.4-.5: block32 -> three scale factors per row and MMA, block16 -> six; the SF ID is
  the byte offset in the TMEM word (Figures 243-258 draw SFB_ID 0-3 for block32, 0 and 2 for block16).

How tilec places the data (compiler/passes/layout_selection.py, compiler/isa/tmem.py): the 48-byte
steps are packed along K in 128B-swizzled K atoms, a step past the end of a 128-byte row continuing at line 0
of the next atom (as CUTLASS's SM103 mainloop does), so a stage is 768 K (8 MMAs, 3 rows of 128 bytes).
The kernels are run on the CPU emulator (compiler/emulator/tcgen05.py), which reads shared memory through the
descriptors with the independent reference model (compiler/sim/smem.py), against a layout-free reference D.
Nothing here ran on Blackwell silicon.
"""
from __future__ import annotations

import os
import re
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pytest

from compiler.diagnostics import CompileError
from compiler.driver import compile_source
from compiler.isa.tcgen05_forms import TCGEN05_TARGETS, all_forms

ROOT = Path(__file__).resolve().parent.parent
ROW = 128                      # bytes of one 128B-swizzle row (9.7.16.3.3 K-major 128B atom: 8 rows x 128 B)
STEP = 96 * 4 // 8             # bytes of one K = 96 step of packed e2m1 (PTX 9.7.16.10.4: two per byte) = 48
VEC = {"block16": "vec=16", "block32": "vec=32", "implicit": ""}
SCALE_TYPE = {"block16": "ue4m3", "block32": "ue8m0", "implicit": "ue8m0"}   # Table 55: ue4m3 only with block16


def k96_tile(name: str = "k", kind: str = "mxf4", block_scale: str = "block32", n: int = 64, loop: int = 768,
             a_space: str = "smem", collector: str | None = None, target: str = "sm_103a",
             extra: tuple[str, ...] = ()) -> str:
    engine = f"engine tcgen05 kind={kind} cta_group=2" + (f" collector={collector}" if collector else "")
    st = SCALE_TYPE[block_scale]
    body = [f"{engine};", f"shape M=256 N={n} K=96;", f"loop K={loop};", f"A: e2m1 {a_space};", "B: e2m1 smem;",
            "D: f32 tmem;", f"SFA: {st} tmem;", f"SFB: {st} tmem;", f"block_scale {VEC[block_scale]};".replace(" ;", ";"),
            *extra]
    return f"target {target};\ntile {name} {{\n" + "".join(f"  {line}\n" for line in body) + "}\n"


def _op(result, tile: str, name: str, sym: str | None = None):
    op = result.tiles[tile].op(name, sym)
    assert op is not None, (name, sym)
    return op


# --------------------------------------------------------------------------------------------------
# Descriptors

def test_instruction_descriptor_sets_bit_31():
    """Table 44 bit 31 = 1 for every MMA of a K = 96 tile, read back by the reference model's own decoder
    (compiler/sim/tcgen05.decode_instr_desc: K = 96)."""
    from compiler.sim.tcgen05 import decode_instr_desc

    for kind, vec in (("mxf4", "block32"), ("mxf4", "implicit"), ("mxf4nvf4", "block16"), ("mxf4nvf4", "block32")):
        result = compile_source(k96_tile(kind=kind, block_scale=vec), "k.tile")
        op = _op(result, "k", "tilec.instr_desc")
        values = [int(v) for v in op.attrs.get("step_values", (op.attrs["value"],))]
        for v in values:
            assert v >> 31 == 1, hex(v)
            f = decode_instr_desc(v, kind)
            assert (f.k, f.m, f.n, f.sparse) == (96, 256, 64, False)


@pytest.mark.parametrize("operand", ["A", "B"])
def test_smem_descriptors_use_the_absolute_lbo_mode(operand):
    """Each step's descriptor, decoded by the reference model (compiler/sim/smem.decode_smem_desc): 128B swizzle,
    bit 52 = 1, base offset 0 (9.7.16.3.1.2.1), SBO = 8 rows x 128 B (9.7.16.3.2), start = the step's first byte,
    LBO = line 0 of the next K atom. Derivation: K-major 128B atoms are 8 rows x 128 B, repeated along MN first
    (rows / 8 atoms = rows * 16 bytes per K atom), then along K; step s starts at K byte 48s, in atom
    48s // 128, at byte 48s % 128 of the row."""
    from compiler.sim.smem import decode_smem_desc

    result = compile_source(k96_tile(n=128), "k.tile")
    layout = _op(result, "k", "tilec.smem_layout", operand)
    desc = _op(result, "k", "tilec.smem_desc", operand)
    rows = {"A": 256 // 2, "B": 128 // 2}[operand]                  # per CTA of the pair: M/2, N/2
    atom_bytes = rows * ROW
    assert desc.attrs["lbo_mode"] == "absolute" and len(desc.attrs["values"]) == 8
    for s, value in enumerate(int(v) for v in desc.attrs["values"]):
        f = decode_smem_desc(value)
        atom, within = divmod(STEP * s, ROW)
        assert (f.swizzle.name, f.lbo_mode, f.base_offset, f.sbo) == ("128B", 1, 0, 8 * ROW)
        assert f.start_address == layout.attrs["offset"] + atom * atom_bytes + within
        assert f.lbo == layout.attrs["offset"] + (atom + 1) * atom_bytes


def test_each_step_is_two_pieces_inside_aligned_128_byte_rows():
    """9.7.16.3.1.2: "both these chunks are laid out within the aligned 128-byte address boundary". Through
    the reference model's address map (compiler/sim/smem.chunk_addresses) every row of every step touches one
    aligned 128-byte row, or two when 48s % 128 + 48 > 128 (steps 2 and 5 of a stage: 96 + 48 and 112 + 48)."""
    from compiler.sim.smem import chunk_addresses

    result = compile_source(k96_tile(), "k.tile")
    values = [int(v) for v in _op(result, "k", "tilec.smem_desc", "A").attrs["values"]]
    crossing = []
    for s, value in enumerate(values):
        addresses = chunk_addresses(value, "K", 128, STEP // 16)        # 128 rows x 3 chunks of 16 B
        rows_touched = {len(set(int(a) // ROW for a in row)) for row in addresses}
        assert rows_touched <= {1, 2}
        if rows_touched == {2}:
            crossing.append(s)
        assert len({int(a) for a in addresses.ravel()}) == addresses.size      # no chunk read twice
    assert crossing == [s for s in range(8) if STEP * s % ROW + STEP > ROW] == [2, 5]


# --------------------------------------------------------------------------------------------------
# Scale factors in TMEM

@pytest.mark.parametrize("kind,vec,nsf,stride,ids", [
    # block32: 3 factors (9.7.16.10.7.2.4); Table 44 SF IDs are 0 or 2, so a 4-byte step keeps every MMA at ID 0
    ("mxf4", "block32", 3, 4, [0] * 8),
    ("mxf4", "implicit", 3, 4, [0] * 8),
    # block16: 6 factors (9.7.16.10.7.2.5), 6-byte steps: IDs (6s) % 4 = 0, 2, 0, 2, ...
    ("mxf4nvf4", "block16", 6, 6, [0, 2] * 4),
])
def test_k96_scale_factor_layout(kind, vec, nsf, stride, ids):
    from compiler.isa.descriptors import CODES
    from compiler.isa.tmem import data_path, scale_layouts

    sfa, sfb = scale_layouts(kind, vec, data_path(256, 2), 128, k96=True)
    for lay, slices in ((sfa, 4), (sfb, 4)):                      # 128 rows of A per CTA; N = 128 columns of B
        assert (lay.nsf, lay.step_bytes, lay.slices) == (nsf, stride, slices)
        got = [lay.step_position(s) for s in range(8)]
        assert [i for _, i in got] == ids
        assert [c for c, _ in got] == [(stride * s // 4) * slices for s in range(8)]
        # the IDs are ones the descriptor can hold (Table 44) and PTX draws (block32: 0-3, block16: 0 and 2)
        assert set(ids) <= set(CODES[kind]["a_scale_id"]) & ({0, 2} if nsf == 6 else {0, 1, 2, 3})
        # every factor of every MMA has its own stream byte inside the stage's columns
        owners = [lay.byte_source(b) for b in range(lay.stream_bytes(8))]
        assert sorted(o for o in owners if o) == [(s, j) for s in range(8) for j in range(nsf)]
        assert lay.columns(8) == -(-lay.stream_bytes(8) // 4) * slices


# --------------------------------------------------------------------------------------------------
# Kernels on the CPU emulator

def _emulate(text: str, m_tiles: int, n_tiles: int, seed: int, shared_base: int = 1024, ptx: str | None = None):
    from compiler.emulator.tcgen05 import host_problem, reference_d, run_kernel

    result = compile_source(text, "k.tile")
    problem = host_problem(result, m_tiles=m_tiles, n_tiles=n_tiles, seed=seed)
    machine = run_kernel(ptx or result.ptx, problem.args, problem.grid, problem.entry, shared_base=shared_base)
    raw = machine.gmem.array("D")
    got = raw.view(np.float32).reshape(problem.args["m_total"], problem.args["n_total"])
    return result, problem, machine, got, reference_d(problem)


EMULATED = {
    # block32 (3 factors per 4-byte group), two tiles along M
    "mxf4_block32": (k96_tile(n=32), 2, 1),
    # the omitted vector size (= block32) with collector reuse: a ::fill MMA then ::use
    "mxf4_implicit_use": (k96_tile(block_scale="implicit", n=32, collector="a::use"), 1, 2),
    # block16 UE4M3 (6 factors, SF IDs 0/2, factors crossing words); A alone is 128 rows x 768 B = 96 KB per
    # CTA, over layout-selection's stage budget with B -> two stages of 768 K
    "mxf4nvf4_block16_2stages": (k96_tile(kind="mxf4nvf4", block_scale="block16", n=48, loop=1536), 1, 1),
    # A in TMEM: 12 columns per MMA
    "mxf4nvf4_block32_a_tmem": (k96_tile(kind="mxf4nvf4", n=32, a_space="tmem"), 1, 2),
    "mxf4nvf4_block16_a_tmem_lastuse": (k96_tile(kind="mxf4nvf4", block_scale="block16", n=16, a_space="tmem",
                                                 collector="a::lastuse"), 2, 1),
}


@pytest.mark.parametrize("name", sorted(EMULATED))
def test_kernel_computes_d_on_the_emulator(name):
    """The whole kernel (copies into the 128B-swizzled stage, absolute-LBO descriptors relocated by a
    shared base of 1024, scale factors and A staged in TMEM, 8 MMAs per stage, epilogue) gives exactly
    D = (A * sA)(B * sB)^T of the host operands (small exact values)."""
    text, m_tiles, n_tiles = EMULATED[name]
    result, _, machine, got, want = _emulate(text, m_tiles, n_tiles, seed=sorted(EMULATED).index(name))
    stages = result.tiles["k"].payload.total_k // result.tiles["k"].facts["k_block"]
    assert stages == (2 if name.endswith("2stages") else 1)
    assert machine.mma_count >= 8 * stages * m_tiles * n_tiles
    bad = np.argwhere(got != want)
    assert not len(bad), f"{len(bad)} of {got.size} differ, first {bad[:3].tolist()}"


def test_shared_memory_holds_each_step_where_its_descriptor_says():
    """The staged operands read back through the kernel's own descriptors (relocated by the buffer address)
    with the reference model's reader (compiler/sim/smem.read_operand_bits) are exactly the host's e2m1
    codes of each MMA's K range, for both CTAs of the pair (as tests/test_sim_sweep.py does for layouts)."""
    from compiler.sim.numerics import encode
    from compiler.sim.smem import read_operand_bits

    base = 1024
    result, problem, machine, _, _ = _emulate(k96_tile(n=32), 1, 1, seed=7, shared_base=base)
    descs = {n: [int(v) for v in _op(result, "k", "tilec.smem_desc", n).attrs["values"]] for n in "AB"}
    # the kernel adds (base >> 4) to the start field and, in absolute mode, to the LBO field (bits 16-29)
    reloc = (base >> 4) | (base >> 4) << 16
    codes = {"A": encode(problem.a, "e2m1"), "B": encode(problem.b, "e2m1")}
    rows = {"A": 128, "B": 16}
    assert len(machine.smem_snapshots) == 2
    for (ctaid, smem) in machine.smem_snapshots:
        rank = ctaid[0] % 2
        for name in "AB":
            for s, desc in enumerate(descs[name]):
                got = read_operand_bits(smem, desc + reloc, "e2m1", "K", rows[name], 96, kind="mxf4")
                want = codes[name][rank * rows[name]:(rank + 1) * rows[name], 96 * s:96 * (s + 1)]
                np.testing.assert_array_equal(got, want, err_msg=f"{name} step {s} CTA {rank}")


def _first_idesc(ptx: str) -> str:
    return re.search(r"mov\.b32 %r\d+, (0x[89a-f][0-9a-f]{7});", ptx).group(1)


def _descriptors(ptx: str) -> list[str]:
    return re.findall(r"add\.u64 %rd\d+, %rd\d+, (0x4010[0-9a-f]{12});", ptx)     # A0, B0, A1, B1, ...


def _mutate(ptx: str, what: str) -> str:
    if what == "idesc_k64":                  # bit 31 cleared: the MMA would be a K = 64 one
        v = _first_idesc(ptx)
        return ptx.replace(v, f"{int(v, 16) & 0x7FFFFFFF:#010x}")
    if what == "relative_lbo":               # step 2's A descriptor without bit 52
        v = _descriptors(ptx)[4]
        return ptx.replace(v, f"{int(v, 16) & ~(1 << 52):#018x}", 1)
    if what == "second_piece":               # step 2's A LBO one 128-byte row further
        v = _descriptors(ptx)[4]
        return ptx.replace(v, f"{int(v, 16) + (8 << 16):#018x}", 1)
    if what == "lbo_not_relocated":          # the buffer address added to the start field only
        m = re.search(r"shl\.b64 (%rd\d+), (%rd\d+), 16;\n\tor\.b64 \1, \1, \2;", ptx)
        return ptx.replace(m.group(0), f"mov.b64 {m.group(1)}, {m.group(2)};")
    if what == "sf_group":                   # MMA 1's SFA address at MMA 0's group
        return re.sub(r"(add\.u32 %r\d+, %r\d+, )36;", r"\g<1>32;", ptx, count=1)
    raise AssertionError(what)


@pytest.mark.parametrize("what", ["idesc_k64", "relative_lbo", "second_piece", "lbo_not_relocated", "sf_group"])
def test_emulator_detects_wrong_k96_kernels(what):
    """The emulated check is not vacuous: one wrong K = 96 detail changes D (or is rejected)."""
    from compiler.diagnostics import SpecError
    from compiler.emulator.tcgen05 import EmulationError

    text = k96_tile(n=32)
    result = compile_source(text, "k.tile")
    bad_ptx = _mutate(result.ptx, what)
    assert bad_ptx != result.ptx
    try:
        _, _, _, got, want = _emulate(text, 1, 1, seed=11, ptx=bad_ptx)
    except (SpecError, EmulationError):
        return
    assert not np.array_equal(got, want)


def test_smem_dump_variant_matches_the_kernels_shared_memory():
    """The sm_90a smem-dump kernel of a K = 96 tile writes the same stage images the tcgen05 kernel's MMAs
    read (the Hopper-side check of copies and layouts, compiler/ptx/tcgen05_kernel.py)."""
    from compiler.emulator.tcgen05 import host_problem, run_kernel

    text = k96_tile(n=16, loop=1536)
    real = compile_source(text, "k.tile")
    dump = compile_source(text, "k.tile", options={"variant": "smem-dump"})
    problem = host_problem(real, seed=5)
    machine = run_kernel(real.ptx, problem.args, problem.grid, "k")
    abi = dump.to_json()["tiles"]["k"]["kernel"]
    size, stages = abi["smem_dump"]["smem_bytes"], abi["smem_dump"]["n_stages"]
    gx, gy = problem.grid
    args = dict(problem.args, S=np.zeros(gx * gy * stages * size, dtype=np.uint8))
    images = run_kernel(dump.ptx, args, problem.grid, "k").gmem.array("S").reshape(gy * gx, stages, size)
    seen: dict = {}
    for (x, y), smem in machine.smem_snapshots:
        stage = seen.get((x, y), 0)
        seen[(x, y)] = stage + 1
        assert np.array_equal(images[y * gx + x, stage], smem[:size]), (x, y, stage)
    assert stages == 2 and set(seen.values()) == {2}


# --------------------------------------------------------------------------------------------------
# ptxas

def _form_tile(form, name: str) -> str:
    return k96_tile(name=name, kind=form.kind, block_scale=form.block_scale,
                    a_space="tmem" if form.a_in_tmem else "smem", collector=form.collector)


def test_every_k96_form_assembles_for_sm_103a(ptxas):
    """All K = 96 forms of tcgen05_forms.all_forms() (kind x vector size x A space x collector usage) in one
    module, assembled by ptxas -arch=sm_103a."""
    forms = [f for f in all_forms() if f.k96]
    assert len(forms) == 40
    bodies = []
    for i, form in enumerate(forms):
        result = compile_source(_form_tile(form, f"k{i}"), f"k{i}.tile")
        assert result.module.attrs["ptx_version"] == "8.8"
        assert form.opcode() in result.ptx
        bodies.append(result.ptx.partition(".address_size 64\n")[2])
    text = ".version 8.8\n.target sm_103a\n.address_size 64\n" + "".join(bodies)
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "k96.ptx"
        src.write_text(text)
        proc = subprocess.run([ptxas, "-O0", "-arch=sm_103a", "-o", os.devnull, str(src)],
                              capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[:2000]


def test_example_assembles(ptxas):
    result = compile_source((ROOT / "examples" / "tcgen05_k96.tile").read_text(), "tcgen05_k96.tile")
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "e.ptx"
        src.write_text(result.ptx)
        proc = subprocess.run([ptxas, "-arch=sm_103a", "-o", os.devnull, str(src)], capture_output=True, text=True,
                              timeout=300)
    assert proc.returncode == 0, proc.stderr[:2000]


# --------------------------------------------------------------------------------------------------
# Diagnostics: every illegal K = 96 combination is rejected at the statement that breaks it

NEGATIVE = [
    # (what, tile text, the source text the caret must point at, message fragment)
    ("target sm_100a", k96_tile(target="sm_100a"), "sm_100a", "K = 96 is not available on sm_100a; use sm_103a"),
    ("target sm_110a", k96_tile(target="sm_110a"), "sm_110a", "K = 96 is not available on sm_110a"),
    ("cta_group::1", k96_tile().replace("cta_group=2", "cta_group=1").replace("M=256", "M=128"), "1",
     "K = 96 needs cta_group::2"),
    ("M = 128", k96_tile().replace("M=256", "M=128"), "128", "valid M: 256"),
    ("N = 8", k96_tile().replace("N=64", "N=8"), "8", "valid N: 16..256 in steps of 16"),
    ("kind::mxf8f6f4", k96_tile().replace("mxf4", "mxf8f6f4").replace("A: e2m1", "A: e4m3")
     .replace("B: e2m1", "B: e4m3"), "96", "K = 96 exists only for kind::mxf4 / mxf4nvf4"),
    ("kind::f16", "target sm_103a;\ntile k {\n  engine tcgen05 kind=f16 cta_group=2;\n  shape M=256 N=64 K=96;\n"
     "  A: f16 smem;\n  B: f16 smem;\n  D: f32 tmem;\n}\n", "96", "not kind::f16"),
    ("sparse", k96_tile(extra=("sparsity 4:8 metadata=runtime;",)), "sparsity", "K = 96 needs a dense A"),
    ("scale_vec::2X", k96_tile().replace("vec=32", "vec=2X"), "2X", "K = 96 needs .block16 or .block32"),
    ("scale_vec::4X", k96_tile(kind="mxf4nvf4", block_scale="block16").replace("vec=16", "vec=4X"), "4X",
     "K = 96 needs .block16 or .block32"),
    ("swizzle 32B", k96_tile().replace("B: e2m1 smem", "B: e2m1 smem swizzle=32B"), "32B", "only the 128B swizzle"),
    ("swizzle none", k96_tile().replace("A: e2m1 smem", "A: e2m1 smem swizzle=none"), "none",
     "only the 128B swizzle"),
    ("MN-major A", k96_tile().replace("A: e2m1 smem", "A: e2m1 smem major=MN"), "MN", "MN-major"),
    ("loop K 384", k96_tile(loop=384), "384", "multiple of 768"),
    ("no loop", k96_tile().replace("  loop K=768;\n", ""), "96", "multiple of 768"),
    (".ws", k96_tile().replace("cta_group=2", "cta_group=1 ws").replace("M=256", "M=128"), "1",
     "K = 96 needs cta_group::2"),
]


@pytest.mark.parametrize("what,text,token,message", NEGATIVE, ids=[n[0] for n in NEGATIVE])
def test_illegal_k96_tiles_are_located_diagnostics(what, text, token, message):
    with pytest.raises(CompileError) as err:
        compile_source(text, "k.tile")
    diag = err.value.diagnostics[0]
    assert message in diag.message, diag.message
    assert diag.loc is not None, what
    line = text.splitlines()[diag.loc.line - 1]
    assert line[diag.loc.col - 1:].startswith(token), (what, line, diag.loc.col)


def test_k96_compiles_only_for_sm_103a():
    """Table 60 row "K shape value 96: 8.8 sm_103a": every other tcgen05 target is rejected at `target`."""
    for target in sorted(TCGEN05_TARGETS):
        text = k96_tile(target=target)
        if target == "sm_103a":
            assert compile_source(text, "k.tile").module.attrs["ptx_version"] == "8.8"
            continue
        with pytest.raises(CompileError) as err:
            compile_source(text, "k.tile")
        assert err.value.diagnostics[0].loc.line == 1, target
