"""`epilogue-lowering`: a tile's `epilogue` statement -> the per-element PTX its kernel applies to the
accumulators before D is stored: `D = convert(scale * act(alpha*(A*B) + beta*C + bias))` in D's type.

The plan is printed as `tilec.epilogue_plan` (compiler/ir.py): where C enters (`c`), the kernel
parameters the epilogue adds (`params`), and the steps, each a list of PTX instruction templates over
`{x}` (the accumulator element, f32), `{a}` (the raw s32 accumulator `to_f32` converts), `{c}` (its element
of C), `{b}` (its bias element, f32 once loaded), `{t0}`..`{t2}` (f32 scratch) and `{alpha}` / `{beta}` /
`{scale}` (the f32 parameters). The kernel emitters (compiler/ptx/epilogue.py) substitute registers and
emit them verbatim; the last steps convert into D's type: `convert` names the cvt of an element pair (2-byte
D), or packs four elements into a word and `convert_pair` two into its low half (1-byte D). Which
(accumulator, D, C, bias type, scale) combinations are legal, and the conversions' PTX, are the table of
compiler/isa/epilogue_outputs.py; `check_epilogue` blames the field that breaks it.

Numbers: alpha and beta literals are rounded to f32 (PTX ISA 5.2.4: an f32 immediate is `0f` and the
8 hex digits of its IEEE binary32 bits) through Python's f64, once, here. alpha = beta = 1 with C keeps
C in the accumulators (loaded before the first MMA, which adds it: scale-d = 1); any other alpha or beta
reads C beside the accumulators in the epilogue. beta = 0 does not read C (the BLAS convention), so the
kernel then takes no `c`.

Activations (f32, per element; PTX ISA 9.7.4 floating-point instructions):
- relu: max(x, 0) (`max.f32`).
- silu: x * sigmoid(x) = x / (1 + e^-x) = x * rcp(1 + 2^(-x*log2 e)) (`ex2.approx.ftz.f32`, PTX ISA
  9.7.4.11; `rcp.approx.ftz.f32`, 9.7.4.8). Large |x| saturate correctly: 2^+inf = inf, rcp(inf) = 0.
- gelu_tanh: 0.5*x*(1 + tanh(sqrt(2/pi)*(x + 0.044715*x^3))) (Hendrycks & Gimpel 2016, eq. for the tanh
  approximation), with `tanh.approx.f32` (PTX ISA 9.7.4.13, sm_75+, PTX 7.0).
- gelu_erf: 0.5*x*(1 + erf(x/sqrt 2)), erf by Abramowitz & Stegun 7.1.26: for z >= 0,
  erf(z) = 1 - (a1 t + a2 t^2 + a3 t^3 + a4 t^4 + a5 t^5) e^(-z^2), t = 1/(1 + p z), |error| <= 1.5e-7,
  p = 0.3275911, a1..a5 = 0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429; erf is odd
  (`copysign.f32`, 9.7.4.2, gives the result x's sign).
Conversion (PTX ISA 9.7.9.21 cvt): f16 / bf16 by `cvt.rn.{f16x2,bf16x2}.f32` (round to nearest even);
s8 and e4m3 as compiler/isa/epilogue_outputs.py says (after the output scale, `scale_out`).
"""
from __future__ import annotations

import struct

from ..diagnostics import SpecError
from ..ir import Op
from ..isa.epilogue_outputs import ACC_TO_F32, BIAS_TYPES, C_IN_EPILOGUE, DEFAULT_BIAS_TYPE, OUTPUTS
from ..spec import EPILOGUE_PARAM, TileSpec
from . import Pass, PassContext
from .derive import tile_loc, tile_spec

INTEGER_A = ("s8", "u8", "s4", "u4")


def f32_imm(value: float) -> str:
    """A PTX f32 immediate: 0f and the IEEE binary32 bits (PTX ISA 5.2.4, floating-point constants)."""
    return "0f%08X" % struct.unpack("<I", struct.pack("<f", value))[0]


