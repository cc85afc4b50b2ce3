"""README's "Limits", "Limits on generated code" and "Exit codes and files" tables state what the code does:
each number is read from the constant that enforces it, each exit status from compiler/cli.py's main (issue
14: "each limit documented in README with its number"; "one exit-code scheme, documented")."""
from __future__ import annotations

import ast
import re
from pathlib import Path

from compiler import cli
from compiler.frontend import build, parser, source
from compiler.passes import limits

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")


def table_after(heading: str) -> dict[str, list[str]]:
    """The first Markdown table under `heading`: first cell -> the other cells."""
    start = README.index(f"\n{heading}\n")
    rows, seen, body = {}, False, False
    for line in README[start:].splitlines()[1:]:
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if set(cells[0]) <= set("-: "):
                body = True             # the header row is above this separator
            elif body:
                rows[cells[0]] = cells[1:]
            seen = True
        elif seen:
            break
    assert rows, f"no table under {heading!r}"
    return rows


def number(cell: str) -> int:
    """The number a cell starts with: '4 MiB (4,194,304 bytes)' -> 4194304 (the exact figure in
    parentheses wins), '2^64 − 1' -> 2**64 - 1, '4096' -> 4096."""
    exact = re.search(r"\(([\d,]+) bytes\)", cell)
    if exact:
        return int(exact.group(1).replace(",", ""))
    power = re.match(r"2\^(\d+) [−-] 1\b", cell)
    if power:
        return 2 ** int(power.group(1)) - 1
    return int(re.match(r"[\d,]+", cell).group(0).replace(",", ""))


def test_front_end_limits_match_the_constants():
    rows = table_after("### Limits")
    stated = {name: number(cells[0]) for name, cells in rows.items()}
    assert stated == {
        "input size": source.MAX_INPUT_BYTES,
        "tiles per file": build.MAX_TILES,
        "items per list (also after `a..b` ranges)": parser.MAX_LIST_ITEMS,
        "list nesting": parser.MAX_LIST_DEPTH,
        "integer value": build.MAX_INT,
        "word (name, number, string)": parser.MAX_TOKEN_CHARS,
        "tile name": build.MAX_NAME_CHARS,
        "errors reported": build.MAX_ERRORS,
    }
    assert rows["input size"][0].startswith(f"{source.MAX_INPUT_BYTES // 2**20} MiB")


def test_generated_code_limits_match_the_constants():
    rows = table_after("### Limits on generated code")
    assert {name: number(cells[0]) for name, cells in rows.items()} == {
        "unrolled MMA instructions per kernel": limits.MAX_UNROLLED_MMA,
        "registers per thread": limits.MAX_REGISTERS,
    }


def _main_statuses() -> set[int]:
    """Every integer compiler.cli.main returns (its `return <int>` and `return <int> if ... else <int>`)."""
    tree = ast.parse(Path(cli.__file__).read_text(encoding="utf-8"))
    (main,) = [f for f in tree.body if isinstance(f, ast.FunctionDef) and f.name == "main"]
    out = set()
    for node in ast.walk(main):
        if isinstance(node, ast.Return) and node.value is not None:
            for c in ast.walk(node.value):
                if isinstance(c, ast.Constant) and isinstance(c.value, int) and not isinstance(c.value, bool):
                    out.add(c.value)
    return out


def test_exit_statuses_match_the_command_line():
    rows = table_after("### Exit codes and files")
    documented = {int(s) for s in rows}
    assert documented == _main_statuses() == {0, 1, 2, 3, 130}
    # the module docstring states the same scheme
    for status in documented:
        assert re.search(rf"\b{status} ", cli.__doc__), status


def test_the_table_reader_reads_numbers_as_written():
    assert number("4 MiB (4,194,304 bytes)") == 4 * 2**20
    assert number("2^64 − 1") == 2**64 - 1
    assert number("1024 characters") == 1024 and number("4096") == 4096
