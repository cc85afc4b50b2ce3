"""Lit support for tilec suites, reused by tilec's own lit.cfg.py and by downstream suites:

    # your lit.cfg.py (anywhere; tilec only has to be importable by the Python that runs lit)
    from compiler.litkit import configure
    config.name = "my-tiles"
    configure(config)          # ShTest format and the .tile suffix unless you set them first

Substitutions: %tilec (this interpreter running tilec), FileCheck and %FileCheck (the Python
filecheck; it ignores FILECHECK_OPTS, so flags go on RUN lines), %python (this interpreter),
%ptxas (when found).
Features: `ptxas` (when found), `tilec`.
The Lark parser cache is warmed once here so parallel lit workers never race to build it.
examples/downstream_lit/ is a complete downstream suite.
"""
from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Sequence
from typing import Any

DEFAULT_SUFFIXES = (".tile",)
# Variables RUN lines need from the caller's environment (lit starts tests with a clean one).
PASSED_ENVIRONMENT = ("HOME", "PATH", "TILEC_CACHE_DIR", "XDG_CACHE_HOME", "PTXAS", "CI", "PYTHONPATH")


def _filecheck() -> str:
    here = os.path.join(os.path.dirname(sys.executable), "filecheck")
    if os.path.exists(here):
        return here
    found = shutil.which("filecheck")
    if found:
        return found
    return f'"{sys.executable}" -m filecheck'


def configure(config: Any, suffixes: Sequence[str] = DEFAULT_SUFFIXES) -> None:
    """Set up a lit `config` (the object lit hands to lit.cfg.py) for tilec tests.

    A test format or suffixes the caller already set are kept; otherwise `lit.formats.ShTest()` and
    `suffixes` are used."""
    from .frontend.parser import get_parser
    from .ptxas import find_ptxas

    if getattr(config, "test_format", None) is None:
        import lit.formats  # type: ignore[import-untyped]  # lit ships no type information

        config.test_format = lit.formats.ShTest()
    if not getattr(config, "suffixes", None):
        config.suffixes = list(suffixes)
    get_parser()   # build or load the LALR cache once, before workers start
    python = f'"{sys.executable}"'
    fc = _filecheck()
    # The installed console script skips runpy (~5 ms a RUN line); `-m compiler` when there is none.
    script = os.path.join(os.path.dirname(sys.executable), "tilec")
    tilec = f'"{script}"' if os.path.isfile(script) else f"{python} -m compiler"
    config.substitutions.append(("%tilec", tilec))
    config.substitutions.append(("%python", python))
    config.substitutions.append(("%FileCheck", fc))
    config.substitutions.append(("FileCheck", fc))
    config.available_features.add("tilec")
    ptxas = find_ptxas()
    if ptxas:
        config.available_features.add("ptxas")
        config.substitutions.append(("%ptxas", ptxas))
    for var in PASSED_ENVIRONMENT:
        if var in os.environ:
            config.environment[var] = os.environ[var]
