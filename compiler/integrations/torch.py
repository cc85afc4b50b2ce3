"""tilec kernels as PyTorch operators: a compiled tile registered as a `torch.library` custom op.

    from compiler.integrations.torch import register
    op = register("examples/sparse_gemm_f16.tile")        # torch.ops.tilec.sparse_gemm_f16
    values, metadata = op.pack_a(A)                       # host: checks the 2:4 pattern, compresses (once)
    D = op(values, metadata, Bt.T, C)                     # D = A*B + C; C may be None (zeros)

What an op is:
* name: `<namespace>::<tile>` (namespace "tilec"; the tile's name with every character that is not a
  letter, digit or underscore made one; `name=` overrides). An out= variant `<name>_out` writes a
  caller's D in place and returns nothing.
* schema: from the kernel's ABI (`--emit json`), the operands compiler.runtime's Kernel takes, in its
  order: mma.sp-engine kernels `(Tensor a_values, Tensor a_metadata, Tensor b, Tensor? c=None) -> Tensor`
  (a_metadata only where the metadata is a kernel argument; c only for D = A*B + C kernels; block-scaled
  forms add `Tensor scale_a, Tensor scale_b`); tcgen05 kernels `(Tensor a, Tensor b[, Tensor scale_a,
  Tensor scale_b][, Tensor metadata]) -> Tensor`. b is K x N stored transposed (`Bt.T` of an N x K Bt),
  D is M x N row-major in the accumulator type. Functional (mutates nothing); no autograd formula.
* fake implementation (torch.compile, FakeTensor, export): D's shape, dtype and device from the ABI and the
  inputs' shapes, no GPU work; symbolic sizes stay symbolic (the ABI's `requires` become guards).
* the rules, checked alike by the fake and the real implementation (so a mistake is raised at trace time
  where shapes are known, and eagerly): a wrong dtype, shape, device (not CUDA, or not A's device), or a
  problem size the kernel's `requires` refuse raises compiler.runtime.ArgumentError (the runtime's names:
  A.values, A.metadata, A, B, C, scale_a, scale_b, metadata, out). Nothing is converted.
* strides: an input laid out otherwise than the kernel reads it (row-major, or B with K contiguous; a
  16-byte aligned start) is COPIED into that layout (`.contiguous()`, or `b.t().contiguous().t()` for B) on
  the current stream before the launch: an ordinary torch op, capturable, costing one copy of that operand.
  The out= variant's D must be row-major (ArgumentError otherwise) and is written in place where the
  kernel can write its rows (aligned, rows a multiple of 16 bytes apart); the sparse wgmma kernel at an N
  whose rows are not (any-size problems) writes a padded D that is then copied into it on the stream.
* the launch: on `torch.cuda.current_stream()` of the inputs' device, asynchronous, no host sync, D
  allocated by torch.empty (the caching allocator); capturable in a CUDA graph, so torch.compile's
  mode="reduce-overhead" works. The kernel's module is loaded at registration when a GPU that runs its
  target is visible, else on the first eager call; a first call inside a capture is refused (load first).
"""
from __future__ import annotations

import hashlib
import inspect
import json
import re
from typing import Any, NamedTuple

from ..runtime import abi as abi_mod
from ..runtime.arrays import _TORCH
from ..runtime.errors import ArgumentError, TilecRuntimeError
from ..runtime.kernel import _ACCEPTS, ALIGN, Kernel, SparseA, aligned_row_elements, target_runs_on

NAMESPACE = "tilec"


class Param(NamedTuple):
    """One tensor argument of the op: its schema name, the runtime's name for it (in errors), the ABI
    buffer it fills, whether it may be None, and whether the kernel reads it transposed (B)."""
    name: str
    argument: str
    key: str
    optional: bool = False
    transposed: bool = False


# op argument -> (runtime argument name, ABI buffer names that argument fills, in the runtime's order)
_OPERANDS = (
    ("a_values", "A.values", ("a_values",)),
    ("a_metadata", "A.metadata", ("a_metadata",)),
    ("a", "A", ("A",)),
    ("b", "B", ("b", "B")),
    ("c", "C", ("c",)),
    ("scale_a", "scale_a", ("SFA", "sfa")),
    ("scale_b", "scale_b", ("SFB", "sfb")),
    ("metadata", "metadata", ("META",)),
)


