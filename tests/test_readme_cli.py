"""README's "Command line" section is the contract of the CLI (issue 13, item 9): every subcommand and every
long option argparse knows appears in it, so a new flag without documentation fails here."""
from __future__ import annotations

import argparse
import re
from pathlib import Path

from compiler.cli import _parser

README = Path(__file__).resolve().parent.parent / "README.md"


def command_line_section() -> str:
    text = README.read_text()
    start = text.index("\n## Command line\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end >= 0 else None]


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(sub.choices)


def long_options(parser: argparse.ArgumentParser) -> set[str]:
    return {s for a in parser._actions for s in a.option_strings if s.startswith("--") and s != "--help"}


def test_every_subcommand_is_in_the_command_line_section():
    section = command_line_section()
    names = subcommands(_parser())
    assert {"compile", "opt", "passes", "explain", "run"} <= names.keys()
    missing = [n for n in names if not re.search(rf"\btilec {re.escape(n)}\b", section)]
    assert missing == []


def test_every_long_option_is_in_the_command_line_section():
    section = command_line_section()
    parser = _parser()
    missing = [f"tilec {name} {opt}" for name, sub in subcommands(parser).items()
               for opt in sorted(long_options(sub)) if not re.search(rf"{re.escape(opt)}\b", section)]
    missing += [f"tilec {opt}" for opt in sorted(long_options(parser)) if opt not in section]
    assert missing == []


def test_every_emit_format_and_choice_is_in_the_command_line_section():
    section = command_line_section()
    parser = _parser()
    missing = [f"tilec {name} {a.option_strings[-1]} {c}" for name, sub in subcommands(parser).items()
               for a in sub._actions if a.choices and a.option_strings for c in a.choices
               if not re.search(rf"\b{re.escape(c)}\b", section)]
    assert missing == []


def test_the_checker_sees_a_missing_option():
    """A planted option that README does not mention is reported (the tests above assert something)."""
    parser = _parser()
    compile_parser = subcommands(parser)["compile"]
    compile_parser.add_argument("--not-in-readme-xyz")
    assert "--not-in-readme-xyz" in long_options(compile_parser)
    assert "--not-in-readme-xyz" not in command_line_section()
