"""compiler/ptx/builder.py: the one PTX builder, and the rule that the PTX mechanics it and
compiler/ptx/tcgen05_issue.py own are spelled nowhere else in compiler/ptx (issue 13 item 4)."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from compiler.bits import is_pow2, log2
from compiler.diagnostics import SpecError
from compiler.ptx.builder import HAND_SCHEDULED, PtxBuilder, module_header, require_kernel_name
from compiler.ptxas import assemble

PTX_DIR = Path(__file__).resolve().parent.parent / "compiler" / "ptx"
COMPILER_DIR = PTX_DIR.parent


def test_log2_and_is_pow2():
    assert [log2(1 << n) for n in range(40)] == list(range(40))
    for bad in (0, -4, 3, 12, True, 2.0):
        assert not is_pow2(bad)
        with pytest.raises(ValueError):
            log2(bad)
    assert is_pow2(1) and is_pow2(1 << 62)


def _demo(b: PtxBuilder) -> None:
    """A kernel using every shared sequence: D[i] = i for i < n, strided over the CTA; an mbarrier the
    thread 0 arrives on and everyone waits for; a counted loop."""
    b.add_params("u64", "d")
    b.add_params("u32", "n")
    b.directives.append(".reqntid 128, 1, 1")
    b.shared.append(".shared .align 8 .b64 demo_mbar;")
    tid, n, k = b.regs("r", 3)
    d, raw = b.regs("rd", 2)
    b.ins(f"mov.u32 {tid}, %tid.x;")
    b.ld_param("u32", n, "n")
    b.global_pointer(d, "d", raw)
    p0 = b.reg("p")
    b.ins(f"setp.eq.u32 {p0}, {tid}, 0;")
    b.ins(f"@{p0} mbarrier.init.shared::cta.b64 [demo_mbar], 1;")
    b.cta_sync(cluster=False)
    with b.strided_loop("fill", tid, 1000, 128) as c:
        off, at = b.reg("rd"), b.reg("rd")
        b.ins(f"mul.wide.u32 {off}, {c}, 4;")
        b.ins(f"add.u64 {at}, {d}, {off};")
        b.ins(f"st.global.u32 [{at}], {c};")
    b.ins(f"mov.u32 {k}, 0;")
    top = b.label("count")
    b.put(top)
    b.count_up(k, 1, b.reg("p"), 4, top, uni=False)
    b.ins(f"@{p0} mbarrier.arrive.shared::cta.b64 _, [demo_mbar];")
    b.wait_parity(b.reg("p"), "demo_mbar", "0", b.label("wait"), uni=False)
    b.ins("ret;")


# What _demo renders, line by line: the builder's own format (head, directives, numbered register
# declarations in REG_TYPES order p, r, rd, entry-scope .shared, blank line, body).
DEMO = """.visible .entry demo(
\t.param .u64 demo_param_d,
\t.param .u32 demo_param_n
)
.reqntid 128, 1, 1
{
\t.reg .pred %p<4>;
\t.reg .b32 %r<4>;
\t.reg .b64 %rd<4>;
\t.shared .align 8 .b64 demo_mbar;

\tmov.u32 %r0, %tid.x;
\tld.param.u32 %r1, [demo_param_n];
\tld.param.u64 %rd1, [demo_param_d];
\tcvta.to.global.u64 %rd0, %rd1;
\tsetp.eq.u32 %p0, %r0, 0;
\t@%p0 mbarrier.init.shared::cta.b64 [demo_mbar], 1;
\tbar.sync 0;
\tmov.u32 %r3, %r0;
$L_fill_1:
\tsetp.ge.u32 %p1, %r3, 1000;
\t@%p1 bra $L_fill_done_2;
\tmul.wide.u32 %rd2, %r3, 4;
\tadd.u64 %rd3, %rd0, %rd2;
\tst.global.u32 [%rd3], %r3;
\tadd.u32 %r3, %r3, 128;
\tbra.uni $L_fill_1;
$L_fill_done_2:
\tmov.u32 %r2, 0;
$L_count_3:
\tadd.u32 %r2, %r2, 1;
\tsetp.lt.u32 %p2, %r2, 4;
\t@%p2 bra $L_count_3;
\t@%p0 mbarrier.arrive.shared::cta.b64 _, [demo_mbar];
$L_wait_4:
\tmbarrier.try_wait.parity.shared::cta.b64 %p3, [demo_mbar], 0;
\t@!%p3 bra $L_wait_4;
\tret;
}
"""


def test_builder_renders_entry(ptxas):
    b = PtxBuilder("demo")
    _demo(b)
    assert b.render() == DEMO
    res = assemble(module_header("8.0", "sm_90") + b.render(), "sm_90", ptxas)
    assert res.ok, res.output


def test_hand_scheduled_spelling():
    """The sparse kernels' spelling: 4-space indent, <kernel>_<param>, unprefixed labels, hand-named
    registers declared in order, no blank line after the declarations."""
    b = PtxBuilder("k", **HAND_SCHEDULED)
    b.add_params(".u32", "M")
    b.declare(".u32", "%M", "%x")
    b.ld_param("u32", "%M", "M")
    b.scale("%x", "%M", 4, 16)
    b.div_imm("%x", "%x", 48)
    b.put(b.label("LOOP"))
    b.count_down("%x", "%p", "LOOP_1")
    assert b.render() == (".visible .entry k(\n    .param .u32 k_M\n)\n{\n    .reg .u32 %M, %x;\n"
                          "    ld.param.u32 %M, [k_M];\n    shr.u32 %x, %M, 2;\n    div.u32 %x, %x, 48;\nLOOP_1:\n"
                          "    sub.u32 %x, %x, 1;\n    setp.ne.u32 %p, %x, 0;\n    @%p bra.uni LOOP_1;\n}\n")


def test_kernel_name_is_a_ptx_identifier():
    require_kernel_name("gemm_f16")
    for bad in ("1t", "x::y", "WARP_SZ", "gémm"):
        with pytest.raises(SpecError, match="not a PTX identifier"):
            require_kernel_name(bad)


def _code_strings(path: Path) -> list[str]:
    """String constants and f-string pieces of a module, without its docstrings."""
    tree = ast.parse(path.read_text())
    docs = {id(n.body[0].value) for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef)) and n.body
            and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    return [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
            and id(n) not in docs]


# PTX text that only the builder (or the tcgen05 issue sequence) spells; (text, its one home, why
# another module may spell it too)
ONE_HOME = [
    (".visible .", "builder.py", {}),
    (".reg .", "builder.py", {}),
    ("ld.param.", "builder.py", {"fragment.py": "Fragment.call: the caller's ld.param of the result array"}),
    ("cvta.to.global", "builder.py", {}),
    ("mbarrier.try_wait", "builder.py", {}),
    ("barrier.cluster.", "builder.py", {}),
    (".address_size", "builder.py", {"emission.py": "joins kernels into one module, dropping their directives"}),
]


@pytest.mark.parametrize("text,home,allowed", ONE_HOME, ids=[t for t, _, _ in ONE_HOME])
def test_ptx_mechanics_have_one_home(text, home, allowed):
    spelled = sorted(p.name for p in PTX_DIR.glob("*.py") if any(text in s for s in _code_strings(p)))
    assert set(spelled) - {home} == set(allowed), spelled


def test_mma_issue_and_small_helpers_have_one_home():
    """tcgen05.mma instructions are rendered and committed only by tcgen05_issue.py; no module of the
    compiler defines its own log2 / power-of-two helper (compiler/bits.py)."""
    renders, helpers = [], []
    for path in COMPILER_DIR.rglob("*.py"):
        tree = ast.parse(path.read_text())
        for n in ast.walk(tree):
            if isinstance(n, ast.Call) and path.parent == PTX_DIR:
                # Tcgen05Form.render(d, a, b, idesc, enable-input-d, ...) (PtxBuilder.render takes no arguments)
                if (isinstance(n.func, ast.Attribute) and n.func.attr == "render" and n.args) or \
                        (isinstance(n.func, ast.Name) and n.func.id == "tcgen05_commit"):
                    renders.append(path.name)
            if isinstance(n, ast.FunctionDef) and n.name.lstrip("_") in ("log2", "pow2", "is_pow2", "ilog2"):
                helpers.append(f"{path.relative_to(COMPILER_DIR)}:{n.name}")
    assert set(renders) == {"tcgen05_issue.py"}, renders
    assert sorted(helpers) == ["bits.py:is_pow2", "bits.py:log2"], helpers
