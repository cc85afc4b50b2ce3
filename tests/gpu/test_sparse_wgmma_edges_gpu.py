"""The sparse wgmma kernel at any problem size on the H100 (issue 17): M, N, K the CTA tile does not
divide (smaller than one tile, K tails shorter than a k-step), B, C and D as strided torch views (rows
further apart than their length), batches (grid y) whose operands lie further apart than their size, and
a guard band around D: D is a view into a larger allocation filled with a sentinel (rows above and below
each batch, columns right of N), and every byte outside D must still hold it after the launch. Launched
through compiler.runtime from the DSL examples; D against numpy (the emulator's exact problems: bit for
bit without an epilogue, within the epilogue's tolerance with one). The CPU side of the same checks:
tests/test_sparse_wgmma_kernel.py (test_any_problem_size, test_batch) on the emulator."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("lark", reason="tilec's parser compiles the examples")
pytest.importorskip("cuda.core", reason="the runtime runs on cuda-core")

from compiler.emulator.sparse_host import (edge_problem, epilogue_atol, epilogue_inputs,  # noqa: E402
                                           epilogue_reference, out_dtype, reference)
from compiler.runtime import ArgumentError, load  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
EX = ROOT / "examples"
SENTINEL = 0x5A                       # guard-band byte
GUARD = 3                             # rows of guard band above and below each batch of D


def torch_dtype(torch, element: str):
    # every element type the sparse kernels read or write (tf32 is stored as f32; 1-byte types as themselves)
    return {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32, "tf32": torch.float32,
            "s32": torch.int32, "s8": torch.int8, "u8": torch.uint8, "e4m3": torch.float8_e4m3fn,
            "e5m2": torch.float8_e5m2}[element]


def pitch_of(cols: int, size: int, extra: int) -> int:
    """A row of `cols` elements of `size` bytes padded to a multiple of 16 bytes, plus `extra` 16-byte units."""
    return (-(-cols * size // 16) + extra) * 16 // size


def on_device(torch, xs: list[np.ndarray], element: str, pitch: int, transposed: bool = False, batched: bool = False):
    """The arrays `xs` (one per batch) on the GPU as one torch view: rows `pitch` elements apart, the rest
    of each row and one extra row per batch sentinel bytes (batch strides that are not the packed size);
    `transposed`: each x is K x N and stored as N x pitch (the view is Bt.T, K contiguous)."""
    rows = [np.ascontiguousarray(x.T if transposed else x) for x in xs]
    r, c = rows[0].shape
    size = rows[0].itemsize
    full = np.full((len(rows), r + 1, pitch * size), SENTINEL, np.uint8)
    for i, x in enumerate(rows):
        full[i, :r, :c * size] = x.view(np.uint8).reshape(r, -1)
    t = torch.from_numpy(full).cuda().view(torch_dtype(torch, element))[:, :r, :c]
    if transposed:
        t = t.transpose(1, 2)
    return t if batched else t[0]


def run(torch, name: str, m: int, n: int, k: int, pads=(8, 8, 8), seed: int = 1, batch: int | None = None,
        tile: str | None = None, kernel=None):
    """One checked launch of example `name` (its `tile`, default the first; or the loaded `kernel`)."""
    from compiler.driver import compile_file

    kernel = kernel or load(str(EX / name), tile)
    t = compile_file(str(EX / name)).tiles[kernel.tile]
    form, d_type = t.facts["form"], t.payload.operands["D"].dtype
    with_c = "c" in {q["name"] for q in kernel.abi["params"]}
    rng = np.random.default_rng(seed)
    count = batch or 1
    ps = [edge_problem(form, m, n, k, rng, with_c) for _ in range(count)]
    dense = np.stack([p.a for p in ps]) if batch else ps[0].a
    a = kernel.pack_a(dense, library="torch")
    eb = ps[0].b.itemsize
    b = on_device(torch, [p.b for p in ps], form.b_type, pitch_of(k, eb, pads[0]), True, bool(batch))
    c = None
    if with_c:
        c = on_device(torch, [p.c for p in ps], form.c_type, pitch_of(n, ps[0].c.itemsize, pads[1]), False, bool(batch))
    dsize = np.dtype(out_dtype(d_type)).itemsize
    ldd = pitch_of(n, dsize, pads[2])
    full = torch.full((count * (m + 2 * GUARD) * ldd * dsize,), SENTINEL, dtype=torch.uint8, device="cuda")
    d = full.view(torch_dtype(torch, d_type)).view(count, m + 2 * GUARD, ldd)[:, GUARD:GUARD + m, :n]
    d = d if batch else d[0]
    desc = kernel.abi.get("epilogue")
    kw, bias, scal = {}, None, None
    if desc is not None:
        bias, scal = epilogue_inputs(desc, m, n, rng)
        if bias is not None:
            kw["bias"] = torch.from_numpy(bias).cuda()
        kw.update({key: scal[key] for key in ("alpha", "beta") if desc[key] == "param"})
    out = kernel(a, b, c, out=d, **kw)
    torch.cuda.synchronize()
    assert out is d
    raw = full.cpu().numpy().reshape(count, m + 2 * GUARD, -1)
    inside = np.zeros(raw.shape, bool)
    inside[:, GUARD:GUARD + m, :n * dsize] = True
    assert (raw[~inside] == SENTINEL).all(), f"{np.count_nonzero(raw[~inside] != SENTINEL)} guard bytes written"
    for i, p in enumerate(ps):
        got = raw[i, GUARD:GUARD + m, :n * dsize].copy().view(out_dtype(d_type)).reshape(m, n)
        if desc is None:
            ref = reference(form, p, d_type)
            bad = np.argwhere(got.view(np.uint8) != np.ascontiguousarray(ref).view(np.uint8))
            assert not len(bad), f"batch {i}: {len(bad)} bytes of D differ; first at {bad[:3].tolist()}"
        else:
            ref, bound, pre = epilogue_reference(form, p, d_type, desc, bias, scal)
            atol = epilogue_atol(bound, pre, desc["act"], d_type)
            diff = np.abs(got.astype(np.float64) - ref.astype(np.float64))
            assert np.count_nonzero(~(diff <= atol)) == 0, f"batch {i}"


# (M, N, K): smaller than one tile, a partial tile row / column, K tails shorter than a k-step, a long
# partial N, and whole tiles (no edge: the interior path with pitched rows)
SHAPES = [(1, 1, 1), (5, 7, 3), (200, 136, 72), (129, 257, 65), (300, 1000, 100), (256, 512, 128),
          (512, 4100, 264)]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("name", ["sparse_wgmma_f16.tile", "sparse_wgmma_f16_silu_bias.tile"])
def test_any_size_strided_views_and_guard_band(sm90, torch_cuda, name, shape):
    run(torch_cuda, name, *shape)


@pytest.mark.parametrize("pads", [(0, 0, 0), (1, 3, 1), (16, 0, 5)])
def test_row_strides(sm90, torch_cuda, pads):
    run(torch_cuda, "sparse_wgmma_f16.tile", 200, 136, 72, pads=pads, seed=7)


@pytest.mark.parametrize("shape,batch", [((200, 136, 72), 3), ((1, 1, 1), 2), ((256, 512, 128), 4)])
@pytest.mark.parametrize("name", ["sparse_wgmma_f16.tile", "sparse_wgmma_f16_silu_bias.tile"])
def test_batch(sm90, torch_cuda, name, shape, batch):
    run(torch_cuda, name, *shape, batch=batch, seed=batch)


def test_rows_the_kernel_cannot_address_are_refused(sm90, torch_cuda):
    torch = torch_cuda
    kernel = load(str(EX / "sparse_wgmma_f16.tile"))
    m, n, k = 64, 35, 40                  # 35 f32 = 140-byte rows of C and D
    a = kernel.pack_a(np.zeros((m, k), np.float16), library="torch")
    b = torch.zeros((n, k), dtype=torch.float16, device="cuda").T
    c = torch.zeros((m, n), dtype=torch.float32, device="cuda")
    with pytest.raises(ArgumentError) as e:
        kernel(a, b, c)
    assert (e.value.argument, e.value.what) == ("C", "stride")
    d = kernel(a, b, torch.zeros((m, 36), dtype=torch.float32, device="cuda")[:, :n])   # D allocated padded
    torch.cuda.synchronize()
    assert d.shape == (m, n) and d.stride(0) % 4 == 0 and not d.any()


@pytest.mark.parametrize("shape", [(200, 135, 70), (5, 7, 3)], ids=lambda s: "x".join(map(str, s)))
def test_torch_op_at_odd_sizes(sm90, torch_cuda, shape):
    """compiler.integrations.torch: contiguous tensors whose rows are not 16-byte multiples (N = 135 f32, K =
    70 f16) are copied into padded rows for the kernel; the functional op returns a contiguous D, the out=
    variant fills a contiguous out."""
    torch = torch_cuda
    from compiler.driver import compile_file
    from compiler.integrations.torch import register

    name = "sparse_wgmma_f16"
    op = register(str(EX / f"{name}.tile"))
    t = compile_file(str(EX / f"{name}.tile")).tiles[name]
    form, d_type = t.facts["form"], t.payload.operands["D"].dtype
    m, n, k = shape
    p = edge_problem(form, m, n, k, np.random.default_rng(5), True)
    values, metadata = op.pack_a(p.a)
    b = torch.from_numpy(np.ascontiguousarray(p.b)).cuda()          # K x N row-major: copied K-contiguous
    c = torch.from_numpy(p.c).cuda()
    ref = reference(form, p, d_type)
    d = op(values, metadata, b, c)
    assert d.is_contiguous() and d.shape == (m, n)
    assert np.array_equal(d.cpu().numpy().view(np.uint8), ref.view(np.uint8))
    out = torch.full((m, n), float("nan"), dtype=torch.float32, device="cuda")
    op.out(values, metadata, b, c, out)
    assert np.array_equal(out.cpu().numpy().view(np.uint8), ref.view(np.uint8))
