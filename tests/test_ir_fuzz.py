"""A quick fuzz slice of the IR reader (issue 14): mutated IR text either compiles or fails with
CompileError (a diagnostic, exit 1), never another exception."""
import os
import random

import pytest

from compiler import CompileError
from compiler.driver import compile_ir, compile_source
from compiler.passes.manager import default_order
from tests.golden import goldens

EXAMPLES = sorted(f for f in os.listdir(os.path.join(goldens.ROOT, "examples")) if f.endswith(".tile"))
TOKENS = ["{", "}", "[", "]", "(", ")", "=", ",", ":", "@A", "#loc0", "loc", "0x", "-1", "4294967296",
          '"', "tilec.tile", "tilec.operand", "true", "none", "fused[", "\n", "//", "\\", "\ufeff"]


def _emitted_ir():
    order = list(default_order())
    out = []
    for f in EXAMPLES:
        path = os.path.join(goldens.ROOT, "examples", f)
        with open(path, encoding="utf-8") as fh:
            out.append(compile_source(fh.read(), path, passes=order[:order.index("ptx-emission")]).ir())
    return out


def _mutate(rng: random.Random, text: str) -> str:
    for _ in range(rng.randint(1, 3)):
        i = rng.randrange(len(text) + 1)
        op = rng.randrange(4)
        if op == 0:
            text = text[:i] + text[i + rng.randint(1, 8):]                      # delete
        elif op == 1:
            text = text[:i] + rng.choice(TOKENS) + text[i:]                     # insert a token
        elif op == 2 and any(c.isdigit() for c in text):
            digits = [j for j, c in enumerate(text) if c.isdigit()]
            j = rng.choice(digits)
            text = text[:j] + str(rng.randrange(10)) * rng.randint(1, 12) + text[j + 1:]   # grow a number
        else:
            j = rng.randrange(len(text) + 1)
            a, b = sorted((i, j))
            text = text[:a] + text[b:b + 20] + text[a:]                         # duplicate a span
    return text


@pytest.mark.parametrize("seed", range(10))
def test_mutated_ir_compiles_or_is_a_diagnostic(seed):
    rng = random.Random(seed)
    texts = _emitted_ir()
    for _ in range(60):                                   # 10 seeds x 60 = 600 inputs
        bad = _mutate(rng, rng.choice(texts))
        try:
            compile_ir(bad, "fuzz.ir")
        except CompileError as e:
            assert e.diagnostics and e.render()


def test_recorded_passes_must_be_a_valid_pipeline():
    from compiler.ir_parser import parse_ir

    text = 'tilec.module {target = "sm_100a", passes = ["verify", "layout-selectoin"]} {\n}\n'
    with pytest.raises(CompileError) as e:
        parse_ir(text, "p.ir")
    d = e.value.diagnostics[0]
    assert "unknown pass 'layout-selectoin'" in d.message and (d.loc.line, d.loc.col) == (1, 44)        # the list
    with pytest.raises(CompileError, match="requires 'verified'"):
        parse_ir(text.replace('"verify", "layout-selectoin"', '"layout-selection"'), "p.ir")
