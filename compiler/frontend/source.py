"""Reading a source file: bounded, decoded as UTF-8 (a leading byte-order mark dropped).

Used by the CLI (a path, or "-" for stdin) and `compile_file`. Reading stops one byte past
MAX_INPUT_BYTES, so `tilec compile /dev/zero` (or `- < /dev/zero`) ends at once with a located
diagnostic instead of growing without bound. Bytes that are not UTF-8 are a located diagnostic too.
"""
from __future__ import annotations

import sys

from ..diagnostics import CompileError, Diagnostic, Loc

# 4 MiB. A tile is 10-20 lines (200-600 bytes with comments); MAX_TILES (frontend/build.py) of them
# stay under 2.5 MiB, so no file tilec can compile is refused, while parsing the largest accepted
# input stays a few seconds (benchmarks/parse_speed.py).
MAX_INPUT_BYTES = 4 * 1024 * 1024

BOM = "\ufeff"


def strip_bom(text: str) -> str:
    """`text` without a leading UTF-8 byte-order mark (editors on Windows write one): columns then
    count from the first real character, as they do in the same file saved without it."""
    return text[1:] if text.startswith(BOM) else text


def _position(text: str, name: str) -> Loc:
    """The position just after `text` (the part of the input read so far)."""
    line = text.count("\n") + 1
    return Loc(name, line, len(text) - (text.rfind("\n") + 1) + 1)


def decode_source(data: bytes, name: str) -> str:
    """`data` as text; bytes that are not UTF-8 are a diagnostic at their line and column."""
    try:
        return strip_bom(data.decode("utf-8"))
    except UnicodeDecodeError as e:
        before = strip_bom(data[:e.start].decode("utf-8"))
        raise CompileError([Diagnostic(f"input is not valid UTF-8 (byte 0x{data[e.start]:02x} at offset "
                                       f"{e.start})", _position(before, name),
                                       hint="tilec reads UTF-8 text; re-save the file as UTF-8")],
                           before) from None


def _too_large(data: bytes, name: str) -> CompileError:
    shown = strip_bom(data[:MAX_INPUT_BYTES].decode("utf-8", errors="replace"))
    return CompileError([Diagnostic(f"input is larger than {MAX_INPUT_BYTES // (1024 * 1024)} MiB "
                                    f"({MAX_INPUT_BYTES:,} bytes)", _position(shown, name),
                                    hint="a tile file is a few kilobytes; split a generated file into several "
                                         "(each tile compiles on its own)")], shown)


def read_source(path: str, stdin_dash: bool = True) -> tuple[str, str]:
    """(text, name shown in diagnostics) of `path`, or of stdin for "-" (when `stdin_dash`); at most
    MAX_INPUT_BYTES bytes. OSError (a missing or unreadable file) propagates for the caller to report."""
    if path == "-" and stdin_dash:
        name = "<stdin>"
        if sys.stdin is None:               # started with stdin closed (<&-)
            raise OSError(9, "standard input is closed", name)
        stream = getattr(sys.stdin, "buffer", None)      # a text-only stdin (tests) has no bytes view
        if stream is None:
            text = sys.stdin.read(MAX_INPUT_BYTES + 1)
            if len(text.encode("utf-8", "surrogatepass")) > MAX_INPUT_BYTES:
                raise _too_large(text.encode("utf-8", "surrogatepass"), name)
            return strip_bom(text), name
        data = stream.read(MAX_INPUT_BYTES + 1)
    else:
        name = path
        with open(path, "rb") as f:
            data = f.read(MAX_INPUT_BYTES + 1)
    if len(data) > MAX_INPUT_BYTES:
        raise _too_large(data, name)
    return decode_source(data, name), name
