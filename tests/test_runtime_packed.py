"""4-bit operands of the mma.sp kernels at launch, without a GPU: the shapes the runtime checks are the shapes
compiler.sparse (Kernel.pack_a, sparse.pack_b) produces.

The m16n8k128 forms (s4/u4; e2m1 of kind::mxf4 / mxf4nvf4) store two 4-bit elements a byte (PTX ISA
9.7.14.6.2.7/.8: packed 8 per 32-bit register; compiler/isa/mma_sp/forms.py storage_bits 4). The ABI's shapes
count elements (a_values M x K/2, b N x K) and marks the two packed; the arrays hold M x K/4 and N x K/2
bytes. The runtime used to check the element counts against byte arrays: every 4-bit mma.sp launch failed
its shape check on the very arrays pack_a uploads.
"""
from __future__ import annotations

import numpy as np
import pytest

from compiler import sparse
from compiler.runtime import ArgumentError, DeviceError, SparseA, load
from compiler.runtime import abi as rabi
from tests.test_runtime import Fake

TILES = {
    # (tile body, A/B type, shape): kind::mxf4 with its ue8m0 scales, and plain s4 (no kind)
    "e2m1": ("  engine mma.sp kind=mxf4;\n  shape M=16 N=8 K=128;\n  A: e2m1 global; B: e2m1 global; "
             "C: f32 global; D: f32 global;\n  SFA: ue8m0 global; SFB: ue8m0 global;\n  block_scale vec=2X;\n"
             "  sparsity 4:8;\n", "sm_120a"),
    "s4": ("  engine mma.sp;\n  shape M=16 N=8 K=128;\n  A: s4 global; B: s4 global; C: s32 global; "
           "D: s32 global;\n  sparsity 4:8;\n", "sm_80"),
}
M, N, K = 32, 16, 256


@pytest.fixture(params=sorted(TILES))
def packed(request, tmp_path):
    body, target = TILES[request.param]
    path = tmp_path / "p.tile"
    path.write_text(f"target {target};\ntile p {{\n{body}}}\n")
    return request.param, load(str(path))


def _operands(dtype: str):
    """What the host side makes for an M x K A and a K x N B: sparse.compress and sparse.pack_b's arrays."""
    rng = np.random.default_rng(0)
    a = sparse.random_sparse(rng, M, K, dtype, "m16n8k128")
    values, meta = sparse.compress(a, dtype, "m16n8k128")
    bt = sparse.pack_b(sparse.random_values(rng, (K, N), dtype), dtype, "m16n8k128")
    return values, meta, bt


