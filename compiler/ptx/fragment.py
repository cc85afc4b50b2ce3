"""PTX fragments: one `.visible .func` per tile that performs the tile's MMA sequence on operands the
caller provides, for embedding tilec output in someone else's kernel.

A fragment is emitted from a tile op after the passes of `FRAGMENT_PASSES` (no `.entry`, no global
memory, no TMEM allocation: the caller owns all of that). Calling conventions (PTX 9.7.12.5 `call`:
"Arguments may be registers, immediate constants, or variables in .param space"; device-function
parameters in `.param` space, PTX 5.1.6.4; ptxas rejects several `.param` return values, so D comes
back as one byte array):

tcgen05 (`engine tcgen05`), no return value, called by ONE thread of the CTA:
    .visible .func NAME(.param .b32 a_smem, .param .b32 b_smem, .param .b32 d_tmem,
                        [.param .b32 meta_tmem,]  .param .b32 mbar, .param .b32 accumulate)
  a_smem, b_smem  shared::cta addresses of A and B, each in the canonical layout of `Fragment.layouts`
                  (PTX 9.7.16.3.3), aligned to the layout's swizzle repeat (so the descriptors' base
                  offset is 0, PTX 9.7.16.4.1), written by the caller and made visible to the async proxy
                  (`fence.proxy.async.shared::cta` by the writers, then a barrier: PTX 9.7.16.6.5).
  d_tmem          TMEM address of D (lane 0, first column; PTX 9.7.16.1): M lanes x N 32-bit columns.
  meta_tmem       sparse tiles: TMEM address of this call's metadata, even column (PTX ISA 9.7.16.10.8.4, Table 44 sparsity selector).
  mbar            shared::cta address of an initialized mbarrier; the fragment ends with
                  `tcgen05.commit` (PTX 9.7.16.12.1), which arrives on it once when the MMAs complete.
  accumulate      0: the first MMA overwrites D (enable-input-d false); non-zero: it accumulates.
  One call performs the MMAs of one K stage (`constants["k_per_call"]` of the tile's K; a tile whose
  A+B exceed layout-selection's stage budget takes `constants["calls_per_tile"]` calls, accumulate
  non-zero after the first).

mma.sp (`engine mma.sp`), called by all 32 threads of a warp together (`call.uni`; mma.sp is
`.sync.aligned`), returns D:
    .visible .func (.param .align A .b8 NAME_param_d[4*dr]) NAME(
        .param .b32 c0 .. c{cr-1},                             // C fragment (PTX 9.7.14.6.2)
        for each K step s: .param .b32 a{s}_0 .., b{s}_0 .., e{s})   // A, B registers, metadata word
  Register j of A / B / C / D is the fragment register of compiler/isa/mma_sp/fragments.py
  (a_register_word, b_register_word, cd_element); e{s} is the lane's metadata word of K step s (the
  layout of compiler.sparse.compress). The selector is the spec's, an immediate. D comes back as dr
  32-bit values in one `.param` byte array: `ld.param.v4.f32` (or `.v2.b32`) it after the call.

Every parameter is declared `.param .b32` whatever its value (f32 C registers included): nvcc, NVRTC and
clang declare every 32-bit scalar of a C++ prototype `.param .b32` (and a float4 / uint2 result as a
`.param .align 16 .b8 [16]` / `.align 8 .b8 [8]` array), and nvlink refuses a call whose `.extern .func`
prototype differs from the definition in any parameter type. `Fragment.cpp_declaration()` is that C++
prototype; `FragmentParam.value` is the type the fragment reads (`ld.param.f32` from a `.b32` parameter,
as nvcc's own callee does).

`Fragment.constants` holds what the caller may materialize itself: the instruction descriptor(s), the
per-K-step smem descriptors relative to each operand's own base (add `address >> 4`, as the fragment
does), the zero-column mask, static metadata words. `Fragment.requires` is the `.version` / `.target`
the fragment needs; `link_fragments` (compiler/api.py) builds a module from several fragments.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..diagnostics import SpecError
from ..ir import Op
from ..passes.derive import OpView, TileView
from ..isa.targets import Version, format_version, parse_version
from .builder import PtxBuilder, function_head, module_header, vector
from .mma_sp_kernel import mma_sp_instruction
from .tcgen05_issue import descriptor, descriptor_base, idesc_registers, issue_mmas, trailing_operands

DEFAULT_PREFIX = "tilec_"
NAME_SUFFIX = "_mma"



# The C++ type of a 32-bit value of each PTX value type, and the inline-asm constraint that puts it in a
# register of that class (CUDA inline PTX assembly: "r" = .u32 reg, "f" = .f32 reg, "l" = .u64 reg).
CPP_TYPES: dict[str, str] = {"b32": "unsigned", "u32": "unsigned", "s32": "int", "f32": "float"}
ASM_CONSTRAINTS: dict[str, str] = {"b32": "r", "u32": "r", "s32": "r", "f32": "f"}


def param_type(value: str) -> str:
    """The `.param` type a fragment declares for a scalar of PTX type `value`: the bit-size type of its
    width (.b32 / .b64), which is what nvcc, NVRTC and clang declare for every scalar parameter of a
    `__device__` function whatever its C++ type (float, int, unsigned). nvlink compares the caller's
    `.extern .func` prototype with the definition type for type, so a `.param .f32` definition cannot
    link with any C++ caller."""
    bits = {"b32": 32, "u32": 32, "s32": 32, "f32": 32, "b64": 64, "u64": 64, "s64": 64, "f64": 64}[value]
    return f"b{bits}"


@dataclass(frozen=True)
class FragmentParam:
    name: str             # short name used in docs and JSON (a_smem, c0, a1_2, ...)
    ptx_name: str         # the .param symbol in the .func signature
    type: str             # the declared .param type without the dot: b32 (param_type of `value`)
    meaning: str
    value: str = "b32"    # the PTX type of the value the fragment reads from it: b32, f32, s32

    @property
    def cpp_type(self) -> str:
        """The C++ type of this parameter in the `extern "C"` declaration (`tilec compile --emit header`)."""
        return CPP_TYPES[self.value]


@dataclass(frozen=True)
class FragmentResult:
    """The `.param` byte array a fragment returns D in."""
    ptx_name: str
    type: str             # element type of each 32-bit value: f32, s32 or b32
    count: int            # 32-bit values
    align: int

    @property
    def bytes(self) -> int:
        return 4 * self.count

    @property
    def cpp_type(self) -> str:
        """The CUDA vector type nvcc returns in this byte array: `float4` is `.param .align 16 .b8 [16]`,
        `uint2` `.param .align 8 .b8 [8]` (the built-in vector types' size and alignment, CUDA C++
        Programming Guide "Built-in Vector Types")."""
        base = {"f32": "float", "s32": "int", "b32": "uint", "u32": "uint"}[self.type]
        assert (self.count, self.align) in ((2, 8), (4, 16)), (self.count, self.align)
        return f"{base}{self.count}"

    def declaration(self) -> str:
        return f".param .align {self.align} .b8 {self.ptx_name}[{self.bytes}]"


@dataclass(frozen=True)
class FragmentRequirement:
    ptx_version: Version
    target: str

    def header(self) -> str:
        return module_header(format_version(self.ptx_version), self.target)

    def to_json(self) -> dict[str, str]:
        return {"ptx_version": format_version(self.ptx_version), "target": self.target}


@dataclass(frozen=True, eq=False)
class Fragment:
    name: str                                   # the .func symbol
    tile: str
    engine: str
    text: str                                   # the .func definition, with its comment block
    params: tuple[FragmentParam, ...]
    result: FragmentResult | None
    requires: FragmentRequirement
    constants: dict[str, Any] = field(repr=False)
    layouts: dict[str, Any] = field(default_factory=dict, repr=False)   # A/B CanonicalLayout (tcgen05)
    convention: tuple[str, ...] = ()            # the calling convention, sentence by sentence
    lanes: dict[str, Any] = field(default_factory=dict, repr=False)     # per-lane register map (mma.sp)
    operands: dict[str, dict[str, str]] = field(default_factory=dict, repr=False)  # see _operands

    def signature(self) -> str:
        return _signature(self.name, self.params, self.result)

    def declaration(self, extern: bool = False) -> str:
        """The prototype, for a module that calls the fragment before defining it, or (extern=True)
        links against a separately compiled one."""
        sig = self.signature()
        return (sig.replace(".visible ", ".extern ", 1) if extern else sig) + ";\n"

    def cpp_declaration(self) -> str:
        """The C++ prototype of the fragment, as a CUDA C++ caller declares it (`extern "C"`: PTX names
        the function by its plain symbol). nvcc compiles it to the `.param` types of `signature()`; D comes
        back as the built-in vector type of the same size and alignment as the result array."""
        ret = "void" if self.result is None else self.result.cpp_type
        params = ", ".join(f"{p.cpp_type} {p.name}" for p in self.params)
        return f'extern "C" __device__ {ret} {self.name}({params});\n'

    def module(self) -> str:
        """A stand-alone PTX module holding just this fragment (ptxas -c compiles it)."""
        return self.requires.header() + self.text

    def call(self, args: Sequence[str], results: Sequence[str] = (), uniform: bool = True) -> str:
        """A PTX block that calls the fragment: `args` are registers or immediates in parameter order;
        `results` receive D (mma.sp fragments). Declares its own return array in a nested scope."""
        if len(args) != len(self.params):
            raise SpecError(f"{self.name} takes {len(self.params)} arguments "
                            f"({', '.join(p.name for p in self.params)}), got {len(args)}")
        op = "call.uni" if uniform else "call"
        if self.result is None:
            if results:
                raise SpecError(f"{self.name} returns nothing")
            return f"{op} {self.name}, ({', '.join(args)});\n"
        r = self.result
        if len(results) != r.count:
            raise SpecError(f"{self.name} returns {r.count} values, got {len(results)} result registers")
        ret = f"{self.name}_ret"
        return (f"{{\n\t.param .align {r.align} .b8 {ret}[{r.bytes}];\n"
                f"\t{op} ({ret}), {self.name}, ({', '.join(args)});\n"
                f"\tld.param.v{r.count}.{r.type} {{{', '.join(results)}}}, [{ret}];\n}}\n")

    def to_json(self) -> dict[str, Any]:
        def enc(v: Any) -> Any:
            if isinstance(v, bool) or not isinstance(v, (int, list, tuple, dict)):
                return v
            if isinstance(v, int):
                return hex(v)
            if isinstance(v, dict):
                return {k: enc(x) for k, x in v.items()}
            return [enc(x) for x in v]

        layouts = {n: {"dtype": lay.dtype, "major": lay.major, "swizzle": lay.swizzle, "mn": lay.mn, "k": lay.k,
                       "lbo": lay.lbo, "sbo": lay.sbo, "size_bytes": lay.size_bytes, "alignment": lay.alignment,
                       "container_bits": lay.container_bits, "storage": lay.storage}
                   for n, lay in self.layouts.items()}
        plain = {"k_per_call", "calls_per_tile", "mma_per_call", "m", "n", "selector", "meta_columns_per_mma",
                 "k_steps", "scale_input_d"}
        return {
            "name": self.name, "tile": self.tile, "engine": self.engine,
            "requires": self.requires.to_json(),
            "params": [{"name": p.name, "ptx_param": p.ptx_name, "type": p.type, "value_type": p.value,
                        "cpp_type": p.cpp_type, "meaning": p.meaning}
                       for p in self.params],
            "result": None if self.result is None else {"ptx_param": self.result.ptx_name, "type": self.result.type,
                                                        "count": self.result.count, "align": self.result.align,
                                                        "cpp_type": self.result.cpp_type},
            "cpp_declaration": self.cpp_declaration().rstrip("\n"),
            "constants": {k: (v if k in plain else enc(v)) for k, v in self.constants.items()},
            "layouts": layouts,
            "lanes": self.lanes,
            "operands": self.operands,
            "convention": list(self.convention),
        }


# ---- shared helpers --------------------------------------------------------------------------------

def _signature(name: str, params: Sequence[FragmentParam], result: FragmentResult | None) -> str:
    return function_head("func", name, [(p.type, p.ptx_name) for p in params], "\t",
                         result.declaration() if result else None)


def _builder(name: str) -> PtxBuilder:
    return PtxBuilder(name, kind="func", blank_after_declarations=False)


def _render(kb: PtxBuilder, params: Sequence[FragmentParam], result: FragmentResult | None,
            comments: Sequence[str]) -> str:
    """The .func definition: comment block, signature, register declarations, body."""
    assert kb.params == [(p.type, p.name) for p in params]
    kb.module = [f"// {c}" for c in comments]
    kb.result = result.declaration() if result else None
    return kb.render()


def _params(kb: PtxBuilder, rows: Sequence[tuple[str, str, str]]) -> tuple[FragmentParam, ...]:
    """Declare the parameters (short name, value type, meaning) on the builder, each as the `.param`
    type a C++ caller's prototype has (param_type); their FragmentParams."""
    for short, value, _meaning in rows:
        kb.add_params(param_type(value), short)
    return tuple(FragmentParam(short, kb.param(short), param_type(value), meaning, value)
                 for short, value, meaning in rows)


