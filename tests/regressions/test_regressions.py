"""Every crasher the fuzzer saved (tests/regressions/crashers, written by benchmarks/fuzz.py) must now
compile or fail with located diagnostics. A crasher whose sidecar carries a `known_issue` note is a
bug reported to its owner and still open: it is xfail(strict=True), so the fix makes this test fail
until the note is removed.
"""
from __future__ import annotations

import pytest

from fuzz import harness
from fuzz.crashers import load_crashers

CRASHERS = load_crashers()


def _param(c):
    marks = [pytest.mark.xfail(strict=True, reason=c.meta["known_issue"])] if c.meta.get("known_issue") else []
    return pytest.param(c, id=f"{c.path.stem}-{c.meta['signature'][:40]}", marks=marks)


@pytest.mark.parametrize("crasher", [_param(c) for c in CRASHERS])
def test_saved_crasher_no_longer_crashes(crasher, tmp_path):
    text = crasher.text
    if crasher.meta["via"] == "cli" or text is None:
        outcome = harness.check_cli(crasher.data, str(tmp_path), timeout=60)
    else:
        overrides = dict(crasher.meta.get("overrides", {}))
        if "ptx_version" in overrides:
            overrides["ptx_version"] = tuple(overrides["ptx_version"])
        outcome = harness.check_source(text, timeout=60, **overrides)
    assert not outcome.crashed, f"{outcome.kind}: {outcome.signature}\n{outcome.detail}"


def test_crashers_are_saved_with_their_signature():
    """Each sidecar names the crash it was saved for; an input without one could never be triaged."""
    for c in CRASHERS:
        assert c.meta["signature"] and c.meta["via"] in ("api", "cli"), c.path
