"""Embedding tilec: tiles built in code (compile_tile), pipeline prefixes (run_passes), passes registered
from outside the package, and the lit kit driving a downstream suite outside this repository."""
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

import compiler
from compiler import (CompileError, FileSpec, OperandSpec, Pass, PassContext, PipelineError, SparsitySpec,
                      TileSpec, compile_source, compile_tile, print_file, register_pass, run_passes,
                      unregister_pass)
from compiler.ptxas import assemble
from compiler.ir import U32, print_op, register_attr
from compiler.passes.derive import tile_view

ROOT = Path(__file__).resolve().parent.parent


def gemm_tile(name: str = "gemm") -> TileSpec:
    """examples/gemm_bf16.tile, built in code."""
    return TileSpec(name, "tcgen05", m=128, n=256, k=16, k_total=64,
                    operands={"A": OperandSpec("bf16", "smem", "K", "128B"),
                              "B": OperandSpec("bf16", "smem", "K", "128B"),
                              "D": OperandSpec("f32", "tmem")})


def sparse_tile(name: str = "sp") -> TileSpec:
    """examples/sparse_f16.tile, built in code: mma.sp m16n8k32 f16 -> f32, two K steps."""
    ops = {"A": OperandSpec("f16", "global"), "B": OperandSpec("f16", "global"),
           "C": OperandSpec("f32", "global"), "D": OperandSpec("f32", "global")}
    return TileSpec(name, "mma.sp", m=16, n=8, k=32, k_total=64, operands=ops, sparsity=SparsitySpec("2:4"))


# Table 42 (PTX 9.7.16.4.2) for kind::f16, bf16 x bf16 -> f32, K-major, M=128, N=256:
# d_type f32 = 1 at bit 4, a_type bf16 = 1 at bits 7-9, b_type bf16 = 1 at bits 10-12,
# N >> 3 = 32 at bits 17-22, M >> 4 = 8 at bits 24-28.
GEMM_IDESC = (1 << 4) | (1 << 7) | (1 << 10) | ((256 >> 3) << 17) | ((128 >> 4) << 24)


# ---- compile_tile ------------------------------------------------------------------------------------

def test_compile_tile_tcgen05_equals_the_dsl_path():
    tile = gemm_tile()
    result = compile_tile(tile, "sm_100a")
    assert result.descriptors["gemm"]["idesc"] == GEMM_IDESC == 0x08400490
    via_text = compile_source(print_file(FileSpec("sm_100a", [tile])))
    assert result.ptx == via_text.ptx
    assert result.to_json()["tiles"]["gemm"]["kernel"]["entry"] == "gemm"


def test_compile_tile_mma_sp_assembles(ptxas):
    result = compile_tile(sparse_tile(), "sm_80")
    # ordered metadata by default (PTX 8.5, PTX ISA 9.7.14.6.3), m16n8k32 f16 with f32 accumulators (9.7.14.6.3)
    assert "mma.sp::ordered_metadata.sync.aligned.m16n8k32.row.col.f32.f16.f16.f32" in result.ptx
    assert result.module.attrs["ptx_version"] == "8.5"
    verdict = assemble(result.ptx, "sm_80", ptxas)
    assert verdict.ok, verdict.output


def test_compile_tile_pins_the_ptx_version():
    assert compile_tile(gemm_tile(), "sm_100a", ptx_version="8.7").ptx.count(".version 8.7") == 1
    assert compile_tile(gemm_tile(), "sm_100a", ptx_version=(8, 8)).module.attrs["ptx_version"] == "8.8"


@pytest.mark.parametrize("mutate, message", [
    (lambda t: replace(t, m=96), "M = 96 is not valid for kind::f16"),          # Table 39
    (lambda t: replace(t, operands={**t.operands, "A": OperandSpec("bf17", "smem")}), "A.dtype: unknown element type"),
    (lambda t: replace(t, name="two words"), "not a single word"),
    (lambda t: replace(t, k_total=-64), "loop.K"),
])
def test_compile_tile_rejects_bad_specs_with_a_diagnostic(mutate, message):
    with pytest.raises(CompileError) as e:
        compile_tile(mutate(gemm_tile()), "sm_100a")
    assert message in e.value.diagnostics[0].message


def test_compile_tile_rejects_unknown_targets_and_versions():
    with pytest.raises(CompileError, match="unknown target 'sm_100z'"):
        compile_tile(gemm_tile(), "sm_100z")
    with pytest.raises(CompileError, match="must look like 8.6"):
        compile_tile(gemm_tile(), "sm_100a", ptx_version="eight")
    with pytest.raises(CompileError, match="tcgen05.mma is not available on sm_90a"):
        compile_tile(gemm_tile(), "sm_90a")


# ---- run_passes --------------------------------------------------------------------------------------

PREFIX = ["verify", "layout-selection", "descriptor-materialization"]


