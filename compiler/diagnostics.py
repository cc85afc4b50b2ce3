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

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Loc:
    file: str
    line: int          # 1-based
    col: int           # 1-based
    end_col: int | None = None   # exclusive, on the same line; None = one character

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}"


@dataclass
class Diagnostic:
    message: str
    loc: Loc | None = None
    hint: str | None = None
    severity: str = "error"
    notes: list[str] = field(default_factory=list)

    def render(self, source: str | None = None) -> str:
        where = f"{self.loc}: " if self.loc else "tilec: "
        # A multi-line message keeps its first line as the headline; the rest (e.g. the zero-column
        # solver's wanted/nearest masks) follows the source line and caret, so those stay line 2 and 3.
        headline, _, details = self.message.partition("\n")
        out = [f"{where}{self.severity}: {headline}"]
        if self.loc and source is not None:
            # Lines end at '\n' only, as the parser counts them (splitlines would also break at
            # '\r', '\x0b', '\u2028', ... and put the caret under the wrong line).
            lines = source.split("\n")
            if 1 <= self.loc.line <= len(lines):
                text = lines[self.loc.line - 1].rstrip("\r").expandtabs(1)
                width = 1
                if self.loc.end_col and self.loc.end_col > self.loc.col:
                    width = self.loc.end_col - self.loc.col
                out.append("  " + text)
                out.append("  " + " " * (self.loc.col - 1) + "^" + "~" * (width - 1))
        if details:
            out.append(details)
        if self.hint:
            out.append(f"hint: {self.hint}")
        out.extend(f"note: {n}" for n in self.notes)
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
