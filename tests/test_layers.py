"""The import graph of the `compiler` package (issue 13, item 3): no import cycle, and layers only point down.

The graph comes from the AST of every module under compiler/: module-level and function-level imports,
relative and absolute (`from . import x` is an edge to the submodule x; `from .m import name` an edge to m),
TYPE_CHECKING blocks included (a type-only import still says which layer a module leans on).

Layers, lowest first. A module imports only modules of its own layer or a lower one:

  0  foundation      diagnostics, bits, files, ptxas_version, ptxas, lazy: no tilec imports (ptxas reads
                     ptxas_version); every layer may report errors, write files and load names lazily
  1  isa             compiler/isa/: the PTX facts; read by all, imports only layer 0
  2  facts users     spec (the DSL's data model), descriptors/ and layout (the encoders), sparse (2:4
                     compression), sim/ (numeric reference models), support_matrix and explain (views of isa/),
                     perf_model (the analytic bound from NVIDIA's published rates): need only isa/, and are
                     needed by the frontend, passes and codegen alike
  3  frontend        frontend/ (text -> spec), spec_printer (spec -> text; reuses the frontend's parser)
  4  ir              ir, lowering (spec -> IR)
  5  passes          compiler/passes/ (no pass imports compiler/ptx: layer 6); ir_parser (IR text -> IR) sits
                     here because it checks the module's recorded `passes` against the pass registry
                     (compiler/passes/manager.py); no pass reads IR text
  6  codegen         compiler/ptx/, including the `ptx-emission` pass (compiler/ptx/emission.py)
  7  driver          driver (the pipeline), api (fragments and linking), tuning (the tuning files
                     `tilec tune` writes and `compile --tuning` applies: a tile's key, its schedule statement)
  8  consumers       emulator/ (runs the emitted PTX), runtime/ (loads and launches it), litkit,
                     draw (`tilec draw` pictures), integrations/ (compiled tiles as PyTorch ops, over
                     runtime/)
  9  entry points    cli, run (`tilec run`), tune (`tilec tune`), usage (what those share), __main__, and the package's
                     lazy facade compiler/__init__.py

No allow-list: every edge in the package fits the map.
"""
from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parent.parent / "compiler"

LAYERS = {
    "diagnostics": 0, "bits": 0, "files": 0, "ptxas_version": 0, "ptxas": 0, "lazy": 0,
    "isa": 1,
    "spec": 2, "descriptors": 2, "layout": 2, "sparse": 2, "sim": 2, "support_matrix": 2, "explain": 2, "perf_model": 2,
    "frontend": 3, "spec_printer": 3,
    "ir": 4, "lowering": 4,
    "passes": 5, "ir_parser": 5,
    "ptx": 6,
    "driver": 7, "api": 7, "tuning": 7,
    "emulator": 8, "runtime": 8, "litkit": 8, "draw": 8, "integrations": 8,
    "cli": 9, "run": 9, "tune": 9, "usage": 9, "__main__": 9, "": 9,          # "": compiler/__init__.py
}


def _module_name(path: Path, root: Path) -> str:
    parts = [root.name, *path.relative_to(root).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(root: Path = ROOT) -> nx.DiGraph:
    """Module -> module edges among the modules under `root` (a package directory)."""
    files = {_module_name(p, root): p for p in sorted(root.rglob("*.py"))}
    graph = nx.DiGraph()
    graph.add_nodes_from(files)
    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    module = ".".join(base + ([node.module] if node.module else []))
                else:
                    module = node.module or ""
                # `from pkg import sub` imports the submodule; `from mod import name` imports mod
                targets = [f"{module}.{a.name}" if f"{module}.{a.name}" in files else module for a in node.names]
            else:
                continue
            for target in targets:
                while target and target not in files and "." in target:   # `import a.b.c` of a name: a.b
                    target = target.rpartition(".")[0]
                if target in files and target != name:
                    graph.add_edge(name, target, line=node.lineno)
    return graph


def layer_of(module: str) -> int:
    top = module.split(".")[1] if "." in module else ""
    return LAYERS[top]


def upward_imports(graph: nx.DiGraph) -> list[str]:
    return [f"{a} (layer {layer_of(a)}) imports {b} (layer {layer_of(b)}), line {d['line']}"
            for a, b, d in graph.edges(data=True) if layer_of(a) < layer_of(b)]


def import_cycle(graph: nx.DiGraph) -> list[str] | None:
    try:
        return [a for a, _ in nx.find_cycle(graph)]
    except nx.NetworkXNoCycle:
        return None


def test_every_module_has_a_layer():
    tops = {m.split(".")[1] if "." in m else "" for m in import_graph().nodes}
    assert tops - LAYERS.keys() == set(), "place the new module in LAYERS (and the docstring's map)"


def test_no_import_cycle():
    cycle = import_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle + cycle[:1])


def test_layers_point_down():
    assert upward_imports(import_graph()) == []


def test_no_pass_imports_ptx():
    graph = import_graph()
    bad = [(a, b) for a, b in graph.edges if a.startswith("compiler.passes") and b.startswith("compiler.ptx")]
    assert bad == []


def test_isa_imports_only_isa_and_diagnostics():
    graph = import_graph()
    bad = [(a, b) for a, b in graph.edges if a.startswith("compiler.isa")
           and not (b.startswith("compiler.isa") or b == "compiler.diagnostics")]
    assert bad == []


def test_the_graph_sees_the_package():
    """The checker reads real edges (a broken walker would pass the tests above vacuously)."""
    graph = import_graph()
    assert graph.number_of_nodes() > 60
    assert graph.has_edge("compiler.ptx.emission", "compiler.passes.derive")       # function-level, relative
    assert graph.has_edge("compiler.driver", "compiler.frontend.build")
    assert graph.has_edge("compiler.runtime.kernel", "compiler.sparse")          # `from .. import sparse`


@pytest.fixture
def planted(tmp_path: Path) -> Path:
    """A tiny package shaped like compiler/: a pass that imports the PTX layer inside a function, and a
    cycle between two foundation modules (one absolute, one relative import)."""
    root = tmp_path / "compiler"
    for d in ("passes", "ptx"):
        (root / d).mkdir(parents=True)
        (root / d / "__init__.py").write_text("")
    (root / "__init__.py").write_text("")
    (root / "ptx" / "emit.py").write_text("X = 1\n")
    (root / "passes" / "limits.py").write_text("def f():\n    from ..ptx import emit\n    return emit.X\n")
    (root / "bits.py").write_text("import compiler.files\n")
    (root / "files.py").write_text("from .bits import *\n")
    return root


def test_checker_catches_a_planted_upward_import(planted: Path):
    graph = import_graph(planted)
    assert graph.has_edge("compiler.passes.limits", "compiler.ptx.emit")
    assert upward_imports(graph) == ["compiler.passes.limits (layer 5) imports compiler.ptx.emit (layer 6), line 2"]


def test_checker_catches_a_planted_cycle(planted: Path):
    assert sorted(import_cycle(import_graph(planted))) == ["compiler.bits", "compiler.files"]