def _load_params(kb: PtxBuilder, params: Sequence[FragmentParam]) -> dict[str, str]:
    """Each parameter into a register of its value's class: `ld.param.f32` from a `.param .b32` is what
    nvcc writes for a float parameter (the `.b32` declaration fixes only the size)."""
    regs: dict[str, str] = {}
    for p in params:
        reg = kb.reg("f" if p.value == "f32" else "r")
        kb.ld_param(p.value, reg, p.name)
        regs[p.name] = reg
    return regs


def _operands(spec: Any, passed_as: dict[str, str]) -> dict[str, dict[str, str]]:
    """Per operand of the tile: its dtype, the space the tile declares, and how the fragment takes it. The
    declared space describes the tile's kernel (where `tilec compile` loads it from); a fragment takes
    whatever `passed_as` says (registers, or an address the caller provides), whatever the space."""
    return {n: {"dtype": op.dtype, "declared_space": op.space, "passed_as": passed_as[n]}
            for n, op in sorted(spec.operands.items()) if n in passed_as}


def _required_op(tile: TileView, name: str, sym: str | None) -> OpView:
    op = tile.op(name, sym)
    if op is None:      # FRAGMENT_PASSES ran, so this is a tilec bug
        raise RuntimeError(f"tile '{tile.sym}' has no {name}{f' @{sym}' if sym else ''}; did its passes run?")
    return op


