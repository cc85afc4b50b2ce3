"""Emitted PTX stays byte-identical for every example and lit input (tests/golden/goldens.py)."""
import json

import pytest

from tests.golden import goldens

with open(goldens.GOLDEN) as _f:
    RECORDED = json.load(_f)


def test_every_input_has_a_golden():
    assert sorted(RECORDED) == goldens.inputs(), "new or removed .tile inputs: rerun goldens --write"


@pytest.mark.parametrize("rel", sorted(RECORDED))
def test_ptx_bytes_unchanged(rel):
    now = {m: goldens.digest(rel, m) for m in goldens.MODES}
    assert now == RECORDED[rel]
