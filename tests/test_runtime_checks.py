"""Launch checks that stand between a wrong argument and a wrong D (compiler/runtime/kernel.py): batch strides
of C and D the kernels' 16-byte accesses can take, D sharing no bytes with an input (C itself excepted), a
SparseA re-checked once its arrays are replaced, the device of a bare __cuda_array_interface__ array asked of
the driver, big-endian elements, the epilogue's scalars, the argument an allocation failure names, and a
dense A whose values overflow the kernel's type. Fake arrays and a recording driver: no GPU."""
from __future__ import annotations

import os

import numpy as np
import pytest

from compiler import sparse
from compiler.diagnostics import SpecError
from compiler.runtime import ArgumentError, SparseA, driver, load
from compiler.runtime import abi as rabi

from test_runtime import Fake, FakeCupy
from test_runtime_launch import H100, FakeDriver, h100  # noqa: F401  (h100: the recording driver, installed)

EX = os.path.join(os.path.dirname(__file__), "..", "examples")
M, N, K = 128, 256, 64


class DevicesDriver(FakeDriver):
    """A FakeDriver that knows which device each address lies on (CudaDriver.pointer_device)."""

    def __init__(self, info, on: dict[int, int]):
        super().__init__(info)
        self.on = on

    def pointer_device(self, ptr):
        return self.on.get(ptr, 0)


@pytest.fixture
def wg():         # loaded per test: a kernel keeps the driver of its first launch
    return load(os.path.join(EX, "sparse_wgmma_f16.tile"))        # f16 A, B; f32 C and D; batches


def packed(kern, batch=None, cls=Fake):
    lead = (batch,) if batch else ()
    return SparseA(cls(lead + rabi.buffer_shape(kern.abi, "a_values", M, K), "<f2"),
                   cls(lead + rabi.buffer_shape(kern.abi, "a_metadata", M, K), "<u4"), "f16", M, K, batch)


def batched_b(batch):
    return Fake((batch, K, N), "<f2", strides=(N * K * 2, 2, K * 2))       # each K x N, K contiguous


def raises(fn, arg, what):
    with pytest.raises(ArgumentError) as e:
        fn()
    assert (e.value.argument, e.value.what) == (arg, what), str(e.value)
    return str(e.value)


# ---------------------------------------------------------------------------------------- batch strides

@pytest.mark.parametrize("extra", [2, 4, 8])
def test_d_batch_stride_off_16_bytes_is_refused(h100, wg, extra):
    # f32 D: a batch stride of span + 2 bytes is not even whole elements (the kernel took stride // 4);
    # + 4 and + 8 are whole elements the kernels' 16-byte stores and bulk copies cannot take
    span = M * N * 4
    out = Fake((2, M, N), "<f4", strides=(span + extra, N * 4, 4))
    msg = raises(lambda: wg(packed(wg, 2), batched_b(2), Fake((2, M, N), "<f4"), out=out), "out", "stride")
    assert f"{span + extra} bytes" in msg and "multiple of 16 bytes" in msg
    assert not h100.launches


def test_c_batch_stride_off_16_bytes_is_refused_and_zero_shares_one_c(h100, wg):
    span = M * N * 4
    bad = Fake((2, M, N), "<f4", strides=(span + 2, N * 4, 4))
    raises(lambda: wg(packed(wg, 2), batched_b(2), bad, out=Fake((2, M, N), "<f4")), "C", "stride")
    negative = Fake((2, M, N), "<f4", strides=(-span, N * 4, 4), ptr=(1 << 44) + span)
    raises(lambda: wg(packed(wg, 2), batched_b(2), negative, out=Fake((2, M, N), "<f4")), "C", "stride")
    shared = Fake((2, M, N), "<f4", strides=(0, N * 4, 4))                # one C for both problems
    wg(packed(wg, 2), batched_b(2), shared, out=Fake((2, M, N), "<f4"))
    params = [name for name, _ in wg.params]
    assert h100.launches[-1][2][params.index("batch_stride_c")] == 0
    assert h100.launches[-1][2][params.index("batch_stride_d")] == M * N      # elements