def op_name(tile: str) -> str:
    """The op name of a tile: letters, digits and underscores kept, anything else one underscore; a
    leading digit gets a 't' before it (a schema name is an identifier)."""
    name = re.sub(r"\W", "_", tile, flags=re.ASCII)
    return f"t{name}" if not name or name[0].isdigit() else name


def buffer_names(abi: dict) -> list[str]:
    """The ABI's buffer parameters, in ABI order."""
    if abi_mod.is_tcgen05(abi):
        return [p["name"] for p in abi["params"] if p["type"] == "u64"]
    return list(abi["buffers"])


def params(abi: dict) -> tuple[list[Param], str]:
    """(the op's tensor arguments, the ABI name of D) for a kernel ABI. AbiError for a buffer the op
    cannot place, or a D that is not M x N."""
    keys = buffer_names(abi)
    tcgen05 = abi_mod.is_tcgen05(abi)
    out_key = "D" if tcgen05 else "d"
    if out_key not in keys:
        raise abi_mod.AbiError(f"{abi_mod.entry(abi)}: no output buffer {out_key!r} in {keys}")
    if tcgen05:
        d_layout = next(p.get("layout", "") for p in abi["params"] if p["name"] == "D")
        if not d_layout.startswith("[m_total][n_total] "):
            raise abi_mod.AbiError(f"{abi_mod.entry(abi)}: D is {d_layout!r}, not M x N")
    elif [str(s).replace(" ", "") for s in abi["buffers"]["d"]["shape"]] != ["M", "N"]:
        raise abi_mod.AbiError(f"{abi_mod.entry(abi)}: d has shape {abi['buffers']['d']['shape']}, not M x N")
    out: list[Param] = []
    placed = {out_key}
    for name, argument, candidates in _OPERANDS:
        key = next((k for k in candidates if k in keys), None)
        if key is None:
            continue
        out.append(Param(name, argument, key, optional=name == "c", transposed=name == "b"))
        placed.add(key)
    unplaced = [k for k in keys if k not in placed]
    if unplaced:
        raise abi_mod.AbiError(f"{abi_mod.entry(abi)}: buffers {unplaced} have no place in a torch op")
    if not any(p.name == "b" for p in out) or not any(p.name in ("a", "a_values") for p in out):
        raise abi_mod.AbiError(f"{abi_mod.entry(abi)}: no A or B operand in {keys}")
    return out, out_key


def schema(ps: list[Param], *, out_variant: bool = False) -> str:
    """The op's schema (torch's function-schema syntax, without the name). The functional op returns a
    new D; the out= variant takes D last (`Tensor(a!) out`, written) and returns nothing."""
    args = []
    for p in ps:
        if p.optional:
            args.append(f"Tensor? {p.name}" + ("" if out_variant else "=None"))
        else:
            args.append(f"Tensor {p.name}")
    if out_variant:
        return "(" + ", ".join(args + ["Tensor(a!) out"]) + ") -> ()"
    return "(" + ", ".join(args) + ") -> Tensor"


def element_of(dtype) -> str:
    """The runtime's element name of a torch dtype (torch.float16 -> 'f16')."""
    short = str(dtype).rpartition(".")[2]
    return _TORCH.get(short, short)


def torch_dtype_name(element: str) -> str:
    """The torch dtype name holding a D of `element` (tf32 is stored as f32)."""
    names = {e: name for name, e in _TORCH.items()}
    names["tf32"] = "float32"
    if element not in names:
        raise abi_mod.AbiError(f"no torch dtype holds a D of {element}")
    return names[element]


def out_element(abi: dict) -> str:
    """D's element type (the ABI's, whatever the problem size: buffers() at size 0 evaluates no division
    that is not whole)."""
    _, out_key = params(abi)
    return abi_mod.buffers(abi, 0, 0, 0)[out_key].element


def accepts(key: str, element: str) -> tuple[str, ...]:
    """The element types the runtime accepts for ABI buffer `key` of type `element` (compiler.runtime.kernel:
    metadata words as s32 or u32; packed values as raw 16-bit words)."""
    out = _ACCEPTS.get(element, (element,))
    if key in ("a_values", "a_metadata") and element in ("f16", "bf16"):
        out = (*out, "u16", "s16")
    return out


