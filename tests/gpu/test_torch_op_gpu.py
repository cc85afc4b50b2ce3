"""compiler.integrations.torch on the GPU: the sm_90a examples registered as torch ops (the pipelined cp.async
mma.sp kernel, and the TMA + wgmma.sp kernel whose tensor maps the runtime encodes per set of buffers),
checked by torch.library.opcheck, run eagerly on torch's current stream without a host sync, captured in a
CUDA graph and replayed on new data, and called inside a small model compiled with torch.compile(fullgraph=True),
default and mode="reduce-overhead". D is compared with numpy's reference of the emulator's exact problems
(compiler/emulator/sparse_host.py: every product and sum exact in f32, so any summation order is equal)."""
from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("lark", reason="tilec's parser compiles the examples")
pytest.importorskip("cuda.core", reason="the runtime runs on cuda-core")

from compiler.emulator.sparse_host import reference, sparse_problem  # noqa: E402
from compiler.runtime import ArgumentError  # noqa: E402
from compiler.runtime.kernel import upload  # noqa: E402

EX = Path(__file__).resolve().parents[2] / "examples"
# problem sizes meeting each kernel's `requires` (--emit json): M % 128 (wgmma: 256), N % 256, K % 64
SHAPES = {"sparse_gemm_f16": (256, 512, 256), "sparse_wgmma_f16": (512, 512, 256)}
NAMES = list(SHAPES)


@pytest.fixture(scope="module")
def torch(sm90, torch_cuda):
    return torch_cuda


@functools.lru_cache(maxsize=None)
def _form(name: str):
    from compiler.driver import compile_file

    t = compile_file(str(EX / f"{name}.tile")).tiles[name]
    return t.facts["form"], t.payload.operands["D"].dtype


def register(name: str):
    from compiler.integrations.torch import register as reg

    return reg(str(EX / f"{name}.tile"))


def problem(name: str, seed: int, with_c: bool = True):
    form, _ = _form(name)
    m, n, k = SHAPES[name]
    return sparse_problem(form, m, n, k, np.random.default_rng(seed), with_c)


def make(op, name: str, seed: int, with_c: bool = True):
    """((values, metadata, b, c) as CUDA tensors, numpy's D) for a random exact problem: b is the K x N
    view of an N x K row-major Bt (K contiguous, as the kernel reads it); c is None without C."""
    form, d_type = _form(name)
    p = problem(name, seed, with_c)
    values, metadata = op.pack_a(p.a)
    b = upload(p.bt, "torch", form.b_type).t()
    c = upload(p.c, "torch", form.c_type) if with_c else None
    return (values, metadata, b, c), reference(form, p, d_type)


def assert_exact(d, ref) -> None:
    got = d.detach().cpu().numpy()
    assert got.shape == ref.shape and got.dtype == ref.dtype
    bad = np.argwhere(got != ref)
    assert not len(bad), f"{len(bad)} of {got.size} elements of D differ; first at {bad[:3].tolist()}"


class LaunchSpy:
    """Stands in for an op's runtime Kernel: forwards everything, and notes for each launch whether torch's
    current stream was capturing a CUDA graph."""

    def __init__(self, kernel, torch) -> None:
        self._kernel, self._torch, self.capturing = kernel, torch, []

    def __getattr__(self, name):
        return getattr(self._kernel, name)

    def __call__(self, *args, **kwargs):
        self.capturing.append(self._torch.cuda.is_current_stream_capturing())
        return self._kernel(*args, **kwargs)


@pytest.mark.parametrize("name", NAMES)
def test_eager_on_the_current_stream_without_a_sync(torch, name):
    op = register(name)
    (values, metadata, b, c), ref = make(op, name, seed=1)
    op(values, metadata, b, c)                     # first launch (a TMA kernel encodes its maps here)
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    torch.cuda.set_sync_debug_mode("error")        # any synchronising torch call in the op raises
    try:
        with torch.cuda.stream(side):
            d = op(values, metadata, b, c)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    side.synchronize()
    assert_exact(d, ref)
    (values, metadata, b, _), ref = make(op, name, seed=2, with_c=False)
    assert_exact(op(values, metadata, b), ref)     # C omitted: D = A*B


