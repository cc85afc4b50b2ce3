"""Runs the whole lit suite (tests/lit) so that one `pytest` command runs everything."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_lit_suite():
    # .ci/run runs this suite against the installed wheel before README's test command and says so here:
    # one CI job need not run it twice
    if os.environ.get("TILEC_LIT_SUITE_RAN") == str(ROOT / "tests" / "lit"):
        pytest.skip("this CI job ran the lit suite against the installed wheel (.ci/run)")
    env = dict(os.environ)
    proc = subprocess.run([sys.executable, "-c", "from lit.main import main; main()", "-sv", str(ROOT / "tests" / "lit")],
                          cwd=ROOT, env=env, capture_output=True, text=True)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-20000:]
    # lit prints "Passed: N"; the suite must actually have run tests.
    assert "Passed" in out, out[-2000:]