ONE, HALF, ZERO = f32_imm(1.0), f32_imm(0.5), f32_imm(0.0)
NEG_LOG2E = f32_imm(-1.4426950408889634)          # -log2(e): e^v = 2^(v*log2 e)

ACTIVATIONS: dict[str, tuple[str, ...]] = {
    "relu": (f"max.f32 {{x}}, {{x}}, {ZERO}",),
    "silu": (f"mul.f32 {{t0}}, {{x}}, {NEG_LOG2E}",          # -x log2 e
             "ex2.approx.ftz.f32 {t0}, {t0}",                 # e^-x
             f"add.f32 {{t0}}, {{t0}}, {ONE}",
             "rcp.approx.ftz.f32 {t0}, {t0}",                 # sigmoid(x)
             "mul.f32 {x}, {x}, {t0}"),
    "gelu_tanh": ("mul.f32 {t0}, {x}, {x}",
                  f"fma.rn.f32 {{t0}}, {{t0}}, {f32_imm(0.044715)}, {ONE}",
                  "mul.f32 {t0}, {t0}, {x}",                  # x + 0.044715 x^3
                  f"mul.f32 {{t0}}, {{t0}}, {f32_imm(0.7978845608028654)}",   # * sqrt(2/pi)
                  "tanh.approx.f32 {t0}, {t0}",
                  f"fma.rn.f32 {{t0}}, {{t0}}, {HALF}, {HALF}",
                  "mul.f32 {x}, {x}, {t0}"),
    "gelu_erf": ("abs.f32 {t0}, {x}",
                 f"mul.f32 {{t0}}, {{t0}}, {f32_imm(0.7071067811865476)}",    # z = |x| / sqrt 2
                 f"fma.rn.f32 {{t1}}, {{t0}}, {f32_imm(0.3275911)}, {ONE}",
                 "rcp.approx.ftz.f32 {t1}, {t1}",                            # t = 1 / (1 + p z)
                 f"fma.rn.f32 {{t2}}, {{t1}}, {f32_imm(1.061405429)}, {f32_imm(-1.453152027)}",
                 f"fma.rn.f32 {{t2}}, {{t2}}, {{t1}}, {f32_imm(1.421413741)}",
                 f"fma.rn.f32 {{t2}}, {{t2}}, {{t1}}, {f32_imm(-0.284496736)}",
                 f"fma.rn.f32 {{t2}}, {{t2}}, {{t1}}, {f32_imm(0.254829592)}",
                 "mul.f32 {t2}, {t2}, {t1}",                                 # a1 t + ... + a5 t^5
                 "mul.f32 {t0}, {t0}, {t0}",
                 f"mul.f32 {{t0}}, {{t0}}, {NEG_LOG2E}",
                 "ex2.approx.ftz.f32 {t0}, {t0}",                            # e^(-z^2)
                 "mul.f32 {t2}, {t2}, {t0}",
                 f"sub.f32 {{t2}}, {ONE}, {{t2}}",                           # erf(z)
                 "copysign.f32 {t2}, {x}, {t2}",                             # erf(x / sqrt 2)
                 f"fma.rn.f32 {{t2}}, {{t2}}, {HALF}, {HALF}",
                 "mul.f32 {x}, {x}, {t2}"),
}
SCRATCH = 3          # {t0}..{t2}


def accumulator_type(spec: TileSpec) -> str:
    """The accumulator type: the epilogue's acc=, else C's type, else (no epilogue) D's, else the
    MMA's natural one (s32 for integer A, f32 otherwise)."""
    e, ops = spec.epilogue, spec.operands
    if e is not None and e.acc is not None:
        return e.acc
    if "C" in ops:
        return ops["C"].dtype
    if e is None and "D" in ops:
        return ops["D"].dtype
    return "s32" if ops["A"].dtype in INTEGER_A else "f32"


