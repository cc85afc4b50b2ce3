"""A compiled kernel's launch contract, read from its ABI (the per-tile `kernel` object of
CompileResult.to_json() / `tilec compile --emit json`): the problem-size names, the `requires` conditions,
the launch grid, block, cluster and dynamic shared memory, and each buffer parameter's element type and
shape for a problem size. Pure Python (no numpy, no CUDA): the argument checks are testable anywhere.

Two ABI families exist:
* the mma.sp-engine kernels (one-instruction-tile mma.sp, pipelined cp.async GEMM, TMA + wgmma.sp) and the
  warp-specialised persistent tcgen05 kernel (compiler/ptx/tcgen05_ws_kernel.py) name their problem sizes
  M, N, K and describe every buffer under `buffers` (element, shape expressions); the mma.sp kernels name
  their operands a_values / a_metadata, b, c, d, the tcgen05 one A, B, D (and META, SFA, SFB);
* the tcgen05 kernels name them m_total, n_total (K is the tile's own `k`, fixed at compile time) and give
  each parameter a `layout` string such as '[m_total][64] bf16 row-major (K-major)'.
"""
from __future__ import annotations

import ast
import re

_OPS = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
        ast.Mod: lambda a, b: a % b, ast.FloorDiv: lambda a, b: a // b}
_COMPARE = {ast.Eq: lambda a, b: a == b, ast.Lt: lambda a, b: a < b, ast.LtE: lambda a, b: a <= b}


class AbiError(ValueError):
    """An ABI the runtime cannot read (an unknown expression or parameter): a bug or a newer compiler."""


def eval_expr(expr, names: dict[str, int]):
    """An ABI expression ('(M / 128) * (N / 256)', 'N / tile_n', 'M % 16 == 0', 'M // 16 <= 65535',
    'min(tiles, multiprocessors * max_ctas_per_sm)', or an int) for the given names. `/` must divide
    exactly (the ABI's sizes are whole: ValueError otherwise); anything but integer arithmetic, ==, <, <=,
    min / max and the given names is refused (AbiError)."""
    if isinstance(expr, int):
        return expr

    def ev(node):
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.Name):
            if node.id not in names:
                raise AbiError(f"{expr!r}: unknown name {node.id!r}")
            return names[node.id]
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            a, b = ev(node.left), ev(node.right)
            if b == 0 or a % b:
                raise ValueError(f"{expr!r}: {a} / {b} is not whole")
            return a // b
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](ev(node.left), ev(node.right))
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _COMPARE:
            return _COMPARE[type(node.ops[0])](ev(node.left), ev(node.comparators[0]))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("min", "max") \
                and node.args and not node.keywords:
            return (min if node.func.id == "min" else max)(ev(a) for a in node.args)
        raise AbiError(f"{expr!r}: not an ABI expression")

    try:
        tree = ast.parse(str(expr), mode="eval")
    except SyntaxError:
        raise AbiError(f"{expr!r}: not an ABI expression") from None
    return ev(tree)


def is_tcgen05(abi: dict) -> bool:
    """The tcgen05 family names its sizes m_total / n_total (see the module docstring)."""
    return any(p["name"] == "m_total" for p in abi["params"])


def entry(abi: dict) -> str:
    return abi.get("entry") or abi["kernel"]


def fixed_k(abi: dict) -> int | None:
    """The K a kernel was compiled for (tcgen05: the tile's `k`), or None when K is a launch argument."""
    return abi["k"] if is_tcgen05(abi) else None


def names(abi: dict, m: int, n: int, k: int, multiprocessors: int | None = None, batch: int = 1) -> dict[str, int]:
    """The names an ABI's expressions use, for problem M x N x K (and, for persistent kernels, the
    device's multiprocessor count; for batched kernels, the batch count)."""
    out = {"M": m, "N": n, "K": k, "m_total": m, "n_total": n, "batch": batch}
    out.update({key: abi[key] for key in ("tile_m", "tile_n", "tile_k", "max_ctas_per_sm") if key in abi})
    if multiprocessors is not None:
        out["multiprocessors"] = multiprocessors
    if "tiles" in abi:
        try:
            out["tiles"] = eval_expr(abi["tiles"], out)
        except ValueError:            # M or N not whole tiles: `requires` says so (unmet)
            pass
    return out


def derived_sizes(abi: dict, m: int, n: int, k: int) -> dict[str, int]:
    """The u32 parameters a kernel takes beyond M, N, K that are functions of them (the ABI's `sizes`:
    name -> expression, e.g. the pipelined mma.sp kernel's Kp, K rounded up to whole K blocks)."""
    env = names(abi, m, n, k)
    return {name: eval_expr(expr, env) for name, expr in abi.get("sizes", {}).items()}


