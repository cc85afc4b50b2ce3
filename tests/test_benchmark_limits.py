"""benchmarks/limits.py measures what its rows say: its inputs sit at the limits they are named after, and one
child measurement runs (the full benchmark takes minutes: docs/measurements.md has its table)."""
from __future__ import annotations

import json
import re
import runpy
import subprocess
import sys
from pathlib import Path

from compiler.frontend import build, parser, source
from compiler.frontend.build import parse_spec

ROOT = Path(__file__).resolve().parent.parent
# the script's functions, without putting benchmarks/ on sys.path (its fuzz.py would shadow tests/fuzz)
make_input = runpy.run_path(str(ROOT / "benchmarks" / "limits.py"))["make_input"]


def test_the_4_mib_tile_file_holds_the_most_tiles_in_the_most_bytes():
    text = make_input("tcgen05", "")
    assert len(text.encode()) == source.MAX_INPUT_BYTES
    assert len(parse_spec(text, "big.tile").tiles) == build.MAX_TILES


def test_the_list_file_is_lists_of_the_most_items_up_to_4_mib():
    text = make_input("lists", "")
    size = len(text.encode())
    last = "tile " + text.rsplit("tile ", 1)[1]
    assert 0 <= source.MAX_INPUT_BYTES - size <= len(last.encode())          # one more tile (as long) would not fit
    assert {len(items.split(", ")) for items in re.findall(r"\[([^\]]*)\]", text)} == {parser.MAX_LIST_ITEMS}
    first = text[:text.index("tile t1 ")]                  # the header and the first tile, as the parser reads it
    (tile,) = parser.parse(first, "lists.tile").tiles
    assert [len(a.value.items) for s in tile.statements for a in s.args if a.value.kind == "list"] == \
        [parser.MAX_LIST_ITEMS]


def test_a_child_measurement_reports_time_and_memory():
    p = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "limits.py"), "--child", "baseline", "", "ptx",
                        "trace"], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert p.returncode == 0, p.stderr
    r = json.loads(p.stdout.splitlines()[-1])
    assert r["outcome"].startswith("PTX ") and r["traced"] > 0 and r["rss_kib"] > 0 and r["wall"] > 0