def test_pipeline_prefix_holds_the_materialized_descriptors():
    tile = gemm_tile()
    module = run_passes(tile, PREFIX, target="sm_100a")
    assert list(module.attrs["passes"]) == PREFIX
    assert not module.ops("ptx.kernel")                        # ptx-emission did not run
    (t,) = module.ops("tilec.tile")
    full = compile_tile(tile, "sm_100a").descriptors["gemm"]
    assert int(t.op("tilec.instr_desc").attrs["value"]) == full["idesc"]
    assert [int(v) for v in t.op("tilec.smem_desc", "A").attrs["values"]] == full["A_desc"]
    lay = t.op("tilec.smem_layout", "B")
    # 256 rows x 64 bf16 = 128 bytes per row, 128B swizzle: SBO = 8 rows x 128 B (PTX 9.7.16.3.2)
    assert (lay.attrs["sbo"], lay.attrs["size"]) == (8 * 128, 256 * 64 * 2)
    assert tile_view(t).facts["idesc"].encode() == full["idesc"]      # the InstrDesc, decoded from the IR


def test_run_passes_continues_a_module_and_reaches_the_same_ptx():
    tile = gemm_tile()
    module = run_passes(tile, PREFIX, target="sm_100a")
    module = run_passes(module)                                # the rest of the default pipeline
    assert module.attrs["passes"][-1] == "ptx-emission"
    assert module.outputs["ptx"] == compile_tile(tile, "sm_100a").ptx


def test_run_passes_checks_the_pipeline():
    spec = FileSpec("sm_100a", [gemm_tile()])
    with pytest.raises(PipelineError, match="requires 'layouts'; run layout-selection"):
        run_passes(spec, ["verify", "descriptor-materialization"])
    module = run_passes(spec, ["verify"])
    with pytest.raises(PipelineError, match="'verify' already ran"):
        run_passes(module, ["verify", "layout-selection"])
    with pytest.raises(PipelineError, match="needs target="):
        run_passes(gemm_tile(), ["verify"])
    # a compiled module records its whole pipeline too
    with pytest.raises(PipelineError, match="'verify' already ran"):
        run_passes(compile_tile(gemm_tile(), "sm_100a").module, ["verify"])


def test_run_passes_on_a_file_spec_reports_located_errors():
    text = ("target sm_100a;\ntile t {\n  engine tcgen05;\n  shape M=96 N=64 K=16;\n"
            "  A: f16 smem; B: f16 smem; D: f32 tmem;\n}\n")
    spec = compiler.parse_source(text, "bad.tile")
    with pytest.raises(CompileError) as e:
        run_passes(spec, ["verify"], source=text)
    assert str(e.value.diagnostics[0].loc) == "bad.tile:4:11"     # the M=96 token


@dataclass(frozen=True)
class SmemReport(Pass):
    """An external pass (defined outside the package): per tile, the smem bytes its descriptors address."""
    name = "smem-report"
    requires = ("descriptors",)
    provides = ("smem-report",)
    description = "sum the smem layouts of each tile"

    def apply(self, module, ctx: PassContext) -> None:
        for tile in module.ops("tilec.tile"):
            tile.attrs["smem_report"] = sum(op.attrs["size"] for op in tile.ops("tilec.smem_layout"))


def test_external_pass_is_placed_by_requires_and_provides():
    register_attr("tilec.tile", "smem_report", U32)       # its result is a typed, printed attribute
    register_pass(SmemReport)
    try:
        assert "smem-report" in compiler.pass_names()
        module = run_passes(gemm_tile(), target="sm_100a")          # the whole (now extended) pipeline
        order = module.attrs["passes"]
        assert order.index("smem-report") > order.index("descriptor-materialization")
        # A: 128 x 64 bf16, B: 256 x 64 bf16 (2 bytes each)
        assert module.ops("tilec.tile")[0].attrs["smem_report"] == (128 + 256) * 64 * 2
        assert f"smem_report = {(128 + 256) * 64 * 2}" in print_op(module)
        # ... and run by name in a prefix
        module = run_passes(gemm_tile(), PREFIX + ["smem-report"], target="sm_100a")
        assert module.attrs["passes"][-1] == "smem-report"
        # compile_source's default pipeline picks it up too
        result = compile_tile(gemm_tile(), "sm_100a")
        assert result.tiles["gemm"].attrs["smem_report"] == (128 + 256) * 64 * 2
    finally:
        unregister_pass("smem-report")
    assert "smem-report" not in compiler.pass_names()


# ---- lit kit in a downstream suite ----------------------------------------------------------------------

def test_downstream_lit_suite_runs_outside_the_repository(tmp_path):
    suite = tmp_path / "downstream"
    shutil.copytree(ROOT / "examples" / "downstream_lit", suite,
                    ignore=shutil.ignore_patterns("Output", "__pycache__"))
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)          # tilec must come from the installed package, not this checkout's path
    proc = subprocess.run([sys.executable, "-c", "from lit.main import main; main()", "-v", str(suite)],
                          cwd=tmp_path, env=env, capture_output=True, text=True)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-5000:]
    tests = sorted(p.name for p in suite.glob("*.tile"))
    assert len(tests) >= 3
    for name in tests:
        assert f"PASS: downstream-tiles :: {name}" in out, out[-5000:]


# ---- the README example runs as written -------------------------------------------------------------------

def test_readme_embedding_example_runs():
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("\n## Embedding\n"):]
    code = section[section.index("```python\n") + len("```python\n"):]
    code = code[:code.index("```")]
    try:
        exec(compile(code, "README.md (Embedding)", "exec"), {"__name__": "readme_example"})
    finally:
        unregister_pass("count-mmas")
