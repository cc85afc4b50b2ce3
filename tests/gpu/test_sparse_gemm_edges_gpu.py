"""The pipelined mma.sp kernel (compiler/ptx/sparse_gemm_kernel.py, `schedule ... mma=sync`) at any problem
size on the H100 (issue 17): M, N, K its CTA tile does not divide (smaller than one tile, K tails shorter
than a k-step and than a 16-byte chunk), B, C and D as strided torch views (rows further apart than their
length), batches (grid y) whose operands lie further apart than their size, persistent CTAs, and a guard
band around D: D is a view into a larger allocation filled with a sentinel (rows above and below each
batch, columns right of N), and every byte outside D must still hold it after the launch. Launched through
compiler.runtime (the DSL examples, and kernels emitted for the other forms: s8, u8 x s8, tf32, e4m3,
bf16 D, direct D stores, persistent); D against numpy bit for bit (the emulator's exact problems). The CPU
side of the same checks: tests/test_sparse_gemm_edges.py."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("lark", reason="tilec's parser compiles the examples")
pytest.importorskip("cuda.core", reason="the runtime runs on cuda-core")

from compiler.emulator.sparse_host import edge_problem, out_dtype, reference  # noqa: E402
from compiler.isa.mma_sp.forms import find_form  # noqa: E402
from compiler.ptx.sparse_gemm_kernel import SparseGemmConfig, emit_sparse_gemm  # noqa: E402
from compiler.runtime import Kernel, load  # noqa: E402
from tests.gpu.test_sparse_wgmma_edges_gpu import GUARD, SENTINEL, on_device, pitch_of, torch_dtype  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
EX = ROOT / "examples"


def run(torch, kernel, form, d_type: str, m: int, n: int, k: int, pads=(8, 8, 8), seed: int = 1,
        batch: int | None = None):
    """Launch `kernel` (a compiler.runtime Kernel of the pipelined GEMM) on random problems of M x N x K
    (`batch` of them) with B, C, D rows `pads` 16-byte units longer than needed, D inside a sentinel guard
    band; assert the guard band is untouched and D equals the numpy reference bit for bit."""
    with_c = "c" in {q["name"] for q in kernel.abi["params"]}
    rng = np.random.default_rng(seed)
    count = batch or 1
    ps = [edge_problem(form, m, n, k, rng, with_c) for _ in range(count)]
    dense = np.stack([p.a for p in ps]) if batch else ps[0].a
    a = kernel.pack_a(dense, library="torch")
    b = on_device(torch, [p.b for p in ps], form.b_type, pitch_of(k, ps[0].b.itemsize, pads[0]), True, bool(batch))
    c = None
    if with_c:
        c = on_device(torch, [p.c for p in ps], form.c_type, pitch_of(n, ps[0].c.itemsize, pads[1]), False, bool(batch))
    dsize = np.dtype(out_dtype(d_type)).itemsize
    ldd = pitch_of(n, dsize, pads[2])
    full = torch.full((count * (m + 2 * GUARD) * ldd * dsize,), SENTINEL, dtype=torch.uint8, device="cuda")
    d = full.view(torch_dtype(torch, d_type)).view(count, m + 2 * GUARD, ldd)[:, GUARD:GUARD + m, :n]
    d = d if batch else d[0]
    out = kernel(a, b, c, out=d)
    torch.cuda.synchronize()
    assert out is d
    raw = full.cpu().numpy().reshape(count, m + 2 * GUARD, -1)
    inside = np.zeros(raw.shape, bool)
    inside[:, GUARD:GUARD + m, :n * dsize] = True
    assert (raw[~inside] == SENTINEL).all(), f"{np.count_nonzero(raw[~inside] != SENTINEL)} guard bytes written"
    for i, p in enumerate(ps):
        got = raw[i, GUARD:GUARD + m, :n * dsize].copy().view(out_dtype(d_type)).reshape(m, n)
        ref = reference(form, p, d_type)
        bad = np.argwhere(got.view(np.uint8) != np.ascontiguousarray(ref).view(np.uint8))
        assert not len(bad), f"batch {i}: {len(bad)} bytes of D differ; first at {bad[:3].tolist()}"


def example(name: str):
    from compiler.driver import compile_file

    kernel = load(str(EX / name))
    t = compile_file(str(EX / name)).tiles[kernel.tile]
    return kernel, t.facts["form"], t.payload.operands["D"].dtype


def emitted(form, d_type: str | None = None, **kw):
    """A Kernel of the pipelined GEMM configured through the API (the forms and options no example has)."""
    cfg = SparseGemmConfig("sg_edge", form, "sm_90a", d_type=d_type, **kw)
    k = emit_sparse_gemm(cfg)
    return Kernel(k.abi, "sm_90a", ptx=k.text), form, cfg.out_type


F16 = find_form("m16n8k32", "f16", "f16", "f32", "f32")
BF16 = find_form("m16n8k32", "bf16", "bf16", "f32", "f32")
TF32 = find_form("m16n8k16", "tf32", "tf32", "f32", "f32")
E4M3 = find_form("m16n8k64", "e4m3", "e4m3", "f32", "f32")
S8 = find_form("m16n8k64", "s8", "s8", "s32", "s32")
U8S8 = find_form("m16n8k64", "u8", "s8", "s32", "s32")
BENCH = dict(cta_m=128, cta_n=256, cta_k=64, warps_m=2, warps_n=4, stages=3)

# (M, N, K): smaller than one tile, K shorter than a chunk, partial tile rows / columns, a long partial N,
# whole tiles (the interior path with pitched rows)
SHAPES = [(1, 1, 1), (5, 7, 3), (200, 136, 72), (129, 257, 65), (300, 1000, 100), (256, 512, 128),
          (512, 4100, 264)]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("name", ["sparse_gemm_f16.tile", "sparse_gemm_bf16.tile"])
def test_examples_any_size_strided_views_and_guard_band(sm90, torch_cuda, name, shape):
    run(torch_cuda, *example(name), *shape)


FORMS = {
    "s8": lambda: emitted(S8, cta_k=128, **{k: v for k, v in BENCH.items() if k != "cta_k"}),
    "u8s8-directD": lambda: emitted(U8S8, cta_k=128, stage_d=False,
                                    **{k: v for k, v in BENCH.items() if k != "cta_k"}),
    "tf32": lambda: emitted(TF32, cta_k=32, **{k: v for k, v in BENCH.items() if k != "cta_k"}),
    # sm_90a emulates warp-level FP8 mma.sp: 16x16 warp tiles, 8 warps (compiler/isa/mma_sp/forms.py)
    "e4m3-f16D": lambda: emitted(E4M3, "f16", accumulate_c=False, cta_m=64, cta_n=32, cta_k=128, warps_m=4,
                                 warps_n=2, stages=3),
    "bf16-bf16D": lambda: emitted(BF16, "bf16", accumulate_c=False, **BENCH),
    "f16-f16D-directD": lambda: emitted(F16, "f16", accumulate_c=False, stage_d=False, **BENCH),
    "f16-persistent": lambda: emitted(F16, "f16", accumulate_c=False, persistent=True, **BENCH),
    "s8-persistent": lambda: emitted(S8, persistent=True, cta_m=64, cta_n=64, cta_k=128, warps_m=2, warps_n=2,
                                     stages=3),
}


@pytest.mark.parametrize("shape", [(5, 7, 3), (200, 136, 72), (129, 1000, 265), (256, 512, 256)],
                         ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("what", list(FORMS))
def test_other_forms_and_d_paths(sm90, torch_cuda, what, shape):
    run(torch_cuda, *FORMS[what](), *shape, seed=3)


@pytest.mark.parametrize("pads", [(0, 0, 0), (1, 3, 1), (16, 0, 5)])
def test_row_strides(sm90, torch_cuda, pads):
    run(torch_cuda, *example("sparse_gemm_f16.tile"), 200, 136, 72, pads=pads, seed=7)


@pytest.mark.parametrize("shape,batch", [((200, 136, 72), 3), ((1, 1, 1), 2), ((256, 512, 128), 4)])
@pytest.mark.parametrize("what", ["example", "f16-persistent"])
def test_batch(sm90, torch_cuda, what, shape, batch):
    kernel = example("sparse_gemm_f16.tile") if what == "example" else FORMS[what]()
    run(torch_cuda, *kernel, *shape, batch=batch, seed=batch)
