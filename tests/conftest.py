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
