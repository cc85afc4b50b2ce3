"""compiler.integrations.torch without a GPU: op names and schemas derived from kernel ABIs (no torch needed),
and, where torch is installed, registration, the fake implementation (shapes, dtypes, devices, symbolic sizes,
no GPU work), the argument rules raised alike at trace time and eagerly, and the stride rule (copies).
The launches themselves are tests/gpu/test_torch_op_gpu.py."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from compiler.integrations import torch as tt
from compiler.runtime import ArgumentError, TilecRuntimeError, load
from compiler.runtime.abi import AbiError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EX = os.path.join(ROOT, "examples")

# A block-scaled mma.sp tile (tests/test_runtime.py's): sfa / sfb buffers become scale_a / scale_b.
MX_TILE = ("target sm_120a;\ntile mx {\n  engine mma.sp kind=mxf8f6f4;\n  shape M=16 N=8 K=64;\n"
           "  A: e2m3 global; B: e3m2 global; C: f32 global; D: f32 global;\n"
           "  SFA: ue8m0 global; SFB: ue8m0 global;\n  block_scale vec=1X;\n  sparsity 2:4;\n}\n")


def abi_of(name: str) -> dict:
    return load(os.path.join(EX, name)).abi


# ------------------------------------------------------------------------------ names and schemas (no torch)

def test_op_names_are_identifiers():
    assert tt.op_name("sparse_gemm_f16") == "sparse_gemm_f16"
    assert tt.op_name("qk-mma.v2") == "qk_mma_v2"
    assert tt.op_name("2cta") == "t2cta"
    assert tt.op_name("é") == "_"           # ASCII identifiers only: a schema name is parsed as ASCII


@pytest.mark.parametrize("example, expected", [
    # the ABI's buffers (--emit json), in the runtime's argument order A, B, C, extras; c is optional
    # because Kernel(..., C=None) computes A*B + 0
    ("sparse_gemm_f16.tile", "(Tensor a_values, Tensor a_metadata, Tensor b, Tensor? c=None) -> Tensor"),
    ("sparse_f16.tile", "(Tensor a_values, Tensor a_metadata, Tensor b, Tensor? c=None) -> Tensor"),
    # buffers a_values, a_metadata, b, c, d, tensor_maps: the maps are the runtime's, not the caller's
    ("sparse_wgmma_f16.tile", "(Tensor a_values, Tensor a_metadata, Tensor b, Tensor? c=None) -> Tensor"),
    # tcgen05 params A, B, D (+ SFA, SFB / META): D = A*B, no C operand
    ("gemm_bf16.tile", "(Tensor a, Tensor b) -> Tensor"),
    ("tcgen05_block_scaled.tile", "(Tensor a, Tensor b, Tensor scale_a, Tensor scale_b) -> Tensor"),
    ("tcgen05_sparse.tile", "(Tensor a, Tensor b, Tensor metadata) -> Tensor"),
])
def test_schema_from_the_abi(example, expected):
    ps, _ = tt.params(abi_of(example))
    assert tt.schema(ps) == expected
    # the out= variant: same operands, none defaulted, D last and written
    out = tt.schema(ps, out_variant=True)
    assert out == expected.replace("=None", "").replace(") -> Tensor", ", Tensor(a!) out) -> ()")


def test_block_scaled_mma_sp_schema(tmp_path):
    src = tmp_path / "mx.tile"
    src.write_text(MX_TILE)
    ps, out_key = tt.params(load(str(src)).abi)
    assert tt.schema(ps) == ("(Tensor a_values, Tensor a_metadata, Tensor b, Tensor? c=None, Tensor scale_a, "
                             "Tensor scale_b) -> Tensor")
    assert out_key == "d"
    assert [p.argument for p in ps] == ["A.values", "A.metadata", "B", "C", "scale_a", "scale_b"]


def test_only_b_is_read_transposed_and_only_c_is_optional():
    ps, _ = tt.params(abi_of("sparse_gemm_f16.tile"))
    assert [p.name for p in ps if p.transposed] == ["b"]
    assert [p.name for p in ps if p.optional] == ["c"]


def test_d_element_from_the_abi():
    assert tt.out_element(abi_of("sparse_gemm_f16.tile")) == "f32"
    assert tt.out_element(abi_of("gemm_bf16.tile")) == "f32"
    assert tt.torch_dtype_name("f32") == "float32" and tt.torch_dtype_name("tf32") == "float32"
    assert tt.torch_dtype_name("f16") == "float16"


def test_an_abi_the_op_cannot_express_is_refused():
    abi = abi_of("sparse_gemm_f16.tile")
    odd = dict(abi, buffers=dict(abi["buffers"], bias={"element": "f32", "shape": ["N"]}))
    with pytest.raises(AbiError, match="bias"):
        tt.params(odd)
    flat = dict(abi, buffers=dict(abi["buffers"], d={"element": "f32", "shape": ["M*N"]}))
    with pytest.raises(AbiError, match="not M x N"):
        tt.params(flat)


def test_metadata_words_are_accepted_as_the_runtime_accepts_them():
    assert set(tt.accepts("a_metadata", "u32")) == {"u32", "s32"}
    assert "u16" in tt.accepts("a_values", "f16") and "u16" not in tt.accepts("b", "f16")


def test_without_torch_registering_says_what_is_missing(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)        # `import torch` raises ImportError
    with pytest.raises(TilecRuntimeError, match="needs PyTorch"):
        tt.register(os.path.join(EX, "sparse_gemm_f16.tile"))


def test_cli_start_up_does_not_import_the_integration():
    code = ("import sys; from compiler.cli import main; "
            f"rc = main(['compile', {os.path.join(EX, 'sparse_gemm_f16.tile')!r}, '-o', '/dev/null']); "
            "assert rc == 0; bad = [m for m in sys.modules if m.startswith(('compiler.integrations', 'torch'))]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


# ------------------------------------------------------------------------------ with torch (CPU build is enough)

@pytest.fixture(scope="module")
def torch():
    return pytest.importorskip("torch", reason="registration and fake tensors need torch (not a tilec dependency)")


@pytest.fixture(scope="module")
def gemm_op(torch):
    return tt.register(os.path.join(EX, "sparse_gemm_f16.tile"))


def fake_operands(torch, m=256, n=512, k=256, c=True):
    """sparse_gemm_f16's operands as fake CUDA tensors (ABI buffers: a_values [M][K/2] f16, a_metadata
    [M/16][K/32][32] u32, b [N][K] f16 read as its K x N transpose, c [M][N] f32)."""
    ops = [torch.empty(m, k // 2, dtype=torch.float16, device="cuda"),
           torch.empty(m // 16, k // 32, 32, dtype=torch.int32, device="cuda"),
           torch.empty(n, k, dtype=torch.float16, device="cuda").t()]
    if c:
        ops.append(torch.empty(m, n, dtype=torch.float32, device="cuda"))
    return ops


def test_registered_schema_is_torchs(gemm_op):
    assert gemm_op.qualname == "tilec::sparse_gemm_f16"
    assert str(gemm_op.default._schema) == "tilec::sparse_gemm_f16" + gemm_op.schema
    assert str(gemm_op.out_default._schema) == "tilec::sparse_gemm_f16_out" + gemm_op.out_schema
    assert gemm_op.out_default._schema.is_mutable and not gemm_op.default._schema.is_mutable


def test_registering_again_returns_the_op_and_a_clash_is_refused(torch, gemm_op):
    assert tt.register(os.path.join(EX, "sparse_gemm_f16.tile")) is gemm_op
    with pytest.raises(TilecRuntimeError, match="already registered.*name="):
        tt.register(os.path.join(EX, "sparse_gemm_bf16.tile"), name="sparse_gemm_f16")
    with pytest.raises(TilecRuntimeError, match="identifiers"):
        tt.register(os.path.join(EX, "sparse_gemm_bf16.tile"), name="bad name")


def test_register_from_dsl_text_and_from_a_kernel(torch):
    with open(os.path.join(EX, "sparse_f16.tile")) as f:
        text = f.read()
    op = tt.register(text, name="sparse_f16_from_text")
    assert op.qualname == "tilec::sparse_f16_from_text" and op.kernel.entry == "sparse_f16"
    kernel = load(os.path.join(EX, "gemm_bf16.tile"))
    assert tt.register(kernel).schema == "(Tensor a, Tensor b) -> Tensor"


def test_fake_gives_d_without_a_gpu(torch, gemm_op):
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        for with_c in (True, False):
            d = gemm_op(*fake_operands(torch, c=with_c))
            assert (tuple(d.shape), d.dtype, str(d.device)) == ((256, 512), torch.float32, "cuda:0")
            assert d.is_contiguous()
        out = torch.empty(256, 512, device="cuda")
        assert gemm_op.out(*fake_operands(torch), out) is None


def test_fake_of_a_tcgen05_kernel(torch):
    from torch._subclasses.fake_tensor import FakeTensorMode

    op = tt.register(os.path.join(EX, "gemm_bf16.tile"))
    # A [m_total][64] bf16, B [n_total][64] bf16 read as 64 x N; K = 64 is the tile's own
    with FakeTensorMode():
        a = torch.empty(128, 64, dtype=torch.bfloat16, device="cuda")
        b = torch.empty(256, 64, dtype=torch.bfloat16, device="cuda").t()
        d = op(a, b)
        assert tuple(d.shape) == (128, 256) and d.dtype == torch.float32
        with pytest.raises(ArgumentError) as e:
            op(a, torch.empty(256, 128, dtype=torch.bfloat16, device="cuda").t())
        assert (e.value.argument, e.value.what) == ("B", "shape")


def test_symbolic_sizes_stay_symbolic(torch, gemm_op):
    """Under torch.compile's dynamic shapes, D's sizes are the inputs' symbols: the ABI's `requires` and
    buffer shapes become guards, nothing is specialised to a number."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv, StatelessSymbolicContext

    env = ShapeEnv()
    mode = FakeTensorMode(shape_env=env)

    def symbolic(like):
        real = torch.empty(tuple(like.shape), dtype=like.dtype)
        sizes = mode.from_tensor(real, symbolic_context=StatelessSymbolicContext(
            dynamic_sizes=[DimDynamic.DYNAMIC] * real.dim())).shape
        with mode:
            return torch.empty(sizes, dtype=like.dtype, device="cuda")

    with FakeTensorMode():
        values, metadata, b, c = fake_operands(torch)
    values, metadata, bt, c = symbolic(values), symbolic(metadata), symbolic(b.t()), symbolic(c)
    with mode:
        d = gemm_op(values, metadata, bt.t(), c)
    assert isinstance(d.shape[0], torch.SymInt) and isinstance(d.shape[1], torch.SymInt)
    assert str(d.shape[0]) == str(values.shape[0]) and str(d.shape[1]) == str(bt.shape[0])
    guards = env.format_guards()
    assert "Eq(Mod(" in guards and "128), 0)" in guards        # M % 128 == 0, a requirement of the ABI


