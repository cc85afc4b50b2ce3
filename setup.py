"""Build step of the wheel: grammar/tile.lark (the one definition of the syntax, kept at the top of the
project) and the LALR(1) tables Lark builds from it become package data in compiler/frontend/grammar/.

An installed tilec then parses with the shipped tables and never imports Lark or writes a cache on its first
run; compiler/frontend/parser.py uses them only when they were built from the grammar text it reads. A
source checkout (and an editable install in the default or compat mode) reads grammar/ directly and keeps
its tables in the user cache. Everything else about the package is in pyproject.toml.
"""
from __future__ import annotations

import json
import os
import shutil
import sys

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = os.path.dirname(os.path.abspath(__file__))
GRAMMAR = os.path.join(ROOT, "grammar", "tile.lark")
PACKAGE_DIR = os.path.join("compiler", "frontend", "grammar")   # relative to build_lib
FILES = ("tile.lark", "tile-lalr.json")


def write_grammar_data(out_dir: str) -> None:
    sys.path.insert(0, ROOT)
    try:
        from compiler.frontend.parser import build_tables, grammar_crc   # needs lark: a build requirement
    finally:
        sys.path.remove(ROOT)
    with open(GRAMMAR, encoding="utf-8") as f:
        text = f.read()
    tables = build_tables(text)
    tables["grammar_crc32"] = grammar_crc(text)
    os.makedirs(out_dir, exist_ok=True)
    shutil.copyfile(GRAMMAR, os.path.join(out_dir, FILES[0]))
    with open(os.path.join(out_dir, FILES[1]), "w", encoding="utf-8") as f:
        json.dump(tables, f, sort_keys=True, separators=(",", ":"))


class BuildPyWithGrammar(build_py):
    # An editable install reads the checkout: editable_mode=strict links each output to its source (the
    # grammar to grammar/tile.lark); the tables have no source in the tree, so there they live in the user
    # cache as in a plain checkout.
    def run(self) -> None:
        super().run()
        if not self.editable_mode:
            write_grammar_data(os.path.join(self.build_lib, PACKAGE_DIR))

    def _data_outputs(self) -> list[str]:
        names = FILES[:1] if self.editable_mode else FILES
        return [os.path.join(self.build_lib, PACKAGE_DIR, name) for name in names]

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        return super().get_outputs(include_bytecode) + self._data_outputs()

    def get_output_mapping(self) -> dict[str, str]:
        mapping = super().get_output_mapping()
        for path in self._data_outputs():
            mapping[path] = GRAMMAR if path.endswith(FILES[0]) else path
        return mapping


if __name__ == "__main__":      # as setuptools' build backend runs it; tests import write_grammar_data
    setup(cmdclass={"build_py": BuildPyWithGrammar})
