import os

import pytest

from compiler.ptxas import find_ptxas


@pytest.fixture(scope="session")
def ptxas():
    """Path to ptxas. In CI (env CI set) a missing ptxas fails the test instead of skipping it."""
    exe = find_ptxas()
    if exe is None:
        if os.environ.get("CI"):
            pytest.fail("ptxas not found; CI must assemble every PTX form")
        pytest.skip("ptxas not found")
    return exe


@pytest.fixture(scope="session")
def nvcc():
    """Path to an nvcc that builds `-rdc` CUDA C++ callers and links them (tests/gpu/harness/nvcc_link.py).
    In CI (env CI set) a missing or broken toolchain fails the test instead of skipping it: the test extra
    installs one (nvidia-cuda-nvcc and its pinned front-end wheels; g++ is the system's)."""
    from tests.gpu.harness.nvcc_link import find_nvcc, toolchain_problem

    exe = find_nvcc()
    problem = toolchain_problem(exe)
    if problem is not None:
        if os.environ.get("CI"):
            pytest.fail(f"{problem}; CI must link every fragment kind with nvcc")
        pytest.skip(problem)
    return exe
