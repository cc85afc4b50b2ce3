"""tilec IR: ops with typed attributes, source locations and nested bodies; an MLIR-like printer, a
verifier that runs between passes, and (compiler/ir_parser.py) a parser of the printed form.

    tilec.module {target = "sm_100a", ptx_version = "8.6"} {
      tilec.tile @gemm {engine = "tcgen05", m = 128, n = 256, k = 16, k_total = 64, ...} {
        tilec.operand @A {dtype = "bf16", space = "smem", major = "K", swizzle = "128B"} loc(#loc3)
        tilec.smem_layout @A {lbo = 16, sbo = 1024, ...} loc(#loc3)        // layout-selection
        tilec.smem_desc @A {k_step = 16, values = [0x4000404000010000, ...]} // descriptor-materialization
        tilec.instr_desc {kind = "f16", value = 0x08400490}
      } loc(#loc1)
    } loc(#loc0)
    #loc0 = loc("gemm.tile":1:8 to :15)
    #loc1 = loc(fused["gemm.tile":5:6 to :10, "shape.N"("gemm.tile":7:17 to :20), ...])

Every op kind is declared in `OP_DEFS`: its attributes, each with a type (`AttrType`), and the ops its
body may hold. Integer attributes that land in PTX carry the PTX type they land in (`U32`, `S32`,
`U64`, `B32`, `B64`); `verify_module` checks every value against its type, so one rule guards every
integer that reaches an instruction (PTX ISA 5.2.2: a 32-bit instruction's immediate must fit 32 bits).
A location is one source position or, for a tile, every field's position (`Op.locs`), so a diagnostic
after a print/parse round trip still points at the .tile token that caused it.
"""
from __future__ import annotations

from typing import Any, Iterator

from .diagnostics import Loc
from .isa.swizzle import MAJORS, SWIZZLE_MODES
from .spec import (EPILOGUE_ACCS, EPILOGUE_ACTS, EPILOGUE_BIAS, EPILOGUE_BIAS_TYPES, METADATA_SOURCES, SCHEDULE_MMAS, SCHEDULE_PERSISTENT,
                   SPACES, SPLIT_K_STREAM, SWIZZLES)


class Hex(int):
    """An integer attribute printed in hexadecimal (descriptor values)."""

    def __repr__(self) -> str:
        return hex(self)


# ---- attribute types ------------------------------------------------------------------------------

class Problem(str):
    """Why a value is not of its type."""


class OutOfRange(Problem):
    """An integer outside the range of the PTX type it lands in."""
    type_name = "?"


def _nested(p: Problem, where: str) -> Problem:
    out = type(p)(f"{where}: {p}")
    if isinstance(p, OutOfRange):
        out.type_name = p.type_name
    return out


_ASK, _INT, _STR, _BOOL, _ENUM = range(5)     # AttrType.accepts


class AttrType:
    """The type of an attribute value: what values it admits and how it prints. `accepts` names the
    inline test check_attrs applies before asking `problem` (a method call per attribute is most of
    the verifier's cost): _INT (an int or Hex in lo..hi), _STR, _BOOL, _ENUM (a str in `values`), or
    _ASK (none: always ask `problem`). A value the inline test rejects still goes to `problem`, which
    has the last word."""
    name = "?"
    accepts = _ASK

    def problem(self, v: Any) -> Problem | None:
        """Why `v` is not a value of this type, or None."""
        raise NotImplementedError

    def fmt(self, v: Any) -> str:
        raise NotImplementedError

    def coerce(self, v: Any) -> Any:
        """A parsed generic value (int, str, bool, list, dict) as this type's Python value."""
        return v

    def __repr__(self) -> str:
        return self.name


class PtxInt(AttrType):
    """An integer that lands in PTX as type `name` (PTX ISA 5.2.2 fundamental types): its range is the
    type's. `hex` values print in hexadecimal (8 digits below 2^32, else 16)."""

    accepts = _INT

    def __init__(self, name: str, bits: int, signed: bool = False, hex: bool = False):
        self.name, self.bits, self.signed, self.hex = name, bits, signed, hex
        self.lo = -(1 << (bits - 1)) if signed else 0
        self.hi = (1 << (bits - 1)) - 1 if signed else (1 << bits) - 1

    def problem(self, v: Any) -> str | None:
        if isinstance(v, bool) or not isinstance(v, int):
            return Problem(f"expected an integer ({self.name}), got {_describe(v)}")
        if not self.lo <= v <= self.hi:
            p = OutOfRange(f"value {v} does not fit PTX type .{self.name} (range {self.lo}..{self.hi})")
            p.type_name = self.name
            return p
        return None

    def fmt(self, v: Any) -> str:
        if self.hex:
            return f"0x{int(v):0{8 if 0 <= v < 1 << 32 else 16}x}"
        return str(int(v))

    def coerce(self, v: Any) -> Any:
        return Hex(v) if self.hex and isinstance(v, int) and not isinstance(v, bool) else v


