# lit configuration for tilec's FileCheck suite (tests/lit). Run: lit tests/lit  (or pytest, which runs it).
import os
import sys

import lit.formats

config.name = "tilec"
config.test_format = lit.formats.ShTest()
config.suffixes = [".tile", ".ir"]   # .ir: IR text inputs (tests/lit/passes), MLIR style
# Only tests/lit holds tests; examples/ and benchmarks/ hold .tile files that are not lit tests.
config.excludes = ["Inputs", "examples", "benchmarks", ".venv", ".ci-venv"]
root = os.path.dirname(os.path.abspath(__file__))

# Appended, not prepended: where the Python running lit has tilec installed (CI's wheel venv, outside the tree),
# the suite tests that installation (%tilec is its console script); the checkout is the fallback.
sys.path.append(root)
from compiler.litkit import configure  # noqa: E402

configure(config)