def _requirement(module: Op) -> FragmentRequirement:
    version = parse_version(module.attrs["ptx_version"])
    assert version is not None       # verify writes a well-formed version
    return FragmentRequirement(version, module.attrs["target"])


# ---- tcgen05 ---------------------------------------------------------------------------------------

def _collector_reuses(spec: Any) -> bool:
    """`::use` / `::lastuse` read a collector buffer an earlier MMA filled (PTX 9.7.16.10.9.1
    .collector_usage); every MMA of a fragment reads a new K step, so the buffer would be stale."""
    return spec.collector is not None and spec.collector.split("::")[-1] in ("use", "lastuse")


# What a tcgen05 fragment does not take (its own table: the kernel emitter's limits may differ).
# Rows: (applies to the spec, field to blame, message, hint).
TCGEN05_FRAGMENT_LIMITS: tuple[tuple[Callable[[Any], bool], str, str, str | None], ...] = (
    (lambda s: s.cta_group != 1, "engine.cta_group",
     "tcgen05 fragments are cta_group::1 only (a CTA pair needs a cluster launch and a multicast commit)",
     "use cta_group=1"),
    (lambda s: s.operands["A"].space != "smem", "A.space",
     "tcgen05 fragments take A from shared memory only (no a-tmem parameter yet)", "write 'A: <type> smem;'"),
    (lambda s: s.block_scale is not None or "SFA" in s.operands or "SFB" in s.operands, "block_scale",
     "tcgen05 fragments have no scale-factor parameters yet", None),
    (_collector_reuses, "engine.collector",
     "collector ::use / ::lastuse would read a buffer holding another K step's operand", "use ::fill or ::discard"),
)