class AtMost(PtxInt):
    """A u32 no larger than `hi`, the hardware's limit (`why`): a plan attribute that sizes loops and tables,
    so that an IR edit past what any tile can have is a located error, not a loop of 2^32 steps."""

    def __init__(self, hi: int, why: str):
        super().__init__("u32", 32)
        self.hi, self.why = hi, why         # check_attrs' inline test reads lo..hi

    def problem(self, v: Any) -> str | None:
        if isinstance(v, int) and not isinstance(v, bool) and v > self.hi:
            return Problem(f"value {v} is more than {self.hi} ({self.why})")
        return super().problem(v)


U32 = PtxInt("u32", 32)
S32 = PtxInt("s32", 32, signed=True)
U64 = PtxInt("u64", 64)
B32 = PtxInt("b32", 32, hex=True)
B64 = PtxInt("b64", 64, hex=True)


# PTX 9.7.16.7.1: a CTA allocates at most 512 TMEM columns
TMEM_COLUMNS = AtMost(512, "TMEM columns a CTA can allocate, PTX 9.7.16.7.1")
# a K block's A and B stages must fit in 232448 bytes of shared memory: at 64 rows of 4-bit elements, fewer than
# 8192 elements; and a ring of more stages than shared memory holds at its smallest stage (1 KB) is not a ring
K_BLOCK = AtMost(8192, "elements of K a shared-memory stage can hold")
RING_STAGES = AtMost(256, "stages shared memory can hold")


class _Instances(AttrType):
    """A type whose values are the instances of one Python class (`cls`)."""
    cls: type = object
    expected = "?"          # what the diagnostic says was expected

    def problem(self, v: Any) -> str | None:
        return None if isinstance(v, self.cls) else Problem(f"expected {self.expected}, got {_describe(v)}")


class Str(_Instances):
    name = "string"
    accepts = _STR
    cls, expected = str, "a string"

    def fmt(self, v: Any) -> str:
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


class Enum(Str):
    """A string from a fixed vocabulary."""

    accepts = _ENUM

    def __init__(self, *values: str):
        self.values = values
        self.name = "enum<" + ", ".join(values) + ">"

    def problem(self, v: Any) -> str | None:
        p = super().problem(v)
        if p is None and v not in self.values:
            return Problem(f"'{v}' is not one of {', '.join(self.values)}")
        return p


class PtxVersion(Str):
    """A PTX ISA version as `.version` prints it ("8.6"): the printer writes it into the PTX, so nothing but
    MAJOR.MINOR may pass. Whether it was released is the verify pass's question (an API caller's version
    reaches the IR before it), and the IR reader's for IR text (ir_parser)."""
    name = "PTX ISA version"
    accepts = _ASK

    def problem(self, v: Any) -> str | None:
        from .isa.targets import version_spelling

        p = super().problem(v)
        if p is None and version_spelling(v) is None:
            return Problem(f"{self.fmt(v)} is not a PTX ISA version (written as \"8.6\")")
        return p


class Target(Str):
    """A target tilec knows (compiler.isa.targets.TARGETS), as `.target` prints it."""
    name = "target"
    accepts = _ASK

    def problem(self, v: Any) -> str | None:
        from .isa.targets import TARGETS

        p = super().problem(v)
        if p is None and v not in TARGETS:
            return Problem(f"unknown target {self.fmt(v)} (one of {', '.join(TARGETS)})")
        return p


class SplitK(AttrType):
    """`schedule split_k=`: a slice count (u32: it lands in PTX as the slices' loop bound) or the word
    "stream" (stream-K)."""
    name = "u32 | \"stream\""

    def problem(self, v: Any) -> str | None:
        if v == SPLIT_K_STREAM:
            return None
        p = U32.problem(v)
        return None if p is None else Problem(f"expected a slice count (u32) or \"stream\", got {_describe(v)}")

    def fmt(self, v: Any) -> str:
        return Str().fmt(v) if isinstance(v, str) else U32.fmt(v)


class Bool(_Instances):
    name = "bool"
    accepts = _BOOL
    cls, expected = bool, "true or false"

    def fmt(self, v: Any) -> str:
        return "true" if v else "false"


class ListOf(AttrType):
    def __init__(self, elem: AttrType):
        self.elem = elem
        self.name = f"list<{elem.name}>"

    def problem(self, v: Any) -> str | None:
        if not isinstance(v, (list, tuple)):
            return Problem(f"expected a list ({self.name}), got {_describe(v)}")
        e = self.elem
        if e.accepts == _INT:
            if all((type(x) is int or type(x) is Hex) and e.lo <= x <= e.hi for x in v):
                return None                                 # the common case, in one pass
        elif e.accepts == _STR and all(type(x) is str for x in v):
            return None
        for i, x in enumerate(v):
            p = self.elem.problem(x)
            if p is not None:
                return _nested(p, f"element {i}")
        return None

    def fmt(self, v: Any) -> str:
        return "[" + ", ".join(self.elem.fmt(x) for x in v) + "]"

    def coerce(self, v: Any) -> Any:
        return tuple(self.elem.coerce(x) for x in v) if isinstance(v, list) else v