def _value(text: str | None) -> float | None:
    return None if text is None or text == EPILOGUE_PARAM else float(text)


def check_epilogue(spec: TileSpec, target: str | None = None) -> None:
    """Combinations the epilogue cannot lower (SpecError on the field to blame), read from the one table of
    compiler/isa/epilogue_outputs.py: (input kind -> accumulator, D type, C type and where C enters, bias
    type, output scale, the target's conversions). Runs in `verify`, before the MMA form is looked up
    (check_epilogue_kernel: after)."""
    e, ops = spec.epilogue, spec.operands
    if e is None:
        return
    if spec.schedule is None:
        raise SpecError("the epilogue is lowered into the whole-GEMM kernels of a 'schedule' (mma=wgmma, or the "
                        "pipelined mma.sp kernel); a tile without one stores its fragments as they are", "epilogue",
                        "add e.g. 'schedule cta=128x256x64 warps=8x1 stages=4 mma=wgmma;' (target sm_90a)")
    natural = "s32" if ops["A"].dtype in INTEGER_A else "f32"
    if e.acc is not None and e.acc != natural:
        raise SpecError(f"acc={e.acc}: {ops['A'].dtype} products accumulate in {natural} in the GEMM kernels "
                        f"(PTX 9.7.15.6.3, 9.7.14.6: f32 for float, s32 for integer types)", "epilogue.acc",
                        f"write acc={natural} or leave acc= out")
    acc = natural
    if "C" in ops and ops["C"].dtype != acc:
        raise SpecError(f"C is read in the accumulator type {acc}, not {ops['C'].dtype}", "C.dtype",
                        f"write 'C: {acc} global;'")
    if e.beta is not None and "C" not in ops:
        raise SpecError("beta scales C, and this tile has no operand C", "epilogue.beta",
                        f"add 'C: {acc} global;' or drop beta=")
    out_name = ops["D"].dtype
    out = OUTPUTS.get(out_name)
    legal = [o.name for o in OUTPUTS.values() if acc in o.accumulators]
    if out is None or acc not in out.accumulators:
        raise SpecError(f"D type {out_name} is not an output of the epilogue on {acc} accumulators ({acc} -> "
                        f"{', '.join(legal)}; compiler/isa/epilogue_outputs.py)", "D.dtype",
                        f"write 'D: {legal[-1]} global;' or one of {', '.join(legal)}")
    if spec.engine == "tcgen05":
        _check_tcgen05_epilogue(spec, acc, out_name)
    problem = out.target_problem(target) if target else None
    if problem:
        here = [o for o in legal if not OUTPUTS[o].target_problem(target)]
        raise SpecError(f"D type {out_name}: {problem} (PTX 9.7.9.21 cvt)", "D.dtype",
                        f"use a target of sm_{out.min_sm} or newer, or another D type ({', '.join(here)})")
    if not out.arithmetic:
        for key, default in (("alpha", None), ("beta", None), ("bias", "none"), ("act", "none"), ("scale", None),
                             ("bias_type", None)):
            if getattr(e, key) != default:
                raise SpecError(f"{key}= on {out_name} output: the epilogue's arithmetic is f32, and an integer output "
                                "without saturation would wrap", f"epilogue.{key}",
                                "drop it, or write 'D: s8 global;' (saturating, with scale=)" if acc == "s32" else
                                "drop it")
    if e.scale is not None and not out.scaled:
        scaled = ", ".join(o.name for o in OUTPUTS.values() if o.scaled)
        raise SpecError(f"scale= is the quantisation scale of a narrow D ({scaled}); D is {out_name}",
                        "epilogue.scale", "fold the factor into alpha= (and beta=), or drop scale=")
    if e.bias_type is not None and e.bias == "none":
        raise SpecError("bias_type= without a bias", "epilogue.bias_type", "add bias=row or bias=col, or drop it")
    if not C_IN_EPILOGUE[acc] and c_entry(spec) == "epilogue":
        key = "epilogue.beta" if e.beta is not None else "epilogue.alpha"
        raise SpecError(f"C of {acc} accumulators enters the accumulators before the first MMA (alpha = beta = 1); "
                        f"the epilogue does not read it beside them", key,
                        "drop alpha= and beta=, or drop C (scale= scales the whole result)")


