"""Front end: DSL text -> syntax tree (parser.py) -> tile specs (build.py)."""