class Record(AttrType):
    """A nested record `{field = value, ...}` with typed fields (optional ones may be absent)."""

    def __init__(self, name: str, fields: dict[str, "AttrType | Opt"]):
        self.name = name
        self.fields = {k: (t if isinstance(t, Opt) else Opt(t, required=True)) for k, t in fields.items()}

    def problem(self, v: Any) -> str | None:
        if not isinstance(v, dict):
            return Problem(f"expected a record {{...}} ({self.name}), got {_describe(v)}")
        for k in v:
            if k not in self.fields:
                return Problem(f"unknown field '{k}' of {self.name}")
        for k, o in self.fields.items():
            if k not in v:
                if o.required:
                    return Problem(f"missing field '{k}' of {self.name}")
                continue
            p = o.type.problem(v[k])
            if p is not None:
                return _nested(p, f"field '{k}'")
        return None

    def fmt(self, v: Any) -> str:
        return "{" + ", ".join(f"{k} = {self.fields[k].type.fmt(v[k])}" for k in self.fields if k in v) + "}"

    def coerce(self, v: Any) -> Any:
        if not isinstance(v, dict):
            return v
        return {k: (self.fields[k].type.coerce(x) if k in self.fields else x) for k, x in v.items()}


class Config(AttrType):
    """The fields of a configuration dataclass, printed one by one: integers (typed u32: they become
    PTX immediates, loop bounds and sizes), booleans, strings. Objects the IR holds elsewhere (the
    form, the metadata table, names) are not repeated here."""
    name = "config"

    def problem(self, v: Any) -> str | None:
        if not isinstance(v, dict):
            return Problem(f"expected a record {{...}}, got {_describe(v)}")
        for k, x in v.items():
            t = _CONFIG_TYPES.get(type(x))
            if t is None:
                return Problem(f"field '{k}': a configuration field is an integer, a boolean or a string, "
                               f"not {_describe(x)}")
            p = t.problem(x)
            if p is not None:
                return _nested(p, f"field '{k}'")
        return None

    def fmt(self, v: Any) -> str:
        return "{" + ", ".join(f"{k} = {_CONFIG_TYPES[type(x)].fmt(x)}" for k, x in v.items()) + "}"


class Opt:
    """An attribute or record field: its type, whether it must be present, and the tile field a
    diagnostic about its value blames (a key of the tile's locations; None = the op's location).
    A plain slotted class rather than a dataclass (as OpDef): a dataclass costs about half a
    millisecond to create, paid by every `tilec` process that imports the IR."""
    __slots__ = ("type", "required", "blame")

    def __init__(self, type: AttrType, required: bool = False, blame: str | None = None):
        self.type, self.required, self.blame = type, required, blame

    def __repr__(self) -> str:
        return f"Opt(type={self.type!r}, required={self.required!r}, blame={self.blame!r})"


_CONFIG_TYPES: dict[type, AttrType] = {int: U32, bool: Bool(), str: Str()}


def _describe(v: Any) -> str:
    return type(v).__name__ if not isinstance(v, (int, str)) or isinstance(v, bool) else repr(v)


# ---- ops ------------------------------------------------------------------------------------------

class Op:
    """One op: its name, @symbol, attributes, body, location and named locations; compared by those
    (not by `outputs`). A plain class with a dataclass's __init__, __eq__ and __repr__: a dataclass
    costs every tilec process about half a millisecond to create."""
    __hash__ = None                 # type: ignore[assignment]  (mutable, compared by value)

    def __init__(self, name: str, sym: str | None = None, attrs: dict[str, Any] | None = None,
                 body: list["Op"] | None = None, loc: Loc | None = None, locs: dict[str, Loc] | None = None,
                 outputs: dict[str, Any] | None = None):
        self.name = name
        self.sym = sym                                  # the @symbol, if any
        self.attrs: dict[str, Any] = attrs if attrs is not None else {}
        self.body: list[Op] = body if body is not None else []
        self.loc = loc
        self.locs: dict[str, Loc] = locs if locs is not None else {}    # named locations (a tile's fields)
        # What the pipeline produces and no pass reads (the PTX text and kernel ABIs of ptx-emission, on
        # the module). Everything a pass consumes is a printed attribute: the IR text is the whole program.
        self.outputs: dict[str, Any] = outputs if outputs is not None else {}

    def __eq__(self, other: object) -> bool:
        if type(other) is not Op:
            return NotImplemented
        return (self.name, self.sym, self.attrs, self.body, self.loc, self.locs) == \
            (other.name, other.sym, other.attrs, other.body, other.loc, other.locs)

    def __repr__(self) -> str:
        return (f"Op(name={self.name!r}, sym={self.sym!r}, attrs={self.attrs!r}, body={self.body!r}, "
                f"loc={self.loc!r}, locs={self.locs!r})")

    def ops(self, name: str, sym: str | None = None) -> list["Op"]:
        return [o for o in self.body if o.name == name and (sym is None or o.sym == sym)]

    def op(self, name: str, sym: str | None = None) -> "Op | None":
        found = self.ops(name, sym)
        return found[0] if found else None

    def walk(self) -> Iterator["Op"]:
        yield self
        for o in self.body:
            yield from o.walk()