# D types the warp-specialised tcgen05 kernel's epilogue stores (compiler/ptx/tcgen05_ws_kernel.py: 4-byte
# elements as tcgen05.ld leaves them, 2-byte ones by the cvt pair); its staged chunks have no 1-byte packing
TCGEN05_OUTPUTS = {"f32": ("f32", "f16", "bf16"), "s32": ("s32",)}


def _check_tcgen05_epilogue(spec: TileSpec, acc: str, out: str) -> None:
    """What the tcgen05 epilogue does not lower of the table's legal combinations: 1-byte D, a 16-bit bias,
    C beside s32 accumulators (it reads C in f32, and its accumulators never start from C)."""
    e = spec.epilogue
    outs = TCGEN05_OUTPUTS[acc]
    if out not in outs:
        raise SpecError(f"D type {out} is not an output of the {acc} epilogue of the warp-specialised tcgen05 kernel "
                        f"({', '.join(outs)}); s8 and e4m3 with an output scale are lowered in the sparse wgmma and "
                        "pipelined mma.sp kernels", "D.dtype", f"write 'D: {outs[-1]} global;'"
                        + (" or f16 or f32" if acc == "f32" else ""))
    if e.bias_type not in (None, DEFAULT_BIAS_TYPE):
        raise SpecError(f"bias_type={e.bias_type}: the tcgen05 epilogue reads an f32 bias", "epilogue.bias_type",
                        "drop bias_type= (f32)")
    if acc == "s32" and "C" in spec.operands:
        raise SpecError("C beside s32 accumulators: the tcgen05 epilogue reads C in f32 (its accumulators start "
                        "from the first MMA, not from C)", "C", "drop C")


def check_epilogue_kernel(spec: TileSpec, form) -> None:
    """An epilogue needs a kernel that lowers it: the wgmma GEMM, or the pipelined mma.sp GEMM (a schedule
    of 2+ stages, runtime metadata and a form it serves: compiler/ptx/emission.py picks the same way)."""
    sc = spec.schedule
    if spec.epilogue is None or sc is None or sc.mma == "wgmma":
        return
    from .limits import mma_sp_kernel

    if mma_sp_kernel(spec, form) == "mma.sp":
        raise SpecError("the epilogue is lowered into the sparse wgmma kernel and the pipelined mma.sp kernel "
                        "(stages >= 2, runtime metadata, the k-wide form without .kind) only; this tile gets the "
                        "one-instruction-tile kernel, which stores its fragments as they are", "epilogue",
                        "write e.g. 'schedule cta=128x256x64 warps=2x4 stages=3;', or mma=wgmma on sm_90a")


def c_entry(spec: TileSpec) -> str:
    """Where C enters: none (no C, or beta = 0), accumulate (alpha = beta = 1: loaded into the accumulators
    before the first MMA, which adds it) or epilogue (read beside the accumulators, beta*C in f32). A tcgen05
    tile reads C in its epilogue always: its TMEM accumulators start from the first MMA (enable-input-d
    false), not from C."""
    e, ops = spec.epilogue, spec.operands
    alpha, beta = _value(e.alpha), _value(e.beta)
    if "C" not in ops or beta == 0.0:
        return "none"
    if (e.alpha is None or alpha == 1.0) and (e.beta is None or beta == 1.0) and spec.engine != "tcgen05":
        return "accumulate"
    return "epilogue"