class Rules:
    """The checks an op applies to its arguments, the same for fake tensors (at trace time) and real ones,
    with the runtime's wording: ArgumentError naming the argument, what was expected and what it got."""

    def __init__(self, abi: dict) -> None:
        self.abi = abi
        self.params, self.out_key = params(abi)
        self.tcgen05 = abi_mod.is_tcgen05(abi)
        self.lead = self.params[0]                 # A (or its values): where D goes, like the runtime

    def check(self, args: dict[str, Any], out=None):
        """(M, N, K, device, expected buffers) of a call; ArgumentError for the first broken rule."""
        lead = args[self.lead.name]
        for p in self.params:
            t = args.get(p.name)
            if t is None:
                if p.optional:
                    continue
                raise ArgumentError(p.argument, "value", "a tensor", "None")
            self._device(p.argument, t, lead)
        if out is not None:
            self._device("out", out, lead)
        b = args["b"]
        if lead.dim() != 2:
            raise ArgumentError(self.lead.argument, "shape", "a 2-D array", f"shape {tuple(lead.shape)}")
        if b.dim() != 2:
            raise ArgumentError("B", "shape", "a 2-D K x N array", f"shape {tuple(b.shape)}")
        m, n = lead.shape[0], b.shape[1]
        # B's rows count K in bytes where two 4-bit elements share one (the ABI marks b `packed`)
        k = self.abi["k"] if self.tcgen05 else b.shape[0] * (2 if self.abi["buffers"]["b"].get("packed") else 1)
        bad = abi_mod.unmet(self.abi, m, n, k)
        if bad:
            raise ArgumentError("A, B", "problem size", f"M x N x K meeting {', '.join(bad)}", f"{m} x {n} x {k}")
        want = abi_mod.buffers(self.abi, m, n, k)
        for p in self.params:
            t = args.get(p.name)
            if t is not None:
                self._matches(p.argument, t, want[p.key], p.transposed)
        if out is not None:
            self._matches("out", out, want[self.out_key], False)
        return m, n, k, lead.device, want

    @staticmethod
    def _device(argument: str, t, lead) -> None:
        if type(t).__module__.split(".")[0] != "torch" or not hasattr(t, "device"):
            raise ArgumentError(argument, "type", "a torch.Tensor", f"{type(t).__module__}.{type(t).__name__}")
        if t.device.type != "cuda":
            raise ArgumentError(argument, "device", "a CUDA tensor", f"a torch tensor on {t.device}")
        if t.device != lead.device:
            raise ArgumentError(argument, "device", f"{lead.device} (where A is)", f"{t.device}")

    def _matches(self, argument: str, t, want: abi_mod.Buffer, transposed: bool) -> None:
        element = element_of(t.dtype)
        if element not in accepts(want.name, want.element):
            raise ArgumentError(argument, "dtype", f"{want.element} elements", element)
        shape = tuple(reversed(want.shape)) if transposed else tuple(want.shape)
        if len(t.shape) != len(shape) or any(a != b for a, b in zip(t.shape, shape)):
            hint = abi_mod.metadata_layout_hint(self.abi, shape, tuple(t.shape)) if want.name == "a_metadata" else None
            raise ArgumentError(argument, "shape", f"{shape}", f"{tuple(t.shape)}", hint=hint)


def _readable(t, transposed: bool = False, pitched: bool = False):
    """`t` itself when the kernel can read it as it is (row-major, or K-contiguous B; 16-byte aligned
    start), else a copy in that layout: the op's stride rule (module docstring). `pitched` (a buffer the
    kernel reads with a row stride: the sparse wgmma kernel's B and C): rows any multiple of 16 bytes
    apart are read as they are, other rows copied into rows padded to one."""
    if t is None:
        return None
    import torch

    view = t.t() if transposed else t
    if pitched and view.dim() == 2:
        rows, cols = view.shape
        size = view.element_size()
        if (view.stride(1) == 1 or cols == 1) and (view.stride(0) * size) % ALIGN == 0 and \
                view.stride(0) >= cols and t.data_ptr() % ALIGN == 0:
            return t
        copy = _padded_empty(torch, rows, cols, view.dtype, view.device)
        copy.copy_(view)
        return copy.t() if transposed else copy
    if view.is_contiguous() and t.data_ptr() % ALIGN == 0:
        return t
    copy = view.clone(memory_format=torch.contiguous_format)
    return copy.t() if transposed else copy


def _padded_empty(torch, rows: int, cols: int, dtype, device):
    """An uninitialised rows x cols tensor whose rows are a multiple of 16 bytes apart (a slice of a wider
    one where cols elements are not)."""
    size = torch.empty((), dtype=dtype).element_size()
    padded = aligned_row_elements(cols, size)
    full = torch.empty((rows, padded), dtype=dtype, device=device)
    return full if padded == cols else full[:, :cols]


