"""`tilec compile --emit header` (compiler/ptx/fragment_header.py): the C++ header of the fragments.

Checked with nvcc: a `.cu` that includes the header and calls every fragment out of line, inlined, and (mma.sp)
through the register bundles compiles and links with the `--emit func` PTX, per engine and target; the
inlined kernels' PTX holds the MMA instructions and no `call`, and a relocatable cubin of inlined calls
leaves no undefined function for nvlink (an out-of-line one leaves the fragment). Labels in an inlined body
get nvcc's per-instance `%=` number, so two inlinings assemble.
"""
import os
import re
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

from compiler import link_fragments
from compiler.cli import main
from compiler.ptx.fragment_header import fragment_header, make_inline_asm
from tests.gpu.harness.nvcc_link import (compile_caller, compile_fragments, entry_bodies, gencode,
                                         header_caller_source, link_executable, run_nvcc, undefined_functions)
from tests.test_fragment_link import _issue_fragment, _mma_sp_fragments, _tcgen05_fragments

ROOT = Path(__file__).resolve().parents[1]


def test_cli_emit_header_is_deterministic_and_written_whole(tmp_path, capsys):
    out = tmp_path / "sparse_f16.h"
    src = str(ROOT / "examples" / "sparse_f16.tile")
    assert main(["compile", src, "--emit", "header", "-o", str(out)]) == 0
    first = out.read_bytes()
    assert main(["compile", src, "--emit", "header", "-o", str(out)]) == 0
    assert out.read_bytes() == first
    assert os.listdir(tmp_path) == ["sparse_f16.h"]          # no temporary file left beside it (files.py)
    assert main(["compile", src, "--emit", "header"]) == 0
    text = capsys.readouterr().out
    assert text.encode() == first
    assert 'extern "C" __device__ float4 tilec_sparse_f16_mma(float c0, ' in text
    assert "static __device__ __forceinline__ float4 tilec_sparse_f16_mma_inline(float c0, " in text
    assert main(["compile", str(ROOT / "tests" / "golden" / "goldens.py"), "--emit", "header"]) == 1


def test_header_lane_table_is_the_isa_layout():
    """The per-lane comment of the m16n8k32 f16 fragment, lane 5: g = 5 >> 2 = 1, t = 5 & 3 = 1 (PTX ISA
    9.7.14.6.2 groupID / threadID_in_group). C/D (f32 accumulators): c0, c1 at row g, columns 2t, 2t+1 =
    (1,2), (1,3); c2, c3 at row g+8 = 9. A (compressed 16 x 16 f16 = 8 words a row): registers 0..3 hold
    word t of row g, of row g+8, word t+4 of row g, of row g+8 = (1,1) (9,1) (1,5) (9,5). B: word t + 4j of
    column g = (1,1) (1,5) (1,9) (1,13). Metadata (two rows a word, a pair of threads supplies: t & 1 = 1
    gives chunks 4..7): nibbles 0..3 = row 1, chunks 4..7; 4..7 = row 9; selector 0 reads t = 0, 1."""
    (f,) = _issue_fragment()
    header = fragment_header([f])
    (line,) = [ln for ln in header.splitlines() if ln.startswith("//   lane  5: ")]
    assert line == ("//   lane  5: C/D (1,2) (1,3) (9,2) (9,3) | A (1,1) (9,1) (1,5) (9,5) | B (1,1) (1,5) (1,9) (1,13)"
                    " | e* (1,4) (1,5) (1,6) (1,7) (9,4) (9,5) (9,6) (9,7)")
    assert f.to_json()["lanes"]["c"][5] == [[[1, 2]], [[1, 3]], [[9, 2]], [[9, 3]]]


def _build(nvcc: str, target: str, fragments: list, workdir: Path) -> str:
    (workdir / "frag.h").write_text(fragment_header(fragments))
    cu = header_caller_source(fragments, "frag.h")
    caller = compile_caller(nvcc, cu, target, workdir)
    run_nvcc(nvcc, [*gencode(target), "-rdc=true", "-ptx", "caller.cu", "-o", "caller.ptx"], workdir)
    frags = compile_fragments(nvcc, link_fragments(fragments), target, workdir)
    link_executable(nvcc, [caller, frags], target, workdir)
    return (workdir / "caller.ptx").read_text()


