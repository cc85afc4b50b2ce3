"""Every mma.sp form an sm_80 / sm_89 / sm_90 GPU can execute, run through tilec's emitter and compared
with numpy (tests/gpu/harness/mma_sp_hw.py). Default slice: the quick variant set (every legal selector,
one-warp and 2x2-warp CTAs, two problem sizes). `-m "gpu and slow"`: the full set as well (plain `.sp` on
sm_90, static metadata patterns, decreasing index pairs, a third problem size). Integers exact, floats
within accumulation tolerance. Skipped without cupy and a GPU; bf16, fp8 and 4-bit forms also need ml_dtypes."""
from __future__ import annotations

import tempfile
import zlib

import numpy as np
import pytest

from compiler.isa.mma_sp.forms import all_forms
from compiler.isa.targets import TARGETS

from tests.gpu.harness import mma_sp_hw

# forms with a plain target (sm_80 or sm_89): the ones pre-Blackwell GPUs can run
RUNNABLE = [f for f in all_forms()
            if any(TARGETS[t].suffix == "" and TARGETS[t].sm <= 90 for t in f.row.target_rule.targets())]


def test_runnable_forms_are_the_sm80_and_sm89_rows():
    # PTX ISA 9.7.14.6 (mma.sp) rows whose target is plain sm_80 or sm_89: 4 f16 + 2 bf16 + 2 tf32 +
    # 16 s8/u8 + 16 s4/u4 + 4 fp8 (e4m3/e5m2, sm_89) = 44
    assert len(RUNNABLE) == 44
    assert [f.name for f in mma_sp_hw.runnable_forms(90)] == [f.name for f in RUNNABLE]


def _check(cupy_device, form, quick: bool):
    cp, sm = cupy_device
    if not any(TARGETS[t].suffix == "" and TARGETS[t].sm <= sm for t in form.row.target_rule.targets()):
        pytest.skip(f"{form.name} needs a newer GPU than sm_{sm}")
    if mma_sp_hw.needs_ml_dtypes(form):
        pytest.importorskip("ml_dtypes", reason=f"{form.name}: host data of its types needs ml_dtypes")
    with tempfile.TemporaryDirectory() as tmp:
        res = mma_sp_hw.check_form(cp, form, np.random.default_rng(zlib.crc32(form.name.encode())), quick, tmp, [0])
    assert res.cases > 0
    assert not res.failures, "\n".join(res.failures[:5])


@pytest.mark.parametrize("form", RUNNABLE, ids=lambda f: f.name)
def test_form_on_gpu(cupy_device, form):
    _check(cupy_device, form, quick=True)


@pytest.mark.slow
@pytest.mark.parametrize("form", RUNNABLE, ids=lambda f: f.name)
def test_form_on_gpu_all_variants(cupy_device, form):
    _check(cupy_device, form, quick=False)
