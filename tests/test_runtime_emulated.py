"""Kernel.__call__ end to end on the CPU emulator (tests/emulated_device.py): a batched launch of the
warp-specialised tcgen05 kernel (issue 18) builds its tensor maps, parameters and grid as on a B200, and the
emulated kernel computes D from exactly those, checked against numpy. Strided batches (each problem's A, B and
D 16 bytes, or more, after the previous one's end, the gaps poisoned) and partial tiles in M and N; D's gaps
must come back untouched."""
from __future__ import annotations

import os

import numpy as np
import pytest

import compiler
from compiler.runtime import driver, load

from emulated_device import EmulatedDevice
from tests.gpu.harness import ws_batch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EX = os.path.join(ROOT, "examples")


@pytest.fixture
def device():
    dev = EmulatedDevice()
    previous = driver.use(dev)
    yield dev
    driver.use(previous)


def strided(dev, batch: int, rows: int, cols: int, dtype, gap: int, fill):
    """A batch-first rows x cols array whose problems lie `gap` elements apart beyond their size, the gaps
    `fill`; (the host view, its base buffer)."""
    base = np.full((batch, rows * cols + gap), fill, dtype)
    view = np.lib.stride_tricks.as_strided(base, (batch, rows, cols),
                                           (base.strides[0], cols * base.itemsize, base.itemsize))
    return view, base


def test_dense_batch_through_the_runtime(device):
    """examples/tcgen05_gemm_f16.tile (128 x 128 tiles, K block 64): 2 problems of 100 x 72 x 48 (a partial tile
    each, one partial K block) on a device of one SM, so that one persistent CTA walks both problems' tiles; A / B / D
    batches 8 f16 / 8 f16 / 4 f32 elements (16 bytes) apart beyond their size; f16 values of -2..2 and 48-deep
    sums: every partial sum exact in f32, so D must equal numpy's A @ B^T bit for bit."""
    from compiler.runtime.driver import DeviceInfo

    device.info = DeviceInfo(0, "NVIDIA B200 (emulated, 1 SM)", (10, 0), 1)
    kernel = load(os.path.join(EX, "tcgen05_gemm_f16.tile"))
    m, n, k, batch = 100, 72, 48, 2
    rng = np.random.default_rng(18)
    a, a_base = strided(device, batch, m, k, np.float16, 8, np.nan)
    bt, bt_base = strided(device, batch, n, k, np.float16, 8, np.nan)
    a[:] = rng.integers(-2, 3, a.shape)
    bt[:] = rng.integers(-2, 3, bt.shape)
    d, d_base = strided(device, batch, m, n, np.float32, 4, np.float32(1234.5))
    out = device.array(d, base=d_base)
    got = kernel(device.array(a, base=a_base), device.array(bt, base=bt_base).T, out=out)
    assert got is out
    ref = np.einsum("bmk,bnk->bmn", a.astype(np.float64), bt.astype(np.float64))
    assert np.array_equal(d, ref.astype(np.float32))
    assert (d_base[:, m * n:] == np.float32(1234.5)).all()           # the gaps between D's problems
    assert device.launches[-1][0].grid == (1, 1, 1)


_TYPED = {"f16": (np.float16, "<f2"), "bf16": (np.uint16, "<V2"), "f32": (np.float32, "<f4"), "u32": (np.uint32, "<u4")}


def placed(device, raw: np.ndarray, element: str, poison: int = 0x7F):
    """The bytes [batch][rows][row bytes] as a strided batch on the emulated device (tests.gpu.harness.ws_batch
    strided_base: GAP poisoned bytes between problems), typed as `element` (bytes for 8- and 4-bit types);
    (the device array, its base bytes)."""
    base = ws_batch.strided_base(raw, poison)
    dtype, typestr = _TYPED.get(element, (np.uint8, "|u1"))
    typed = base.view(dtype)
    shape, strides = ws_batch.typed_strides(raw, typed.itemsize)
    view = np.lib.stride_tricks.as_strided(typed, shape, tuple(s * typed.itemsize for s in strides))
    return device.array(view, typestr, base=base), base