# ---------------------------------------------------------------------------------------- D overlapping inputs

def _ptr(x):
    return x.__cuda_array_interface__["data"][0]


@pytest.mark.parametrize("victim", ["B", "A.values", "A.metadata", "C (another view)"])
def test_d_overlapping_an_input_is_refused(h100, wg, victim):
    a, b, c = packed(wg), Fake((N, K), "<f2").T, Fake((M, N), "<f4")
    target = {"B": _ptr(b), "A.values": _ptr(a.values) + 64, "A.metadata": _ptr(a.metadata),
              "C (another view)": _ptr(c) + N * 4}[victim]
    msg = raises(lambda: wg(a, b, c, out=Fake((M, N), "<f4", ptr=target)), "out", "memory")
    assert (victim.split(" ")[0] in msg) if victim != "C (another view)" else "another view of C" in msg
    assert not h100.launches


def test_d_is_c_in_place_and_disjoint_neighbours_launch(h100, wg):
    a, b, c = packed(wg), Fake((N, K), "<f2").T, Fake((M, N), "<f4")
    wg(a, b, c, out=c)                                                        # D = A*B + C in place
    after_b = _ptr(b) + N * K * 2                                             # the byte after B's last
    wg(a, b, c, out=Fake((M, N), "<f4", ptr=after_b))
    assert len(h100.launches) == 2


# ---------------------------------------------------------------------------------------- SparseA re-checks

def test_a_sparse_a_whose_arrays_are_replaced_is_checked_again(h100, wg):
    a, b, c, d = packed(wg), Fake((N, K), "<f2").T, Fake((M, N), "<f4"), Fake((M, N), "<f4")
    wg(a, b, c, out=d)
    a.metadata = Fake(rabi.buffer_shape(wg.abi, "a_metadata", M, K), "<u4")
    wg(a, b, c, out=d)
    assert h100.maps[-1][1]["a_metadata"] == _ptr(a.metadata)               # the new array's address
    a.values = Fake((3, 5), "<f4", ptr=(1 << 40) + 2)                         # wrong dtype, shape, alignment
    raises(lambda: wg(a, b, c, out=d), "A.values", "dtype")
    assert len(h100.launches) == 2


# ---------------------------------------------------------------------------------------- devices, byte order

def test_a_bare_cuda_array_interface_array_on_another_device_is_refused(wg):
    a = packed(wg)                                                           # Fake: no device of its own
    drv = DevicesDriver(H100, {_ptr(a.values): 0, _ptr(a.metadata): 0})
    previous = driver.use(drv)
    try:
        b = Fake((N, K), "<f2").T
        drv.on[_ptr(b)] = 1
        msg = raises(lambda: wg(a, b, Fake((M, N), "<f4"), out=Fake((M, N), "<f4")), "B", "device")
        assert "cuda:1" in msg
        ok = Fake((N, K), "<f2").T
        wg(a, ok, Fake((M, N), "<f4"), out=Fake((M, N), "<f4"))
        other = FakeCupy((M, N), "<f4", device=1)                           # cupy names its own device
        raises(lambda: wg(a, ok, Fake((M, N), "<f4"), out=other), "out", "device")
        assert len(drv.launches) == 1
    finally:
        driver.use(previous)


@pytest.mark.parametrize("arg", ["B", "out"])
def test_big_endian_elements_are_refused(h100, wg, arg):
    b = Fake((N, K), ">f2" if arg == "B" else "<f2").T
    out = Fake((M, N), ">f4" if arg == "out" else "<f4")
    msg = raises(lambda: wg(packed(wg), b, Fake((M, N), "<f4"), out=out), arg, "dtype")
    assert "little-endian" in msg


# ---------------------------------------------------------------------------------------- scalars

@pytest.fixture
def s8():
    return load(os.path.join(EX, "sparse_wgmma_s8_s8.tile"))             # s8 D with a `scale` parameter


