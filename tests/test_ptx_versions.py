"""PTX ISA versions: only released ones (PTX ISA "Release Notes", "PTX Release History"), compared as versions."""
from __future__ import annotations

import pytest

from compiler import CompileError, compile_source
from compiler.isa.targets import (MAX_PTX, PTX_RELEASES, TARGETS, format_version, near_versions, parse_version,
                                  version_problem)

TILE = """target sm_100a;
tile t {
  engine tcgen05;
  shape M=128 N=64 K=16;
  A: bf16 smem;
  B: bf16 smem;
  D: f32 tmem;
}
"""


def test_every_released_version_parses_to_itself():
    for v in PTX_RELEASES:
        assert parse_version(format_version(v)) == v


@pytest.mark.parametrize("text", ["8.9", "8.48", "8.60", "7.257", "9.10", "10.0", "1.6", "0.9"])
def test_unreleased_versions_are_refused(text):
    assert parse_version(text) is None
    message, hint = version_problem(text)
    assert f"PTX ISA {text} was never released" in message
    assert hint.startswith("released versions near it: ")


@pytest.mark.parametrize("text", ["08.8", "8.08", "8", "8.", ".8", "8.8.0", "eight", "８.８", "8.8 "])
def test_malformed_or_padded_spellings_are_refused(text):
    assert parse_version(text) is None
    assert version_problem(text)[0]


def test_8_48_is_not_taken_for_a_version_newer_than_8_8():
    # Tuple order would put (8, 48) after (8, 8); the table never lets (8, 48) exist.
    assert parse_version("8.48") is None
    assert (8, 48) not in PTX_RELEASES
    # The released 8.x minors are exactly 0..8 (Release History rows PTX ISA 8.0 .. 8.8).
    assert sorted(m for (major, m) in PTX_RELEASES if major == 8) == list(range(9))


def test_near_versions_surround_the_bad_one():
    assert near_versions((8, 9)) == [(8, 7), (8, 8), (9, 0), (9, 1)]
    assert near_versions((7, 257)) == [(7, 7), (7, 8), (8, 0), (8, 1)]
    assert near_versions((0, 1)) == [(1, 0), (1, 1)]


def test_targets_and_ptxas_limit_are_released_versions():
    assert MAX_PTX in PTX_RELEASES
    for t in TARGETS.values():
        assert t.min_ptx in PTX_RELEASES, t.name


@pytest.mark.parametrize("version", [(8, 48), (8, 9), (7, 257)])
def test_api_version_tuples_are_checked_too(version):
    with pytest.raises(CompileError, match="was never released"):
        compile_source(TILE, "t.tile", ptx_version=version)


def test_released_version_still_compiles():
    assert ".version 8.8\n" in compile_source(TILE, "t.tile", ptx_version=(8, 8)).ptx
