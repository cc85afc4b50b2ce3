"""GPU tests: run only where cupy imports and sees an NVIDIA GPU; skipped everywhere else (CI)."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def pytest_collection_modifyitems(config, items):
    here = Path(__file__).parent
    for item in items:
        if here in Path(item.fspath).parents:
            item.add_marker(pytest.mark.gpu)


@pytest.fixture(scope="session")
def cupy_device():
    """(cupy module, compute capability as an int), or skip."""
    try:
        import cupy as cp
        if cp.cuda.runtime.getDeviceCount() < 1:
            pytest.skip("no CUDA device")
        return cp, int(cp.cuda.Device().compute_capability)
    except Exception as e:          # ImportError, CUDARuntimeError without a driver, ...
        pytest.skip(f"cupy / GPU unavailable: {e}")


@pytest.fixture(scope="session")
def hw_check():
    """benchmarks/mma_sp_hw_check.py as a module (benchmarks/ is not a package)."""
    spec = importlib.util.spec_from_file_location("mma_sp_hw_check", REPO / "benchmarks" / "mma_sp_hw_check.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod          # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod
