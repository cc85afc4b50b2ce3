# lit configuration for tilec's FileCheck suite (tests/lit). Run: lit tests/lit  (or pytest, which runs it).
import os
import sys

import lit.formats

config.name = "tilec"
config.test_format = lit.formats.ShTest()
config.suffixes = [".tile"]
# Only tests/lit holds tests; examples/ and benchmarks/ hold .tile files that are not lit tests.
config.excludes = ["Inputs", "examples", "benchmarks", ".venv", ".ci-venv"]
root = os.path.dirname(os.path.abspath(__file__))

sys.path.insert(0, root)
from compiler.litkit import configure  # noqa: E402

configure(config)
