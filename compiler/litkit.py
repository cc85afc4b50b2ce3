"""Lit support for tilec suites, reused by tilec's own lit.cfg.py and by downstream suites:

    # your lit.cfg.py
    import lit.formats
    from compiler.litkit import configure
    config.name = "my-tiles"; config.test_format = lit.formats.ShTest(); config.suffixes = [".tile"]
    configure(config)

Substitutions: %tilec (this interpreter running tilec), FileCheck and %FileCheck (the Python
filecheck; it ignores FILECHECK_OPTS, so flags go on RUN lines), %ptxas (when found).
Features: `ptxas`.
The Lark parser cache is warmed once here so parallel lit workers never race to build it.
"""
from __future__ import annotations

import os
import shutil
import sys


def _filecheck() -> str:
    here = os.path.join(os.path.dirname(sys.executable), "filecheck")
    if os.path.exists(here):
        return here
    found = shutil.which("filecheck")
    if found:
        return found
    return f'"{sys.executable}" -m filecheck'


def configure(config) -> None:
    from .frontend.parser import get_parser
    from .ptxas import find_ptxas

    get_parser()   # build or load the LALR cache once, before workers start
    tilec = f'"{sys.executable}" -m compiler'
    fc = _filecheck()
    config.substitutions.append(("%tilec", tilec))
    config.substitutions.append(("%FileCheck", fc))
    config.substitutions.append(("FileCheck", fc))
    ptxas = find_ptxas()
    if ptxas:
        config.available_features.add("ptxas")
        config.substitutions.append(("%ptxas", ptxas))
    for var in ("HOME", "PATH", "TILEC_CACHE_DIR", "XDG_CACHE_HOME", "PTXAS", "CI", "PYTHONPATH"):
        if var in os.environ:
            config.environment[var] = os.environ[var]
