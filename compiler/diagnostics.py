"""Located diagnostics.

Every error the user can cause is a `Diagnostic` with a source location; it renders as

    file:line:col: error: message
      <the source line>
      ^~~~~
    hint: ...

`SpecError` is what the pure modules (tables, descriptors, layouts, packers) raise: they know what is
wrong but not where it was written. The compiler attaches the location of the offending field
(`field` names a key of the spec's `locs`) and turns it into a `Diagnostic`.
"""
from __future__ import annotations


# What a diagnostic echoes of the input is bounded, whatever the input (a 10 MB name once gave 30 MB
# of diagnostics): a quoted word at most ECHO_CHARS characters, the source line a window of
# SOURCE_WINDOW characters around the caret, and each message, hint or note at most TEXT_CHARS.
ECHO_CHARS = 48
SOURCE_WINDOW = 160
TEXT_CHARS = 1000


def echo(text: str, limit: int = ECHO_CHARS) -> str:
    """`text` for quoting in a message: whole when short, else its start and its length."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text):,} characters)"


def _bounded(text: str) -> str:
    return text if len(text) <= TEXT_CHARS else f"{text[:TEXT_CHARS]}... ({len(text):,} characters)"


_split_cache: list = [None, []]


def _source_lines(source: str) -> list[str]:
    """source.split('\n'), once per source: rendering many diagnostics of one big file stays linear."""
    if _split_cache[0] is not source:
        _split_cache[0], _split_cache[1] = source, source.split("\n")
    return _split_cache[1]


class Loc:
    """A source position: file, 1-based line and column, exclusive end column on the same line (None:
    one character). A value: never changed after it is made, compared and hashed by its fields.
    A plain slotted class rather than a frozen dataclass: the parser makes one per token, and a
    frozen dataclass's __init__ (object.__setattr__ per field) was a sixth of the parse time."""
    __slots__ = ("file", "line", "col", "end_col")

    def __init__(self, file: str, line: int, col: int, end_col: int | None = None):
        self.file = file
        self.line = line            # 1-based
        self.col = col              # 1-based
        self.end_col = end_col      # exclusive, on the same line; None = one character

    def _key(self) -> tuple:
        return (self.file, self.line, self.col, self.end_col)

    def __eq__(self, other: object) -> bool:
        return type(other) is Loc and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return f"Loc(file={self.file!r}, line={self.line!r}, col={self.col!r}, end_col={self.end_col!r})"

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}"


class Diagnostic:
    """One message: what is wrong, where (None: no position), a hint, its severity ("error" or
    "warning") and notes. A plain class rather than a dataclass (same fields, equality and repr): a
    dataclass costs every tilec process about half a millisecond to create."""
    __hash__ = None                 # type: ignore[assignment]  (mutable, compared by value)

    def __init__(self, message: str, loc: Loc | None = None, hint: str | None = None, severity: str = "error",
                 notes: list[str] | None = None):
        self.message, self.loc, self.hint, self.severity = message, loc, hint, severity
        self.notes: list[str] = notes if notes is not None else []

    def _key(self) -> tuple:
        return (self.message, self.loc, self.hint, self.severity, self.notes)

    def __eq__(self, other: object) -> bool:
        return type(other) is Diagnostic and self._key() == other._key()

    def __repr__(self) -> str:
        return (f"Diagnostic(message={self.message!r}, loc={self.loc!r}, hint={self.hint!r}, "
                f"severity={self.severity!r}, notes={self.notes!r})")

    def render(self, source: str | None = None) -> str:
        where = f"{self.loc}: " if self.loc else "tilec: "
        # A multi-line message keeps its first line as the headline; the rest (e.g. the zero-column
        # solver's wanted/nearest masks) follows the source line and caret, so those stay line 2 and 3.
        headline, _, details = self.message.partition("\n")
        out = [f"{where}{self.severity}: {_bounded(headline)}"]
        if self.loc and source is not None:
            # Lines end at '\n' only, as the parser counts them (splitlines would also break at
            # '\r', '\x0b', '\u2028', ... and put the caret under the wrong line).
            lines = _source_lines(source)
            if 1 <= self.loc.line <= len(lines):
                text = lines[self.loc.line - 1].rstrip("\r")
                col = self.loc.col
                width = 1
                if self.loc.end_col and self.loc.end_col > self.loc.col:
                    width = self.loc.end_col - self.loc.col
                if len(text) > SOURCE_WINDOW:       # a window around the caret, marked as cut
                    start = max(0, min(col - 1 - SOURCE_WINDOW // 4, len(text) - SOURCE_WINDOW))
                    before = "..." if start else ""
                    after = "..." if start + SOURCE_WINDOW < len(text) else ""
                    text = before + text[start:start + SOURCE_WINDOW] + after
                    col = col - start + len(before)
                    width = max(1, min(width, len(text) - len(after) - (col - 1)))
                out.append("  " + text.expandtabs(1))
                out.append("  " + " " * (col - 1) + "^" + "~" * (width - 1))
        if details:
            out.append(_bounded(details))
        if self.hint:
            out.append(f"hint: {_bounded(self.hint)}")
        out.extend(f"note: {_bounded(n)}" for n in self.notes)
        return "\n".join(out)

    def to_json(self) -> dict:
        d: dict[str, object] = {"severity": self.severity, "message": self.message, "hint": self.hint}
        if self.loc:
            d.update(file=self.loc.file, line=self.loc.line, col=self.loc.col)
        return d


class CompileError(Exception):
    """Raised by the API for bad input; carries every diagnostic and the source text."""

    def __init__(self, diagnostics: list[Diagnostic], source: str | None = None):
        self.diagnostics = list(diagnostics)
        self.source = source
        super().__init__(self.render())

    def render(self) -> str:
        return "\n".join(d.render(self.source) for d in self.diagnostics)


class SpecError(ValueError):
    """A violation found by a pure module; `field` says which spec field to blame."""

    def __init__(self, message: str, field: str | None = None, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.field = field
        self.hint = hint