class OpDef:
    __slots__ = ("attrs", "body", "sym")

    def __init__(self, attrs: dict[str, Opt], body: tuple[str, ...] | None = None, sym: bool = False):
        self.attrs = attrs                 # in print order
        self.body = body                   # ops allowed in the body; None = no body
        self.sym = sym                     # takes an @symbol

    def __repr__(self) -> str:
        return f"OpDef(attrs={self.attrs!r}, body={self.body!r}, sym={self.sym!r})"


def _attrs(**kw: "AttrType | Opt") -> dict[str, Opt]:
    return {k: (v if isinstance(v, Opt) else Opt(v, required=True)) for k, v in kw.items()}


_LBO_MODES = Enum("relative", "absolute")
_MAJOR = Enum(*MAJORS)

OP_DEFS: dict[str, OpDef] = {
    # `passes`: the passes that have run, in order (run_passes continues after them; `tilec compile`
    # of IR text runs the rest of the pipeline).
    "tilec.module": OpDef(_attrs(target=Target(), ptx_version=Opt(PtxVersion()), passes=Opt(ListOf(Str()))),
                          ("tilec.tile", "ptx.kernel")),
    # ---- the tile as written (lowering): every TileSpec field ----
    "tilec.tile": OpDef(
        _attrs(engine=Str(), m=Opt(U32, True, "shape.M"), n=Opt(U32, True, "shape.N"),
               k=Opt(U32, True, "shape.K"), k_total=Opt(U32, True, "loop.K"), kind=Opt(Str()),
               cta_group=Opt(U32, blame="engine.cta_group"), ws=Opt(Bool()), collector=Opt(Str()),
               ashift=Opt(Bool()), block_scale=Opt(Str()), negate_a=Opt(Bool()), negate_b=Opt(Bool()),
               saturate=Opt(Bool()), max_shift=Opt(U32, blame="max_shift"),
               scale_input_d=Opt(U32, blame="scale_input_d.value"),
               disable_output_lane=Opt(ListOf(B32), blame="disable_output_lane.value")),
        ("tilec.operand", "tilec.sparsity", "tilec.zero_columns", "tilec.schedule", "tilec.epilogue", "tilec.mma_form",
         "tilec.epilogue_plan",
         "tilec.smem_layout", "tilec.pipeline", "tilec.tmem_plan", "tilec.metadata", "tilec.instr_desc",
         "tilec.smem_desc", "tilec.zero_column_mask", "tilec.ws_plan", "tilec.kernel", "tilec.resources"), sym=True),
    "tilec.operand": OpDef(_attrs(dtype=Str(), space=Enum(*SPACES),
                                  major=Opt(_MAJOR), swizzle=Opt(Enum(*SWIZZLES))), sym=True),
    # rows: per row, per chunk, the kept positions (one index or a pair)
    "tilec.sparsity": OpDef(_attrs(ratio=Str(), metadata=Enum(*METADATA_SOURCES),
                                   selector=Opt(U32, True, "sparsity.selector"), pattern=Opt(Str()),
                                   rows=Opt(ListOf(ListOf(ListOf(U32))), blame="sparsity.rows"))),
    "tilec.zero_columns": OpDef(_attrs(value=Opt(B64, blame="zero_columns"),
                                       columns=Opt(ListOf(ListOf(U32)), blame="zero_columns"),
                                       shift=Opt(U32, True, "zero_columns"))),
    "tilec.schedule": OpDef(_attrs(cta_m=Opt(U32, True, "schedule.cta"), cta_n=Opt(U32, True, "schedule.cta"),
                                   cta_k=Opt(U32, True, "schedule.cta"), warps_m=Opt(U32, True, "schedule.warps"),
                                   warps_n=Opt(U32, True, "schedule.warps"),
                                   stages=Opt(U32, True, "schedule.stages"), mma=Enum(*SCHEDULE_MMAS),
                                   cluster=Opt(U32, True, "schedule.cluster"),
                                   persistent=Opt(Enum(*SCHEDULE_PERSISTENT), blame="schedule.persistent"),
                                   raster=Opt(U32, blame="schedule.raster"),
                                   split_k=Opt(SplitK(), blame="schedule.split_k"),
                                   accumulators=Opt(U32, blame="schedule.accumulators"),
                                   promote=Opt(U32, blame="schedule.promote"))),
    # alpha / beta: decimal literals as written, or "param" (absent: 1)
    "tilec.epilogue": OpDef(_attrs(alpha=Opt(Str(), blame="epilogue.alpha"), beta=Opt(Str(), blame="epilogue.beta"),
                                   bias=Opt(Enum(*EPILOGUE_BIAS), blame="epilogue.bias"),
                                   act=Opt(Enum(*EPILOGUE_ACTS), blame="epilogue.act"),
                                   acc=Opt(Enum(*EPILOGUE_ACCS), blame="epilogue.acc"),
                                   scale=Opt(Str(), blame="epilogue.scale"),
                                   bias_type=Opt(Enum(*EPILOGUE_BIAS_TYPES), blame="epilogue.bias_type"))),
    # ---- verify: the instruction form, a key into the ISA tables (compiler/isa/) ----
    # tcgen05: the fields of isa.tcgen05_forms.Tcgen05Mma; mma.sp: the arguments of isa.mma_sp.forms.find_form
    "tilec.mma_form": OpDef(_attrs(
        opcode=Str(), kind=Opt(Str()), cta_group=Opt(U32), sparse=Opt(Bool()), ws=Opt(Bool()),
        a_in_tmem=Opt(Bool()), block_scale=Opt(Str()), collector=Opt(Str()), ashift=Opt(Bool()),
        disable_output_lane=Opt(Bool()), scale_input_d=Opt(Bool()), zero_column_mask=Opt(Bool()),
        k96=Opt(Bool()), scale_type=Opt(Str()),
        shape=Opt(Str()), a=Opt(Str()), b=Opt(Str()), c=Opt(Str()), d=Opt(Str()), satfinite=Opt(Bool()))),
    # ---- layout-selection: smem layouts (PTX 9.7.16.3), the K stage, the TMEM columns ----
    "tilec.smem_layout": OpDef(_attrs(major=_MAJOR, swizzle=Enum(*SWIZZLE_MODES), lbo=U32, sbo=U32,
                                      offset=U32, size=U32, k_block=Opt(U32, True, "loop.K"),
                                      lbo_mode=Opt(_LBO_MODES)), sym=True),
    # a ring's plan (pipeline-planning, compiler/ptx/pipeline.py RingPlan) adds its slot bytes, barriers and
    # what completes them; tcgen05's stage plan (layout-selection) has the first three only
    "tilec.pipeline": OpDef(_attrs(k_block=Opt(U32, True, "loop.K"), stages=Opt(U32, True, "loop.K"),
                                   smem_bytes=Opt(U32, True, "shape"),
                                   stage_bytes=Opt(U32, blame="schedule.cta"), tx_bytes=Opt(U32, blame="schedule.cta"),
                                   full_arrivals=Opt(U32, blame="schedule.warps"),
                                   empty_arrivals=Opt(U32, blame="schedule.warps"),
                                   barrier_offset=Opt(U32, blame="schedule.stages"))),
    # column offsets of every TMEM region of one CTA (PTX 9.7.16.7.1: allocated = a power of 2 >= 32)
    "tilec.tmem_plan": OpDef(_attrs(d=U32, d_columns=U32, scratch=Opt(U32), meta=Opt(U32), meta_columns=Opt(U32),
                                    sfa=Opt(U32), sfa_columns=Opt(U32), sfb=Opt(U32), sfb_columns=Opt(U32),
                                    a=Opt(U32), a_columns=Opt(U32), allocated=U32)),
    # ---- warp-specialization: the roles, ring, barriers, TMEM accumulators and tile scheduler of a scheduled
    # tcgen05 tile (compiler/passes/warp_specialization.py; byte offsets from the ring's 1024-aligned base)
    "tilec.ws_plan": OpDef(_attrs(
        threads=U32, epilogue_warps=ListOf(U32), mma_warp=U32, tma_warp=U32,
        stages=Opt(RING_STAGES, True, "schedule.stages"), k_block=Opt(K_BLOCK, True, "schedule.cta"), stage_bytes=U32,
        tx_bytes=U32, full=U32, empty=U32, acc_full=U32, acc_empty=U32, tmem_slot=U32,
        accumulators=Opt(TMEM_COLUMNS, True, "schedule.accumulators"), acc_columns=TMEM_COLUMNS,
        tmem_columns=TMEM_COLUMNS, smem_bytes=U32,
        cluster=Opt(U32, True, "schedule.cluster"), scheduler=Enum("static", "clc"), raster=Enum("m"), why=Opt(Str()),
        cp_operands=Opt(ListOf(Enum("META", "SFA", "SFB"))), cp_smem=Opt(ListOf(U32)), cp_bytes=Opt(ListOf(U32)),
        tmem_stage=Opt(U32), tmem_stage_columns=Opt(U32), stage_regions=Opt(ListOf(U32)),
        sf_group_columns=Opt(ListOf(U32)), a_smem=Opt(U32), a_bytes=Opt(U32), a_region=Opt(U32), d_stage=U32, d_stage_bytes=U32, d_buffers=U32, d_chunk=TMEM_COLUMNS,
        d_swizzle=Enum("none", "32B", "64B", "128B"), sched_warp=Opt(U32), clc_stages=Opt(U32),
        clc_response=Opt(U32), clc_full=Opt(U32), clc_empty=Opt(U32))),
    # ---- sparse-metadata-packing: words = the periodic table, row-major over `period` ----
    "tilec.metadata": OpDef(_attrs(source=Enum(*METADATA_SOURCES), words_per_row=Opt(U32, blame="loop.K"),
                                   period=Opt(ListOf(U32)), words=Opt(ListOf(B32)))),
    # ---- descriptor-materialization (PTX 9.7.16.4) ----
    "tilec.instr_desc": OpDef(_attrs(kind=Str(), value=B32, step_values=Opt(ListOf(B32)))),
    "tilec.smem_desc": OpDef(_attrs(k_step=U32, values=ListOf(B64), lbo_mode=Opt(_LBO_MODES)), sym=True),
    "tilec.zero_column_mask": OpDef(_attrs(value=B64)),
    # ---- epilogue-lowering: per accumulator element, the PTX the kernel applies before storing D ----
    # c: where C enters (none | accumulate: loaded into the accumulators before the first MMA, which
    # adds it | epilogue: loaded beside the accumulators and scaled there); params: the epilogue's
    # kernel parameters in order; steps: {step, ptx = instruction templates over {x} (the element),
    # {c} (its C element), {b} (its bias element), {t0}.. (scratch), {alpha}/{beta} (f32 parameters)}
    # alpha / beta: the f32 immediate (0f...) or "param" (absent: 1; beta absent also without C)
    "tilec.epilogue_plan": OpDef(_attrs(acc=Enum(*EPILOGUE_ACCS), out=Str(), c=Enum("none", "accumulate", "epilogue"),
                                        alpha=Opt(Str()), beta=Opt(Str()), bias=Enum(*EPILOGUE_BIAS),
                                        act=Enum(*EPILOGUE_ACTS), params=ListOf(Str()),
                                        scale=Opt(Str()), bias_type=Opt(Enum(*EPILOGUE_BIAS_TYPES)),
                                        steps=ListOf(Record("epilogue_step", {"step": Str(), "ptx": ListOf(Str())})))),
    # ---- kernel-selection: the kernel that implements the tile and its configuration ----
    # The tcgen05 kernel's immediates derived from the loop K: the bytes of one row of A / B in global
    # memory (K-major operands; A in TMEM: in its TMEM containers) and of one row of scale factors.
    "tilec.kernel": OpDef(_attrs(kernel=Str(), config=Opt(Config()), a_row_bytes=Opt(U32, blame="loop.K"),
                                 b_row_bytes=Opt(U32, blame="loop.K"), sf_row_bytes=Opt(U32, blame="loop.K"))),
    # ---- resource-planning: what the tile's kernel asks of one SM (compiler/ptx/resource_planning.py) ----
    # per CTA: threads; the smem ring (`stages` slots of `stage_bytes`) and all shared memory (`smem_bytes`,
    # static or dynamic, within `smem_limit`); TMEM columns allocated; mbarriers; CTAs resident per SM;
    # per warp role its warps, register budget and live data registers per thread (accumulators and
    # fragments; a lower bound). For the analytic bound (compiler/perf_model.py): the MMA (`mma`, its kind or
    # A type; `mma_k`, the dense K of one instruction of it, which sets its rate), `sparse`, the bits of an A and a B element in memory, the D tile one CTA computes (`cta_m` x `cta_n`), the K block per stage, the bytes the
    # copies deliver to shared memory per K block (`tx_bytes`) and how (`copy`: the TMA, cp.async, or the
    # threads' loads and stores), whether copies overlap the MMAs (`overlap`)
    # and whether CTAs stay resident over several tiles (`persistent`); the warp-specialised tcgen05 kernel's
    # D staging buffers (`d_staging_bytes`, part of smem_bytes; the persistent sparse wgmma kernel's staged-D
    # region too, and `d_staging` says how it is used); a `.ws` tile's form choices (`ws`: data-path
    # layout, accumulator columns, collector usage and why, zero-column mask; `tmem_operands`: the per-slot META /
    # SFA / SFB columns and their copies, and the TMEM budget; `a_tmem`: A's staging, copies and the TMEM budget); `spill_note`: where ptxas may spill the sparse wgmma consumers (measured), and why.
    "tilec.resources": OpDef(_attrs(
        kernel=Str(), threads=U32, cluster=U32, stages=U32, stage_bytes=U32, smem_bytes=U32, smem_limit=U32,
        smem_space=Enum("none", "static", "dynamic"), tmem_columns=U32, mbarriers=U32, ctas_per_sm=U32,
        roles=ListOf(Record("role", {"name": Str(), "warps": U32, "registers": U32, "live": U32})),
        mma=Str(), mma_k=U32, sparse=Bool(), a_bits=U32, b_bits=U32, cta_m=U32, cta_n=U32, k_block=U32, tx_bytes=U32,
        d_bytes=U32, d_staging_bytes=Opt(U32), copy=Enum("tma", "cp.async", "threads", "none"), overlap=Bool(), persistent=Bool(),
        scheduler=Opt(Enum("static", "clc")),
        setmaxnreg=Opt(Str()), ws=Opt(Str()), tmem_operands=Opt(Str()), a_tmem=Opt(Str()), spill_note=Opt(Str()),
        d_staging=Opt(Str()))),
    # ---- ptx-emission ----
    "ptx.kernel": OpDef(_attrs(entry=Str(), lines=U32), sym=True),
}