def _tcgen05_fragment(tile: TileView, module: Op, name: str) -> Fragment:
    spec = tile.payload
    for applies, field_name, message, hint in TCGEN05_FRAGMENT_LIMITS:
        if applies(spec):
            raise SpecError(message, field_name, hint)
    form = tile.facts["form"]
    sparse = spec.sparsity is not None
    if sparse and spec.sparsity.selector != 0:
        raise SpecError("a tcgen05 fragment derives the sparsity selector of each MMA from its metadata column "
                        "(PTX ISA Table 44 sparsity selector, 9.7.16.10.8.4); the spec's selector must be 0", "sparsity.selector", "write selector=0")
    kb = _builder(name)
    layouts = {n: _required_op(tile, "tilec.smem_layout", n).facts["layout"] for n in ("A", "B")}
    k_step = {n: int(_required_op(tile, "tilec.smem_desc", n).attrs["k_step"]) for n in ("A", "B")}
    # Descriptors relative to each operand's own base: the materialized ones are relative to the kernel's
    # single buffer (A and B at their layout-selection offsets); a fragment takes two independent bases.
    descs = {n: [lay.descriptor(k0, k_step[n], 0).encode() for k0 in range(0, lay.k, k_step[n])]
             for n, lay in layouts.items()}
    steps = len(descs["A"])
    # Sparse metadata in TMEM, as the kernel emitter addresses it (compiler/isa/tmem.py; PTX ISA 9.7.16.10.8.4,
    # Table 44 sparsity selector): f16/tf32 use one column per MMA and two MMAs share a 64-bit granule (the even column is passed,
    # the parity goes to idesc bits 0-1); 8-bit and fp4 kinds use two columns per MMA, selector 0.
    meta_cols = 0
    step_meta = [(0, 0)] * steps                       # (column offset of [sp-meta-tmem], selector) per MMA
    if sparse:
        from ..isa.tmem import metadata_format

        fmt = metadata_format(tile.attrs["kind"])
        meta_cols = fmt.words_per_mma
        step_meta = [fmt.selector_and_column(s)[::-1] for s in range(steps)]
    # The instruction descriptor of each MMA as descriptor-materialization wrote it (`step_values` where it
    # changes from MMA to MMA: the sparsity selector above); the selectors must agree with the columns.
    idesc_op = _required_op(tile, "tilec.instr_desc", None)
    idescs = [int(v) for v in idesc_op.attrs.get("step_values", (idesc_op.attrs["value"],) * steps)]
    if sparse and [v & 0b11 for v in idescs] != [sel for _, sel in step_meta]:    # Table 42 bits 0-1
        raise RuntimeError(f"tile '{spec.name}': materialized sparsity selectors disagree with the metadata columns")

    a, b = layouts["A"], layouts["B"]
    rows = [("a_smem", "b32", f"shared::cta address of A: {a.mn}x{a.k} {a.dtype}, {a.major}-major, swizzle "
                              f"{a.swizzle}, {a.size_bytes} B, {a.alignment}-B aligned"),
            ("b_smem", "b32", f"shared::cta address of B: {b.mn}x{b.k} {b.dtype}, {b.major}-major, swizzle "
                              f"{b.swizzle}, {b.size_bytes} B, {b.alignment}-B aligned"),
            ("d_tmem", "b32", f"TMEM address of D ({spec.m} rows x {spec.n} 32-bit columns, "
                              f"{spec.operands['D'].dtype})")]
    if sparse:
        rows.append(("meta_tmem", "b32", f"TMEM address of the sparse metadata, even column; MMA s reads "
                                         f"{meta_cols} column(s) from column {meta_cols}*s"))
    rows += [("mbar", "b32", "shared::cta address of an initialized mbarrier; one arrive when the MMAs complete"),
             ("accumulate", "b32", "0: the first MMA writes D = A*B; otherwise D += A*B")]
    params = _params(kb, rows)
    e = kb.emit
    regs = _load_params(kb, params)
    # The caller's barrier ordered its smem writes and TMEM setup before this thread; order the MMAs after
    # it (PTX 9.7.16.6.4 tcgen05.fence::after_thread_sync).
    e("tcgen05.fence::after_thread_sync;")
    base4 = {n: descriptor_base(kb, regs[n.lower() + "_smem"]) for n in ("A", "B")}
    p_acc = kb.reg("p")
    e(f"setp.ne.u32 {p_acc}, {regs['accumulate']}, 0;")
    p_true = kb.constant_pred(True)
    zcm_op = tile.op("tilec.zero_column_mask")
    extra = trailing_operands(kb, spec, None if zcm_op is None else zcm_op.attrs["value"])
    idesc_regs = idesc_registers(kb, idescs)
    meta_regs: dict[int, str] = {0: regs["meta_tmem"]} if sparse else {}

    def step_operands(s: int) -> dict[str, str]:
        if not sparse:
            return {}
        column = step_meta[s][0]
        if column not in meta_regs:      # TMEM address: bits 15-0 = column (PTX 9.7.16.1)
            meta_regs[column] = kb.reg("r")
            e(f"add.u32 {meta_regs[column]}, {regs['meta_tmem']}, {column};")
        return {"meta": meta_regs[column]}

    issue_mmas(kb, form, regs["d_tmem"], steps, a_operand=lambda s: descriptor(kb, base4["A"], descs["A"][s]),
               b_operand=lambda s: descriptor(kb, base4["B"], descs["B"][s]), step_operands=step_operands,
               idesc=lambda s: idesc_regs[idescs[s]], first_enable=p_acc, enable=p_true, extra=extra,
               mbar=regs["mbar"])
    e("ret;")

    total_k, k_block = spec.total_k, tile.facts["k_block"]      # k_block: layout-selection's K stage
    constants: dict[str, Any] = {
        "idesc": idescs[0],
        "A_desc": descs["A"], "B_desc": descs["B"],
        "mma_per_call": steps, "k_per_call": k_block,
        "m": spec.m, "n": spec.n,
    }
    # a tile with a `schedule` is a whole GEMM of the runtime's K: one call per K block of the schedule's
    # cta K, so it has no fixed call count (its `shape` K is the instruction's)
    if spec.schedule is None:
        constants["calls_per_tile"] = total_k // k_block
    if sparse:
        constants["idesc_per_mma"] = idescs
        constants["meta_columns_per_mma"] = meta_cols
    if zcm_op is not None:
        constants["zero_column_mask"] = int(zcm_op.attrs["value"])
    if spec.disable_output_lane is not None:
        constants["disable_output_lane"] = list(spec.disable_output_lane)
    if spec.scale_input_d is not None:
        constants["scale_input_d"] = spec.scale_input_d
    convention = (
        "call from one thread of the CTA; the MMAs are asynchronous (PTX 9.7.16.10.9)",
        "before the call: A and B written in their canonical layouts at aligned bases, "
        "fence.proxy.async.shared::cta by the writers, then a CTA barrier (PTX 9.7.16.6.5)",
        "after the call: wait on mbar's phase, then tcgen05.fence::after_thread_sync before reading D "
        "(PTX 9.7.16.6.4.2)",
        f"one call = {steps} MMA(s) = K {k_block}; " + (
            f"{constants['calls_per_tile']} call(s) cover the tile's K {total_k}" if spec.schedule is None else
            f"one call per K block of the schedule (cta K {k_block}): ceil(K / {k_block}) calls for a GEMM of K"),
    )
    req = _requirement(module)
    comments = [f"tilec fragment {name}: tile {spec.name}, {form.opcode()} x {steps}",
                f"requires .version {format_version(req.ptx_version)}, .target {req.target}",
                *(f"param {p.name}: {p.meaning}" for p in params), *convention]
    passed = {"A": "a_smem: shared::cta address, canonical layout (layouts.A)",
              "B": "b_smem: shared::cta address, canonical layout (layouts.B)",
              "D": "d_tmem: TMEM address (accumulated in place)",
              "META": "meta_tmem: TMEM address of the sparse metadata"}
    return Fragment(name, spec.name, "tcgen05", _render(kb, params, None, comments), params, None, req, constants,
                    layouts, convention, {}, _operands(spec, passed))