def test_abi_buffers_are_the_packers_arrays(packed):
    dtype, kernel = packed
    values, meta, bt = _operands(dtype)
    # 4 bits an element: M x K/2 elements of A are M x K/4 bytes, N x K of B are N x K/2 bytes
    assert values.shape == (M, K // 4) and bt.shape == (N, K // 2) and values.dtype == bt.dtype == np.uint8
    want = rabi.buffers(kernel.abi, M, N, K)
    assert want["a_values"].shape == values.shape and want["b"].shape == bt.shape
    assert want["a_values"].packed and want["b"].packed
    assert want["a_metadata"].shape == meta.shape


def _launch(kernel, dtype, values_shape, b_shape):
    values, meta, _ = _operands(dtype)
    a = SparseA(Fake(values_shape, "<u1"), Fake(meta.shape, "<u4"), dtype, M, K)
    acc = "<f4" if dtype == "e2m1" else "<i4"
    scales = {"scale_a": Fake((M, K // 64), "<u1"), "scale_b": Fake((N, K // 64), "<u1")} if dtype == "e2m1" else {}
    kernel(a, Fake(b_shape, "<u1").T, Fake((M, N), acc), out=Fake((M, N), acc), **scales)


def test_a_launch_with_the_packers_arrays_passes_every_check(packed):
    dtype, kernel = packed
    values, _, bt = _operands(dtype)
    with pytest.raises(DeviceError):          # every argument check passed; no GPU here to load the module
        _launch(kernel, dtype, values.shape, bt.shape)


def test_unpacked_shapes_are_refused_naming_the_bytes(packed):
    dtype, kernel = packed
    values, _, bt = _operands(dtype)
    with pytest.raises(ArgumentError) as e:
        _launch(kernel, dtype, values.shape, (N, K))                    # a byte per element: K bytes a row
    assert (e.value.argument, e.value.what) == ("B", "shape")
    assert f"K = {K // 2} bytes (two 4-bit elements a byte)" in e.value.expected
    with pytest.raises(ArgumentError) as e:
        _launch(kernel, dtype, (M, K // 2), bt.shape)                   # M x K/2 bytes: twice the packed A
    assert (e.value.argument, e.value.what, e.value.expected) == ("A.values", "shape", str((M, K // 4)))


# -- the torch op's rules (compiler/integrations/torch.py), on stand-ins for torch tensors --------------------

class _Device:
    type = "cuda"

    def __eq__(self, other):
        return isinstance(other, _Device)


class FakeTensor:
    """What Rules.check reads of a torch.Tensor: module, device, dim(), shape, dtype."""
    __module__ = "torch.fake"

    def __init__(self, shape, dtype="torch.uint8"):
        self.shape, self.dtype, self.device = tuple(shape), dtype, _Device()

    def dim(self):
        return len(self.shape)


def test_the_torch_ops_rules_take_the_packers_arrays(packed):
    """The op reads K from B; B of a 4-bit form holds K/2 bytes a row, so K is twice its row count."""
    from compiler.integrations.torch import Rules

    dtype, kernel = packed
    values, meta, bt = _operands(dtype)
    acc = "torch.float32" if dtype == "e2m1" else "torch.int32"
    args = {"a_values": FakeTensor(values.shape), "a_metadata": FakeTensor(meta.shape, "torch.int32"),
            "b": FakeTensor(bt.shape[::-1]), "c": FakeTensor((M, N), acc)}
    if dtype == "e2m1":
        args.update(scale_a=FakeTensor((M, K // 64)), scale_b=FakeTensor((N, K // 64)))
    m, n, k, _, want = Rules(kernel.abi).check(args, out=FakeTensor((M, N), acc))
    assert (m, n, k) == (M, N, K) and want["a_values"].shape == values.shape


def test_the_pipelined_kernels_4bit_operands_are_packed_too():
    """The pipelined block-scaled kernel (schedule ... stages=3, examples/sparse_gemm_nvf4.tile) packs A and B
    like the single-tile kernel: its ABI marks them packed, so the runtime checks the bytes compress_padded
    and pack_b produce (it used to check M x K/2 and N x K element counts against byte arrays), and a launch
    with those arrays passes every argument check."""
    import os

    from compiler.ptx.sparse_gemm_kernel import padded_sizes

    kernel = load(os.path.join(os.path.dirname(__file__), "..", "examples", "sparse_gemm_nvf4.tile"))
    m, n, k = 128, 128, 256
    rng = np.random.default_rng(0)
    a = sparse.random_sparse(rng, m, k, "e2m1", "m16n8k128")
    ps = padded_sizes(kernel.abi, m, k)
    values, meta = sparse.compress_padded(a, "e2m1", "m16n8k128", ps["k_values"], ps["meta_rows"] * 16,
                                          ps["meta_words"] // 32 * 128, value_rows=ps["value_rows"])
    bt = sparse.pack_b(sparse.random_values(rng, (k, n), "e2m1"), "e2m1", "m16n8k128")
    want = rabi.buffers(kernel.abi, m, n, k)
    assert want["a_values"].packed and want["b"].packed
    assert want["a_values"].shape == values.shape == (m, k // 4) and want["b"].shape == bt.shape == (n, k // 2)
    sa = SparseA(Fake(values.shape, "<u1"), Fake(meta.shape, "<u4"), "e2m1", m, k)
    scales = {"scale_a": Fake(want["sfa"].shape, "<u1"), "scale_b": Fake(want["sfb"].shape, "<u1")}
    with pytest.raises(DeviceError):          # every argument check passed; no GPU here to load the module
        kernel(sa, Fake(bt.shape, "<u1").T, Fake((m, n), "<f4"), out=Fake((m, n), "<f4"), **scales)