def plan_attrs(spec: TileSpec) -> dict:
    """The `tilec.epilogue_plan` attributes of a tile with an epilogue (check_epilogue passed). A tcgen05
    tile reads C in its epilogue always (`c` = epilogue): its TMEM accumulators start from the first MMA
    (enable-input-d false), not from C."""
    e, ops = spec.epilogue, spec.operands
    acc, out = accumulator_type(spec), ops["D"].dtype
    alpha, beta, scale = _value(e.alpha), _value(e.beta), _value(e.scale)
    params: list[str] = []
    steps: list[dict] = []
    arithmetic = OUTPUTS[out].arithmetic
    if acc in ACC_TO_F32 and arithmetic:        # integer accumulators into the f32 arithmetic ({a}: the raw one)
        steps.append({"step": "to_f32", "ptx": [ACC_TO_F32[acc]]})
    if alpha != 1.0 and e.alpha is not None:
        if e.alpha == EPILOGUE_PARAM:
            params.append("alpha")
        steps.append({"step": "scale", "ptx": ["mul.f32 {x}, {x}, " + ("{alpha}" if alpha is None else f32_imm(alpha))]})
    c = c_entry(spec)
    if c == "epilogue":
        if e.beta == EPILOGUE_PARAM:
            params.append("beta")
        if e.beta is None or beta == 1.0:
            steps.append({"step": "add_c", "ptx": ["add.f32 {x}, {x}, {c}"]})
        else:
            steps.append({"step": "add_c", "ptx": ["fma.rn.f32 {x}, {c}, " + ("{beta}" if beta is None else
                                                                                  f32_imm(beta)) + ", {x}"]})
    if e.bias != "none":
        params.insert(0, "bias")
        steps.append({"step": f"bias_{e.bias}", "ptx": ["add.f32 {x}, {x}, {b}"]})
    if e.act != "none":
        steps.append({"step": e.act, "ptx": list(ACTIVATIONS[e.act])})
    if e.scale is not None and scale != 1.0:
        if e.scale == EPILOGUE_PARAM:
            params.append("scale")
        steps.append({"step": "scale_out", "ptx": ["mul.f32 {x}, {x}, " + ("{scale}" if scale is None else
                                                                           f32_imm(scale))]})
    conv = OUTPUTS[out]
    if conv.pair:
        steps.append({"step": "convert", "ptx": [conv.pair]})
    if conv.quad:                 # 1-byte D: four elements -> one word; an element pair -> its low half
        steps.append({"step": "convert", "ptx": list(conv.quad)})
        steps.append({"step": "convert_pair", "ptx": list(conv.half)})
    attrs = {"acc": acc, "out": out, "c": c}
    if e.alpha is not None and alpha != 1.0:
        attrs["alpha"] = e.alpha if alpha is None else f32_imm(alpha)
    if c == "epilogue" and e.beta is not None and beta != 1.0:
        attrs["beta"] = e.beta if beta is None else f32_imm(beta)
    attrs.update(bias=e.bias, act=e.act, params=params)
    if e.scale is not None and scale != 1.0:
        attrs["scale"] = e.scale if scale is None else f32_imm(scale)
    if e.bias != "none" and (e.bias_type or DEFAULT_BIAS_TYPE) != DEFAULT_BIAS_TYPE:
        attrs["bias_type"] = e.bias_type
    attrs["steps"] = steps
    return attrs


