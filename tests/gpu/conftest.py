"""GPU tests: everything under tests/gpu/ is marked `gpu` and runs only where its device and libraries are
present; elsewhere (CI, a laptop) each test is skipped with the reason. `tests/gpu/run_on_device.sh` runs
the slice on a GPU machine; the host halves live in tests/gpu/harness/ and are exercised by the CPU tests."""
from __future__ import annotations

from pathlib import Path

import pytest


def pytest_collection_modifyitems(config, items):
    """Mark every test here `gpu`. The full sweeps are also `slow`: they run only when the -m expression
    names `slow` (`-m "gpu and slow"`), so that `-m gpu`, which replaces the default `-m 'not slow'` of
    pyproject's addopts, still selects the default slice only."""
    here = Path(__file__).parent
    wants_slow = "slow" in (config.getoption("markexpr", "") or "")
    kept, dropped = [], []
    for item in items:
        if here in Path(item.fspath).parents:
            item.add_marker(pytest.mark.gpu)
            if not wants_slow and item.get_closest_marker("slow"):
                dropped.append(item)
                continue
        kept.append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


@pytest.fixture(scope="session")
def cupy_device():
    """(cupy module, compute capability as an int), or skip saying what is missing."""
    try:
        import cupy as cp
    except Exception as e:          # ImportError, or a cupy built for another CUDA
        pytest.skip(f"no GPU check without cupy: import cupy failed ({type(e).__name__}: {e})")
    try:
        count = cp.cuda.runtime.getDeviceCount()
    except Exception as e:          # CUDARuntimeError without a driver, ...
        pytest.skip(f"no CUDA device: {type(e).__name__}: {e}")
    if count < 1:
        pytest.skip("no CUDA device (cupy sees 0)")
    return cp, int(cp.cuda.Device().compute_capability)


@pytest.fixture(scope="session")
def sm90(cupy_device):
    """cupy on a Hopper GPU (sm_90: wgmma and the arch-specific sm_90a code), or skip."""
    cp, sm = cupy_device
    if sm != 90:
        pytest.skip(f"sm_90a code (wgmma; an arch-specific `.target`) runs on sm_90 only; the device is sm_{sm}")
    return cp


@pytest.fixture(scope="session")
def torch_cuda(cupy_device):
    """torch with CUDA on the same device, or skip."""
    try:
        import torch
    except Exception as e:
        pytest.skip(f"torch unavailable: {type(e).__name__}: {e}")
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA device")
    return torch