@pytest.mark.parametrize("change, argument, what", [
    (lambda t, ops: ops.__setitem__(2, ops[2].float()), "B", "dtype"),
    (lambda t, ops: ops.__setitem__(1, t.empty(16, 8, 31, dtype=t.int32, device="cuda")), "A.metadata", "shape"),
    (lambda t, ops: ops.__setitem__(3, t.empty(256, 512, dtype=t.float16, device="cuda")), "C", "dtype"),
    (lambda t, ops: ops.__setitem__(2, t.empty(500, 256, dtype=t.float16, device="cuda").t()), "A, B",
     "problem size"),
    (lambda t, ops: ops.__setitem__(0, t.empty(256, 128, 1, dtype=t.float16, device="cuda")), "A.values", "shape"),
    (lambda t, ops: ops.__setitem__(3, t.empty(256, 512, device="cuda:1")), "C", "device"),
])
def test_fake_raises_the_runtimes_errors(torch, gemm_op, change, argument, what):
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        ops = fake_operands(torch)
        change(torch, ops)
        with pytest.raises(ArgumentError) as e:
            gemm_op(*ops)
    assert (e.value.argument, e.value.what) == (argument, what)


def test_out_variant_checks_out(torch, gemm_op):
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        with pytest.raises(ArgumentError) as e:
            gemm_op.out(*fake_operands(torch), torch.empty(256, 256, device="cuda"))
        assert (e.value.argument, e.value.what) == ("out", "shape")
        with pytest.raises(ArgumentError) as e:
            gemm_op.out(*fake_operands(torch), torch.empty(256, 512, dtype=torch.float16, device="cuda"))
        assert (e.value.argument, e.value.what) == ("out", "dtype")


