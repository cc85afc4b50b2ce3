"""The stable public surface: names never disappear, signatures of the embedding entry points stay,
public callables are annotated, and mypy is clean on the public modules (skipped without mypy)."""
import ast
import inspect
import subprocess
import sys
from pathlib import Path

import pytest

import compiler

ROOT = Path(__file__).resolve().parent.parent

# Frozen: removing or renaming any of these breaks embedders. Add new names here when they become public.
PUBLIC_NAMES = (
    "CompileError", "CompileResult", "Diagnostic", "FileSpec", "Fragment", "LinkError", "Loc", "Op", "OperandSpec",
    "Pass", "PassContext", "PassManager", "PipelineError", "ScheduleSpec", "SparsitySpec", "SpecError", "TileSpec",
    "ZeroColumnsSpec",
    "compile_file", "compile_source", "compile_spec", "compile_tile", "emit_fragment", "emit_fragments",
    "link_fragments", "parse_source", "pass_names", "print_file", "print_tile", "register_pass", "run_passes",
    "unregister_pass", "emulate", "Emulation", "EmulationError",
)

# Leading parameters of the embedding entry points (names and order), as README "Embedding" uses them.
SIGNATURES = {
    "compile_tile": ["spec", "target", "options", "ptx_version"],
    "compile_source": ["text", "filename", "arch", "ptx_version"],
    "compile_spec": ["spec"],
    "run_passes": ["module_or_spec", "passes", "options", "target"],
    "emit_fragment": ["spec", "target", "prefix"],
    "emit_fragments": ["spec", "prefix"],
    "link_fragments": ["fragments"],
    "print_file": ["spec"],
    "print_tile": ["tile"],
    "parse_source": ["text", "filename", "arch"],
    "register_pass": ["cls"],
    "emulate": ["result", "tile", "shape", "seed", "order", "mode"],
}

# Public modules whose own definitions must be fully annotated (mypy --disallow-untyped-defs), and
# modules checked with mypy's defaults.
STRICT_MODULES = ("compiler/__init__.py", "compiler/api.py", "compiler/spec_printer.py", "compiler/ptx/fragment.py",
                  "compiler/litkit.py")
DEFAULT_MODULES = ("compiler/driver.py", "compiler/spec.py")


def test_no_public_name_disappears():
    missing = sorted(set(PUBLIC_NAMES) - set(compiler.__all__))
    assert not missing, f"public names removed from compiler.__all__: {missing}"


def test_types_the_api_hands_out_are_public():
    # TileSpec.schedule holds a ScheduleSpec (issue 15 item 12: it was used by the API but not exported).
    spec = compiler.parse_source((ROOT / "examples" / "sparse_gemm_f16.tile").read_text())
    assert type(spec.tiles[0].schedule) is compiler.ScheduleSpec
    assert issubclass(compiler.LinkError, ValueError) and not issubclass(compiler.LinkError, compiler.SpecError)


@pytest.mark.parametrize("name", compiler.__all__)
def test_every_public_name_resolves(name):
    assert getattr(compiler, name) is not None
    assert name in dir(compiler)


def test_type_checking_imports_match_the_lazy_table():
    # compiler/__init__.py loads names lazily (_WHERE) and repeats them under `if TYPE_CHECKING:` for type
    # checkers; the two lists must agree.
    tree = ast.parse((ROOT / "compiler" / "__init__.py").read_text())
    guarded = next(n for n in tree.body if isinstance(n, ast.If) and getattr(n.test, "id", "") == "TYPE_CHECKING")
    imported = {alias.name for node in guarded.body for alias in node.names}
    assert imported == set(compiler.__all__)


@pytest.mark.parametrize("name, leading", sorted(SIGNATURES.items()))
def test_entry_point_signatures(name, leading):
    params = list(inspect.signature(getattr(compiler, name)).parameters)
    assert params[:len(leading)] == leading


@pytest.mark.parametrize("name", [n for n in compiler.__all__ if inspect.isfunction(getattr(compiler, n))])
def test_public_functions_are_annotated(name):
    sig = inspect.signature(getattr(compiler, name))
    assert sig.return_annotation is not inspect.Signature.empty, f"{name}: no return annotation"
    for p in sig.parameters.values():
        if p.kind is not p.VAR_KEYWORD:
            assert p.annotation is not inspect.Parameter.empty, f"{name}({p.name}): no annotation"


def _module_name(path: str) -> str:
    return path[:-len(".py")].replace("/", ".").removesuffix(".__init__")


def test_mypy_clean_on_public_modules_and_a_typed_client(tmp_path):
    """One mypy run: the public modules (STRICT_MODULES with --disallow-untyped-defs) and a client that
    uses the lazily loaded names, whose one deliberate type error must be the only error."""
    pytest.importorskip("mypy")
    config = tmp_path / "mypy.ini"
    config.write_text("[mypy]\nfollow_imports = silent\n"
                      f"[mypy-{','.join(_module_name(m) for m in STRICT_MODULES)}]\n"
                      "disallow_untyped_defs = True\ndisallow_incomplete_defs = True\n")
    client = tmp_path / "client.py"
    client.write_text(
        "import compiler\n"
        "from compiler import OperandSpec, TileSpec\n"
        "tile = TileSpec('t', 'tcgen05', 128, 64, 16, {'A': OperandSpec('f16', 'smem')})\n"
        "result: compiler.CompileResult = compiler.compile_tile(tile, 'sm_100a')\n"
        "ptx: str | None = result.ptx\n"
        "fragment: compiler.Fragment = compiler.emit_fragment(tile, 'sm_100a', prefix='x_')\n"
        "text: str = compiler.link_fragments([fragment], '// host')\n"
        "module: compiler.Op = compiler.run_passes(tile, ['verify'], target='sm_100a')\n"
        "dsl: str = compiler.print_tile(tile)\n"
        "wrong: int = compiler.print_tile(tile)\n")          # the one error mypy must report
    proc = subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(config), "--cache-dir",
                           str(tmp_path / "cache"), "--no-error-summary", *STRICT_MODULES, *DEFAULT_MODULES,
                           str(client)], cwd=ROOT, capture_output=True, text=True)
    errors = [ln for ln in proc.stdout.splitlines() if ": error:" in ln]
    assert len(errors) == 1 and "client.py:10:" in errors[0], proc.stdout + proc.stderr
