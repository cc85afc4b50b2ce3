"""compiler/isa/ is the single home of the PTX facts tilec uses (issue 13): no module outside it spells a
shape list or a per-kind rule.

The test reads every module of compiler/ outside compiler/isa/ (AST, not text, so comments and docstrings
may cite the ISA freely) and flags
  - a tcgen05 / mma kind name compared in a conditional (`kind == "mxf4"`, `kind in ("f8f6f4", "i8")`),
  - a table keyed by kind names (`{"f16": ..., "tf32": ...}`),
  - a literal list of shape values in a conditional (`m in (128, 256)`, `n not in [64, 128, 256]`),
  - a literal range of shape values (`range(8, 257, 8)`),
  - the K = 96 shape spelled as a number in a conditional (isa/tcgen05_kinds.py: K96),
  - a literal list of swizzle-mode names (`("none", "32B", ...)`: isa/swizzle.py SWIZZLE_MODES) or of
    sparsity ratios (`("2:4", "1:2")`: isa/sparsity.py GRANULARITIES), anywhere (a vocabulary list of the
    front end or the IR is such a list).
Ask `compiler.isa` instead (KINDS[kind].<fact>, shape_rule(...), K96, SWIZZLE_MODES, GRANULARITIES, ...).
"""
from __future__ import annotations

import ast
from pathlib import Path

COMPILER = Path(__file__).resolve().parents[1] / "compiler"

# The short allow-list: (path relative to compiler/, why it may restate ISA facts).
ALLOWED = {
    "sim/": "the independent reference model: it derives the ISA from the PTX text on its own, never from "
            "tilec's tables, so that checking tilec against it is not circular (compiler/sim/__init__.py)",
    "emulator/": "the PTX interpreter that executes what tilec emitted: it reads the instruction text and "
                "applies the ISA's semantics independently of the tables that chose the instruction",
}


def _kind_names() -> set[str]:
    from compiler.isa.mma_sp.forms import KINDS as SP_KINDS
    from compiler.isa.tcgen05_kinds import KINDS

    return set(KINDS) | {k for k in SP_KINDS if k}


def _listed_names() -> dict[str, set[str]]:
    """Names whose lists have one home in compiler/isa/: what a literal list of two or more of them is."""
    from compiler.isa.sparsity import GRANULARITIES
    from compiler.isa.swizzle import SWIZZLE_MODES

    return {"swizzle-mode": set(SWIZZLE_MODES), "sparsity-ratio": set(GRANULARITIES)}


def _type_names() -> set[str]:
    from compiler.isa.types import TYPES

    return set(TYPES)


def _is_shape_value(v: object) -> bool:
    # M/N/K values of the tables: multiples of 8 from 8 to 256 (Table 39; mma.sp and wgmma .shape lists)
    return isinstance(v, int) and not isinstance(v, bool) and 8 <= v <= 256 and v % 8 == 0


def _constants(node: ast.AST) -> list:
    if isinstance(node, ast.Constant):
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [e.value for e in node.elts if isinstance(e, ast.Constant)]
    return []


def _problems(path: Path, kinds: set[str], root: Path = COMPILER) -> list[str]:
    """Every forbidden spelling in `path`. "f16" and "tf32" name a kind and an element type: they count as
    kind names only where the compared expression mentions a kind (`kind == "f16"`, `spec.kind in (...)`);
    a type test (`dtype == "tf32"`, choosing a cvt) is codegen, not a per-kind rule."""
    src = path.read_text(encoding="utf-8")
    types = _type_names()
    listed = _listed_names()
    out = []
    for node in ast.walk(ast.parse(src)):
        where = f"{path.relative_to(root)}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Compare):
            about_kind = "kind" in (ast.get_source_segment(src, node) or "")
            for op, comp in zip(node.ops, node.comparators):
                values = _constants(comp) + _constants(node.left)
                if any(isinstance(v, str) and v in kinds and (v not in types or about_kind) for v in values):
                    out.append(f"{where}: kind name in a conditional: {ast.get_source_segment(src, node)}")
                elif (isinstance(op, (ast.In, ast.NotIn)) and isinstance(comp, (ast.Tuple, ast.List, ast.Set))
                      and len(values) >= 2 and all(_is_shape_value(v) for v in values)):
                    out.append(f"{where}: shape list in a conditional: {ast.get_source_segment(src, node)}")
                elif any(v == 96 and not isinstance(v, bool) for v in values):
                    out.append(f"{where}: K = 96 spelled as a number: {ast.get_source_segment(src, node)}")
        elif isinstance(node, ast.Dict):
            keys = [k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)]
            if sum(1 for k in keys if k in kinds) >= 2 and any(k in kinds - types for k in keys):
                out.append(f"{where}: table keyed by kind names")
        elif isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            values = _constants(node)
            for what, names in listed.items():
                if sum(1 for v in values if isinstance(v, str) and v in names) >= 2:
                    out.append(f"{where}: {what} list: {ast.get_source_segment(src, node)}")
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "range"
              and len(node.args) == 3 and all(isinstance(a, ast.Constant) for a in node.args)):
            lo, hi, step = (a.value for a in node.args)
            if _is_shape_value(lo) and hi > 64 and step % 8 == 0:
                out.append(f"{where}: range of shape values: {ast.get_source_segment(src, node)}")
    return out


