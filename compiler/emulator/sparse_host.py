"""Host side of the warp-level sparse kernels: random structured-sparse problems in the kernels' ABI
(compiler/sparse.py layouts, compiler/ptx/sparse_gemm_kernel.py and sparse_wgmma_kernel.py module
docstrings), a run of the emitted PTX on the warp machine, and the numpy reference.

Inputs have few significant bits, so every partial sum is exact in f32 / s32 and the kernel's D equals
the reference bit for bit (f16 / bf16 D rounds once, like the reference).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .memory import FlatMemory
from .parse import parse_kernel
from .warp import WarpMachine

# wgmma-kernel modes -> (when TMA copies land, whether wgmma groups run only when wait_group retires them);
# "adversarial" and "random" are the warp machine's scheduling policies (compiler/emulator/warp.py POLICIES:
# every asynchronous operation late, warps interleaved a few instructions at a time)
WGMMA_MODES = {"eager": ("eager", False), "lazy": ("lazy", True), "late_mma": ("eager", True),
               "adversarial": ("lazy", True), "random": ("lazy", True)}


def policy_of(mode: str) -> str | None:
    return mode if mode in ("adversarial", "random") else None


# unit of D's type, relative to sum_k |a||b| + |c| (the classic GEMM error bound's scale): one ulp
# (2^-(mantissa bits)) for f16 (10 bits) and bf16 (7 bits); a few f32 ulps (2^-23) of accumulation for f32;
# integer sums are exact (they wrap mod 2^32 like the reference). `tilec run --check` (compiler/run.py).
TOLERANCE = {"f32": 2.0 ** -21, "f16": 2.0 ** -10, "bf16": 2.0 ** -7, "s32": 0.0, "e4m3": 2.0 ** -3}
# a quantised D (the epilogue's scale= into s8 or e4m3): where the kernel's f32 value and the reference's
# differ at all (approximate activations, f32 rounding), the rounding to D may differ by one step of D: one
# integer for s8, one e4m3 ulp (2^-3 relative; 2^-9, its subnormal step, near 0)
QUANTUM = {"s8": 1.0, "e4m3": 2.0 ** -9}
# the fused epilogue's activations (compiler/passes/epilogue_lowering.py), relative to |x| before the
# activation: ex2.approx / rcp.approx are within a few f32 ulps (2^-20 covers silu's and the erf
# polynomial's 1.5e-7); tanh.approx.f32's error is near 2^-11 (PTX ISA 9.7.4.13), so gelu_tanh gets 2^-10
ACT_ERROR = {"none": 0.0, "relu": 0.0, "silu": 2.0 ** -20, "gelu_erf": 2.0 ** -20, "gelu_tanh": 2.0 ** -10}


def epilogue_atol(bound, pre, act: str, out_type: str, scale: float = 1.0):
    """Per element, the absolute error an epilogue's D may have: D's unit times the terms' magnitude, plus
    the activation's error on the value before it (times the output scale); a quantised D (QUANTUM) one
    step of D more wherever the f32 values may differ (an exact epilogue: none, so D must match exactly)."""
    err = (2.0 ** -21 * bound + ACT_ERROR[act] * np.abs(pre)) * abs(scale)
    if out_type in QUANTUM:
        step = QUANTUM[out_type] + (TOLERANCE.get(out_type, 0.0) * (bound + np.abs(pre)) * abs(scale))
        return np.where(err > 0, err + step, 0.0) if ACT_ERROR[act] else np.zeros_like(np.asarray(bound, float))
    return TOLERANCE.get(out_type, 2.0 ** -7) * bound + ACT_ERROR[act] * np.abs(pre)


def out_dtype(type_name: str):
    np_type = {"f32": np.float32, "s32": np.int32, "f16": np.float16, "s8": np.int8}.get(type_name)
    if np_type is None:
        import ml_dtypes
        np_type = {"bf16": ml_dtypes.bfloat16, "e4m3": ml_dtypes.float8_e4m3fn}[type_name]
    return np_type


def quantise(y32: np.ndarray, out_type: str) -> np.ndarray:
    """f32 values into a D type as the epilogue's conversions do (compiler/isa/epilogue_outputs.py): s8
    round to nearest even and saturate (NaN -> 0); e4m3 round to nearest even, beyond +-448 -> +-448
    (.satfinite); the others round to nearest even."""
    if out_type == "s8":
        return np.clip(np.nan_to_num(np.rint(y32.astype(np.float64)), nan=0.0), -128, 127).astype(np.int8)
    if out_type == "e4m3":
        y32 = np.where(np.isnan(y32), y32, np.clip(y32, -448.0, 448.0)).astype(np.float32)
    return y32.astype(out_dtype(out_type))


@dataclass
class SparseProblem:
    """Logical operands (dense A, B, optional C) and their kernel encodings."""
    a: np.ndarray
    b: np.ndarray
    c: np.ndarray | None
    values: np.ndarray
    meta: np.ndarray
    bt: np.ndarray
    sfa: np.ndarray | None = None      # block-scaled forms: u8 [M][K/blk] scale bytes (PTX 9.7.14.3)
    sfb: np.ndarray | None = None      # u8 [N][K/blk]


# Random non-unit scale bytes that keep every product and partial sum exact in f32: powers of two around
# 1 for .ue8m0 (2^(e-127)), and 0.5, 0.75, 1, 1.5, 2 for .ue4m3 (bias 7: 0x30 = 2^-1, 0x34 = 1.5 * 2^-1,
# 0x38 = 1, 0x3C = 1.5, 0x40 = 2).
SCALE_BYTES = {"ue8m0": (125, 126, 127, 128, 129), "ue4m3": (0x30, 0x34, 0x38, 0x3C, 0x40)}


def scale_values(form, codes: np.ndarray) -> np.ndarray:
    from ..sparse import decode_scales

    return decode_scales(codes, form.block_scale.scale_type)


def sparse_problem(form, m: int, n: int, k: int, rng: np.random.Generator, accumulate_c: bool) -> SparseProblem:
    from .. import sparse

    a = sparse.random_sparse(rng, m, k, form.a_type, form.shape)
    b = sparse.random_values(rng, (k, n), form.b_type)
    values, meta = sparse.compress(a, form.a_type, form.shape)
    bt = sparse.pack_b(b, form.b_type, form.shape)
    c = None
    if accumulate_c:
        if form.c_type == "s32":
            c = rng.integers(-1000, 1000, (m, n)).astype(np.int32)
        else:
            c = sparse.random_values(rng, (m, n), "f16").astype(np.float32 if form.c_type == "f32" else np.float16)
    p = SparseProblem(a, b, c, values, meta, bt)
    if form.block_scale is not None:
        from ..isa.mma_sp.block_scale import block_elements

        nblk = k // block_elements(form.k, form.block_scale.scale_vec)
        choices = np.array(SCALE_BYTES[form.block_scale.scale_type], np.uint8)
        p.sfa = rng.choice(choices, (m, nblk))
        p.sfb = rng.choice(choices, (n, nblk))
    return p


def scaled_operands(form, p: SparseProblem) -> tuple[np.ndarray, np.ndarray]:
    """A and B as float64, block-scaled forms with their scales applied: D = (A * scale_A)(B * scale_B) + C,
    entry [r][j] of SFA / SFB scales K elements blk*j .. blk*j + blk - 1 (PTX 9.7.14.3)."""
    af, bf = p.a.astype(np.float64), p.b.astype(np.float64)
    if p.sfa is not None:
        blk = af.shape[1] // p.sfa.shape[1]
        af = af * np.repeat(scale_values(form, p.sfa), blk, axis=1)
        bf = bf * np.repeat(scale_values(form, p.sfb).T, blk, axis=0)
    return af, bf


def reference(form, p: SparseProblem, out_type: str) -> np.ndarray:
    """D = A B (+ C), rounded once to the D type; s32 wraps; tf32 inputs lose their low 13 mantissa bits."""
    if form.c_type == "s32":
        ref = p.a.astype(np.int64) @ p.b.astype(np.int64) + (p.c.astype(np.int64) if p.c is not None else 0)
        return ((ref + 2**31) % 2**32 - 2**31).astype(np.int32)
    af, bf = scaled_operands(form, p)
    if form.a_type == "tf32":
        af = (p.a.astype(np.float32).view(np.uint32) & 0xFFFFE000).view(np.float32).astype(np.float64)
        bf = (p.b.astype(np.float32).view(np.uint32) & 0xFFFFE000).view(np.float32).astype(np.float64)
    if form.c_type == "f16":
        # f16 accumulators: every mma.sp step rounds D to f16 (9.7.14.6.3: the accumulator is the f16 C/D)
        d = p.c.astype(np.float64) if p.c is not None else np.zeros((af.shape[0], bf.shape[1]))
        for k0 in range(0, af.shape[1], form.k):
            d = (af[:, k0:k0 + form.k] @ bf[k0:k0 + form.k] + d).astype(np.float16).astype(np.float64)
        return d.astype(out_dtype(out_type))
    ref = af @ bf + (p.c.astype(np.float64) if p.c is not None else 0)
    return ref.astype(np.float32).astype(out_dtype(out_type))


def epilogue_inputs(desc: dict, m: int, n: int, rng: np.random.Generator, scalars: dict | None = None):
    """The bias vector (f32, few significant bits) and the alpha / beta values of an epilogue (the ABI's
    `epilogue`): "param" scalars take `scalars[name]` (default alpha -1.25, beta 0.75)."""
    from .. import sparse

    bias = None
    if desc["bias"] != "none":
        # values with few significant bits: exact in every bias type (bf16 keeps 8 of them)
        bias = sparse.random_values(rng, (n if desc["bias"] == "col" else m,), "f16").astype(np.float32)
        bias = bias.astype(out_dtype(desc.get("bias_type", "f32")))
    # scale: keeps D in s8's range with these inputs (float: |A*B| of a few tens; s8: of some 10^5)
    values = {"alpha": -1.25, "beta": 0.75, "scale": 0.375 if desc["acc"] == "f32" else 2.0 ** -10, **(scalars or {})}
    keys = ("alpha", "beta", "scale") if "scale" in desc else ("alpha", "beta")
    return bias, {k: (values[k] if desc[k] == "param" else desc[k]) for k in keys}


def epilogue_reference(form, p: SparseProblem, out_type: str, desc: dict, bias, scalars: dict):
    """D = act(alpha*(A*B) + beta*C + bias) in f64, rounded once to f32 and then to the D type (the
    activations exactly: tanh, erf); also the magnitude bound of the terms (|alpha||A||B| + |beta||C| +
    |bias|) and the pre-activation values, for tolerances."""
    import math

    af, bf = scaled_operands(form, p)
    ab = af @ bf
    alpha, beta = scalars["alpha"], scalars["beta"]
    x = alpha * ab
    bound = abs(alpha) * (np.abs(af) @ np.abs(bf))
    if p.c is not None and desc["c"] != "none":
        x = x + beta * p.c.astype(np.float64)
        bound = bound + abs(beta) * np.abs(p.c.astype(np.float64))
    if bias is not None:
        b = bias.astype(np.float64)
        b = b[None, :] if desc["bias"] == "col" else b[:, None]
        x = x + b
        bound = bound + np.abs(b)
    act = desc["act"]
    if act == "relu":
        y = np.maximum(x, 0.0)
    elif act == "silu":
        with np.errstate(over="ignore"):       # exp(-x) = inf below x = -709: x / inf = -0, silu's limit
            y = x / (1.0 + np.exp(-x))
    elif act == "gelu_tanh":
        y = 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))
    elif act == "gelu_erf":
        y = 0.5 * x * (1.0 + np.vectorize(math.erf, otypes=[np.float64])(x / math.sqrt(2.0)))
    else:
        y = x
    y32 = y.astype(np.float32)
    if "scale" in scalars:         # the output scale, one f32 multiply (as the kernel's scale_out step)
        y32 = (y32 * np.float32(scalars["scale"])).astype(np.float32)
    return quantise(y32, out_type), bound, x


def run_sparse_gemm(text: str, name: str, form, grid: int | tuple[int, int], threads: int, smem_bytes: int, m: int,
                    n: int, k: int, out_type: str, accumulate_c: bool, *, land: str = "eager", order: str = "forward",
                    seed: int = 0, problem: SparseProblem | None = None, rng: np.random.Generator | None = None,
                    runtime_metadata: bool = True, policy: str | None = None, epilogue: dict | None = None,
                    scalars: dict | None = None):
    """The cp.async + ldmatrix + mma.sp kernels (pipelined and simple): run `text` on a random problem
    (or `problem`); returns (D, reference D, machine stats). Parameters `<name>_a_values`, `_a_metadata`
    (runtime metadata only), `_b`, `_c`, `_d`, `_M`, `_N`, `_K`; the dynamic shared window at address 0.
    `epilogue`: the kernel ABI's fused epilogue (its bias and scalar parameters; the reference then
    epilogue_reference, its tolerance stats["atol"])."""
    rng = rng or np.random.default_rng(seed)
    p = problem or sparse_problem(form, m, n, k, rng, accumulate_c)
    out_np = out_dtype(out_type)
    mem = FlatMemory()
    params = {f"{name}_a_values": mem.add("a_values", p.values), f"{name}_b": mem.add("b", p.bt)}
    if runtime_metadata:
        params[f"{name}_a_metadata"] = mem.add("a_metadata", p.meta)
    if p.c is not None:
        params[f"{name}_c"] = mem.add("c", p.c)
    if p.sfa is not None:
        params[f"{name}_sfa"] = mem.add("sfa", np.ascontiguousarray(p.sfa))
        params[f"{name}_sfb"] = mem.add("sfb", np.ascontiguousarray(p.sfb))
    params[f"{name}_d"] = mem.add("d", np.zeros((m, n), out_np), writable=True, fill=0xFF)    # poison
    params.update({f"{name}_M": m, f"{name}_N": n, f"{name}_K": k})
    # the pipelined kernel's row strides (contiguous B, C, D) and batch strides (one problem: any value)
    params.update({f"{name}_ldb": k, f"{name}_ldc": n, f"{name}_ldd": n, f"{name}_Kp": k,
                   **{f"{name}_batch_stride_{x}": 0 for x in ("a_values", "a_metadata", "b", "c", "d")}})
    bias = scal = None
    if epilogue is not None:
        bias, scal = _epilogue_params(epilogue, name, m, n, rng, scalars, mem, params)
    grid = grid if isinstance(grid, tuple) else (grid, 1)
    machine = WarpMachine(parse_kernel(text, name), mem, params, grid, threads, order=order, land=land,
                          rng=rng, dynamic_smem=smem_bytes, policy=policy)
    return _outcome(machine, mem, (m, n), out_np, form, p, out_type, epilogue, bias, scal)


def _outcome(machine, mem, shape, out_np, form, p, out_type: str, desc: dict | None, bias, scal):
    """Run the machine; (D, reference D, machine stats), the reference with the fused epilogue `desc` applied
    (and the activation's error bound as stats["atol"]) when the kernel has one."""
    machine.run()
    d = mem.array("d").view(out_np).reshape(shape).copy()
    return _reference(mem, d, form, p, out_type, desc, bias, scal, machine.stats)


def _reference(mem, d, form, p, out_type: str, desc: dict | None, bias, scal, stats: dict):
    if desc is None:
        return d, reference(form, p, out_type), stats
    ref, bound, pre = epilogue_reference(form, p, out_type, desc, bias, scal)
    stats["atol"] = epilogue_atol(bound, pre, desc["act"], out_type, scal.get("scale", 1.0))
    return d, ref, stats


def _epilogue_params(desc: dict, name: str, m: int, n: int, rng, scalars, mem, params: dict):
    """The fused epilogue's bias buffer and f32 scalar parameters (as their bits) for a kernel run."""
    bias, scal = epilogue_inputs(desc, m, n, rng, scalars)
    if bias is not None:
        params[f"{name}_bias"] = mem.add("bias", bias)
    for key in scal:
        params[f"{name}_{key}"] = int(np.float32(scal[key]).view(np.uint32))
    return bias, scal


def edge_problem(form, m: int, n: int, k: int, rng: np.random.Generator, accumulate_c: bool) -> SparseProblem:
    """A random problem of any M, N, K >= 1 (A sparse in whole chunks of the padded K, then cut to K). B is
    packed (`bt`: sparse.pack_b of B with K padded to the instruction K, then cut back to K columns); A's
    values and metadata are left to the caller, whose kernel decides A's padding."""
    from .. import sparse

    chunk = form.layout.granularity.chunk
    kc = -(-k // chunk) * chunk
    a = sparse.random_sparse(rng, m, kc, form.a_type, form.shape)[:, :k]
    b = sparse.random_values(rng, (k, n), form.b_type)
    c = None
    if accumulate_c:
        if form.c_type == "s32":
            c = rng.integers(-1000, 1000, (m, n)).astype(np.int32)
        else:
            c = sparse.random_values(rng, (m, n), "f16").astype(np.float32 if form.c_type == "f32" else np.float16)
    bt = sparse.pack_b(np.concatenate([b, np.zeros((-k % form.k, n), b.dtype)]), form.b_type, form.shape)[:, :k]
    return SparseProblem(np.ascontiguousarray(a), b, c, None, None, np.ascontiguousarray(bt))


def pitched(x: np.ndarray, pitch: int, fill: int) -> np.ndarray:
    """x (rows x cols) in rows of `pitch` elements, the padding bytes `fill` (poison: a read or write of
    it shows)."""
    out = np.full((x.shape[0], pitch * x.dtype.itemsize), fill, np.uint8).view(x.dtype)
    out[:, :x.shape[1]] = x
    return out


# the SMs of the device a persistent kernel's grid is sized for on the emulator (grid = min(tiles, SMs x
# CTAs per SM)): two, so that each CTA walks several tiles of any problem of more than two tiles
EMULATED_MULTIPROCESSORS = 2
BATCH_GAP = 48          # bytes of poison between the batches of a batched run (a multiple of 16: TMA strides)


def stacked(images: list[np.ndarray], fill: int) -> tuple[np.ndarray, int]:
    """Byte images of equal size, one after another BATCH_GAP bytes apart (the gaps `fill`); returns the
    buffer and the batch stride in bytes."""
    raw = [np.ascontiguousarray(x).view(np.uint8).reshape(-1) for x in images]
    stride = raw[0].size + (BATCH_GAP if len(raw) > 1 else 0)
    out = np.full(stride * (len(raw) - 1) + raw[0].size, fill, np.uint8)
    for i, x in enumerate(raw):
        out[i * stride:i * stride + x.size] = x
    return out, stride


def _row_pitch(pad: dict[str, int] | None, what: str, cols: int, itemsize: int) -> int:
    """Elements between rows of operand `what`: the least that keeps rows 16-byte multiples, plus
    `pad[what]` (a guard band the tests poison)."""
    from ..runtime.kernel import aligned_row_elements

    return aligned_row_elements(cols, itemsize) + (pad or {}).get(what, 0)


def _edge_problems(form, m: int, n: int, k: int, batch: int, rng, accumulate_c: bool, compress) -> tuple[list, list]:
    """`batch` random edge problems, each A packed by `compress(a)` -> (values, metadata) (the kernel's
    padding) and B as edge_problem packs it (K padded to the instruction K, then cut back to K columns)."""
    problems, bts = [], []
    for _ in range(batch):
        p = edge_problem(form, m, n, k, rng, accumulate_c)
        p.values, p.meta = compress(p.a)
        bts.append(p.bt)
        problems.append(p)
    return problems, bts


class _GuardedD:
    """D for `batch` problems in one image: rows `ldd` elements apart, batches BATCH_GAP bytes apart, the
    guard band (columns N..ldd, the gaps) 0xA5 and the elements the kernel must write poisoned (0xFF); C (if
    the kernel reads it) pitched alike with 0x7F padding. Sets the d / c parameters and their strides."""

    def __init__(self, mem: FlatMemory, params: dict, name: str, problems: list, m: int, n: int, out_np,
                 ldd: int, pad: dict[str, int] | None, accumulate_c: bool):
        batch = len(problems)
        self.m, self.n, self.ldd, self.out_np = m, n, ldd, out_np
        self.dsize = np.dtype(out_np).itemsize
        d_img, self.stride = stacked([pitched(np.zeros((m, n), out_np), ldd, 0xA5) for _ in range(batch)], 0xA5)
        params[f"{name}_d"] = mem.add("d", d_img, writable=True)
        self.written = np.zeros(d_img.size, bool)
        for i in range(batch):
            block = self.written[i * self.stride:i * self.stride + m * ldd * self.dsize].reshape(m, -1)
            block[:, :n * self.dsize] = True
        mem.array("d")[self.written] = 0xFF                         # poison where D is written
        params[f"{name}_batch_stride_d"] = self.stride // self.dsize
        if accumulate_c:
            ldc = _row_pitch(pad, "c", n, problems[0].c.itemsize)
            c_img, c_stride = stacked([pitched(p.c, ldc, 0x7F) for p in problems], 0x7F)
            params[f"{name}_c"] = mem.add("c", c_img)
            params[f"{name}_ldc"] = ldc
            params[f"{name}_batch_stride_c"] = c_stride // problems[0].c.itemsize

    def read_back(self, mem: FlatMemory, stats: dict, form, problems: list, out_type: str, desc, bias, scal):
        """(D, reference D, stats) after the launch, batch x M x N when there are several problems;
        EmulationError if the kernel wrote into the guard band."""
        from .parse import EmulationError

        out = mem.array("d")
        if (out[~self.written] != 0xA5).any():
            raise EmulationError("the kernel wrote into the guard band around D (columns N..ldd, between batches)")
        m, n, dsize = self.m, self.n, self.dsize
        ds, refs = [], []
        for i, p in enumerate(problems):
            rows = out[i * self.stride:i * self.stride + m * self.ldd * dsize].reshape(m, -1)
            d = rows[:, :n * dsize].copy().view(self.out_np).reshape(m, n)
            d, ref, one = _reference(mem, d, form, p, out_type, desc, bias, scal, stats)
            ds.append(d)
            refs.append(ref)
            atol = one.pop("atol", None)
            if atol is not None:
                one.setdefault("atols", []).append(atol)
        if "atols" in stats:
            atols = stats.pop("atols")
            stats["atol"] = atols[0] if len(problems) == 1 else np.stack(atols)
        if len(problems) == 1:
            return ds[0], refs[0], stats
        return np.stack(ds), np.stack(refs), stats


def _scratch_dim(expr, abi: dict, m: int, n: int, k: int, multiprocessors: int, batch: int) -> int:
    """A dimension of an ABI scratch buffer (an int or an ABI expression of the tile count `tiles`, K and,
    for stream-K's workspace, the grid: `multiprocessors`)."""
    from ..runtime import abi as abi_mod

    return int(abi_mod.eval_expr(expr, abi_mod.names(abi, m, n, k, multiprocessors, batch)))


def run_sparse_wgmma(kern, name: str, form, cluster_m: int, threads: int, smem_bytes: int, m: int, n: int, k: int,
                     out_type: str, accumulate_c: bool, *, mode: str = "eager", order: str = "forward", seed: int = 0,
                     text: str | None = None, smem_window: int = 528, scalars: dict | None = None,
                     pad: dict[str, int] | None = None, batch: int = 1,
                     multiprocessors: int = EMULATED_MULTIPROCESSORS, fp8_acc_bits: int | None = None):
    """The TMA + mbarrier + wgmma.sp kernel: run `text` (default `kern.text`) on `batch` random problems of
    any M x N x K; returns (D, reference D, machine stats), D and reference `batch` x M x N when batch > 1.
    A is packed as the runtime packs it (compiler.sparse.compress_padded to the ABI's padded sizes); B, C
    and D rows are `pad` = {"b": .., "c": .., "d": ..} elements longer than their rows (default: the least
    that keeps rows 16-byte multiples), the padding poisoned; batches lie BATCH_GAP poisoned bytes apart
    (batch strides that are not the packed size). D's padding and gaps (a guard band right of every row
    and between batches) must come back untouched (EmulationError otherwise), and nothing is written
    outside D (the memory model refuses it). The bias (with an epilogue) is shared by the batches. The
    dynamic window sits at `smem_window`, not 1024-aligned (the kernel rounds it up); TMA reads take the
    tensor-map parameters (compiler/ptx/sparse_wgmma_kernel.py `tensor_map_args`), not the opaque bytes.
    A persistent kernel's grid is that of a device with `multiprocessors` SMs (few: each CTA walks several
    tiles). `fp8_acc_bits`: the warp machine's model of fp8 wgmma's reduced-precision sums (default: exact
    f32)."""
    from .. import sparse
    from ..ptx.sparse_wgmma_kernel import TMA_MAP_BYTES, TMA_SWIZZLE, padded_sizes, tensor_map_args
    from .parse import EmulationError

    rng = np.random.default_rng(seed)
    ps = padded_sizes(kern.abi, m, k)
    out_np = out_dtype(out_type)
    from ..runtime.abi import compact_metadata

    compact = compact_metadata(kern.abi)        # the ABI's metadata layout (16 or 32 words a k-step)
    problems, bts = _edge_problems(form, m, n, k, batch, rng, accumulate_c, lambda a: sparse.compress_padded(
        a, form.a_type, form.shape, ps["k_values"], ps["meta_rows"] * 16, ps["meta_steps"] * form.k,
        compact=compact))
    ldb = _row_pitch(pad, "b", k, bts[0].dtype.itemsize)
    ldd = _row_pitch(pad, "d", n, np.dtype(out_np).itemsize)
    mem = FlatMemory()
    images = {"a_values": stacked([p.values for p in problems], 0x7F),
              "a_metadata": stacked([p.meta for p in problems], 0x00),
              "b": stacked([pitched(np.ascontiguousarray(bt), ldb, 0x7F) for bt in bts], 0x7F)}
    addr = {key: mem.add(key, img, loadable=False) for key, (img, _) in images.items()}
    params = {}
    d = _GuardedD(mem, params, name, problems, m, n, out_np, ldd, pad, accumulate_c)
    params[f"{name}_ldd"] = ldd
    desc = kern.abi.get("epilogue")
    bias = scal = None
    if desc is not None:          # the fused epilogue: its bias buffer and f32 scalar parameters (as bits)
        bias, scal = _epilogue_params(desc, name, m, n, rng, scalars, mem, params)
    sems = None
    for key, spec in kern.abi.get("scratch", {}).items():      # split-K: workspace and semaphores
        count = int(np.prod([_scratch_dim(d, kern.abi, m, n, k, multiprocessors, batch) for d in spec["shape"]]))
        # the semaphores start as zeros (the runtime clears them once); the workspace, which the runtime does
        # not clear, as poison whose every byte must be written in this launch before it is read
        # (FlatMemory's `uninitialised`: a partial read before its CTA stored it is an error)
        arr = np.zeros(count, np.uint32)
        zeroed = bool(spec["zeroed"])
        params[f"{name}_{key}"] = mem.add(key, arr, writable=True, fill=None if zeroed else 0x7F,
                                          uninitialised=not zeroed)
        if key == "semaphores":
            sems = key
    maps = mem.add("tensor_maps", np.zeros(3 * TMA_MAP_BYTES, np.uint8), loadable=False)
    params[f"{name}_tensor_maps"] = maps
    params.update({f"{name}_M": m, f"{name}_N": n, f"{name}_K": k})
    tmaps = {}
    args = tensor_map_args(kern.abi, m, n, k, {"b": ldb * bts[0].dtype.itemsize}, batch,
                           {key: stride for key, (_, stride) in images.items()} if batch > 1 else None)
    for i, t in enumerate(args):       # the kernel's `tensor_maps` parameter: maps in .param space
        tmaps[maps + i * TMA_MAP_BYTES] = {
            **t, "address": addr[t["operand"]], "elem_bytes": {0: 1, 1: 2, 2: 4}[t["data_type"]],
            "swizzle": {code: sw for sw, code in TMA_SWIZZLE.items()}[t["swizzle"]], "param": True}
    land, late = WGMMA_MODES[mode]
    gx, gy, _ = kern.grid(m, n, k, batch, multiprocessors)
    machine = WarpMachine(parse_kernel(text or kern.text, name), mem, params, (gx, gy), threads,
                          order=order, land=land, late_mma=late, rng=rng, dynamic_smem=smem_bytes,
                          dynamic_at=smem_window, tensor_maps=tmaps, policy=policy_of(mode), fp8_acc_bits=fp8_acc_bits)
    machine.run()
    if sems is not None and mem.array(sems).any():
        raise EmulationError("a split-K semaphore is not zero after the launch: the next launch would miscount")
    return d.read_back(mem, machine.stats, form, problems, out_type, desc, bias, scal)


def run_sparse_gemm_edges(kern, form, m: int, n: int, k: int, out_type: str, accumulate_c: bool, *, mode: str = "eager",
                          order: str = "forward", seed: int = 0, text: str | None = None, ctas: int | None = None,
                          pad: dict[str, int] | None = None, batch: int = 1, scalars: dict | None = None):
    """The pipelined cp.async kernel (compiler/ptx/sparse_gemm_kernel.py) on `batch` random problems of any
    M x N x K its ABI allows: returns (D, reference D, machine stats), batch x M x N when batch > 1. A is
    packed as the runtime packs it (compiler.sparse.compress_padded to the kernel's padded_sizes); B, C and D
    rows are `pad` = {"b": .., "c": .., "d": ..} elements longer than their rows (default: the least that
    keeps rows 16-byte multiples), the padding poisoned (0x7F: a read of it shows as NaN / a wrong sum);
    batches lie BATCH_GAP poisoned bytes apart. D's padding and gaps (a guard band right of every row and
    between batches) must come back untouched (EmulationError otherwise), and nothing is written outside
    D (the memory model refuses it). A persistent kernel runs on `ctas` CTAs per batch (default 3)."""
    from .. import sparse
    from ..ptx.sparse_gemm_kernel import padded_sizes

    abi = kern.abi
    name = abi.get("entry") or abi["kernel"]
    rng = np.random.default_rng(seed)
    ps = padded_sizes(abi, m, k)
    out_np = out_dtype(out_type)
    problems, bts = _edge_problems(form, m, n, k, batch, rng, accumulate_c, lambda a: sparse.compress_padded(
        a, form.a_type, form.shape, ps["k_values"], ps["meta_rows"] * 16, ps["meta_words"] // 32 * form.k,
        abi.get("selector", 0), value_rows=ps["value_rows"]))
    ldb = _row_pitch(pad, "b", k, bts[0].dtype.itemsize)
    ldd = _row_pitch(pad, "d", n, np.dtype(out_np).itemsize)
    mem = FlatMemory()
    images = {"a_values": stacked([p.values for p in problems], 0x7F),
              "a_metadata": stacked([p.meta for p in problems], 0x00),
              "b": stacked([pitched(np.ascontiguousarray(bt), ldb, 0x7F) for bt in bts], 0x7F)}
    params = {f"{name}_{key}": mem.add(key, img) for key, (img, _) in images.items()}
    params.update({f"{name}_batch_stride_{key}": stride for key, (_, stride) in images.items()})
    d = _GuardedD(mem, params, name, problems, m, n, out_np, ldd, pad, accumulate_c)
    params.update({f"{name}_ldb": ldb, f"{name}_ldd": ldd, f"{name}_M": m, f"{name}_N": n, f"{name}_K": k,
                   f"{name}_Kp": ps["k_values"]})
    desc = abi.get("epilogue")
    bias = scal = None
    if desc is not None:          # the fused epilogue: its bias buffer and f32 scalar parameters (as bits)
        bias, scal = _epilogue_params(desc, name, m, n, rng, scalars, mem, params)
    gx, gy, _ = kern.grid(m, n, k, ctas or 3, batch)
    land = WGMMA_MODES[mode][0]
    machine = WarpMachine(parse_kernel(text or kern.text, name), mem, params, (gx, gy), abi["block"][0],
                          order=order, land=land, rng=rng, dynamic_smem=abi["dynamic_smem_bytes"],
                          policy=policy_of(mode))
    machine.run()
    return d.read_back(mem, machine.stats, form, problems, out_type, desc, bias, scal)