class TorchOp:
    """A registered tile: `op(*tensors)` runs the functional op (torch.ops.<namespace>.<name>), `op.out(*tensors,
    out)` the out= variant; `op.default` / `op.out_default` are the OpOverloads, `op.kernel` the runtime Kernel,
    `op.schema` / `op.out_schema` the schemas, `op.pack_a(A)` packs a dense structured-sparse A."""

    def __init__(self, kernel: Kernel, namespace: str, name: str) -> None:
        import torch

        self.kernel, self.namespace, self.name = kernel, namespace, name
        self.qualname = f"{namespace}::{name}"
        self.rules = Rules(kernel.abi)
        self.params = self.rules.params
        self.schema = schema(self.params)
        self.out_schema = schema(self.params, out_variant=True)
        self.out_dtype = getattr(torch, torch_dtype_name(out_element(kernel.abi)))
        self._signature = inspect.Signature(
            [inspect.Parameter(p.name, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                               default=None if p.optional else inspect.Parameter.empty) for p in self.params])
        self._out_signature = inspect.Signature(
            [inspect.Parameter(p.name, inspect.Parameter.POSITIONAL_OR_KEYWORD) for p in self.params]
            + [inspect.Parameter("out", inspect.Parameter.POSITIONAL_OR_KEYWORD)])

        def impl(*args, **kwargs):
            return self._launch(self._bind(self._signature, args, kwargs), None)

        def fake(*args, **kwargs):
            m, n, _, device, _ = self.rules.check(self._bind(self._signature, args, kwargs))
            return torch.empty((m, n), dtype=self.out_dtype, device=device)

        def impl_out(*args, **kwargs):
            bound = self._bind(self._out_signature, args, kwargs)
            self._launch(bound, bound.pop("out"))

        def fake_out(*args, **kwargs):
            bound = self._bind(self._out_signature, args, kwargs)
            self.rules.check(bound, bound.pop("out"))

        impl.__name__ = fake.__name__ = name
        impl_out.__name__ = fake_out.__name__ = f"{name}_out"
        self.op = torch.library.custom_op(self.qualname, impl, mutates_args=(), schema=self.schema)
        self.op.register_fake(fake)
        self.out_op = torch.library.custom_op(f"{self.qualname}_out", impl_out, mutates_args=("out",),
                                              schema=self.out_schema)
        self.out_op.register_fake(fake_out)
        ops = getattr(torch.ops, namespace)
        self.default = getattr(ops, name).default
        self.out_default = getattr(ops, f"{name}_out").default

    def __repr__(self) -> str:
        return f"<tilec TorchOp {self.qualname}{self.schema}>"

    def __call__(self, *args, **kwargs):
        return self.default(*args, **kwargs)

    def out(self, *args, **kwargs) -> None:
        """The out= variant: D written into `out` (last argument), nothing returned."""
        self.out_default(*args, **kwargs)

    def pack_a(self, a):
        """(values, metadata) of a dense M x K structured-sparse A for this kernel, as CUDA tensors
        (Kernel.pack_a: the pattern checked, compressed on the host: synchronising, do it once and outside
        any capture). metadata is None where the kernel embeds it."""
        packed = self.kernel.pack_a(a, library="torch")
        has_metadata = any(p.name == "a_metadata" for p in self.params)
        return packed.values, (packed.metadata if has_metadata else None)

    @staticmethod
    def _bind(signature: inspect.Signature, args, kwargs) -> dict[str, Any]:
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        return dict(bound.arguments)

    def _launch(self, args: dict[str, Any], out):
        import torch

        m, n, k, device, want = self.rules.check(args, out)
        pitched = {key: key in want and want[key].pitch is not None for key in ("b", "c", "d")}
        result, target = out, out
        if pitched["d"]:              # rows 16-byte multiples apart: a padded D (copied out where needed)
            if out is not None and out.stride(1) != 1 and n != 1:
                # out= is written in place: only its row pitch may be fixed by a copy, never its layout
                raise ArgumentError("out", "stride", "a row-major D (unit column stride)",
                                    f"strides {tuple(out.stride())}",
                                    "pass a row-major tensor, or use the functional op")
            size = out.element_size() if out is not None else torch.empty((), dtype=self.out_dtype).element_size()
            fits = out is not None and (out.stride(1) == 1 or n == 1) and (out.stride(0) * size) % ALIGN == 0 \
                and out.data_ptr() % ALIGN == 0
            if not fits:
                target = _padded_empty(torch, m, n, self.out_dtype, device)
        if target is None:
            target = result = torch.empty((m, n), dtype=self.out_dtype, device=device)
        kernel = self.kernel
        if getattr(kernel, "_fn", None) is None:
            if torch.cuda.is_current_stream_capturing():
                raise TilecRuntimeError(f"{self.qualname}: its module is loaded by the first call, which cannot "
                                        "happen inside a CUDA graph capture: call the op once before capturing")
            kernel.load(device.index if device.index is not None else torch.cuda.current_device())
        b = _readable(args["b"], transposed=True, pitched=pitched["b"])
        if self.rules.tcgen05:
            a = _readable(args["a"])
        else:
            a = SparseA(_readable(args["a_values"]), _readable(args.get("a_metadata")),
                        want["a_values"].element, m, k)
        stream = torch.cuda.current_stream(device).cuda_stream
        kernel(a, b, _readable(args.get("c"), pitched=pitched["c"]), out=target, stream=stream,
               scale_a=_readable(args.get("scale_a")), scale_b=_readable(args.get("scale_b")),
               metadata=_readable(args.get("metadata")))
        if result is None:            # the functional op returns a contiguous D, as its fake does
            return target.contiguous()
        if target is not result:
            result.copy_(target)
        return result


