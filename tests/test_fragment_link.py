"""Fragments link into CUDA C++ (issue 16): a `.cu` caller compiled by nvcc with `-rdc=true` calls a fragment
of every engine and kind `--emit func` accepts, and nvcc links it into an executable (nvlink resolves each
`extern "C"` call and compares the caller's `.extern .func` prototype with the fragment's definition).

One caller and one fragment module per target (sm_80 / sm_89 / sm_120a: every row of the mma.sp form
table, block-scaled ones included; sm_90a: examples/sparse_f16.tile through `tilec compile --emit func`;
sm_100a: the tcgen05 kinds), built in parallel. The recipe is the README's ("Embedding": from `.tile` to
executable) as tests/gpu/harness/nvcc_link.py writes it.
"""
import re
import tempfile
from functools import cache
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from compiler import OperandSpec, SparsitySpec, TileSpec, emit_fragment, emit_fragments, link_fragments, parse_source
from tests.gpu.harness.nvcc_link import (NvccError, caller_source, compile_caller, compile_fragments,
                                         link_executable)

ROOT = Path(__file__).resolve().parents[1]


@cache
def _mma_sp_fragments() -> dict[str, list]:
    """(Built once per session, as the other builders here: shared by tests/test_fragment_header.py.) Every form of compiler/isa/mma_sp/forms.py (PTX ISA 9.7.14.6.3) that the pinned ptxas can take, as a
    two-K-step fragment on its first target; block-scaled forms with their SFA/SFB scale registers (PTX ISA
    9.7.14.3)."""
    from compiler.isa.mma_sp.forms import all_forms
    from compiler.isa.targets import MAX_PTX
    from tests.test_fragments import mma_sp_tile

    by_target: dict[str, list] = {}
    for i, form in enumerate(f for f in all_forms() if f.min_ptx <= MAX_PTX):
        target = form.row.target_rule.targets()[0]
        extra = {}
        if form.block_scale is not None:
            extra = {"block_scale": f"scale_vec::{form.block_scale.scale_vec}"}
        tile = mma_sp_tile("t", ab=form.a_type, cd=form.c_type, k=form.k, k_total=2 * form.k, kind=form.kind,
                           saturate=form.satfinite,
                           sparsity=SparsitySpec(form.granularity.name, selector=max(form.selectors)), **extra)
        tile.operands["B"] = OperandSpec(form.b_type, "global")
        if form.block_scale is not None:
            scale = OperandSpec(form.block_scale.scale_type, "reg")
            tile.operands.update(SFA=scale, SFB=scale)
        by_target.setdefault(target, []).append(emit_fragment(tile, target, prefix=f"form{i}_"))
    return by_target


@cache
def _tcgen05_fragments() -> list:
    """The tcgen05 kinds a fragment takes (Table 39: f16, tf32, f8f6f4, i8; dense and sparse; .ws)."""
    from tests.test_fragments import TCGEN05_SWEEP, tcgen05_tile

    fragments = []
    for i, (dtype, d, m, n, k, k_total, swizzle, majors, extra) in enumerate(TCGEN05_SWEEP):
        tile = tcgen05_tile("t", dtype=dtype, d=d, m=m, n=n, k=k, k_total=k_total, swizzle=swizzle, **extra)
        for name, major in zip("AB", majors):
            tile.operands[name] = OperandSpec(dtype, "smem", major, swizzle)
        fragments.append(emit_fragment(tile, "sm_100a", prefix=f"sweep{i}_"))
    sparse_i8 = TileSpec("spi8", "tcgen05", 128, 64, 64, {"A": OperandSpec("s8", "smem"),
                                                          "B": OperandSpec("s8", "smem"),
                                                          "D": OperandSpec("s32", "tmem")},
                         k_total=128, sparsity=SparsitySpec("2:4"))
    fragments.append(emit_fragment(sparse_i8, "sm_100a"))
    return fragments


@cache
def _issue_fragment() -> list:
    """The fragment of the issue: examples/sparse_f16.tile (m16n8k32 f16, f32 C/D, 2:4, loop K = 64) for sm_90a."""
    text = (ROOT / "examples" / "sparse_f16.tile").read_text()
    return emit_fragments(parse_source(text.replace("target sm_80;", "target sm_90a;"), "sparse_f16.tile"),
                          source=text)


def _link(nvcc: str, target: str, fragments: list, workdir: Path) -> Path:
    caller = compile_caller(nvcc, caller_source(fragments), target, workdir)
    frags = compile_fragments(nvcc, link_fragments(fragments), target, workdir)
    return link_executable(nvcc, [caller, frags], target, workdir)


def test_every_fragment_kind_links_with_an_nvcc_caller(nvcc):
    groups = {**_mma_sp_fragments(), "sm_90a": _issue_fragment(), "sm_100a": _tcgen05_fragments()}
    assert set(groups) == {"sm_80", "sm_89", "sm_90a", "sm_100a", "sm_120a"}
    assert any(p.name == "sa0" for f in groups["sm_120a"] for p in f.params)     # block-scaled ones are there
    for fragments in groups.values():            # what nvcc declares for a C++ scalar (see _nvcc_prototype)
        assert {p.type for f in fragments for p in f.params} == {"b32"}
    with tempfile.TemporaryDirectory() as d, ThreadPoolExecutor() as pool:
        jobs = {}
        for target, fragments in groups.items():
            (Path(d) / target).mkdir()
            jobs[target] = pool.submit(_link, nvcc, target, fragments, Path(d) / target)
        for target, job in jobs.items():
            assert job.result().is_file(), target


