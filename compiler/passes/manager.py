"""Pass manager: resolves the pipeline order from requires/provides and runs passes with the IR
verifier between them."""
from __future__ import annotations

from ..diagnostics import CompileError, Diagnostic
from ..ir import IRError, print_op, verify_module
from . import PassContext, get_pass_class, pass_names


class PipelineError(Exception):
    """A pipeline that cannot run: unknown pass, cycle, missing provider (a usage error, exit 2)."""


def registry_key(names: list[str]) -> str:
    """A string identifying the registry contents that decide the order."""
    parts = []
    for n in names:
        c = get_pass_class(n)
        parts.append(f"{n}<{','.join(c.requires)}>{','.join(c.provides)}")
    return ";".join(parts)


# Baked result of `resolve_order_with_graph(pass_names())` for the built-in registry; see
# compiler/passes/__init__.py for why, and tests/test_pass_manager.py for the check.
BAKED_KEY = ("verify<>verified;layout-selection<verified>layouts;"
             "sparse-metadata-packing<verified>metadata;"
             "descriptor-materialization<layouts>descriptors;"
             "epilogue-lowering<verified>epilogue;"
             "warp-specialization<layouts>roles;"
             "kernel-selection<descriptors,metadata,epilogue,roles>kernels;"
             "pipeline-planning<kernels>pipeline;"
             "resource-planning<kernels>resources;"
             "ptx-emission<kernels,pipeline,resources>ptx")
BAKED_ORDER = ("verify", "layout-selection", "sparse-metadata-packing", "descriptor-materialization",
               "epilogue-lowering", "warp-specialization", "kernel-selection", "pipeline-planning", "resource-planning", "ptx-emission")


def build_graph(names: list[str]):
    """The pass graph: an edge P -> Q when Q requires a fact P provides."""
    import networkx as nx

    g = nx.DiGraph()
    providers: dict[str, list[str]] = {}
    for n in names:
        g.add_node(n)
        for fact in get_pass_class(n).provides:
            providers.setdefault(fact, []).append(n)
    for n in names:
        for fact in get_pass_class(n).requires:
            if fact not in providers:
                raise PipelineError(f"pass '{n}' requires '{fact}', which no registered pass provides")
            for p in providers[fact]:
                g.add_edge(p, n, fact=fact)
    return g


def resolve_order_with_graph(names: list[str]) -> tuple[str, ...]:
    import networkx as nx

    g = build_graph(names)
    try:
        cycle = nx.find_cycle(g)
    except nx.NetworkXNoCycle:
        cycle = None
    if cycle:
        raise PipelineError("pass dependency cycle: " + " -> ".join([e[0] for e in cycle] + [cycle[0][0]]))
    index = {n: i for i, n in enumerate(names)}
    # Registration order breaks ties, so the order is deterministic and stable.
    return tuple(nx.lexicographical_topological_sort(g, key=lambda n: index[n]))


def default_order() -> tuple[str, ...]:
    names = pass_names()
    if registry_key(names) == BAKED_KEY:
        return BAKED_ORDER
    return resolve_order_with_graph(names)


def check_pipeline(names: list[str]) -> None:
    """An explicit pipeline must name known passes, each after the providers of what it requires."""
    known = set(pass_names())
    have: set[str] = set()
    for n in names:
        if n not in known:
            import difflib
            close = difflib.get_close_matches(n, sorted(known), n=1)
            raise PipelineError(f"unknown pass '{n}'" + (f"; did you mean '{close[0]}'?" if close else "")
                                + f" (passes: {', '.join(pass_names())})")
        cls = get_pass_class(n)
        for fact in cls.requires:
            if fact not in have:
                providers = [p for p in pass_names() if fact in get_pass_class(p).provides]
                raise PipelineError(f"pass '{n}' requires '{fact}'; run {' or '.join(providers) or '?'} before it")
        have.update(cls.provides)


class PassManager:
    """Runs passes in order with the IR verifier between them. (A plain class: a dataclass costs every
    `tilec` process half a millisecond to create.)"""

    def __init__(self, names: tuple[str, ...], print_after: set[str] | None = None,
                 ir_sink: list[str] | None = None):
        self.names = names
        self.print_after = print_after if print_after is not None else set()   # pass names, or {"*"}
        self.ir_sink = ir_sink                             # printed IR dumps are appended here

    def __repr__(self) -> str:
        return f"PassManager(names={self.names!r}, print_after={self.print_after!r})"

    @classmethod
    def default(cls, **kw) -> "PassManager":
        return cls(default_order(), **kw)

    @classmethod
    def from_names(cls, names: list[str], **kw) -> "PassManager":
        check_pipeline(names)
        return cls(tuple(names), **kw)

    def run(self, module, ctx: PassContext):
        """Verify the IR, then run the passes in order; after each, record it in the module's `passes`
        and verify the IR again. A value that does not fit the PTX type it is emitted as is the input's
        fault (a located diagnostic naming the value and the type); any other broken IR is a bug of the
        pass that produced it."""
        self.verify(module, ctx, None)
        for n in self.names:
            get_pass_class(n)().apply(module, ctx)
            module.attrs["passes"] = (*module.attrs.get("passes", ()), n)
            self.verify(module, ctx, n)
            if self.ir_sink is not None and ("*" in self.print_after or n in self.print_after):
                self.ir_sink.append(f"// -----// IR Dump After {n} //----- //\n{print_op(module)}\n")
        return module

    @staticmethod
    def verify(module, ctx: PassContext, after: str | None) -> None:
        try:
            verify_module(module)
        except IRError as e:
            if e.out_of_range:
                raise CompileError([Diagnostic(str(e), e.loc(e.tile), e.hint())], ctx.source) from None
            where = f"after pass '{after}'" if after else "before the first pass"
            raise CompileError([Diagnostic(f"internal error: IR invalid {where}: {e}")], ctx.source) from e