_REGISTERED: dict[str, tuple[str, TorchOp]] = {}      # qualname -> (the kernel's identity, its op)


def _identity(kernel: Kernel) -> str:
    h = hashlib.sha256(json.dumps(kernel.abi, sort_keys=True).encode())
    h.update((kernel.ptx or "").encode())
    h.update(kernel.cubin or b"")
    return h.hexdigest()


def register(source, tile: str | None = None, *, arch: str | None = None, namespace: str = NAMESPACE,
             name: str | None = None) -> TorchOp:
    """Register one compiled tile as `namespace::name` (default: tilec::<tile name>) and its out= variant.
    `source`: a .tile path, DSL text (anything containing a newline), a CompileResult, or a runtime Kernel;
    `tile` picks a tile of a multi-tile file, `arch` overrides a file's target. Registering the same kernel
    under the same name again returns the existing op; another kernel under a taken name is refused.
    Raises TilecRuntimeError (also for kernels the op cannot express), CompileError for bad DSL."""
    try:
        import torch  # noqa: F401  (the op's home)
    except ImportError as e:
        raise TilecRuntimeError(f"registering a torch op needs PyTorch (pip install torch): {e}") from None
    from ..runtime import load

    if isinstance(source, Kernel):
        kernel = source
    elif isinstance(source, str) and "\n" in source:
        from ..driver import compile_source

        kernel = load(compile_source(source, "<torch op>", arch=arch), tile)
    else:
        kernel = load(source, tile, arch=arch)
    name = name or op_name(kernel.tile or kernel.entry)
    if not re.fullmatch(r"[A-Za-z_]\w*", name, flags=re.ASCII) or not re.fullmatch(r"[A-Za-z_]\w*", namespace,
                                                                                  flags=re.ASCII):
        raise TilecRuntimeError(f"{namespace}::{name}: an op's namespace and name must be identifiers")
    qualname = f"{namespace}::{name}"
    identity = _identity(kernel)
    known = _REGISTERED.get(qualname)
    if known is not None:
        if known[0] == identity:
            return known[1]
        raise TilecRuntimeError(f"{qualname} is already registered for another kernel "
                                f"({known[1].kernel.entry}, {known[1].kernel.target}): pass name=")
    try:
        op = TorchOp(kernel, namespace, name)
    except abi_mod.AbiError as e:
        raise TilecRuntimeError(f"{kernel.entry} cannot be a torch op: {e}") from None
    _REGISTERED[qualname] = (identity, op)
    _load_if_runnable(kernel)
    return op


def _load_if_runnable(kernel: Kernel) -> None:
    """Load the module now where this process's current GPU runs the kernel's target, so that no first call
    happens inside a CUDA graph capture; elsewhere (no GPU, another architecture) the op still registers
    for tracing and the first eager call loads it."""
    import torch

    if not torch.cuda.is_available():
        return
    major, minor = torch.cuda.get_device_capability()
    if target_runs_on(kernel.target, major * 10 + minor):
        kernel.load(torch.cuda.current_device())
