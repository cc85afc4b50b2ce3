"""Byte-identity goldens: the SHA-256 of what tilec emits for every example and lit input.

A restructuring must not change emitted PTX. `python -m tests.golden.goldens --write` records, for
every `.tile` under examples/ and tests/lit/, the SHA-256 of the default kernel PTX, of `--emit func`
and of `--variant smem-dump` (or "error" where that input is rejected); `tests/test_goldens.py`
recompiles everything and compares. A change that alters PTX on purpose rewrites the file in the same
commit and says why in its message.
"""
from __future__ import annotations

import hashlib
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GOLDEN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ptx_sha256.json")
MODES = ("kernel", "func", "smem-dump")


def inputs() -> list[str]:
    out = []
    for top in ("examples", os.path.join("tests", "lit")):
        for dirpath, dirnames, filenames in os.walk(os.path.join(ROOT, top)):
            dirnames[:] = sorted(d for d in dirnames if d != "Output")
            out += [os.path.relpath(os.path.join(dirpath, f), ROOT) for f in filenames if f.endswith(".tile")]
    return sorted(out)


def digest(rel: str, mode: str) -> str:
    from compiler import CompileError, compile_source
    from compiler.api import emit_fragments
    from compiler.driver import parse_source

    with open(os.path.join(ROOT, rel), encoding="utf-8", errors="surrogateescape") as f:
        text = f.read()
    try:
        if mode == "func":
            frags = emit_fragments(parse_source(text, rel), source=text)
            out = "\n".join(fr.text for fr in frags)
        else:
            opts = {"variant": "smem-dump"} if mode == "smem-dump" else None
            out = compile_source(text, rel, options=opts).ptx or ""
    except CompileError:
        return "error"
    except Exception as e:  # an internal error is recorded too, so a change in it shows
        return f"internal:{type(e).__name__}"
    return hashlib.sha256(out.encode()).hexdigest()


def compute() -> dict[str, dict[str, str]]:
    return {rel: {m: digest(rel, m) for m in MODES} for rel in inputs()}


if __name__ == "__main__":
    if "--write" in sys.argv:
        table = compute()
        with open(GOLDEN, "w") as f:
            json.dump(table, f, indent=1, sort_keys=True)
            f.write("\n")
        print(f"wrote {len(table)} inputs to {GOLDEN}")