def test_nvcc_declares_every_32_bit_scalar_b32(nvcc):
    """What the fragments' `.param .b32` follows: nvcc's own `.extern .func` for the C++ prototype of a
    float / int / unsigned parameter and a float4 result (CUDA C++ -> PTX, `nvcc -rdc=true -ptx`)."""
    (f,) = _issue_fragment()
    with tempfile.TemporaryDirectory() as d:
        Path(d, "c.cu").write_text(caller_source([f]))
        from tests.gpu.harness.nvcc_link import gencode, run_nvcc

        run_nvcc(nvcc, [*gencode("sm_90a"), "-rdc=true", "-ptx", "c.cu", "-o", "c.ptx"], d)
        ptx = Path(d, "c.ptx").read_text()
    extern = ptx[ptx.index(f".extern .func"):].split(";")[0]
    nvcc_types = re.findall(rf"\.param \.(\w+) {f.name}_param_\d+", extern)
    assert nvcc_types == ["b32"] * len(f.params) == [p.type for p in f.params]
    assert re.search(r"\(\.param \.align 16 \.b8 \w+\[16\]\)", extern)        # float4 D
    assert f.signature().count(".param .b32 ") == len(f.params)
    assert f.result.declaration().startswith(".param .align 16 .b8 ") and f.result.bytes == 16


def test_a_float_typed_param_does_not_link(nvcc):
    """The check is real: the fragment with its C registers declared `.param .f32` (as tilec wrote it
    before) is refused by nvlink against the same caller."""
    (f,) = _issue_fragment()
    ptx = link_fragments([f])
    old = re.sub(rf"\.param \.b32 ({f.name}_param_c\d)\b", r".param .f32 \1", ptx)
    assert old.count(".param .f32 ") == 4
    with tempfile.TemporaryDirectory() as d:
        caller = compile_caller(nvcc, caller_source([f]), "sm_90a", Path(d))
        frags = compile_fragments(nvcc, old, "sm_90a", Path(d))
        with pytest.raises(NvccError, match="Prototype doesn't match"):
            link_executable(nvcc, [caller, frags], "sm_90a", Path(d))


def _nvcc_ptx(nvcc: str, cu: str, target: str = "sm_90a") -> str:
    from tests.gpu.harness.nvcc_link import gencode, run_nvcc

    with tempfile.TemporaryDirectory() as d:
        Path(d, "caller.cu").write_text(cu)
        run_nvcc(nvcc, [*gencode(target), "-rdc=true", "-ptx", "caller.cu", "-o", "caller.ptx"], d)
        return Path(d, "caller.ptx").read_text()


def test_link_fragments_takes_nvcc_ptx_as_it_comes(nvcc, ptxas):
    """nvcc's whole module (its own .version 9.0 / .target sm_90a / .address_size 64 header and an .extern
    .func of the fragment) with an sm_80 fragment of PTX 8.5: one header with the newer version and the
    target that holds both (sm_80 code runs on sm_90a; PTX ISA 11.1.2 .target), the declaration checked and
    dropped, and the module assembles on its own (ptxas without -c: the call resolves inside it)."""
    from compiler.ptxas import assemble

    spec = parse_source((ROOT / "examples" / "sparse_f16.tile").read_text())
    f = emit_fragment(spec.tiles[0], "sm_80")
    caller = _nvcc_ptx(nvcc, caller_source([f]))
    assert caller.count(".version ") == 1 and f".extern .func  (.param .align 16 .b8 func_retval0[16]) {f.name}" in caller
    ptx = link_fragments([f], ("caller.ptx", caller))
    assert re.findall(r"^\.(version|target|address_size) (\S+)$", ptx, flags=re.M) == [
        ("version", "9.0"), ("target", "sm_90a"), ("address_size", "64")]
    assert ".extern .func" not in ptx and ptx.count(f".visible .func (.param .align 16 .b8 {f.name}_param_d[16]) {f.name}(") == 1
    verdict = assemble(ptx, "sm_90a", ptxas)
    assert verdict.ok, verdict.output


@pytest.mark.parametrize("change, why", [
    # e1 declared 64-bit: nvcc writes .param .b64 for unsigned long long
    (lambda d: d.replace("unsigned e1)", "unsigned long long e1)"), r"parameter 21 \(e1\) is \.b64 there, \.b32 in"),
    (lambda d: d.replace(", unsigned e1)", ")"), "21 parameters declared, 22 defined"),
    (lambda d: d.replace("float4", "float2"), r"result \.align 8 \.b8\[8\] there, \.align 16 \.b8\[16\] in"),
])
def test_link_fragments_names_both_sides_of_a_prototype_mismatch(nvcc, change, why):
    from compiler import LinkError

    (f,) = _issue_fragment()
    decl = change(f.cpp_declaration())
    ret = decl.split("__device__ ")[1].split(" ")[0]
    args = ", ".join(f"in[{i}]" for i in range(decl.count(",") + 1))
    cu = decl + f'extern "C" __global__ void k(const unsigned *in, {ret} *out) {{ *out = {f.name}({args}); }}\n'
    with pytest.raises(LinkError, match=why) as e:
        link_fragments([f], ("caller.ptx", _nvcc_ptx(nvcc, cu)))
    assert f"between caller.ptx and fragment {f.name} (tile sparse_f16)" in e.value.message
    assert "caller.ptx: .extern .func" in e.value.message and e.value.hint.startswith("declare it as")
