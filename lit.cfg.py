# lit configuration for tilec's FileCheck suite (tests/lit). Run: lit tests/lit  (or pytest, which runs it).
import os
import sys

import lit.formats

config.name = "tilec"
config.test_format = lit.formats.ShTest()
config.suffixes = [".tile"]
config.excludes = ["Inputs"]
root = os.path.dirname(os.path.abspath(__file__))
config.test_source_root = os.path.join(root, "tests", "lit")
config.test_exec_root = os.path.join(root, "tests", "lit")

sys.path.insert(0, root)
from compiler.litkit import configure  # noqa: E402

configure(config)
