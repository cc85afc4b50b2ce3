"""Every repository path that code, tests, benchmarks, docs and README name (`compiler/ptx/emulate.py`,
`tests/test_x.py`, `examples/y.tile`) exists: a docstring that sends the reader to a moved or deleted file
is wrong documentation (compiler/ptx/tcgen05_kernel.py named compiler/ptx/emulate.py, long after the
emulator moved to compiler/emulator/)."""
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# written by the build (setup.py), not kept in the repository; placeholders that stand for any path
NOT_IN_THE_TREE = {"compiler/frontend/grammar/tile-lalr.json", "compiler/frontend/grammar/tile.lark", "compiler/x/y.py"}
NAMED_PATH = re.compile(r"(?<![\w./-])((?:compiler|tests|benchmarks|examples|docs|grammar)/[\w./-]+?\.(?:py|md|tile|lark|json|sh))\b")


def named_paths(text: str) -> list[str]:
    return NAMED_PATH.findall(text)


def test_every_named_path_exists():
    files = subprocess.run(["git", "ls-files", "compiler", "tests", "benchmarks", "examples", "docs", "README.md"],
                           cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    missing = []
    for name in files:
        if name == "tests/test_named_paths.py" or not name.endswith((".py", ".tile", ".md", ".sh")):
            continue
        for n, line in enumerate((ROOT / name).read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            for path in named_paths(line):
                if path not in NOT_IN_THE_TREE and not (ROOT / path).exists():
                    missing.append(f"{name}:{n}: {path}")
    assert not missing, "paths named but not in the repository:\n" + "\n".join(missing)


def test_the_pattern_finds_paths_in_prose():
    assert named_paths("and compiler/ptx/emulate.py runs the kernels") == ["compiler/ptx/emulate.py"]
    assert named_paths("(`compiler/mma_sp/fragments.py`):") == ["compiler/mma_sp/fragments.py"]
    assert named_paths("see tests/lit/negative/x.tile.") == ["tests/lit/negative/x.tile"]
    assert named_paths("site/compiler/frontend/grammar/tile.lark") == []     # a path under another root