def _modules() -> list[Path]:
    return sorted(p for p in COMPILER.rglob("*.py")
                  if not str(p.relative_to(COMPILER)).startswith("isa/")
                  and not any(str(p.relative_to(COMPILER)).startswith(a) for a in ALLOWED))


def test_no_isa_fact_outside_isa():
    kinds = _kind_names()
    problems = [p for m in _modules() for p in _problems(m, kinds)]
    assert not problems, "ISA facts restated outside compiler/isa/:\n  " + "\n  ".join(problems)


def test_the_scanner_sees_what_it_forbids(tmp_path):
    """The patterns above are caught (a scanner that finds nothing proves nothing)."""
    sample = tmp_path / "sample.py"
    sample.write_text('if kind == "mxf4nvf4":\n    pass\nok = m in (128, 256)\nbad = k != 96\n'
                      'T = {"f16": 1, "i8": 2}\nNS = range(8, 257, 8)\nfine = n in (1, 2)\n'
                      'also_fine = dtype == "tf32" or out in ("f16", "bf16")\nU = {"f16": 2, "tf32": 4}\n'
                      'but = spec.kind in ("f16", "tf32")\nSW = ("none", "32B", "auto")\n'
                      'if ratio not in ["2:4", "4:8"]:\n    pass\none = ("128B", "K")\n', encoding="utf-8")
    found = _problems(sample, _kind_names(), root=tmp_path)
    assert [f.split(": ", 1)[1].split(":")[0] for f in found] == [
        "kind name in a conditional", "shape list in a conditional", "K = 96 spelled as a number",
        "table keyed by kind names", "range of shape values", "kind name in a conditional", "swizzle-mode list",
        "sparsity-ratio list"], found


def test_allow_list_is_short_and_needed():
    """Each entry exists, says why, and still restates something (drop it once it reads compiler.isa)."""
    assert len(ALLOWED) <= 4
    kinds = _kind_names()
    for prefix, why in ALLOWED.items():
        assert (COMPILER / prefix).exists(), prefix
        assert len(why) > 40, prefix
        assert any(_problems(m, kinds) for m in sorted((COMPILER / prefix).rglob("*.py"))), \
            f"{prefix} no longer restates ISA facts: remove it from ALLOWED"


def test_isa_imports_only_downward():
    """compiler/isa/ is read by every layer and imports none of them (frontend, ir, passes, ptx, ...)."""
    allowed = {"diagnostics", "isa"}          # SpecError; isa's own modules
    bad = []
    for path in sorted((COMPILER / "isa").rglob("*.py")):
        depth = len(path.relative_to(COMPILER).parts) - 1          # isa/x.py: 1, isa/mma_sp/x.py: 2
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level:
                up = node.level - 1                                 # packages climbed above the module's own
                top = ("isa" if up < depth else (node.module or "").split(".")[0])
                if top not in allowed:
                    bad.append(f"{path.relative_to(COMPILER)}:{node.lineno}: from {'.' * node.level}{node.module}")
            elif isinstance(node, (ast.Import, ast.ImportFrom)) and not getattr(node, "level", 0):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                bad += [f"{path.relative_to(COMPILER)}:{node.lineno}: import {n}" for n in names
                        if n.split(".")[0] == "compiler"]
    assert not bad, "\n".join(bad)


def test_table_entries_cite_the_ptx_isa():
    """Each entry of the form tables names its PTX ISA section or table (never the reading aid that restates it)."""
    import re

    from compiler.isa.mma_sp.forms import FORM_ROWS
    from compiler.isa.tcgen05_forms import FEATURES
    from compiler.isa.tcgen05_kinds import K96

    section = re.compile(r"\b\d+\.\d+\.\d+(\.\d+)*\b|\bTable \d+\b|ISA notes")
    for row in FORM_ROWS:
        assert row.cite.startswith("PTX ") and section.search(row.cite), row.describe()
    for feat in FEATURES:
        assert "digest" not in feat.source and (section.search(feat.source) or feat.source.startswith("as ")), \
            feat.name
    assert section.search(K96.source) and "digest" not in K96.source
