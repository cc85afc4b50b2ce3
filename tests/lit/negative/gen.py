"""Write the generated negative lit suite (this directory) from the negative table.

    python tests/lit/negative/gen.py          # (re)write the files
    python tests/lit/negative/gen.py --check  # exit 1 if they are stale

One file per combination class of tests/fuzz/negative.py (see tests/fuzz/negative_lit.py for the
file layout); tests/test_negative_table.py::test_lit_suite_is_current fails when they are stale.
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))      # tests/: the `fuzz` package

from fuzz import negative_lit  # noqa: E402


def main(argv: list[str]) -> int:
    if "--check" in argv:
        stale = negative_lit.stale_files()
        for name in stale:
            print(f"stale: {name}")
        return 1 if stale else 0
    names = negative_lit.write()
    print(f"wrote {len(names)} files to {negative_lit.LIT_DIR}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