def register_attr(op_name: str, attr: str, type: AttrType) -> None:
    """Declare an optional attribute on an op kind (for passes defined outside the package). A pass
    that records a result does so as a typed, printed attribute."""
    d = OP_DEFS[op_name]
    if attr in d.attrs and d.attrs[attr].type is not type:
        raise ValueError(f"'{op_name}' already has an attribute '{attr}'")
    d.attrs[attr] = Opt(type)


class IRError(Exception):
    """An IR that breaks its op definitions. `op` and `attr` say where (for a located diagnostic)."""

    def __init__(self, message: str, op: Op | None = None, attr: str | None = None, *,
                 out_of_range: bool = False, tile: Op | None = None):
        super().__init__(message)
        self.op, self.attr, self.out_of_range, self.tile = op, attr, out_of_range, tile
        self.type_name = "?"

    def hint(self) -> str | None:
        if not self.out_of_range:
            return None
        d = OP_DEFS.get(self.op.name) if self.op is not None else None
        blame = d.attrs[self.attr].blame if d and self.attr in d.attrs else None
        what = blame.replace(".", " ") if blame else None
        return (f"the kernel uses it as a .{self.type_name} immediate and it grows with {what}; use a smaller "
                f"{what}" if what else "the tile's sizes make this value too large; use smaller ones")

    def loc(self, tile: Op | None = None) -> Loc | None:
        """The source location to blame: the attribute's tile field when it names one, else the op's."""
        if self.op is None:
            return None
        d = OP_DEFS.get(self.op.name)
        blame = d.attrs[self.attr].blame if d and self.attr in d.attrs else None
        for holder in (self.op, tile):
            if holder is not None and blame:
                key = blame
                while key:
                    if key in holder.locs:
                        return holder.locs[key]
                    key = key.rpartition(".")[0]
        return self.op.loc or (tile.loc if tile is not None else None)


