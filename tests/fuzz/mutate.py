"""Token- and byte-level mutations of real tiles (examples/*.tile, tests/lit/**/*.tile).

Tokens are split the way grammar/tile.lark's terminals split them (comments, whitespace, RATIO, ATOM,
STRING, one punctuation character), so a mutation deletes, duplicates, swaps or replaces whole words
as well as single characters. `mutate` applies one to four mutations; `mutate_bytes` additionally
damages the UTF-8 encoding (for the CLI, which reads files itself).
"""
from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

from . import vocab
from .generate import Chooser, value, word

ROOT = Path(__file__).resolve().parent.parent.parent

TOKEN_RE = re.compile(r"""
    (?P<comment>//[^\n]*|\#[^\n]*)
  | (?P<ws>\s+)
  | (?P<ratio>[0-9]+:[0-9]+)
  | (?P<atom>[A-Za-z0-9_][A-Za-z0-9_.]*(?:::[A-Za-z0-9_]+)*)
  | (?P<string>"[^"\n]*")
  | (?P<punct>.)
""", re.VERBOSE | re.DOTALL)


def tokens(text: str) -> list[str]:
    return [m.group(0) for m in TOKEN_RE.finditer(text)]


def _significant(toks: list[str]) -> list[int]:
    return [i for i, t in enumerate(toks) if not t.isspace() and not t.startswith(("//", "#"))]


@lru_cache(maxsize=None)
def corpus() -> tuple[str, ...]:
    """Every .tile file of examples/ and tests/lit/ (sorted, so the corpus order is deterministic)."""
    files = sorted(ROOT.glob("examples/*.tile")) + sorted(
        p for p in ROOT.glob("tests/lit/**/*.tile") if "Output" not in p.parts)
    return tuple(p.read_text(encoding="utf-8") for p in files)


# ---- mutations: (chooser, text) -> text -------------------------------------------------------------

def _token_op(c: Chooser, text: str, op) -> str:
    toks = tokens(text)
    sig = _significant(toks)
    if not sig:
        return text + value(c)
    op(c, toks, sig)
    return "".join(toks)


def delete_token(c, text):
    def op(c, toks, sig):
        toks[c.choice(sig)] = ""
    return _token_op(c, text, op)


def duplicate_token(c, text):
    def op(c, toks, sig):
        i = c.choice(sig)
        toks[i] = toks[i] + c.choice(("", " ")) + toks[i]
    return _token_op(c, text, op)


def swap_tokens(c, text):
    def op(c, toks, sig):
        i, j = c.choice(sig), c.choice(sig)
        toks[i], toks[j] = toks[j], toks[i]
    return _token_op(c, text, op)


def replace_token(c, text):
    def op(c, toks, sig):
        toks[c.choice(sig)] = c.choice((word(c), value(c), c.choice(";:=,[]{}\"'-+*/\\@$%^&()<>?!|`~")))
    return _token_op(c, text, op)


def replace_number(c, text):
    def op(c, toks, sig):
        nums = [i for i in sig if toks[i][0].isdigit()] or sig
        toks[c.choice(nums)] = c.choice(vocab.all_numbers())
    return _token_op(c, text, op)


def flip_char(c, text):
    if not text:
        return c.choice(vocab.UNICODE_SNIPPETS)
    i = c.randint(0, len(text) - 1)
    ch = chr(c.randint(0, 127)) if c.chance(0.8) else c.choice(vocab.UNICODE_SNIPPETS)
    return text[:i] + ch + text[i + 1:]


def insert_unicode(c, text):
    i = c.randint(0, len(text))
    return text[:i] + c.choice(vocab.UNICODE_SNIPPETS) + text[i:]


def truncate(c, text):
    return text[:c.randint(0, len(text))]


def deep_list(c, text):
    """A list nested hundreds to thousands deep in place of a value (or left open)."""
    depth = c.choice((50, 300, 1000, 5000))
    nested = "[" * depth + ("]" * depth if c.chance(0.8) else "")

    def op(c, toks, sig):
        toks[c.choice(sig)] = nested
    return _token_op(c, text, op)


def long_list(c, text):
    items = ", ".join(str(v) for v in range(c.choice((100, 5000)))) if c.chance(0.5) else f"0..{c.choice(vocab.BOUNDARY_INTS)}"

    def op(c, toks, sig):
        toks[c.choice(sig)] = f"[{items}]"
    return _token_op(c, text, op)


def huge_number(c, text):
    def op(c, toks, sig):
        nums = [i for i in sig if toks[i][0].isdigit()] or sig
        toks[c.choice(nums)] = "9" * c.choice((20, 100, 4000))
    return _token_op(c, text, op)


def line_op(c, text):
    lines = text.split("\n")
    i, j = c.randint(0, len(lines) - 1), c.randint(0, len(lines) - 1)
    pick = c.randint(0, 2)
    if pick == 0:
        del lines[i]
    elif pick == 1:
        lines.insert(j, lines[i])
    else:
        lines[i], lines[j] = lines[j], lines[i]
    return "\n".join(lines)


def splice(c, text):
    """Lines of another corpus file inserted at a random line."""
    other = c.choice(corpus()).split("\n")
    a = c.randint(0, len(other) - 1)
    piece = other[a:a + c.randint(1, 6)]
    lines = text.split("\n")
    i = c.randint(0, len(lines))
    return "\n".join(lines[:i] + piece + lines[i:])


def strip_comments(c, text):
    return "".join(t for t in tokens(text) if not t.startswith(("//", "#")))


MUTATIONS = (delete_token, duplicate_token, swap_tokens, replace_token, replace_token, replace_number,
             replace_number, flip_char, insert_unicode, truncate, deep_list, long_list, huge_number, line_op,
             line_op, splice, strip_comments)


def mutate(c: Chooser, text: str) -> str:
    for _ in range(c.choice((1, 1, 2, 3, 4))):
        text = c.choice(MUTATIONS)(c, text)
    return text


def mutated_corpus_file(c: Chooser) -> str:
    return mutate(c, c.choice(corpus()))


def mutate_bytes(c: Chooser, text: str) -> bytes:
    """The file's bytes with some damage to the encoding: a stray continuation byte, a truncated
    multi-byte sequence, a lone surrogate, a UTF-16 or UTF-8 byte-order mark, Latin-1 text."""
    raw = text.encode("utf-8")
    i = c.randint(0, len(raw))
    damage = c.choice((b"\x80", b"\xc3", b"\xff\xfe", b"\xef\xbb\xbf", b"\xed\xa0\x80", "é".encode("latin-1"), b""))
    if damage == b"\xef\xbb\xbf":
        return damage + raw
    return raw[:i] + damage + raw[i:]