# ---- warp-level mma.sp -----------------------------------------------------------------------------

def _mma_sp_fragment(tile: TileView, module: Op, name: str) -> Fragment:
    spec = tile.payload
    form = tile.facts["form"]
    scaled = form.block_scale is not None
    req = _requirement(module)
    steps = spec.total_k // form.k
    # the value type of C/D registers: f32, s32, or b32 for packed f16x2 (C++ float / int / unsigned)
    c_type = form.c_type if form.c_type in ("f32", "s32") else "b32"
    kb = _builder(name)
    rows = [(f"c{i}", c_type, f"C fragment register {i} (9.7.14.6.2; fragments.cd_element)")
            for i in range(form.c_regs)]
    for s in range(steps):
        rows += [(f"a{s}_{j}", "b32", f"K step {s}: A register {j} (compressed; fragments.a_register_word)")
                 for j in range(form.a_regs)]
        rows += [(f"b{s}_{j}", "b32", f"K step {s}: B register {j} (fragments.b_register_word)")
                 for j in range(form.b_regs)]
        rows.append((f"e{s}", "b32", f"K step {s}: this lane's metadata word (9.7.14.6.2; compiler.sparse layout)"))
        if scaled:
            # 32-bit scalars, declared .b32 as nvcc declares them; read with {byte-id 0, thread-id 0}
            rows += [(f"sa{s}", "b32", f"K step {s}: this lane's scale-a-data (9.7.14.3: lane 4g / 4g+1 give "
                                       f"rows g / g+8 of scale_A in bytes 0..vector-1)"),
                     (f"sb{s}", "b32", f"K step {s}: this lane's scale-b-data (9.7.14.3: lane 4g gives column g "
                                       f"of scale_B in bytes 0..vector-1)")]
    params = _params(kb, rows)
    result = FragmentResult(kb.param("d"), c_type, form.d_regs, 16 if form.d_regs * 4 >= 16 else 8)
    e = kb.emit
    regs = _load_params(kb, params)
    acc = kb.regs("f" if c_type == "f32" else "r", form.d_regs)
    opcode = form.instruction(req.ptx_version)
    selector = spec.sparsity.selector

    c = [regs[f"c{i}"] for i in range(form.c_regs)]
    for s in range(steps):
        a = [regs[f"a{s}_{j}"] for j in range(form.a_regs)]
        b = [regs[f"b{s}_{j}"] for j in range(form.b_regs)]
        scales = f", {regs[f'sa{s}']}, {{0, 0}}, {regs[f'sb{s}']}, {{0, 0}}" if scaled else ""
        # later K steps accumulate into D
        e(mma_sp_instruction(opcode, acc, a, b, c if s == 0 else acc, regs[f"e{s}"], selector, scales))
    e(f"st.param.v{form.d_regs}.{c_type} [{result.ptx_name}], {vector(acc)};")
    e("ret;")

    constants: dict[str, Any] = {"k_steps": steps, "selector": selector}
    static = tile.facts.get("static_metadata")
    if static is not None:
        constants["static_metadata"] = [[list(words) for words in row] for row in static]
    convention = (
        "call from all 32 threads of a warp together (call.uni): mma.sp is .sync.aligned (9.7.14.6.3)",
        f"{form.name}: A {form.a_regs}, B {form.b_regs}, C/D {form.c_regs} registers per K step; "
        f"{steps} K step(s) of {form.k}",
        f"D returns in {result.ptx_name} ({result.count} x .{c_type}); ld.param it after the call",
        *((f"block scale {form.block_scale.scale_vec} .{form.block_scale.scale_type}: sa{{s}}/sb{{s}} are the "
           "lanes' scale registers, read with {byte-id 0, thread-id 0} (PTX 9.7.14.3)",) if scaled else ()),
    )
    comments = [f"tilec fragment {name}: tile {spec.name}, {opcode} x {steps}, selector {selector}",
                f"requires .version {format_version(req.ptx_version)}, .target {req.target}",
                "params: c0.. = C; per K step s: a{s}_j, b{s}_j, e{s}" + (", sa{s}, sb{s}" if scaled else ""),
                *convention]
    return Fragment(name, spec.name, "mma.sp", _render(kb, params, result, comments), params, result, req, constants, {},
                    convention, mma_sp_lane_layout(form, selector), _operands(spec, {
                        "A": "registers a{s}_0.. per K step (compressed; lanes.a)",
                        "B": "registers b{s}_0.. per K step (lanes.b)",
                        "C": "registers c0.. (lanes.c)", "D": f"returned: {result.cpp_type} (lanes.c)",
                        "META": "register e{s} per K step (lanes.e)",
                        "SFA": "register sa{s} per K step (lanes.sa)", "SFB": "register sb{s} per K step (lanes.sb)"}))


