"""The pass graph: order resolved from requires/provides, the baked default order, explicit pipelines."""
from dataclasses import dataclass

import pytest

from compiler.passes import Pass, get_pass_class, pass_names, register_pass, unregister_pass
from compiler.passes.manager import (BAKED_KEY, BAKED_ORDER, PipelineError, check_pipeline, default_order,
                                     registry_key, resolve_order_with_graph)


def test_baked_default_order_matches_networkx():
    # The CLI uses the baked order to avoid importing networkx; it must be what the graph gives.
    names = pass_names()
    assert registry_key(names) == BAKED_KEY, f"update BAKED_KEY to {registry_key(names)!r}"
    assert resolve_order_with_graph(names) == BAKED_ORDER


def test_every_pass_is_a_small_frozen_dataclass_with_kebab_case_name():
    for n in pass_names():
        cls = get_pass_class(n)
        assert cls.name == n and n == n.lower() and "_" not in n
        assert cls.__dataclass_params__.frozen


def test_each_requirement_comes_before_its_user():
    order = default_order()
    provided: set[str] = set()
    for n in order:
        cls = get_pass_class(n)
        assert set(cls.requires) <= provided, n
        provided |= set(cls.provides)


def test_external_pass_is_placed_by_its_facts():
    @dataclass(frozen=True)
    class CountOps(Pass):
        name = "count-ops"
        requires = ("descriptors",)
        provides = ("op-count",)

        def apply(self, module, ctx):
            module.attrs["ops"] = sum(1 for _ in module.walk())

    register_pass(CountOps)
    try:
        order = default_order()
        assert order.index("count-ops") > order.index("descriptor-materialization")
    finally:
        unregister_pass("count-ops")
    assert "count-ops" not in default_order()


def test_cycle_and_missing_provider_are_reported():
    @dataclass(frozen=True)
    class P1(Pass):
        name = "p-one"
        requires = ("two",)
        provides = ("one",)

    @dataclass(frozen=True)
    class P2(Pass):
        name = "p-two"
        requires = ("one",)
        provides = ("two",)

    register_pass(P1)
    try:
        with pytest.raises(PipelineError, match="requires 'two'.*no registered pass"):
            default_order()
        register_pass(P2)
        with pytest.raises(PipelineError, match="cycle"):
            default_order()
    finally:
        unregister_pass("p-one")
        unregister_pass("p-two")


def test_explicit_pipeline_checks_order_and_names():
    check_pipeline(["verify", "layout-selection"])
    with pytest.raises(PipelineError, match="requires 'layouts'; run layout-selection"):
        check_pipeline(["verify", "descriptor-materialization"])
    with pytest.raises(PipelineError, match="did you mean 'layout-selection'"):
        check_pipeline(["verify", "layout-selectoin"])