def launch_batch(device, key: str, m: int, n: int, batch: int) -> list[str]:
    """KINDS[key], `batch` problems of M x N x (2 K blocks) through Kernel.__call__ on the emulated device;
    what is wrong with D (ws_batch.d_mismatches)."""
    result, tile = ws_batch.compile_kind(key)
    kernel = load(result, tile)
    k = 2 * kernel.abi["tile_k"]
    p = ws_batch.batch_problem(result, tile, m, n, k, batch)
    arrays = {name: placed(device, raw, element, ws_batch.POISON.get(name, 0x7F))
              for name, (raw, element) in p.raw.items()}
    args = [arrays["A"][0], arrays["B"][0].T] + ([arrays["C"][0]] if "C" in arrays else [])
    kw = {x: v for x, v in p.kwargs.items() if x != "bias"}
    if "bias" in p.kwargs:
        kw["bias"] = device.array(p.kwargs["bias"])
    for kwarg, name in ws_batch.IMAGES:
        if name in p.naturals:
            kw[kwarg] = device.array(kernel.host_image(name, p.naturals[name], k), "<u4" if name == "META" else "|u1")
    d = arrays["D"][0]
    assert kernel(*args, out=d, **kw) is d
    assert device.launches[-1][1][-1 - ("C" in arrays)] == batch      # the batch parameter (before batch_stride_c)
    return ws_batch.d_mismatches(p, arrays["D"][1])


@pytest.mark.slow
@pytest.mark.parametrize("key", [x for x in ws_batch.KINDS if x != "dense"])
def test_every_ws_kind_batched_through_the_runtime(device, key):
    """Every other kind of warp-specialised kernel (sparse with META, block-scaled with SFA / SFB, sparse and
    block-scaled with all three, A in TMEM, cluster launch control, a CTA pair, a fused epilogue reading C), a
    batch of 3 problems of 150 (a pair:
    300) x 136 with partial tiles, through Kernel.__call__ on the emulator: tests.gpu.harness.ws_batch's
    problems (the B200 test launches the same), A, B, D and C batches 16 bytes apart beyond their size, the
    images built by Kernel.host_image from the batch's natural layouts."""
    assert launch_batch(device, key, 300 if ws_batch.is_pair(key) else 150, 136, 3) == []


def test_seeded_wrong_batch_stride_is_caught(device, monkeypatch):
    """The check itself: a runtime that gave the tensor maps the packed batch stride (rows x row bytes)
    instead of the arrays' (16 bytes more) reads the second problem 16 bytes early, and D is wrong."""
    from compiler.ptx import tcgen05_ws_kernel

    real = tcgen05_ws_kernel.tensor_map_args
    monkeypatch.setattr(tcgen05_ws_kernel, "tensor_map_args",
                        lambda *a, **kw: real(*a, **{**kw, "batch_bytes": None}))
    bad = launch_batch(device, "dense", 100, 72, 2)
    assert bad and all("problem 1" in x or "gaps" in x for x in bad), bad


def test_tilec_run_check_of_a_batch_on_the_emulator(device, monkeypatch, capsys):
    """`tilec run --check --batch 2` of the warp-specialised kernel as on a B200, but the runtime's driver and
    the array library are the emulator's (tests/emulated_device.py: its device and a cupy stand-in whose
    arrays are host buffers): compiler/run.py builds the batch-first operands and images, Kernel.__call__
    the maps, parameters and grid, the emulated kernel computes D, and tilec run checks each problem."""
    import sys

    from compiler import cli
    from emulated_device import fake_cupy

    cupy = fake_cupy(device)
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    monkeypatch.setattr("compiler.run._array_library", lambda: ("cupy", cupy))
    rc = cli.main(["run", "--check", "--batch", "2", "--shape", "100,72,64",
                   os.path.join(EX, "tcgen05_gemm_sparse_f16.tile")])
    out, err = capsys.readouterr()
    assert rc == 0, out + err
    assert "100 x 72 x 64 x 2 problems on NVIDIA B200 (emulated, 4 SMs) (sm_100)" in out
    assert "D matches numpy" in out and "14400 of 14400 elements bit-identical" in out      # 2 x 100 x 72
    assert device.launches[-1][1][-1] == 2
