"""Every `tcgen05.mma` instruction form, its PTX version / target rules, and the supporting tcgen05
instructions a complete kernel needs.

Sources (section numbers of PTX ISA 9.0/9.1/9.2):
- 9.7.16.10.9.1-4 (`tcgen05.mma`, `.sp`, `.ws`, `.ws.sp`): syntax groups, operand order, qualifier
  rules, "PTX ISA Notes" and "Target ISA Notes".
- 13 "Release Notes", Table 60 "Arch-specific/Family-specific PTX Features Release History" (PTX 9.2)
  and Table 61 "features promoted to family-specific architecture" (PTX 8.8 notes).
- PTX 9.7.16.10.9.1 (operands, qualifiers; every form checked with ptxas 13.0), 9.7.16.7-9.7.16.12
  (supporting instructions); ptxas 13.0 where it disagrees with the text (noted per row).

A form is the instruction without its operands (`Tcgen05Mma`); `.opcode()` spells it, `.render()`
adds operands in ISA order, `.requirements()` / `check_target()` say where it assembles.

Targets: a feature that PTX lists for a family target `sm_100f` is available on every target of
that family with an `a` or `f` suffix and an equal or higher SM (`sm_100a/f`, `sm_103a/f`); one listed
for an arch target (`sm_100a`) only there (PTX 1.2.x "family-specific" / "arch-specific" features).
A feature's PTX minimum on a target is max(feature minimum, the target's own minimum): every row of
Table 60 agrees with that rule (e.g. base `tcgen05.mma` 8.6 on sm_100a, 8.8 on sm_100f = sm_100f's
minimum, 9.0 on sm_110f = sm_110f's minimum).
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from ..diagnostics import SpecError
from .targets import TARGETS, Version, format_version
from .tcgen05_kinds import K96 as _K96, KINDS

# --------------------------------------------------------------------------------------------------
# Spec fields blamed by each check: the keys the DSL front end records locations under
# (compiler/frontend/build.py), so that a diagnostic points at the offending token.
FIELD = {
    "kind": "engine.kind",
    "cta_group": "engine.cta_group",
    "ws": "engine.ws",
    "a_in_tmem": "A.space",
    "block_scale": "block_scale.vec",
    "collector": "engine.collector",
    "ashift": "engine.ashift",
    "disable_output_lane": "disable_output_lane.value",
    "scale_input_d": "scale_input_d.value",
    "zero_column_mask": "zero_columns",
    "k96": "shape.K",
    "target": "target",
    "ptx_version": "ptx",
}

# --------------------------------------------------------------------------------------------------
# Per-kind instruction-form rules (9.7.16.10.9.1 syntax groups 1-6; 9.7.16.10.9.3 `.ws` groups 1-2;
# Table 54 "Valid combinations of scale_vectorsize" + the alias list of 9.7.16.10.9.1).


@dataclass(frozen=True)
class KindForm:
    """The instruction-spelling facts of one kind. Whether it has `.ws` and scale-input-d is a kind
    fact kept once, in compiler/isa/tcgen05_kinds.py (KINDS); only the `.block_scale` qualifier choices
    live here."""
    kind: str
    block_vector_sizes: tuple[str, ...]   # () = not block scaled; else the legal `.block_scale` choices

    @property
    def block_scaled(self) -> bool:
        return bool(self.block_vector_sizes)

    @property
    def ws(self) -> bool:                 # `.ws` / `.ws.sp` syntax groups list this kind
        return KINDS[self.kind].ws

    @property
    def scale_input_d(self) -> bool:      # "scale-input-d is only valid for .kind::tf32 and .kind::f16"
        return KINDS[self.kind].scale_input_d


KIND_FORMS: dict[str, KindForm] = {k.kind: k for k in (
    # syntax groups 1/3/5/6 (no block scale)
    KindForm("f16", ()),
    KindForm("tf32", ()),
    KindForm("f8f6f4", ()),
    KindForm("i8", ()),
    # syntax groups 2/4 (block scaled). Table 54: mxf8f6f4 takes 1X (= block32); mxf4 takes 2X
    # (= block32); mxf4nvf4 takes 2X (= block32) or 4X (= block16). An omitted vector size is the
    # default (.block32 for mxf4, per the text; ptxas reads it the same for mxf8f6f4); mxf4nvf4
    # "must be explicitly specified".
    KindForm("mxf8f6f4", ("scale_vec::1X", "block32", "implicit")),
    KindForm("mxf4", ("scale_vec::2X", "block32", "implicit")),
    KindForm("mxf4nvf4", ("scale_vec::2X", "scale_vec::4X", "block16", "block32")),
)}

BLOCK_SCALE_CHOICES = ("block16", "block32", "scale_vec::1X", "scale_vec::2X", "scale_vec::4X", "implicit")

# Where each operand of tcgen05.mma lives (9.7.16.10.9.1 operands: [d-tmem]; A as a-desc (shared memory) or
# [a-tmem]; b-desc (shared memory); [scale-A-tmem], [scale-B-tmem]). Spaces as the DSL names them.
OPERAND_SPACES = {"A": ("smem", "tmem"), "B": ("smem",), "D": ("tmem",)}
SCALE_OPERAND_SPACES = {"SFA": ("tmem",), "SFB": ("tmem",)}

# Collector buffer usage (9.7.16.10.9.1 ".collector_usage" table: buffer ::a for tcgen05.mma{.sp};
# 9.7.16.10.9.3: buffers ::b0..::b3 for tcgen05.mma.ws{.sp}).
COLLECTOR_OPS = ("fill", "use", "lastuse", "discard")
COLLECTOR_BUFFERS = {False: ("a",), True: ("b0", "b1", "b2", "b3")}     # keyed by `ws`
# "It is illegal to specify either of .collector::a::use or .collector::a::fill along with .ashift"
ASHIFT_FORBIDDEN_COLLECTORS = ("a::use", "a::fill")

# 9.7.16.10.9.1 table "Size of the vector disable-output-lane": 4 for ::1, 8 for ::2.
DISABLE_LANE_REGS = {1: 4, 2: 8}
SCALE_INPUT_D_RANGE = range(0, 16)      # "The valid range of values for argument scale-input-d is [0, 15]"


def _join_or(items: Sequence[str]) -> str:
    items = list(items)
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " or " + items[-1]


def _is_literal(operand: str) -> bool:
    text = operand.strip().lower()
    return text.lstrip("-").isdigit() or text.startswith("0x")


def _tmem(operand: str) -> str:
    """A TMEM address operand is written in brackets ([d-tmem], [a-tmem], ...)."""
    operand = operand.strip()
    return operand if operand.startswith("[") else f"[{operand}]"


@dataclass(frozen=True)
class Tcgen05Mma:
    """One `tcgen05.mma{.ws}{.sp}` form (9.7.16.10.9.1-4), validated on construction.

    `block_scale`: None for f16/tf32/f8f6f4/i8; for mx kinds one of "block16", "block32",
    "scale_vec::1X/2X/4X" or "implicit" (the qualifier `.block_scale` with no vector size).
    `collector`: None (ISA default ::discard) or "a::OP" (non-ws) / "bN::OP" (ws), OP in fill, use,
    lastuse, discard.
    `k96`: the K = 96 shape of mxf4/mxf4nvf4 (instruction descriptor bit 31): not visible in the
    instruction text, but it restricts the form and the target (Table 60: "K shape value 96: 8.8 sm_103a").
    Not checked here (they live in the instruction descriptor, see tcgen05_kinds / descriptors.instr):
    `.ashift` needs M = 128 or 256 (`check_ashift_m`), the other shape rules.
    """

    kind: str
    cta_group: int = 1
    sparse: bool = False
    ws: bool = False
    a_in_tmem: bool = False
    block_scale: str | None = None
    collector: str | None = None
    ashift: bool = False
    disable_output_lane: bool = False
    scale_input_d: bool = False
    zero_column_mask: bool = False
    k96: bool = False

    def __post_init__(self) -> None:
        kf = KIND_FORMS.get(self.kind)
        if kf is None:
            raise SpecError(f"unknown tcgen05 kind '{self.kind}'", FIELD["kind"],
                            hint="kinds: " + ", ".join(KIND_FORMS))
        if self.cta_group not in DISABLE_LANE_REGS:
            raise SpecError(f"cta_group must be 1 or 2, not {self.cta_group}", FIELD["cta_group"])
        if self.ws:
            # 9.7.16.10.9.3 syntax: `tcgen05.mma.ws.cta_group::1` only; .kind in f16/tf32/f8f6f4/i8.
            if self.cta_group != 1:
                raise SpecError("tcgen05.mma.ws exists only with .cta_group::1", FIELD["ws"],
                                hint="drop .ws or use cta_group 1")
            if not kf.ws:
                raise SpecError(f"tcgen05.mma.ws does not take .kind::{self.kind}", FIELD["ws"],
                                hint="ws kinds: " + ", ".join(k for k, f in KIND_FORMS.items() if f.ws))
        self._check_block_scale(kf)
        self._check_collector()
        self._check_ashift(kf)
        self._check_operands(kf)
        self._check_k96()

    def _check_block_scale(self, kf: KindForm) -> None:
        field = FIELD["block_scale"]
        if not kf.block_scaled:
            if self.block_scale is not None:
                raise SpecError(f".block_scale is only for the mx kinds, not .kind::{self.kind}", field)
            return
        if self.block_scale is None:
            raise SpecError(f".kind::{self.kind} needs .block_scale and scale-factor operands", field,
                            hint="choose one of: " + ", ".join(kf.block_vector_sizes))
        if self.block_scale not in BLOCK_SCALE_CHOICES:
            raise SpecError(f"unknown block-scale vector size '{self.block_scale}'", field,
                            hint="one of: " + ", ".join(BLOCK_SCALE_CHOICES))
        if self.block_scale not in kf.block_vector_sizes:
            if self.block_scale == "implicit":
                msg = f".kind::{self.kind} requires an explicit .scale_vectorsize"
            else:
                msg = f".{self.block_scale} is not a valid vector size for .kind::{self.kind} (Table 54)"
            raise SpecError(msg, field, hint="valid: " + ", ".join(kf.block_vector_sizes))

    def _check_collector(self) -> None:
        if self.collector is None:
            return
        buffers = COLLECTOR_BUFFERS[self.ws]
        buf, sep, op = self.collector.partition("::")
        where = "tcgen05.mma.ws" if self.ws else "tcgen05.mma"
        legal = [f"{b}::{o}" for b in buffers for o in COLLECTOR_OPS]
        if not sep or op not in COLLECTOR_OPS or buf not in ("a", "b0", "b1", "b2", "b3"):
            raise SpecError(f"unknown collector usage '{self.collector}'", FIELD["collector"],
                            hint="one of: " + ", ".join(legal))
        if buf not in buffers:
            other = "::b0..::b3 (B buffers) belong to .ws" if not self.ws else "::a (A buffer) is not for .ws"
            raise SpecError(f".collector::{self.collector} is not allowed on {where}; {other}",
                            FIELD["collector"], hint="one of: " + ", ".join(legal))

    def _check_ashift(self, kf: KindForm) -> None:
        if not self.ashift:
            return
        field = FIELD["ashift"]
        # .ashift appears only in syntax groups 3 and 6 (non-ws, no block scale), always with [a-tmem].
        if self.ws:
            raise SpecError(".ashift is not available on tcgen05.mma.ws", field)
        if kf.block_scaled:
            raise SpecError(f".ashift cannot be used with block scaling (.kind::{self.kind})", field)
        if not self.a_in_tmem:
            raise SpecError(".ashift shifts rows of A in Tensor Memory: A must be in TMEM", field,
                            hint="put operand A in tmem, or drop ashift")
        if self.collector in ASHIFT_FORBIDDEN_COLLECTORS:
            raise SpecError(f".collector::{self.collector} cannot be combined with .ashift",
                            FIELD["collector"], hint="use a::lastuse or a::discard with ashift")

    def _check_operands(self, kf: KindForm) -> None:
        if self.disable_output_lane:
            # Syntax: only groups 1/3/5/6 (no block scale) list {disable-output-lane}; .ws lists none.
            if kf.block_scaled:
                raise SpecError("disable-output-lane is not allowed with block scaling",
                                FIELD["disable_output_lane"])
            if self.ws:
                raise SpecError("disable-output-lane is not allowed on tcgen05.mma.ws",
                                FIELD["disable_output_lane"])
        if self.scale_input_d:
            if not kf.scale_input_d:
                # ptxas 13.0 accepts it with .kind::i8; PTX allows only f16/tf32.
                raise SpecError(f"scale-input-d is only valid for .kind::f16 and .kind::tf32, "
                                f"not .kind::{self.kind}", FIELD["scale_input_d"])
            if self.ws:
                raise SpecError("scale-input-d is not an operand of tcgen05.mma.ws",
                                FIELD["scale_input_d"])
        if self.zero_column_mask and not self.ws:
            raise SpecError("a zero-column mask descriptor is only an operand of tcgen05.mma.ws",
                            FIELD["zero_column_mask"], hint="set ws, or drop the zero columns")

    def _check_k96(self) -> None:
        if not self.k96:
            return
        # K96 (tcgen05_kinds): dense mxf4/mxf4nvf4 with cta_group::2 (M = 256) only; the vector-size aliases
        # of 9.7.16.10.9.1 define scale_vec::NX only "when K = 64 or 128", so K = 96 takes .block16/.block32
        # (or mxf4's omitted size, which defaults to .block32).
        field = FIELD["k96"]
        if self.kind not in _K96.kinds:
            raise SpecError(f"K = {_K96.k} exists only for .kind::mxf4 and .kind::mxf4nvf4, not .kind::{self.kind}",
                            field)
        if self.cta_group != _K96.cta_group or self.sparse != _K96.sparse:
            raise SpecError(f"K = {_K96.k} exists only for dense cta_group::{_K96.cta_group} "
                            f"(M = {'/'.join(map(str, _K96.ms))}) MMAs (PTX Table 39); {_K96.outside_note()}", field)
        if self.block_scale not in _K96.block_scales:
            raise SpecError(f"K = {_K96.k} needs .block16 or .block32, not .{self.block_scale}", FIELD["block_scale"],
                            hint=".scale_vec::NX aliases are defined only for K = 64 or 128")

    # ----------------------------------------------------------------------------------------------
    def check_ashift_m(self, m: int) -> None:
        """9.7.16.10.9.1: "Qualifier .ashift is only allowed with M = 128 or M = 256"."""
        if self.ashift and m not in (128, 256):
            raise SpecError(f".ashift needs M = 128 or 256, not {m}", "shape.M")

    def opcode(self) -> str:
        """Qualifiers in ISA syntax order:
        tcgen05.mma{.ws}{.sp}.cta_group::N.kind::K{.block_scale{.VEC}}{.ashift}{.collector::B::OP}."""
        parts = ["tcgen05.mma"]
        if self.ws:
            parts.append("ws")
        if self.sparse:
            parts.append("sp")
        parts += [f"cta_group::{self.cta_group}", f"kind::{self.kind}"]
        if self.block_scale is not None:
            parts.append("block_scale")
            if self.block_scale != "implicit":
                parts.append(self.block_scale)
        if self.ashift:
            parts.append("ashift")
        if self.collector is not None:
            parts.append(f"collector::{self.collector}")
        return ".".join(parts)

    def render(self, d: str, a: str, b: str, idesc: str, enable_input_d: str, meta: str | None = None,
               scale_a: str | None = None, scale_b: str | None = None,
               disable_lanes: Sequence[str] | None = None, scale_input_d: int | None = None,
               zcm: str | None = None) -> str:
        """The whole instruction. Operand order (9.7.16.10.9.1-4):
        [d], A, b-desc, [sp-meta], idesc, [scale-A], [scale-B], {disable-output-lane},
        enable-input-d, scale-input-d, zero-column-mask-desc."""
        def need(flag: bool, value: object, name: str) -> None:
            if flag and value is None:
                raise SpecError(f"{self.opcode()} needs the {name} operand")
            if not flag and value is not None:
                raise SpecError(f"{self.opcode()} takes no {name} operand")

        kf = KIND_FORMS[self.kind]
        need(self.sparse, meta, "sparse-metadata")
        need(kf.block_scaled, scale_a, "scale-A")
        need(kf.block_scaled, scale_b, "scale-B")
        need(self.disable_output_lane, disable_lanes, "disable-output-lane")
        need(self.scale_input_d, scale_input_d, "scale-input-d")
        need(self.zero_column_mask, zcm, "zero-column-mask")
        # enable-input-d is a predicate; ptxas also takes a literal 1 - PTX does not.
        if _is_literal(enable_input_d):
            raise SpecError(f"enable-input-d must be a predicate register, not '{enable_input_d}'")
        ops = [_tmem(d), _tmem(a) if self.a_in_tmem else a, b]
        if meta is not None:
            ops.append(_tmem(meta))
        ops.append(idesc)
        if scale_a is not None:
            ops += [_tmem(scale_a), _tmem(scale_b)]
        if disable_lanes is not None:
            want = DISABLE_LANE_REGS[self.cta_group]
            if len(disable_lanes) != want:
                raise SpecError(f"disable-output-lane needs {want} registers with cta_group::"
                                f"{self.cta_group}, got {len(disable_lanes)}",
                                FIELD["disable_output_lane"])
            ops.append("{" + ", ".join(disable_lanes) + "}")
        ops.append(enable_input_d)
        if scale_input_d is not None:
            if isinstance(scale_input_d, bool) or not isinstance(scale_input_d, int) \
                    or scale_input_d not in SCALE_INPUT_D_RANGE:
                raise SpecError(f"scale-input-d must be an immediate in [0, 15], not {scale_input_d!r}",
                                FIELD["scale_input_d"])
            ops.append(str(scale_input_d))
        if zcm is not None:
            # ptxas takes an immediate here too; PTX: a 64-bit register.
            if _is_literal(zcm):
                raise SpecError(f"the zero-column mask descriptor must be a .b64 register, not '{zcm}'",
                                FIELD["zero_column_mask"])
            ops.append(zcm)
        return f"{self.opcode()} {', '.join(ops)};"

    def features(self) -> list[Feature]:
        """The rows of FEATURES this form uses (always starting with the base instruction)."""
        return [f for f in FEATURES if f.applies(self)]

    def requirements(self) -> Requirement:
        feats = self.features()
        targets = frozenset.intersection(*(f.targets for f in feats))
        return Requirement(max(f.min_ptx for f in feats), targets)


# --------------------------------------------------------------------------------------------------
# Version / target data table.


@dataclass(frozen=True)
class Requirement:
    min_ptx: Version               # the newest feature's PTX minimum (a target may need more)
    targets: frozenset[str]

    def min_ptx_on(self, target: str) -> Version:
        return max(self.min_ptx, TARGETS[target].min_ptx)


def _family(name: str) -> frozenset[str]:
    """Targets taking a feature PTX lists for family target `name` (e.g. sm_100f -> sm_100a/f,
    sm_103a/f): same family, SM at least as high, an `a` or `f` suffix."""
    base = TARGETS[name]
    return frozenset(t.name for t in TARGETS.values()
                     if t.family == base.family and t.sm >= base.sm and t.suffix in ("a", "f"))


def _sorted_targets(names: Iterable[str]) -> list[str]:
    order = list(TARGETS)
    return sorted(names, key=order.index)


# Table 60 rows "8.6 sm_100a / 8.8 sm_100f / 9.0 sm_110f" (base tcgen05.mma, .sp, .ws, .ws.sp and the
# supporting instructions alloc/dealloc/relinquish/ld/st/wait/cp/fence/commit).
TCGEN05_TARGETS = frozenset({"sm_100a"}) | _family("sm_100f") | _family("sm_110f")
SCALE_VEC_HINT = ("use .block32 (= .scale_vec::1X for mxf8f6f4, = .scale_vec::2X for mxf4/mxf4nvf4) or "
                  ".block16 (= .scale_vec::4X, mxf4nvf4): the aliases of 9.7.16.10.9.1, PTX 8.8+, "
                  "also on family targets")


@dataclass(frozen=True)
class Feature:
    name: str                                  # as the messages say it
    applies: Callable[[Tcgen05Mma], bool]
    min_ptx: Version
    targets: frozenset[str]
    source: str
    hint: str | None = None


FEATURES: tuple[Feature, ...] = (
    Feature("tcgen05.mma", lambda f: True, (8, 6), TCGEN05_TARGETS,
            "9.7.16.10.9.1-4 PTX/Target ISA notes; Table 60 'Base variant'"),
    Feature("kind::i8", lambda f: f.kind == "i8", (8, 6), frozenset({"sm_100a", "sm_110a"}),
            "Target ISA notes: '.kind::i8 is supported on sm_100a, sm_101a (= sm_110a)'; Table 60; "
            "ptxas rejects sm_100f/sm_103a/sm_103f/sm_110f"),
    Feature("kind::mxf4nvf4", lambda f: f.kind == "mxf4nvf4", (8, 7), TCGEN05_TARGETS,
            "PTX ISA notes: '.kind::mxf4nvf4 introduced in PTX ISA version 8.7'; 13.5 (8.7 notes)"),
    Feature("scale-input-d", lambda f: f.scale_input_d, (8, 6), frozenset({"sm_100a"}) | _family("sm_100f"),
            "Target ISA notes: 'scale-input-d requires sm_100a and is supported on sm_100f or higher "
            "in the same family from 8.8'; Table 60 (no sm_110 entry; ptxas rejects sm_110a/f)",
            hint="scale D separately, or target sm_100a/sm_100f/sm_103a/sm_103f"),
    Feature("scale_vec::1X", lambda f: f.block_scale == "scale_vec::1X", (8, 6), frozenset({"sm_100a"}),
            "Target ISA notes: '.scale_vec::1X/2X/4X requires sm_100a'; Table 60. ptxas 13.0 also "
            "takes sm_103a/sm_110a - not documented, so not allowed here",
            hint=SCALE_VEC_HINT),
    Feature("scale_vec::2X", lambda f: f.block_scale == "scale_vec::2X", (8, 6), frozenset({"sm_100a"}),
            "as scale_vec::1X", hint=SCALE_VEC_HINT),
    Feature("scale_vec::4X", lambda f: f.block_scale == "scale_vec::4X", (8, 7), frozenset({"sm_100a"}),
            "as scale_vec::1X; 13.5: '.scale_vec::4X' added in PTX 8.7", hint=SCALE_VEC_HINT),
    Feature("block16", lambda f: f.block_scale == "block16", (8, 8), _family("sm_100f") | _family("sm_110f"),
            "PTX ISA notes: '.block16/.block32 introduced in 8.8'; Target ISA notes: 'requires "
            "sm_100f or sm_110f'"),
    Feature("block32", lambda f: f.block_scale == "block32", (8, 8), _family("sm_100f") | _family("sm_110f"),
            "as block16"),
    Feature("block_scale without a vector size (= block32)", lambda f: f.block_scale == "implicit", (8, 8),
            _family("sm_100f") | _family("sm_110f"),
            "the omitted size defaults to .block32 (9.7.16.10.9.1); ptxas 13.0 then demands PTX 8.8 "
            "('.block32' requires PTX ISA .version 8.8)",
            hint="write scale_vec::1X (mxf8f6f4) / 2X (mxf4) for PTX 8.6"),
    Feature("sparse kind::mxf4/mxf4nvf4", lambda f: f.sparse and f.kind in ("mxf4", "mxf4nvf4"), (8, 6),
            frozenset({"sm_100a", "sm_103a", "sm_110a"}),
            "Table 60 'tcgen05.mma.sp: Kind .kind::mxf4nvf4 and .kind::mxf4: 8.6 sm_100a, 8.8 sm_103a, "
            "9.0 sm_110a'; Table 61 excludes them from family targets; ptxas agrees"),
    Feature("K = 96", lambda f: f.k96, _K96.min_ptx, frozenset(_K96.targets),
            "Table 60 'K shape value 96: 8.8 sm_103a'; 13.4 (8.8 notes). ptxas cannot check it (K is in "
            "the instruction descriptor)"),
)


def _target(name: str):
    target = TARGETS.get(name)
    if target is None:
        raise SpecError(f"unknown target '{name}'", FIELD["target"],
                        hint="tcgen05 targets: " + ", ".join(_sorted_targets(TCGEN05_TARGETS)))
    return target


def check_target(form: Tcgen05Mma, target_name: str, ptx_version: Version | None = None) -> None:
    """Raise SpecError(field="target") when `form` cannot run on `target_name`, naming the feature and
    targets that can take the whole form; SpecError(field="ptx") when `ptx_version` is too old."""
    target = _target(target_name)
    feats = form.features()
    whole = frozenset.intersection(*(f.targets for f in feats))
    for feat in feats:
        if target.name not in feat.targets:
            alternatives = _sorted_targets(whole or feat.targets)
            raise SpecError(f"{feat.name} is not available on {target.name}; use {_join_or(alternatives)}",
                            FIELD["target"], hint=feat.hint)
    if ptx_version is not None:
        for feat in feats:
            need = max(feat.min_ptx, target.min_ptx)
            if ptx_version < need:
                raise SpecError(f"{feat.name} on {target.name} needs PTX ISA {format_version(need)}; "
                                f".version {format_version(ptx_version)} is too old",
                                FIELD["ptx_version"], hint=f"use .version {format_version(need)} or newer")


def infer_ptx_version(forms: Iterable[Tcgen05Mma], target: str) -> Version:
    """The lowest PTX ISA version taking every form on `target` (checking the target too)."""
    version = _target(target).min_ptx
    for form in forms:
        check_target(form, target)
        version = max(version, form.requirements().min_ptx)
    return version


def all_forms() -> list[Tcgen05Mma]:
    """Every valid form (each field combination `Tcgen05Mma` accepts), in a fixed order."""
    import itertools

    forms = []
    for kind, kf in KIND_FORMS.items():
        for cta_group, ws, sparse, a_in_tmem, ashift, dol, sid, zcm, k96 in itertools.product(
                (1, 2), (False, True), (False, True), (False, True), (False, True), (False, True),
                (False, True), (False, True), (False, True)):
            collectors = [None] + [f"{b}::{o}" for b in COLLECTOR_BUFFERS[ws] for o in COLLECTOR_OPS]
            for block_scale in (kf.block_vector_sizes or (None,)):
                for collector in collectors:
                    try:
                        forms.append(Tcgen05Mma(kind, cta_group, sparse, ws, a_in_tmem, block_scale,
                                                collector, ashift, dol, sid, zcm, k96))
                    except SpecError:
                        pass
    return forms


# --------------------------------------------------------------------------------------------------
# Supporting instructions (PTX 9.7.16.7-9.7.16.9 and 9.7.16.11-12). All are PTX 8.6 on the
# targets of Table 60 row "tcgen05.ld, tcgen05.st, tcgen05.wait, tcgen05.cp, tcgen05.fence,
# tcgen05.commit" / "tcgen05.alloc, tcgen05.dealloc, tcgen05.relinquish_alloc_permit": the same set as
# base tcgen05.mma.

SUPPORT_REQUIREMENT = Requirement((8, 6), TCGEN05_TARGETS)

# tcgen05.ld/st: registers per .num (9.7.16.8.3 table "num x shape"): factor per shape and the
# largest .num each shape takes (x128 only for 32-bit-per-lane shapes, 16x128b up to x64, 16x256b x32).
LDST_SHAPES = {"32x32b": (1, 128), "16x64b": (1, 128), "16x32bx2": (1, 128),
               "16x128b": (2, 64), "16x256b": (4, 32)}
LDST_NUMS = (1, 2, 4, 8, 16, 32, 64, 128)

# tcgen05.cp (9.7.16.8.2): shape -> legal multicast qualifiers (None = none allowed); ptxas 13.0:
# 64x128b and 32x128b require their "warptype", the others reject one.
CP_SHAPES = {"128x256b": (None,), "4x256b": (None,), "128x128b": (None,),
             "64x128b": ("warpx2::02_13", "warpx2::01_23"), "32x128b": ("warpx4",)}
CP_DECOMPRESS = (None, "b8x16.b6x16_p32", "b8x16.b4x16_p64")   # .dst_fmt.src_fmt
# tcgen05.cp shape -> (rows of the shared-memory source, 32-bit TMEM columns written): .RxWb copies R rows of
# W bits, one row per TMEM lane (9.7.16.8.2); the warpx multicasts repeat the rows in other lane groups
CP_GEOMETRY = {"128x256b": (128, 8), "4x256b": (4, 8), "128x128b": (128, 4), "64x128b": (64, 4), "32x128b": (32, 4)}


def _check_cta_group(cta_group: int) -> None:
    if cta_group not in (1, 2):
        raise SpecError(f"cta_group must be 1 or 2, not {cta_group}", FIELD["cta_group"])


def _check_ncols(ncols: int | str) -> None:
    # 9.7.16.7.1: "nCols ... must be a power of 2 ... in the range [32, 512]" (ptxas enforces both).
    if isinstance(ncols, int) and not (32 <= ncols <= 512 and ncols & (ncols - 1) == 0):
        raise SpecError(f"TMEM allocation of {ncols} columns: must be a power of two in [32, 512]")


def tcgen05_alloc(dst_smem: str, ncols: int | str, cta_group: int = 1) -> str:
    """Warp-collective TMEM allocation; the TMEM address is written to shared memory at [dst_smem]."""
    _check_cta_group(cta_group)
    _check_ncols(ncols)
    return f"tcgen05.alloc.cta_group::{cta_group}.sync.aligned.shared::cta.b32 [{dst_smem}], {ncols};"


def tcgen05_dealloc(taddr: str, ncols: int | str, cta_group: int = 1) -> str:
    _check_cta_group(cta_group)
    _check_ncols(ncols)
    return f"tcgen05.dealloc.cta_group::{cta_group}.sync.aligned.b32 {taddr}, {ncols};"


def tcgen05_relinquish_alloc_permit(cta_group: int = 1) -> str:
    _check_cta_group(cta_group)
    return f"tcgen05.relinquish_alloc_permit.cta_group::{cta_group}.sync.aligned;"


def tcgen05_commit(mbar: str, cta_group: int = 1, cta_mask: str | None = None) -> str:
    """Arrive once on the mbarrier at [mbar] when this thread's prior tcgen05 async ops complete
    (9.7.16.12.1). `cta_mask` (a 16-bit register) multicasts the arrive to the CTAs it names
    (`.multicast::cluster`), as a cta_group::2 kernel does for both CTAs of the pair."""
    _check_cta_group(cta_group)
    base = f"tcgen05.commit.cta_group::{cta_group}.mbarrier::arrive::one.shared::cluster"
    if cta_mask is None:
        return f"{base}.b64 [{mbar}];"
    return f"{base}.multicast::cluster.b64 [{mbar}], {cta_mask};"


def tcgen05_ldst_regs(shape: str, num: int) -> int:
    """Registers per thread of tcgen05.ld/st .shape.xnum (unchanged by .pack::16b / .unpack::16b)."""
    if shape not in LDST_SHAPES:
        raise SpecError(f"unknown tcgen05.ld/st shape '{shape}'", hint="one of: " + ", ".join(LDST_SHAPES))
    factor, max_num = LDST_SHAPES[shape]
    if num not in LDST_NUMS or num > max_num:
        raise SpecError(f".{shape} takes .x1 .. .x{max_num}, not .x{num}")
    return factor * num


def _ldst_tail(shape: str, half_split_offset: int | None) -> str:
    if (shape == "16x32bx2") != (half_split_offset is not None):
        raise SpecError("immHalfSplitoff is required exactly for the .16x32bx2 shape")
    return "" if half_split_offset is None else f", {half_split_offset}"


def _regs(regs: Sequence[str], shape: str, num: int) -> str:
    want = tcgen05_ldst_regs(shape, num)
    if len(regs) != want:
        raise SpecError(f".{shape}.x{num} moves {want} registers per thread, got {len(regs)}")
    return "{" + ", ".join(regs) + "}"


def tcgen05_ld(regs: Sequence[str], taddr: str, shape: str, num: int, pack_16b: bool = False,
               half_split_offset: int | None = None) -> str:
    """Asynchronous TMEM -> registers load (9.7.16.8.3); wait with tcgen05_wait_ld() before use."""
    vec = _regs(regs, shape, num)
    pack = ".pack::16b" if pack_16b else ""
    return (f"tcgen05.ld.sync.aligned.{shape}.x{num}{pack}.b32 {vec}, [{taddr}]"
            f"{_ldst_tail(shape, half_split_offset)};")


def tcgen05_st(taddr: str, regs: Sequence[str], shape: str, num: int, unpack_16b: bool = False,
               half_split_offset: int | None = None) -> str:
    """Asynchronous registers -> TMEM store (9.7.16.8.4); wait with tcgen05_wait_st()."""
    vec = _regs(regs, shape, num)
    unpack = ".unpack::16b" if unpack_16b else ""
    return (f"tcgen05.st.sync.aligned.{shape}.x{num}{unpack}.b32 [{taddr}]"
            f"{_ldst_tail(shape, half_split_offset)}, {vec};")


def tcgen05_wait_ld() -> str:
    return "tcgen05.wait::ld.sync.aligned;"


def tcgen05_wait_st() -> str:
    return "tcgen05.wait::st.sync.aligned;"


def tcgen05_fence_before_thread_sync() -> str:
    return "tcgen05.fence::before_thread_sync;"


def tcgen05_fence_after_thread_sync() -> str:
    return "tcgen05.fence::after_thread_sync;"


def tcgen05_cp(taddr: str, smem_desc: str, shape: str, cta_group: int = 1, multicast: str | None = None,
               decompress: str | None = None) -> str:
    """Asynchronous shared memory -> TMEM copy (9.7.16.8.2), e.g. block-scale factors
    (`32x128b` + `warpx4` copies 32 rows x 16 B to all four 32-lane quarters) or sparse metadata.
    `smem_desc` is a shared-memory matrix descriptor (9.7.16.4.1). Ordered before a later
    tcgen05.mma issued by the same thread (tcgen05 pipelined pair, 9.7.16.6)."""
    _check_cta_group(cta_group)
    if shape not in CP_SHAPES:
        raise SpecError(f"unknown tcgen05.cp shape '{shape}'", hint="one of: " + ", ".join(CP_SHAPES))
    if multicast not in CP_SHAPES[shape]:
        legal = ", ".join(m or "none" for m in CP_SHAPES[shape])
        raise SpecError(f"tcgen05.cp .{shape} takes multicast {legal}, not {multicast or 'none'}")
    if decompress not in CP_DECOMPRESS:
        raise SpecError(f"unknown tcgen05.cp decompression '{decompress}'",
                        hint="one of: " + ", ".join(d for d in CP_DECOMPRESS if d))
    parts = ["tcgen05.cp", f"cta_group::{cta_group}", shape]
    parts += [q for q in (multicast, decompress) if q]
    return f"{'.'.join(parts)} [{taddr}], {smem_desc};"
