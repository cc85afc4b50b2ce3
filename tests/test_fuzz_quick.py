"""A quick, deterministic slice of the fuzzer (benchmarks/fuzz.py runs the long version).

Contract checked (compiler/cli.py docstring, compiler/diagnostics.py): any input either compiles, or
raises CompileError whose every diagnostic is located inside the file and renders its own source
line; through the CLI the exit status is 0 or 1, never 3 ("internal error"). Crashes that are already
saved under tests/regressions/crashers with a `known_issue` note are tracked there (xfail, strict)
and tolerated here, so this test fails only on a new kind of crash.
"""
from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fuzz import generate, harness, mutate, strategies
from fuzz.crashers import known_signatures

QUICK = settings(max_examples=300, derandomize=True, deadline=None, database=None,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _assert_no_new_crash(outcome: harness.Outcome, data) -> None:
    if outcome.crashed and outcome.signature not in known_signatures():
        shown = data if isinstance(data, str) else repr(data)
        pytest.fail(f"{outcome.kind}: {outcome.signature}\n{outcome.detail}\n--- input:\n{shown[:2000]}")


@QUICK
@given(strategies.generated_sources())
def test_generated_tiles_compile_or_fail_located(src):
    _assert_no_new_crash(harness.check_source(src, timeout=20), src)


@QUICK
@given(strategies.mutated_sources())
def test_mutated_corpus_compiles_or_fails_located(src):
    _assert_no_new_crash(harness.check_source(src, timeout=20), src)


# What the CLI's --arch / --ptx-version / --variant hand to compile_source; an overridden target or
# version is written nowhere in the file, so diagnostics about it need no location.
OVERRIDES = ({"arch": "sm_100a"}, {"arch": "sm_80"}, {"arch": "sm_120a"}, {"arch": "sm_103f"},
             {"ptx_version": (8, 6)}, {"ptx_version": (9, 1)}, {"ptx_version": (7, 0)},
             {"options": {"variant": "smem-dump"}}, {"arch": "sm_90a", "options": {"variant": "smem-dump"}})


@settings(QUICK, max_examples=100)
@given(strategies.sources(), st.sampled_from(OVERRIDES))
def test_cli_overrides_compile_or_fail_located(src, overrides):
    _assert_no_new_crash(harness.check_source(src, timeout=20, **overrides), src)


@settings(QUICK, max_examples=15)
@given(strategies.sources())
def test_cli_exit_status_is_0_or_1(tmp_path_factory, src):
    _assert_no_new_crash(harness.check_cli(src, str(tmp_path_factory.mktemp("cli")), timeout=20), src)


@settings(QUICK, max_examples=10)
@given(strategies.damaged_bytes())
def test_cli_damaged_encoding_is_a_located_error(tmp_path_factory, data):
    _assert_no_new_crash(harness.check_cli(data, str(tmp_path_factory.mktemp("cli")), timeout=20), data)


def test_generators_reach_ptx_and_diagnostics():
    """The generators are useful only if they reach both ends of the pipeline: some inputs must
    compile to PTX and some must be rejected (fixed seed, so the counts are stable for one corpus; a file
    added to examples/ or tests/lit/ reshuffles every corpus pick, so the mutations are 300, about 15 of which
    compile, not 150, about 5: 3 to 6 over recent corpora)."""
    c = generate.RandomChooser(random.Random(1234))
    statuses = [harness.check_source(generate.source(c)).status for _ in range(150)]
    statuses += [harness.check_source(mutate.mutated_corpus_file(c)).status for _ in range(300)]
    assert statuses.count("ok") >= 5, statuses.count("ok")
    assert statuses.count("error") >= 100, statuses.count("error")


# ---- the harness itself: it must call each kind of contract violation a crash --------------------------

def _raising(exc):
    def compile_source(*args, **kwargs):
        raise exc
    return compile_source


def test_harness_reports_an_escaped_exception(monkeypatch):
    monkeypatch.setattr("compiler.driver.compile_source", _raising(KeyError("boom")))
    out = harness.check_source("target sm_100a;")
    assert (out.status, out.kind) == ("crash", "exception")
    assert out.signature.startswith("KeyError@")


@pytest.mark.parametrize("loc_args, kind", [
    (None, "unlocated"),
    (("other.tile", 1, 1), "unlocated"),
    ((harness.FUZZ_FILENAME, 3, 1), "out-of-range"),       # the input below has 2 lines
    ((harness.FUZZ_FILENAME, 1, 40), "out-of-range"),      # line 1 has 15 characters
    ((harness.FUZZ_FILENAME, 2, 3), None),                 # inside line 2: a proper diagnostic
])
def test_harness_checks_diagnostic_locations(monkeypatch, loc_args, kind):
    from compiler.diagnostics import CompileError, Diagnostic, Loc

    src = "target sm_100a;\ntile t { }"
    loc = Loc(*loc_args) if loc_args else None
    monkeypatch.setattr("compiler.driver.compile_source", _raising(CompileError([Diagnostic("bad", loc)], src)))
    out = harness.check_source(src)
    assert (out.status, out.kind) == (("crash", kind) if kind else ("error", ""))


def test_harness_reports_a_hang(monkeypatch):
    def slow(*args, **kwargs):
        while True:
            pass
    monkeypatch.setattr("compiler.driver.compile_source", slow)
    assert harness.check_source("x", timeout=0.2).kind == "hang"


def test_cli_harness_accepts_a_real_error_and_real_ptx(tmp_path):
    assert harness.check_cli("target sm_100a;\ntile t {\n  shape M=1;\n}\n", str(tmp_path)).status == "error"
    example = mutate.ROOT / "examples" / "gemm_bf16.tile"
    assert harness.check_cli(example.read_text(), str(tmp_path)).status == "ok"


def test_tokenizer_is_lossless_on_the_corpus():
    """Token mutations rebuild the file from its tokens; joining them must give the file back."""
    for text in mutate.corpus():
        assert "".join(mutate.tokens(text)) == text


def test_minimize_keeps_the_property_and_shrinks():
    from fuzz.minimize import minimize

    text = "target sm_100a;\ntile t {\n  engine tcgen05;\n  shape M=128 N=64 K=16;\n  bogus x=1;\n}\n"
    small = minimize(text, lambda t: "bogus" in t)
    assert "bogus" in small and len(small) < len(text) // 4, small
