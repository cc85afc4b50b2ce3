"""The IR verifier between passes re-types only ops whose attributes changed (compiler/ir.py
verify_module). It must stay sound: an op a pass corrupts after it was verified, in place or by
replacement, is caught right after that pass, as an internal error naming the pass."""
from __future__ import annotations

from dataclasses import dataclass

import pytest

from compiler.diagnostics import CompileError
from compiler.driver import parse_source, run_passes
import compiler.ir as ir
from compiler.ir import IRError, Op, verify_module
from compiler.passes import Pass, PassContext, register_pass, unregister_pass

TILE = ("target sm_100a;\ntile gemm {\n  engine tcgen05;\n  shape M=128 N=256 K=16;\n  loop K=64;\n"
        "  A: bf16 smem major=K swizzle=128B;\n  B: bf16 smem major=K swizzle=128B;\n  D: f32 tmem;\n}\n")
PREFIX = ["verify", "layout-selection", "sparse-metadata-packing", "descriptor-materialization"]


def _tile(module: Op) -> Op:
    return module.ops("tilec.tile")[0]


def _layout(module: Op) -> Op:
    return _tile(module).op("tilec.smem_layout", "A")


def _desc(module: Op) -> Op:
    return _tile(module).op("tilec.smem_desc", "A")


def _listed(module: Op) -> Op:
    """The module after a verification that saw tilec.smem_desc @A's values as a list (a pass may
    hold any sequence): the next change to that list happens in place."""
    _desc(module).attrs["values"] = list(_desc(module).attrs["values"])
    verify_module(module)
    return module


def _set(attr: str, value):
    return lambda m: _layout(m).attrs.__setitem__(attr, value)


# Each corruption touches an op that earlier verifications already passed (so its attribute snapshot
# exists) and is what a buggy pass could do.
CORRUPTIONS = {
    "out of range": _set("lbo", 1 << 32),                                  # u32 attribute
    "wrong type": _set("sbo", "1024"),
    "bool for an integer": _set("size", True),
    "unknown enum word": _set("swizzle", "256B"),
    "undeclared attribute": _set("colour", "red"),
    "required attribute removed": lambda m: _layout(m).attrs.pop("offset"),
    "list attribute changed in place": lambda m: _desc(m).attrs["values"].append("0x0"),
    "module attribute": lambda m: m.attrs.__setitem__("target", 100),
    "tile attribute": lambda m: _tile(m).attrs.__setitem__("m", "128"),
    "op renamed to an unknown op": lambda m: setattr(_layout(m), "name", "tilec.smem_layuot"),
    "op not allowed there": lambda m: m.body.append(Op("tilec.operand", "X", {"dtype": "f16", "space": "smem"})),
    "symbol dropped": lambda m: setattr(_layout(m), "sym", None),
    "duplicate symbol": lambda m: setattr(_tile(m).op("tilec.operand", "B"), "sym", "A"),
    "body on a leaf op": lambda m: _layout(m).body.append(Op("tilec.pipeline", None, {})),
}


@pytest.mark.parametrize("name", list(CORRUPTIONS))
def test_a_corrupting_pass_is_caught_right_after_it(name):
    @dataclass(frozen=True)
    class Corrupt(Pass):
        """An external pass that breaks an op the verifier already accepted."""
        name = "corrupt"
        requires = ("descriptors",)
        provides = ("corrupted",)

        def apply(self, module, ctx: PassContext) -> None:
            CORRUPTIONS[name_](module)

    name_ = name
    register_pass(Corrupt)
    try:
        spec = parse_source(TILE, "t.tile")
        module = _listed(run_passes(spec, PREFIX))        # verified before and after each pass
        with pytest.raises(CompileError) as e:
            run_passes(module, ["corrupt"], source=TILE)
    finally:
        unregister_pass("corrupt")
    message = e.value.diagnostics[0].message
    if name == "out of range":          # a value that does not fit its PTX type is blamed on the input
        assert "does not fit PTX type .u32" in message, message
    else:
        assert f"internal error: IR invalid after pass 'corrupt'" in message, message


def test_an_in_place_change_to_a_verified_op_is_seen_by_verify_module():
    module = run_passes(parse_source(TILE, "t.tile"), PREFIX)
    verify_module(module)                                  # every op has its snapshot now
    lay = _layout(module)
    lay.attrs["lbo"] = 1 << 40
    with pytest.raises(IRError, match="does not fit PTX type .u32"):
        verify_module(module)
    lay.attrs["lbo"] = 16                                  # repaired: accepted again
    verify_module(module)


def test_an_unchanged_module_is_accepted_again():
    module = run_passes(parse_source(TILE, "t.tile"), PREFIX)
    verify_module(module)
    verify_module(module)


def test_the_corruption_check_is_not_vacuous(monkeypatch):
    """With attribute typing switched off, the same corruptions go through: the tests above see the
    verifier re-type changed ops, not some other check."""
    monkeypatch.setattr(ir, "_checked_snapshot", lambda op, tile: ir.snapshot_attrs(op.attrs))
    module = run_passes(parse_source(TILE, "t.tile"), PREFIX)
    CORRUPTIONS["wrong type"](module)
    verify_module(module)