def test_eager_call_checks_before_any_gpu_work(torch, gemm_op):
    """The real implementation applies the same rules first: host tensors are refused by name (on this
    CPU-only machine nothing reaches the runtime's loader)."""
    ops = [torch.zeros(256, 128, dtype=torch.float16), torch.zeros(16, 8, 32, dtype=torch.int32),
           torch.zeros(512, 256, dtype=torch.float16).t()]
    with pytest.raises(ArgumentError) as e:
        gemm_op(*ops)
    assert (e.value.argument, e.value.what, e.value.expected) == ("A.values", "device", "a CUDA tensor")


def test_trace_time_error_under_torch_compile(torch, gemm_op):
    """torch.compile(fullgraph=True) runs the fake implementation while tracing: the rule is broken before
    any backend (or GPU) is reached."""
    reached = []

    def backend(gm, inputs):
        reached.append(gm)
        return gm

    @torch.compile(fullgraph=True, backend=backend)
    def layer(values, metadata, x):
        return gemm_op.default(values, metadata, x.t()).t().relu()

    with pytest.raises(Exception, match="argument A.values: wrong device: expected a CUDA tensor"):
        layer(torch.zeros(256, 128, dtype=torch.float16), torch.zeros(16, 8, 32, dtype=torch.int32),
              torch.zeros(512, 256, dtype=torch.float16))
    assert reached == []


