# A downstream project's lit suite built on tilec's lit kit (compiler/litkit.py). It refers to nothing in
# tilec's source tree: copy this directory anywhere and run `lit <dir>` with the Python environment
# tilec is installed in (tests/test_api_embedding.py does exactly that, from a temporary directory).
from compiler.litkit import configure

config.name = "downstream-tiles"
configure(config)     # ShTest, .tile files, %tilec, FileCheck, %python, %ptxas + feature `ptxas`
