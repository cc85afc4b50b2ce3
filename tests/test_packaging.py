"""Packaging (issue 15, items 1 and 2): what a wheel carries and how an installed tilec finds it.

At 422d16c `pip install .` gave a package without grammar/tile.lark (it is not inside the package), so the
installed tilec could not compile anything. setup.py's build step now puts the grammar and its LALR tables
in compiler/frontend/grammar/; these tests build that data the way the wheel does and run tilec from a
copy of the package laid out as site-packages would hold it. .ci/run builds and installs the real wheel.
"""
from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from compiler.frontend import parser

ROOT = Path(__file__).resolve().parent.parent


def _setup_module():
    spec = importlib.util.spec_from_file_location("tilec_setup", ROOT / "setup.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)       # __name__ is not "__main__": defines the build step, runs no setup()
    return mod


def _installed_copy(tmp_path: Path) -> Path:
    """compiler/ as a wheel installs it (no grammar/ beside it), with the build step's data."""
    site = tmp_path / "site"
    shutil.copytree(ROOT / "compiler", site / "compiler", ignore=shutil.ignore_patterns("__pycache__", "grammar"))
    _setup_module().write_grammar_data(str(site / "compiler" / "frontend" / "grammar"))
    return site


def test_installed_package_compiles_every_example_with_shipped_tables(tmp_path):
    site = _installed_copy(tmp_path)
    assert sorted(p.name for p in (site / "compiler" / "frontend" / "grammar").iterdir()) == \
        ["tile-lalr.json", "tile.lark"]
    work, checkout = tmp_path / "elsewhere", tmp_path / "checkout"
    work.mkdir()
    checkout.mkdir()
    cache = tmp_path / "cache"
    env = dict(os.environ, PYTHONPATH=str(site), TILEC_CACHE_DIR=str(cache))
    examples = sorted((ROOT / "examples").glob("*.tile"))
    probe = ("import sys\n"
             "import compiler.cli as cli\n"
             "assert cli.__file__.startswith(sys.argv[1]), cli.__file__\n"
             "for path in sys.argv[2:]:\n"
             "    name = path.rsplit('/', 1)[1]\n"
             "    assert cli.main(['compile', path, '-o', name + '.ptx']) == 0, path\n"
             "assert 'lark' not in sys.modules, 'the shipped tables were not used'\n")
    installed = subprocess.run([sys.executable, "-c", probe, str(site), *map(str, examples)], cwd=work, env=env,
                               capture_output=True, text=True)
    assert installed.returncode == 0, installed.stderr
    from compiler import cli

    for example in examples:
        assert cli.main(["compile", str(example), "-o", str(checkout / f"{example.name}.ptx")]) == 0
        assert (work / f"{example.name}.ptx").read_bytes() == (checkout / f"{example.name}.ptx").read_bytes()
    # the cache directory may hold other caches (ptxas-versions.json, compiler/ptxas_version.py), but no
    # parser tables (compiler/frontend/parser.py names them tile-lalr-<key>.json)
    parser_files = [p.name for p in cache.iterdir() if "tile-lalr" in p.name] if cache.exists() else []
    assert not parser_files, "the installed tilec wrote a parser cache instead of using the wheel's tables"


def test_shipped_tables_of_another_grammar_are_not_used(tmp_path, monkeypatch):
    out = tmp_path / "grammar"
    _setup_module().write_grammar_data(str(out))
    monkeypatch.setattr(parser, "PACKAGED_DIR", str(out))
    text = (ROOT / "grammar" / "tile.lark").read_text(encoding="utf-8")
    assert parser._packaged_tables(text) is not None
    assert parser._packaged_tables(text + "\n// edited\n") is None      # grammar changed since the build
    (out / "tile-lalr.json").write_text("{not json")
    assert parser._packaged_tables(text) is None                         # a damaged file: rebuild instead


def test_project_metadata():
    tomllib = pytest.importorskip("tomllib")
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    # No upper pin on setuptools: the default editable mode is a plain .pth path entry (package-dir "" = "."),
    # so nothing depends on the transitional editable_mode=compat.
    setuptools_req = next(r for r in meta["build-system"]["requires"] if r.startswith("setuptools"))
    assert "<" not in setuptools_req
    assert meta["tool"]["setuptools"]["package-dir"] == {"": "."}
    names = {re.split(r"[<>=!~ ;\[]", r)[0] for r in meta["project"]["dependencies"]}
    assert {"lark", "networkx", "numpy", "ml-dtypes"} <= names      # numpy/ml-dtypes: compiler.sparse
    extras = meta["project"]["optional-dependencies"]
    assert {re.split(r"[<>=]", r)[0] for r in extras["lit"]} == {"lit", "filecheck"}
    assert {re.split(r"[<>=]", r)[0] for r in extras["gpu"]} == {"cuda-core", "cuda-bindings"}
    assert "test" in extras
    manifest = (ROOT / "MANIFEST.in").read_text()
    assert "grammar/tile.lark" in manifest      # python -m build makes the wheel from the sdist