def check_attrs(op: Op, tile: Op | None = None) -> None:
    """Every attribute of `op` is declared, present when required, and a value of its type: for an
    integer that lands in PTX, within the range of that PTX type (the one range rule)."""
    _checked_snapshot(op, tile)


def _checked_snapshot(op: Op, tile: Op | None) -> dict[str, Any]:
    """check_attrs, returning snapshot_attrs(op.attrs) made on the way (a value the inline tests
    accept is a scalar and needs no copy)."""
    d = OP_DEFS[op.name]
    defs = d.attrs
    attrs = op.attrs
    snap = attrs.copy()
    for key, value in attrs.items():
        o = defs.get(key)
        if o is None:
            raise IRError(f"'{op.name}' has no attribute '{key}'", op, key)
        t = o.type
        accepts = t.accepts
        if accepts == _INT:
            tv = type(value)
            if (tv is int or tv is Hex) and t.lo <= value <= t.hi:
                continue
        elif accepts == _STR:
            if type(value) is str:
                continue
        elif accepts == _ENUM:
            if type(value) is str and value in t.values:
                continue
        elif accepts == _BOOL:
            if type(value) is bool:
                continue
        p = t.problem(value)
        if p is not None:
            what = f"{op.name}{' @' + op.sym if op.sym else ''}"
            err = IRError(f"attribute '{key}' of '{what}': {p}", op, key,
                          out_of_range=isinstance(p, OutOfRange), tile=tile)
            err.type_name = p.type_name if isinstance(p, OutOfRange) else "?"
            raise err
        tv = type(value)
        if tv is list or tv is dict or tv is tuple:
            snap[key] = _copy_mutable(value)
    required = _REQUIRED.get(op.name)
    if required is None or required[0] is not defs or required[1] != len(defs):
        required = _REQUIRED[op.name] = (defs, len(defs), frozenset(k for k, o in defs.items() if o.required))
    if not required[2] <= attrs.keys():
        for key, o in defs.items():
            if o.required and key not in attrs:
                raise IRError(f"'{op.name}' is missing attribute '{key}'", op, key)
    return snap


