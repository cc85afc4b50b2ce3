"""The compile entry points used by the CLI and the Python API."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from .diagnostics import CompileError, Diagnostic
from .ir import Op, print_op
from .spec import FileSpec


@dataclass
class CompileResult:
    module: Op
    ptx: str | None
    spec: FileSpec
    ir_dumps: list[str] = field(default_factory=list)

    @property
    def tiles(self) -> dict[str, Op]:
        return {o.sym: o for o in self.module.ops("tilec.tile")}

    @property
    def descriptors(self) -> dict[str, dict]:
        """Per tile: the instruction descriptor and the per-K-step smem descriptors, as integers."""
        out = {}
        for name, tile in self.tiles.items():
            d: dict = {}
            idesc = tile.op("tilec.instr_desc")
            if idesc:
                d["idesc"] = int(idesc.attrs["value"])
            for sd in tile.ops("tilec.smem_desc"):
                d[f"{sd.sym}_desc"] = [int(v) for v in sd.attrs["values"]]
            z = tile.op("tilec.zero_column_mask")
            if z:
                d["zero_column_mask"] = int(z.attrs["value"])
            out[name] = d
        return out

    def ir(self) -> str:
        return print_op(self.module)

    def to_json(self) -> dict:
        kernels = {}
        for k in self.module.ops("ptx.kernel"):
            kernels[k.sym] = {"entry": k.attrs["entry"], **(k.payload.get("abi", {}) if k.payload else {})}
        return {
            "target": self.module.attrs.get("target"),
            "ptx_version": self.module.attrs.get("ptx_version"),
            "tiles": {n: {"descriptors": {k: (hex(v) if isinstance(v, int) else [hex(x) for x in v])
                                          for k, v in d.items()},
                          "kernel": kernels.get(n)}
                      for n, d in self.descriptors.items()},
        }


def parse_source(text: str, filename: str = "<string>", arch: str | None = None,
                 ptx_version: tuple[int, int] | None = None) -> FileSpec:
    from dataclasses import replace

    from .frontend.build import parse_spec
    from .targets import TARGETS

    if arch is not None and arch not in TARGETS:
        raise CompileError([Diagnostic(f"unknown target '{arch}' given with --arch",
                                       hint="one of: " + ", ".join(TARGETS))], text)
    if arch is not None:
        # --arch overrides the file's target; a file without one is fine then.
        text_for_parse = text
        try:
            spec = parse_spec(text_for_parse, filename)
        except CompileError as e:
            real = [d for d in e.diagnostics if not d.message.startswith("missing 'target'")]
            if real:
                raise CompileError(real, text) from None
            raise
        spec = replace(spec, target=arch)
    else:
        spec = parse_spec(text, filename)
    if ptx_version is not None:
        spec = replace(spec, ptx_version=ptx_version)
    return spec


def compile_spec(spec: FileSpec, source: str | None = None, passes: list[str] | None = None,
                 print_ir_after: set[str] | None = None, options: dict | None = None) -> CompileResult:
    """Run the pipeline (default order, or `passes`) on a spec. `options` reach every pass through
    PassContext.options, e.g. {"variant": "smem-dump"} (the sm_90a verification variant)."""
    from .lowering import lower
    from .passes import PassContext
    from .passes.manager import PassManager

    module = lower(spec)
    dumps: list[str] = []
    kw = {"print_after": print_ir_after or set(), "ir_sink": dumps}
    pm = PassManager.from_names(passes, **kw) if passes is not None else PassManager.default(**kw)
    pm.run(module, PassContext(source=source, filename=spec.filename, options=dict(options or {})))
    ptx = module.payload.get("ptx")
    return CompileResult(module, ptx, spec, dumps)


def compile_source(text: str, filename: str = "<string>", arch: str | None = None,
                   ptx_version: tuple[int, int] | None = None, passes: list[str] | None = None,
                   print_ir_after: set[str] | None = None, options: dict | None = None) -> CompileResult:
    """Compile DSL text. Raises CompileError (with located diagnostics) on bad input."""
    spec = parse_source(text, filename, arch, ptx_version)
    return compile_spec(spec, text, passes, print_ir_after, options)


def compile_file(path: str | Path, **kw) -> CompileResult:
    p = Path(path)
    return compile_source(p.read_text(), str(p), **kw)
