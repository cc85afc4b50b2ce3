"""The sparse wgmma kernel's schedules on the H100 (issue 17): persistent CTAs (`persistent=static`,
examples/sparse_wgmma_f16_persistent.tile) at 4096^3 (512 CTA tiles in 256 pairs over the 66 pairs of 132
SMs: every pair walks 3 or 4 tiles, the ring's stage and phase carried across them) and at edge shapes and
batches. Each run goes through compiler.runtime (the grid read from the ABI with the device's SM count),
with B and D strided views and a guard band around D (tests/gpu/test_sparse_wgmma_edges_gpu.py `run`: every
byte outside D must keep its sentinel; D against numpy bit for bit, the inputs' few significant bits keep
every f32 partial sum exact up to K = 8192). The CPU side of the same checks: tests/test_sparse_wgmma_sched.py."""
from __future__ import annotations

import pytest

pytest.importorskip("lark", reason="tilec's parser compiles the examples")
pytest.importorskip("cuda.core", reason="the runtime runs on cuda-core")

from tests.gpu.test_sparse_wgmma_edges_gpu import run  # noqa: E402

PERSISTENT = "sparse_wgmma_f16_persistent.tile"


@pytest.mark.parametrize("shape", [(4096, 4096, 4096), (4100, 3000, 1000), (200, 136, 72), (1, 1, 1)],
                         ids=lambda s: "x".join(map(str, s)))
def test_persistent_any_size_and_guard_band(sm90, torch_cuda, shape):
    run(torch_cuda, PERSISTENT, *shape)


@pytest.mark.parametrize("shape,batch", [((300, 600, 100), 3), ((2048, 2048, 512), 2)])
def test_persistent_batch(sm90, torch_cuda, shape, batch):
    run(torch_cuda, PERSISTENT, *shape, batch=batch, seed=batch)


def test_persistent_grid_is_the_sm_count(sm90, torch_cuda):
    """4096^3: min(512 tiles, SMs) CTAs, in pairs: the launch the runtime makes."""
    from compiler.runtime import load

    kernel = load(str(__import__("pathlib").Path(__file__).resolve().parents[2] / "examples" / PERSISTENT)).load()
    sms = torch_cuda.cuda.get_device_properties(0).multi_processor_count
    grid, cluster, _, _ = kernel.launch_dims(4096, 4096, 4096)
    assert cluster == (2, 1, 1) and grid == (min(512, sms) // 2, 1, 1)