# ------------------------------------------------------------------------------ the stride rule

def test_readable_keeps_what_the_kernel_reads(torch):
    t = torch.zeros(64, 32, dtype=torch.float16)
    assert tt._readable(t) is t
    bt = torch.zeros(48, 64, dtype=torch.float16)          # N x K, K contiguous: B = bt.t()
    b = bt.t()
    assert tt._readable(b, transposed=True) is b
    assert tt._readable(None) is None


def test_readable_copies_other_layouts(torch):
    wide = torch.arange(64 * 40, dtype=torch.float32).reshape(64, 40)
    part = wide[:, :32]                                     # row stride 40: not row-major 64 x 32
    copy = tt._readable(part)
    assert copy.is_contiguous() and torch.equal(copy, part) and copy.data_ptr() != part.data_ptr()
    b = torch.arange(64 * 48, dtype=torch.float32).reshape(64, 48)   # K x N row-major: N contiguous
    copy = tt._readable(b, transposed=True)
    assert copy.stride() == (1, 64) and torch.equal(copy, b)         # K contiguous now
    flat = torch.arange(1 + 64 * 32, dtype=torch.float32)
    shifted = flat[1:].view(64, 32)                          # contiguous, 4 bytes past a 16-byte boundary
    assert shifted.data_ptr() % 16 == 4
    copy = tt._readable(shifted)
    assert copy.data_ptr() % 16 == 0 and torch.equal(copy, shifted)