class EpiloguePlan:
    """`tilec.epilogue_plan` as the kernel emitters read it (compiler/ptx/sparse_wgmma_kernel.py). A plain
    class (a dataclass costs every process that imports this module half a millisecond to create)."""
    __slots__ = ("acc", "out", "c", "alpha", "beta", "bias", "act", "params", "steps", "scale", "bias_type")

    def __init__(self, acc: str, out: str, c: str, alpha: str | None, beta: str | None, bias: str, act: str,
                 params: tuple[str, ...], steps: tuple[tuple[str, tuple[str, ...]], ...], scale: str | None = None,
                 bias_type: str | None = None):
        self.acc, self.out = acc, out
        self.c = c                          # none | accumulate | epilogue
        self.alpha, self.beta = alpha, beta  # f32 immediate (0f...) | "param" | None (1)
        self.bias, self.act = bias, act      # bias: none | row | col
        self.params = params                # u64 bias first, then the f32 scalars, in this order
        self.steps = steps
        self.scale = scale                  # the output scale: f32 immediate | "param" | None (1)
        self.bias_type = bias_type or DEFAULT_BIAS_TYPE

    def _key(self) -> tuple:
        return tuple(getattr(self, k) for k in self.__slots__)

    def __eq__(self, other) -> bool:
        return isinstance(other, EpiloguePlan) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return "EpiloguePlan(" + ", ".join(f"{k}={getattr(self, k)!r}" for k in self.__slots__) + ")"

    @property
    def element_steps(self) -> tuple[tuple[str, tuple[str, ...]], ...]:
        """The per-element steps (all but the conversions into D's type)."""
        return tuple(s for s in self.steps if not s[0].startswith("convert"))

    def scalar(self, name: str) -> float | str:
        """alpha, beta or scale: its value, or "param"."""
        v = getattr(self, name)
        if v is None:
            return 1.0
        if v == EPILOGUE_PARAM:
            return v
        return struct.unpack("<f", int(v[2:], 16).to_bytes(4, "little"))[0]

    def describe(self) -> dict:
        """The epilogue as the kernel ABI states it (what the runtime passes, what a reference computes)."""
        d = {"formula": "D = act(alpha*(A*B) + beta*C + bias)", "c": self.c, "alpha": self.scalar("alpha"),
             "beta": self.scalar("beta") if self.c == "epilogue" else (1.0 if self.c == "accumulate" else 0.0),
             "bias": self.bias, "act": self.act, "acc": self.acc, "out": self.out}
        if self.scale is not None or self.packs:
            d.update(formula="D = convert(scale*act(alpha*(A*B) + beta*C + bias))", scale=self.scalar("scale"))
        if self.bias != "none" and self.bias_type != DEFAULT_BIAS_TYPE:
            d["bias_type"] = self.bias_type
        return d

    @property
    def convert(self) -> str | None:
        """The pair conversion of a 2-byte D (`cvt d, hi, lo`), else None."""
        return next((p[0] for s, p in self.steps if s == "convert" and len(p) == 1), None)

    @property
    def packs(self) -> bool:
        """A 1-byte D: `quad` packs four elements into a word, `pair` two into its low half."""
        return self.quad is not None

    @property
    def quad(self) -> tuple[str, ...] | None:
        return next((p for s, p in self.steps if s == "convert" and len(p) > 1), None)

    @property
    def pair(self) -> tuple[str, ...] | None:
        return next((p for s, p in self.steps if s == "convert_pair"), None)

    @property
    def bias_bytes(self) -> int:
        return BIAS_TYPES[self.bias_type].bytes


def epilogue_plan(tile: Op) -> EpiloguePlan | None:
    """The tile's plan (None without an epilogue statement)."""
    op = tile.op("tilec.epilogue_plan")
    if op is None:
        return None
    a = op.attrs
    return EpiloguePlan(a["acc"], a["out"], a["c"], a.get("alpha"), a.get("beta"), a["bias"], a["act"],
                        tuple(a["params"]),
                        tuple((s["step"], tuple(s["ptx"])) for s in a["steps"]), a.get("scale"), a.get("bias_type"))


class EpilogueLowering(Pass, name="epilogue-lowering", requires=("verified",), provides=("epilogue",),
                       description="lower each tile's epilogue statement to its per-element PTX plan"):

    def apply(self, module, ctx: PassContext) -> None:
        ctx.each_tile(module, self.tile, having="tilec.epilogue")

    def tile(self, tile: Op) -> None:
        spec = tile_spec(tile)
        check_epilogue(spec)
        tile.body.append(Op("tilec.epilogue_plan", None, plan_attrs(spec), loc=tile_loc(tile, "epilogue")))