# Per op kind: its attribute definitions (and their number, which register_attr changes) and the
# names of its required attributes.
_REQUIRED: dict[str, tuple[dict, int, frozenset]] = {}


_UNIQUE_SYMS = frozenset(("tilec.tile", "tilec.operand", "ptx.kernel"))


def verify_module(module: Op) -> None:
    """Known ops, typed attributes in range, legal nesting, unique symbols.

    Structure (op names, symbols, nesting, uniqueness) is checked on every op at every call. The typed
    attribute check runs on an op when its attributes differ from those it last passed with: the pass
    manager calls this before the first pass and after each, so an op a pass added or changed (its
    attribute dict compared by value, a list or dict attribute against a copy of itself, so a change in
    place counts) is checked again, and an unchanged one is not re-typed."""
    if module.name != "tilec.module":
        raise IRError("top-level op must be 'tilec.module'", module)
    d = OP_DEFS.get(module.name)
    if module.sym is not None:
        raise IRError(f"'{module.name}' takes no @symbol", module)
    if module.__dict__.get("_verified") != module.attrs:
        module.__dict__["_verified"] = _checked_snapshot(module, None)
    _check_body(module, d, None)


def snapshot_attrs(attrs: dict[str, Any]) -> dict[str, Any]:
    """A copy of an op's attributes that compares equal to them until they change, in place included
    (its lists and dicts are deep copies), for caches keyed on an op's attributes."""
    snap = attrs.copy()
    for k, v in snap.items():
        tv = type(v)
        if tv is list or tv is dict or tv is tuple:
            snap[k] = _copy_mutable(v)
    return snap