def test_header_callers_link_and_inline_on_every_engine(nvcc):
    mma_sp = _mma_sp_fragments()
    groups = {"sm_80": mma_sp["sm_80"][::4], "sm_90a": _issue_fragment(), "sm_100a": _tcgen05_fragments()[::3],
              "sm_120a": [f for f in mma_sp["sm_120a"] if any(p.name == "sa0" for p in f.params)][::3]}
    with tempfile.TemporaryDirectory() as d, ThreadPoolExecutor() as pool:
        jobs = {}
        for target, fragments in groups.items():
            (Path(d) / target).mkdir()
            jobs[target] = pool.submit(_build, nvcc, target, fragments, Path(d) / target)
        for target, job in jobs.items():
            entries = entry_bodies(job.result())
            for f in groups[target]:
                opcode = "mma.sp" if f.engine == "mma.sp" else "tcgen05.mma"
                kinds = ("call", "inline") + (("bundle", "bundle_inline") if f.result else ())
                for kind in kinds:
                    body = entries[f"{kind}_{f.name}"]
                    if kind.endswith("inline"):
                        assert opcode in body and not re.search(r"\bcall(\.uni)?\b", body), (target, kind, f.name)
                    else:
                        assert re.search(rf"\bcall(\.uni)? .*\n?\s*{f.name},", body) and opcode not in body, \
                            (target, kind, f.name)


def test_inlined_call_leaves_nothing_for_nvlink(nvcc):
    (f,) = _issue_fragment()
    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "frag.h").write_text(fragment_header([f]))
        cu = header_caller_source([f], "frag.h")
        inline_only = header_caller_source([f], "frag.h", kinds=("inline", "bundle_inline"))
        for stem, text in (("both", cu), ("inline", inline_only)):
            Path(d, f"{stem}.cu").write_text(text)
            run_nvcc(nvcc, [*gencode("sm_90a"), "-rdc=true", "-cubin", f"{stem}.cu", "-o", f"{stem}.cubin"], d)
        assert undefined_functions(Path(d) / "both.cubin") == [f.name]
        assert undefined_functions(Path(d) / "inline.cubin") == []
        # and without -rdc (whole-program compilation) the inline variant needs no fragment object at all
        run_nvcc(nvcc, [*gencode("sm_90a"), "-cubin", "inline.cu", "-o", "whole.cubin"], d)


def test_inlined_labels_are_unique_per_inlining(nvcc):
    """A fragment body with a branch (none of today's has one: the transformation must still hold for the
    next): its label becomes `NAME_%=`, which nvcc numbers per asm instance, so a kernel that inlines the
    fragment twice assembles."""
    f = _tcgen05_fragments()[0]
    lines = f.text.split("\n")
    i = lines.index("\tret;")
    lines[i:i] = ["\t@%p0 bra $L_done;", "\tsetp.ne.u32 %p0, %r0, 1;", "$L_done:"]
    g = replace(f, text="\n".join(lines))
    asm = make_inline_asm(g)
    assert "@%%tl_p0 bra $L_done_%=;" in asm.template and "$L_done_%=:" in asm.template
    header = fragment_header([g])
    args = ", ".join(f"in[{k}]" for k in range(len(g.params)))
    cu = (f'#include "frag.h"\nextern "C" __global__ void twice(const unsigned *in) {{\n'
          f"    if (threadIdx.x == 0) {{ {g.name}_inline({args}); {g.name}_inline({args}); }}\n}}\n")
    with tempfile.TemporaryDirectory() as d:
        Path(d, "frag.h").write_text(header)
        Path(d, "twice.cu").write_text(cu)
        run_nvcc(nvcc, [*gencode("sm_100a"), "-ptx", "twice.cu", "-o", "twice.ptx"], d)
        ptx = Path(d, "twice.ptx").read_text()
        run_nvcc(nvcc, [*gencode("sm_100a"), "-cubin", "twice.cu", "-o", "twice.cubin"], d)
    assert len(set(re.findall(r"^\s*(\$L_done_\d+):", ptx, flags=re.M))) == 2