def mma_sp_lane_layout(form: Any, selector: int) -> dict[str, Any]:
    """What each lane's fragment registers hold, from compiler/isa/mma_sp/fragments.py (PTX ISA 9.7.14.6.2)
    and block_scale.py (PTX ISA 9.7.14.3); JSON-able lists indexed [lane][register]:

      c       C/D register r: the (row, col) of each element it holds, low bits first (f16 C packs two)
      a       A register j: (row, word): 32-bit word `word` of row `row` of the compressed 16 x k/2 A of one
              K step, `elements_per_register["a"]` elements per word
      b       B register j: (n, word): word `word` along K of column n of the k x 8 B of one K step
      e       nibble i of the metadata word (bits 4i+3..4i): the (row, chunk) it describes
      e_read  whether mma.sp reads this lane's word with the tile's selector (PTX ISA 9.7.14.6.1)
      sa, sb  (block-scaled) the rows of scale_A / columns of scale_B this lane's scale register supplies
              (thread-id 0; byte b = scale block b, byte-id 0)"""
    from ..isa.mma_sp.fragments import (a_register_word, b_register_word, cd_element, metadata_slot,
                                        metadata_suppliers)

    lay = form.layout
    c_per_reg = 4 // form.c_regs              # m16n8: 128 C elements over 32 lanes = 4 per lane
    readers = metadata_suppliers(lay, selector)
    out: dict[str, Any] = {
        "elements_per_register": {"a": lay.elems_per_reg, "b": lay.elems_per_reg, "c": c_per_reg},
        "c": [[[list(cd_element(lane, r * c_per_reg + i)) for i in range(c_per_reg)] for r in range(form.c_regs)]
              for lane in range(32)],
        "a": [[list(a_register_word(lane, j)) for j in range(form.a_regs)] for lane in range(32)],
        "b": [[list(b_register_word(lane, j)) for j in range(form.b_regs)] for lane in range(32)],
        "e": [[list(metadata_slot(lay, lane, i)) for i in range(8)] for lane in range(32)],
        "e_read": [(lane & 3) in readers for lane in range(32)],
    }
    if form.block_scale is not None:
        from ..isa.mma_sp.block_scale import scale_a_lane, scale_b_lane

        out["sa"] = [[r for r in range(16) if scale_a_lane(r, 0) == lane] for lane in range(32)]
        out["sb"] = [[c for c in range(8) if scale_b_lane(c, 0) == lane] for lane in range(32)]
    return out