def _copy_mutable(v: Any) -> Any:
    tv = type(v)
    if tv is list:
        return [_copy_mutable(x) for x in v]
    if tv is tuple:
        if all(type(x) is int or type(x) is Hex or type(x) is str for x in v):
            return v                                    # immutable all the way down
        return tuple(_copy_mutable(x) for x in v)
    if tv is dict:
        return {k: _copy_mutable(x) for k, x in v.items()}
    return v


def _check_body(op: Op, d: OpDef, tile: Op | None) -> None:
    """The ops in `op`'s body (and theirs): each known, allowed there, with a symbol exactly when its
    kind takes one, unique where symbols must be, and typed attributes (re-checked when changed)."""
    body = op.body
    if not body:
        return
    allowed = d.body
    if allowed is None:
        raise IRError(f"'{op.name}' cannot have a body", op)
    seen = None
    defs = OP_DEFS
    for child in body:
        name = child.name
        if name not in allowed:
            raise IRError(f"'{name}' is not allowed inside '{op.name}'", child)
        cd = defs.get(name)
        if cd is None:
            raise IRError(f"unknown op '{name}'", child)
        sym = child.sym
        if sym is None:
            if cd.sym:
                raise IRError(f"'{name}' needs an @symbol", child)
        elif not cd.sym:
            raise IRError(f"'{name}' takes no @symbol", child)
        elif name in _UNIQUE_SYMS:
            key = (name, sym)
            if seen is None:
                seen = {key}
            elif key in seen:
                raise IRError(f"duplicate '{name} @{sym}'", child)
            else:
                seen.add(key)
        owner = child if name == "tilec.tile" else tile
        attrs = child.attrs
        cdict = child.__dict__
        if cdict.get("_verified") != attrs:
            cdict["_verified"] = _checked_snapshot(child, owner)
        if child.body:
            _check_body(child, cd, owner)


# ---- reading: which language a text is in ----------------------------------------------------------

def looks_like_ir(text: str) -> bool:
    """IR text starts (after blank lines and // comments) with the `tilec.module` op; DSL text never
    does (its statements are `target`, `ptx`, `tile`)."""
    for line in text.lstrip("\ufeff").split("\n"):
        s = line.strip()
        if s and not s.startswith("//"):
            return s.startswith("tilec.module")
    return False


# ---- printing -------------------------------------------------------------------------------------

def _fmt(v: Any) -> str:
    """An untyped value (an attribute no definition declares): printed by its Python type."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, Hex):
        return f"0x{int(v):0{8 if v < 1 << 32 else 16}x}"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, str):
        return Str().fmt(v)
    if isinstance(v, (tuple, list)):
        return "[" + ", ".join(_fmt(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k} = {_fmt(x)}" for k, x in v.items()) + "}"
    return repr(v)


def fmt_attr(op_name: str, key: str, value: Any) -> str:
    d = OP_DEFS.get(op_name)
    o = d.attrs.get(key) if d else None
    return o.type.fmt(value) if o is not None and o.type.problem(value) is None else _fmt(value)


def _fmt_loc(loc: Loc) -> str:
    end = f" to :{loc.end_col}" if loc.end_col is not None else ""
    return f"{Str().fmt(loc.file)}:{loc.line}:{loc.col}{end}"


def fmt_location(op: Op) -> str | None:
    """The body of `op`'s loc(...): one position, or fused[main, "field"(pos), ...] for named ones."""
    if not op.locs:
        return _fmt_loc(op.loc) if op.loc else None
    parts = [_fmt_loc(op.loc)] if op.loc else []
    parts += [f"{Str().fmt(k)}({_fmt_loc(v)})" for k, v in op.locs.items()]
    return "fused[" + ", ".join(parts) + "]"


def print_op(op: Op, indent: int = 0, with_locs: bool = True) -> str:
    """The op in MLIR-like text. With `with_locs`, each op ends in loc(#locN) and the aliases follow
    the top-level op (`#locN = loc(...)`), as mlir-opt prints debug locations."""
    aliases: dict[str, str] = {}
    text = _print(op, indent, aliases if with_locs else None)
    if aliases:
        text += "\n" + "\n".join(f"{a} = loc({body})" for body, a in aliases.items())
    return text


def _print(op: Op, indent: int, aliases: dict[str, str] | None) -> str:
    pad = "  " * indent
    head = pad + op.name + (f" @{op.sym}" if op.sym else "")
    if op.attrs:
        head += " {" + ", ".join(f"{k} = {fmt_attr(op.name, k, v)}" for k, v in op.attrs.items()) + "}"
    loc = ""
    if aliases is not None:
        body = fmt_location(op)
        if body is not None:
            alias = aliases.setdefault(body, f"#loc{len(aliases)}")
            loc = f" loc({alias})"
    if not op.body:
        return head + loc
    inner = "\n".join(_print(c, indent + 1, aliases) for c in op.body)
    return f"{head} {{\n{inner}\n{pad}}}{loc}"
