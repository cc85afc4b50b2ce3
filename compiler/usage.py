"""What the command line (compiler/cli.py) and `tilec run` (compiler/run.py) share without importing each
other: the usage error (exit 2) and reading the input file or stdin."""
from __future__ import annotations


class UsageError(Exception):
    pass


def read_input(path: str) -> tuple[str, str]:
    """The input as text (bounded, UTF-8, BOM dropped: compiler/frontend/source.py); an OS error on
    the named file is reported as compiler/files.py reports it."""
    from .frontend.source import read_source

    try:
        return read_source(path)
    except OSError as e:
        from .files import file_error

        raise file_error("read", path, e) from None