def requires(abi: dict) -> list[str]:
    """The conditions on M, N, K: the ABI's `requires`, or (tcgen05) the parameters' `constraint`s and
    the compiled K."""
    if not is_tcgen05(abi):
        return list(abi.get("requires", []))
    out = []
    for p in abi["params"]:
        c = re.fullmatch(r"multiple of (\d+)", p.get("constraint", ""))
        if c:
            out.append(f"{'M' if p['name'] == 'm_total' else 'N'} % {c.group(1)} == 0")
    out.append(f"K == {abi['k']}")
    return out


def limits(abi: dict) -> list[str]:
    """The ranges of M, N, K the kernel's address arithmetic and launch grid are built for (the ABI's
    `limits`: each size below 2^31, the grid within CUDA's limits, ...). A kernel launched beyond them
    would compute wrapped addresses or could not be launched; the runtime refuses such a launch."""
    return list(abi.get("limits", []))


def unmet(abi: dict, m: int, n: int, k: int, batch: int = 1) -> list[str]:
    """The conditions problem M x N x K (`batch` of them) breaks (empty: it can run): those of `requires`,
    else those of `limits` (which may count whole tiles, so they are read once the sizes are whole tiles)."""
    if m <= 0 or n <= 0 or k <= 0:        # not min(): a tracer would guard on their order
        return [f"M, N, K > 0 (got {m} x {n} x {k})"]
    if batch != 1 and ("batch" not in abi or batch <= 0):
        return [f"batch == 1 (got {batch}: {entry(abi)} takes no batch)" if "batch" not in abi
                else f"batch > 0 (got {batch})"]
    env = names(abi, m, n, k, batch=batch)
    bad = [r for r in requires(abi) if not eval_expr(r, env)]
    return bad or [r for r in limits(abi) if not eval_expr(r, env)]


def size_units(abi: dict) -> dict[str, int]:
    """The multiple each of M, N, K must be (from `requires`; a fixed K is its own unit)."""
    units = {"M": 1, "N": 1, "K": 1}
    for r in requires(abi):
        match = re.fullmatch(r"([MNK]) (%|==) (\d+)(?: == 0)?", r)
        if match:
            units[match.group(1)] = int(match.group(3))
    return units


def largest(abi: dict, size: str, others: dict[str, int] | None = None) -> int:
    """The largest multiple of its unit that `size` ('M', 'N' or 'K') may be within the kernel's limits,
    the other sizes held at `others` (default: their units)."""
    units = size_units(abi)
    if size == "K" and fixed_k(abi) is not None:
        return fixed_k(abi)
    dims = {**units, **(others or {})}

    def fits(count: int) -> bool:
        dims[size] = count * units[size]
        return not unmet(abi, dims["M"], dims["N"], dims["K"])

    lo, hi = 1, 1
    while fits(hi):
        lo, hi = hi, 2 * hi
        if hi > 1 << 40:
            raise AbiError(f"{entry(abi)}: no limit bounds {size}")
    while hi - lo > 1:                  # fits(lo), not fits(hi): the limits are upper bounds
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo * units[size]


def cluster(abi: dict) -> tuple[int, int, int]:
    c = list(abi.get("cluster", [1, 1, 1])) + [1, 1]
    return int(c[0]), int(c[1]), int(c[2])


def grid_blocks(abi: dict, m: int, n: int, k: int, multiprocessors: int | None = None,
                batch: int = 1) -> tuple[int, int, int]:
    """The grid in CTAs (the ABI's `grid`) for problem M x N x K (`batch` of them); ValueError naming the
    broken `requires`."""
    bad = unmet(abi, m, n, k, batch)
    if bad:
        raise ValueError(f"problem {m} x {n} x {k} breaks the kernel's requirements: {', '.join(bad)}")
    env = names(abi, m, n, k, multiprocessors, batch)
    x, y, z = (int(eval_expr(g, env)) for g in abi["grid"])
    return x, y, z