def s8_args(kern):
    a = SparseA(Fake(rabi.buffer_shape(kern.abi, "a_values", M, K), "|i1"),
                Fake(rabi.buffer_shape(kern.abi, "a_metadata", M, K), "<u4"), "s8", M, K)
    return a, Fake((N, K), "|i1").T


@pytest.mark.parametrize("value", ["abc", "2", np.array([1.0, 2.0]), [1.0], complex(1, 1), True,
                                   2 ** 1024, 1e300, float("inf"), float("nan"), np.float64(-1e39)])
def test_a_scale_that_is_no_finite_f32_number_is_refused(h100, s8, value):
    assert ("scale", "f32") in s8.params
    raises(lambda: s8(*s8_args(s8), out=Fake((M, N), "|i1"), scale=value), "scale", "value")
    assert not h100.launches


@pytest.mark.parametrize("value, passed", [(2, 2.0), (np.float32(0.5), 0.5), (np.int64(-3), -3.0),
                                           (3.4e38, np.float32(3.4e38))])
def test_a_finite_real_scale_reaches_its_parameter(h100, s8, value, passed):
    s8(*s8_args(s8), out=Fake((M, N), "|i1"), scale=value)
    params = [name for name, _ in s8.params]
    assert h100.launches[-1][2][params.index("scale")] == pytest.approx(float(passed))


# ---------------------------------------------------------------------------------------- what an error names

def test_an_allocation_the_library_cannot_make_names_its_argument(h100, wg):
    msg = raises(lambda: wg(packed(wg), Fake((N, K), "<f2").T, out=Fake((M, N), "<f4")), "C", "value")
    assert "allocates C only for torch and cupy" in msg
    split = load(os.path.join(EX, "sparse_wgmma_f16_decode_split_k.tile"))
    a = SparseA(Fake(rabi.buffer_shape(split.abi, "a_values", 128, 256), "<f2"),
                Fake(rabi.buffer_shape(split.abi, "a_metadata", 128, 256), "<u4"), "f16", 128, 256)
    assert "scratch" in split.abi
    msg = raises(lambda: split(a, Fake((16, 256), "<f2").T, out=Fake((128, 16), "<f2")), "A", "library")
    assert "workspace" in msg


# ---------------------------------------------------------------------------------------- packing A

def test_pack_a_refuses_values_that_overflow_the_kernels_type(wg):
    a = np.zeros((M, K), np.float32)
    a[0, 0], a[3, 1] = 1.0, 1e5                                              # 2:4 kept; 1e5 > f16's 65504
    msg = raises(lambda: wg.pack_a(a), "A", "values")
    assert "overflows f16" in msg and "(3, 1)" in msg


@pytest.mark.parametrize("dtype, fits, overflows", [
    # the largest finite value plus half its ulp overflows (round to nearest, PTX/IEEE); below it rounds
    ("f16", 65519.0, 65520.0),          # 65504 + 32 / 2
    ("e4m3", 460.0, 464.0),             # 448 + 32 / 2 (e4m3 has no inf: it would be NaN)
    ("e5m2", 61439.0, 61440.0),         # 57344 + 8192 / 2
    ("e2m1", 6.9, 7.0),                 # 6 + 2 / 2 (fp4 saturates: 7 would become 6)
])
def test_to_elements_rounds_below_the_overflow_threshold_and_refuses_at_it(dtype, fits, overflows):
    import ml_dtypes

    largest = float(ml_dtypes.finfo(sparse._np_dtype(dtype)).max)
    assert float(sparse.to_elements(np.array([fits], np.float32), dtype).astype(np.float32)[0]) == largest
    with pytest.raises(SpecError, match=f"overflows {dtype}"):
        sparse.to_elements(np.array([-overflows], np.float32), dtype)
    with pytest.raises(SpecError, match="overflows f16"):                      # from an ml_dtypes type too
        sparse.to_elements(np.array([1e5], ml_dtypes.bfloat16), "f16")
    inf = sparse.to_elements(np.array([np.inf], np.float32), "f16")          # given inf stays inf
    assert np.isinf(inf.astype(np.float32)[0])