# Per engine: the passes a fragment needs (a pipeline prefix, no ptx-emission) and its emitter.
FRAGMENT_PASSES: dict[str, tuple[str, ...]] = {
    "tcgen05": ("verify", "layout-selection", "descriptor-materialization"),
    "mma.sp": ("verify", "sparse-metadata-packing"),
}
FRAGMENT_EMITTERS: dict[str, Callable[[TileView, Op, str], Fragment]] = {
    "tcgen05": _tcgen05_fragment,
    "mma.sp": _mma_sp_fragment,
}


def fragment_name(tile_name: str, prefix: str | None = None) -> str:
    """`<prefix><tile>_mma` (prefix default "tilec_"), checked as a PTX identifier (PTX 4.4) that is also a C
    identifier: host code names exported symbols, and `$` is a PTX identifier character but not a C one."""
    from ..isa.identifiers import is_c_identifier, is_ptx_identifier

    name = f"{DEFAULT_PREFIX if prefix is None else prefix}{tile_name}{NAME_SUFFIX}"
    if not is_ptx_identifier(name):
        raise SpecError(f"fragment name '{name}' is not a PTX identifier", "tile",
                        "use a prefix of letters, digits and '_' (PTX 4.4)")
    if not is_c_identifier(name):
        raise SpecError(f"fragment name '{name}' is not a C identifier", "tile",
                        "use a prefix of letters, digits and '_'")
    return name


def emit_fragment_for_tile(tile_op: Op, module: Op, prefix: str | None = None) -> Fragment:
    """The fragment of one tile op of a module that has run FRAGMENT_PASSES[engine]."""
    from ..passes.derive import tile_view

    tile = tile_view(tile_op)       # the TileSpec and plans, rebuilt from the tile's attributes
    engine = tile.attrs["engine"]
    if engine not in FRAGMENT_EMITTERS:
        raise SpecError(f"no fragment emitter for engine '{engine}'", "engine.name",
                        "engines: " + ", ".join(FRAGMENT_EMITTERS))
    if tile.payload.epilogue is not None:
        # a fragment returns the MMA's accumulators to its caller; D = act(alpha*(A*B) + ...) is the kernel's
        raise SpecError("a fragment returns the MMA's accumulators; the epilogue is applied by the whole-GEMM "
                        "kernel only", "epilogue", "compile the tile as a kernel, or drop 'epilogue' for its fragment")
    return FRAGMENT_EMITTERS[engine](tile, module, fragment_name(tile.payload.name, prefix))