def launch_dims(abi: dict, m: int, n: int, k: int, multiprocessors: int | None = None, batch: int = 1):
    """(grid in clusters, cluster, block, dynamic shared bytes) as a cluster launch takes them: with a
    cluster, the launch grid counts clusters (cuLaunchKernelEx's gridDim is in blocks, a multiple of the
    cluster's; cuda.core's LaunchConfig takes clusters)."""
    gx, gy, gz = grid_blocks(abi, m, n, k, multiprocessors, batch)
    cx, cy, cz = cluster(abi)
    if gx % cx or gy % cy or gz % cz:
        raise AbiError(f"grid {gx, gy, gz} is not whole clusters of {cx, cy, cz}")
    block = tuple(int(b) for b in (list(abi["block"]) + [1, 1])[:3])
    return (gx // cx, gy // cy, gz // cz), (cx, cy, cz), block, int(abi.get("dynamic_smem_bytes", 0))


# --------------------------------------------------------------------------------------------------
# Buffers: what the kernel reads and writes, for a problem size
# --------------------------------------------------------------------------------------------------

class Buffer:
    """One buffer parameter: its ABI name, element type, storage shape (elements; 4-bit packed types
    in bytes), whether it is written, and its required byte alignment."""
    __slots__ = ("name", "element", "shape", "written", "align", "packed", "strides", "pitch")

    def __init__(self, name: str, element: str, shape: tuple[int, ...], written: bool = False,
                 align: int = 16, packed: bool = False, pitch: str | None = None) -> None:
        self.name, self.element, self.shape, self.written = name, element, shape, written
        self.align, self.packed = align, packed
        # rows may be further apart than their length (a multiple of 16 bytes): the kernel takes the row
        # stride as the u32 parameter of this name (ldc, ldd), or "tensor map" (in the TMA map's stride)
        self.pitch = pitch
        self.strides: dict = {}       # (itemsize, transposed) -> expected byte strides (the runtime's cache)

    def __repr__(self) -> str:
        return f"Buffer({self.name}: {self.element}{list(self.shape)}{' written' if self.written else ''})"


_LAYOUT = re.compile(r"((?:\[\w+\])+)\s+(\w+)(\s+packed)?")


def buffer_shape(abi: dict, name: str, m: int, k: int) -> tuple[int, ...]:
    """The shape of one buffer of a mma.sp-engine ABI for an M x K A (buffers of A only: N is not known
    when A is packed). ValueError where M or K is not whole units of it."""
    env = names(abi, m, 1, k)
    return tuple(eval_expr(s, env) for s in abi["buffers"][name]["shape"])


def compact_metadata(abi: dict) -> bool:
    """Whether the kernel's a_metadata is compiler/sparse.py's compact layout (16 words per 16-row tile and
    k-step, those of the lanes its `lanes` lists: the sparse wgmma kernel's for 16- and 32-bit A) rather
    than the 32-lane one."""
    return "lanes" in abi.get("buffers", {}).get("a_metadata", {})


def metadata_layout_hint(abi: dict, want: tuple, got: tuple) -> str | None:
    """The hint of a wrong-shape a_metadata whose words per (16-row tile, k-step) are the other layout's
    (a 32-lane buffer for a compact kernel, or the reverse): which layout the kernel takes and how to make
    it. None where the last dimension agrees (a wrong M or K: the shape says it)."""
    if tuple(got[-1:]) == tuple(want[-1:]):
        return None
    how = ("the compact layout: sparse.compress(..., compact=True) or sparse.compact_metadata"
           if compact_metadata(abi) else "every lane's word: sparse.compress")
    return f"{entry(abi)} takes {want[-1]} metadata words per 16-row tile and k-step ({how}; pack_a packs A for it)"


def buffers(abi: dict, m: int, n: int, k: int) -> dict[str, Buffer]:
    """Every buffer of the kernel, by ABI name, for problem M x N x K (a TMA kernel's tensor maps are a
    by-value parameter, not a buffer).
    Sizes stay what eval_expr makes of the names (ints for ints; a tracer's symbolic sizes stay symbolic:
    compiler/integrations/torch.py checks shapes under torch.compile without fixing them)."""
    env = names(abi, m, n, k)
    out: dict[str, Buffer] = {}
    if not is_tcgen05(abi):
        for name, b in abi["buffers"].items():
            shape = [eval_expr(s, env) for s in b["shape"]]
            packed = bool(b.get("packed"))
            if packed:        # two 4-bit elements per byte (the ABI's shape counts elements)
                shape[-1] //= 2
            out[name] = Buffer(name, b["element"], tuple(shape), written=name in ("d", "D"), packed=packed,
                               pitch=b.get("pitch"))
        return out
    for p in abi["params"]:
        if p["type"] != "u64":
            continue
        match = _LAYOUT.match(p.get("layout", ""))
        if not match:
            raise AbiError(f"parameter {p['name']}: unreadable layout {p.get('layout')!r}")
        dims = [eval_expr(d, env) if not d.isdigit() else int(d)
                for d in re.findall(r"\[(\w+)\]", match.group(1))]
        element, packed = match.group(2), bool(match.group(3))
        if packed:            # two 4-bit elements per byte: the storage row is half as many bytes
            dims[-1] //= 2
        out[p["name"]] = Buffer(p["name"], element, tuple(dims), written=p["name"] == "D", packed=packed)
    return out