@pytest.mark.parametrize("name", NAMES)
def test_out_variant_and_the_stride_rule(torch, name):
    op = register(name)
    (values, metadata, b, c), ref = make(op, name, seed=3)
    m, n, k = SHAPES[name]
    out = torch.full((m, n), float("nan"), device="cuda")
    assert op.out(values, metadata, b, c, out) is None
    assert_exact(out, ref)
    # inputs laid out otherwise are copied: B row-major (N contiguous), A's values a column slice of a wider
    # array, C starting 4 bytes past a 16-byte boundary
    wide = torch.zeros((m, k // 2 + 8), dtype=values.dtype, device="cuda")
    wide[:, : k // 2] = values
    flat = torch.zeros(m * n + 1, device="cuda")
    shifted = flat[1:].view(m, n)
    shifted.copy_(c)
    assert not b.contiguous().t().is_contiguous() and shifted.data_ptr() % 16 == 4
    assert_exact(op(wide[:, : k // 2], metadata, b.contiguous(), shifted), ref)
    # the out= variant's D is written in place, so never copied: a column-major D is an error
    with pytest.raises(ArgumentError) as e:
        op.out(values, metadata, b, c, torch.empty((n, m), device="cuda").t())
    assert (e.value.argument, e.value.what) == ("out", "stride")
    with pytest.raises(ArgumentError) as e:
        op(values, metadata, b.float(), c)
    assert (e.value.argument, e.value.what) == ("B", "dtype")


@pytest.mark.parametrize("name", NAMES)
def test_opcheck(torch, name):
    op = register(name)
    (values, metadata, b, c), _ = make(op, name, seed=4)
    torch.library.opcheck(op.default, (values, metadata, b, c))
    torch.library.opcheck(op.default, (values, metadata, b, None))
    out = torch.empty(c.shape, device="cuda")
    torch.library.opcheck(op.out_default, (values, metadata, b, c, out))


@pytest.mark.parametrize("name", NAMES)
def test_cuda_graph_capture_and_replay(torch, name, monkeypatch):
    op = register(name)
    (values, metadata, b, c), ref = make(op, name, seed=5)
    (values2, metadata2, b2, c2), ref2 = make(op, name, seed=6)
    # the graph's inputs: buffers no launch has seen before the capture (for the TMA kernel, their tensor
    # maps are encoded during the capture)
    s_values, s_metadata, s_bt, s_c = values.clone(), metadata.clone(), b.t().clone(), c.clone()
    spy = LaunchSpy(op.kernel, torch)
    monkeypatch.setattr(op, "kernel", spy)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        d = op(s_values, s_metadata, s_bt.t(), s_c)     # D from the graph's pool
    assert spy.capturing == [True]
    g.replay()
    torch.cuda.synchronize()
    assert_exact(d, ref)
    for dst, src in ((s_values, values2), (s_metadata, metadata2), (s_bt, b2.t()), (s_c, c2)):
        dst.copy_(src)
    g.replay()
    torch.cuda.synchronize()
    assert_exact(d, ref2)
    assert spy.capturing == [True]                       # replays launch without Python


def sparse_linear(torch, op, values, metadata):
    """y = relu(x W^T) with a 2:4-sparse W (M x K) packed once: the tilec op computes D = W x^T (M x N), x
    (N x K, row-major) being B stored transposed; y is D's transpose."""
    gemm = op.default

    class SparseLinear(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("values", values)
            self.register_buffer("metadata", metadata)

        def forward(self, x):
            return torch.relu(gemm(self.values, self.metadata, x.t()).t())

    return SparseLinear()


@pytest.mark.parametrize("name, mode", [("sparse_gemm_f16", "default"), ("sparse_gemm_f16", "reduce-overhead"),
                                        ("sparse_wgmma_f16", "reduce-overhead")])
def test_in_a_compiled_model(torch, name, mode, monkeypatch):
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    op = register(name)
    spy = LaunchSpy(op.kernel, torch)
    monkeypatch.setattr(op, "kernel", spy)
    form, _ = _form(name)
    w = problem(name, seed=7, with_c=False).a                  # the weight, M x K, 2:4-sparse
    values, metadata = op.pack_a(w)
    compiled = torch.compile(sparse_linear(torch, op, values, metadata), fullgraph=True, mode=mode)
    calls = 4
    for i in range(calls):                   # reduce-overhead: warm-up, record (a capture), then replays
        p = problem(name, seed=20 + i, with_c=False)
        x = upload(p.bt, "torch", form.b_type)                  # N x K activations, new values each call
        x_before = x.clone()
        torch.compiler.cudagraph_mark_step_begin()          # each call a new iteration (no backward here)
        y = compiled(x)
        torch.cuda.synchronize()
        # W x^T in float64 is exact in f32 (sparse_problem's values: 2-bit mantissas, exponents -1..1)
        ref = (w.astype(np.float64) @ p.b.astype(np.float64)).astype(np.float32)
        assert_exact(y, np.maximum(ref, 0).T)
        assert torch.equal(x, x_before)      # the op mutates nothing
    if mode == "reduce-overhead":
        assert counters["inductor"]["cudagraph_skips"] == 0, "torch.compile skipped CUDA graphs"
        assert True in spy.capturing, "the op was never launched inside a CUDA graph capture"
        assert len(spy.capturing) < calls, "the graph was not replayed"


def test_trace_time_error_with_cuda_tensors(torch):
    op = register("sparse_gemm_f16")
    (values, metadata, b, _), _ = make(op, "sparse_gemm_f16", seed=8)
    torch._dynamo.reset()

    @torch.compile(fullgraph=True)
    def layer(values, metadata, x):
        return op.default(values, metadata, x.t()).t()

    with pytest.raises(Exception, match="argument B: wrong dtype: expected f16 elements, got f32"):
        layer(values, metadata, b.t().float())
