"""Code, tests, benchmarks and README cite the PTX ISA (a section or table), never the reading aid that
restates it (the project's ptx-digest.md): a citation must point at the document a reader can check."""
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CITATION_OF_THE_AID = re.compile(r"ptx-digest|digest( |-)?§|the digest\b|digest's|\(digest|digest [0-9]")


def test_nothing_cites_the_digest():
    files = subprocess.run(["git", "ls-files", "compiler", "tests", "benchmarks", "examples", "docs", "README.md"],
                           cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    bad = []
    for name in files:
        if name == "tests/test_citations.py" or not name.endswith((".py", ".tile", ".md", ".sh", ".ir")):
            continue
        for n, line in enumerate((ROOT / name).read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if CITATION_OF_THE_AID.search(line):
                bad.append(f"{name}:{n}: {line.strip()[:120]}")
    assert not bad, "cite the PTX ISA section or table instead:\n" + "\n".join(bad)


def test_the_check_sees_a_citation_of_the_aid():
    assert CITATION_OF_THE_AID.search("metadata layout (digest §4.2)")
    assert not CITATION_OF_THE_AID.search("the SHA-256 digest of the PTX")
