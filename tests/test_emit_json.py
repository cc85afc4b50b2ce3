"""`--emit json` for every example (issue 15 item 10): each tile says its engine and MMA `kind`, and every
descriptor is hex with all the digits of its field (at 422d16c there was no kind, and idesc 0x08400490
came out as "0x8400490").

Widths: the instruction descriptor is 32 bits (PTX ISA 9.7.16.4.2, Tables 42-44) = 8 hex digits; the
shared-memory descriptors (9.7.16.4.1, Table 41) and the zero-column mask (9.7.16.4.3, Table 45) are
64 bits = 16 hex digits.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from compiler import compile_file
from compiler.explain import EXPLAINERS

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples").glob("*.tile"))
DIGITS = {"idesc": 8, "A_desc": 16, "B_desc": 16, "zero_column_mask": 16}


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_every_tile_has_engine_kind_and_padded_hex(path):
    out = json.loads(json.dumps(compile_file(path).to_json()))
    assert out["tiles"]
    for name, tile in out["tiles"].items():
        assert tile["engine"] in ("tcgen05", "mma.sp"), name
        assert "kind" in tile, name
        for key, value in tile["descriptors"].items():
            for v in value if isinstance(value, list) else [value]:
                assert re.fullmatch(rf"0x[0-9a-f]{{{DIGITS[key]}}}", v), (name, key, v)
        if tile["engine"] == "tcgen05":
            # the kind is what `tilec explain idesc VALUE --kind KIND` needs to decode the idesc
            ex = EXPLAINERS["idesc"](int(tile["descriptors"]["idesc"], 16), kind=tile["kind"])
            assert ex.violations == [], (name, ex.violations)
        else:
            assert tile["kind"] is None or tile["kind"] in ("f8f6f4", "mxf8f6f4", "mxf4", "mxf4nvf4")


def test_kinds_of_the_examples():
    kinds = {p.stem: [t["kind"] for t in compile_file(p).to_json()["tiles"].values()] for p in EXAMPLES}
    # gemm_bf16: bf16 A/B is kind::f16 (Table 39, inferred); tcgen05_block_scaled names kind=mxf4nvf4
    assert kinds["gemm_bf16"] == ["f16"]
    assert kinds["tcgen05_block_scaled"] == ["mxf4nvf4"]
    assert kinds["sparse_f16"] == [None]                 # mma.sp m16n8k32 f16 has no .kind qualifier
