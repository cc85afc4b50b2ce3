"""Run one input through the whole tilec pipeline and classify what happened.

The contract being fuzzed (compiler/cli.py, compiler/diagnostics.py): bad input produces located
diagnostics (`file:line:col: error: message`, the source line, a caret) and exit status 1; anything
else is a bug. Outcomes:

    ok       the pipeline produced PTX
    error    CompileError, every diagnostic located inside the file and rendered on its own line
    crash    anything else; `kind` says what:
               exception    an exception other than CompileError escaped (the CLI would print
                            "tilec: internal error" and exit 3)
               unlocated    a diagnostic without a location, or located in another file
               out-of-range a location whose line/column is not inside the input
               misrendered  the rendered diagnostic shows a different source line than the one the
                            location names (e.g. line breaks counted differently by parser and renderer),
                            or, for a line longer than the diagnostic's window, a caret under another character
               unbounded    a rendered diagnostic longer than ECHO_BOUND (a huge name echoed whole)
               empty        CompileError without any diagnostic
               exit-code    the CLI exited with a status other than 0 (PTX written) or 1 (located errors)
               hang         the input took longer than the time limit

Lines are counted the way the parser counts them (Lark: only '\\n' ends a line; a trailing '\\r' of
a '\\r\\n' ending is not part of the line's text).
"""
from __future__ import annotations

import contextlib
import hashlib
import io
import os
import re
import signal
import tempfile
import traceback
from dataclasses import dataclass

FUZZ_FILENAME = "fuzz.tile"


@dataclass(frozen=True)
class Outcome:
    status: str                 # "ok" | "error" | "crash"
    kind: str = ""              # crash kind (module docstring); "" unless status == "crash"
    detail: str = ""            # human-readable: the exception and traceback tail, or the bad diagnostic
    signature: str = ""         # stable key for de-duplicating crashes of one cause

    @property
    def crashed(self) -> bool:
        return self.status == "crash"


class Hang(BaseException):
    """Raised by the SIGALRM handler; a BaseException so `except Exception` in tilec cannot eat it."""


@contextlib.contextmanager
def _time_limit(seconds: float | None):
    if not seconds or not hasattr(signal, "setitimer"):
        yield
        return

    def on_alarm(signum, frame):
        raise Hang(f"no result after {seconds} s")

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def source_lines(text: str) -> list[str]:
    """The file's lines as the parser numbers them (see the module docstring)."""
    return [ln[:-1] if ln.endswith("\r") else ln for ln in text.split("\n")]


def _innermost_compiler_frame(tb) -> str:
    """'compiler/x/y.py:function' of the deepest traceback frame inside the compiler package."""
    where = "?"
    for frame in traceback.extract_tb(tb):
        path = frame.filename.replace(os.sep, "/")
        if "/compiler/" in path:
            where = "compiler/" + path.rsplit("/compiler/", 1)[1] + ":" + frame.name
    return where


def _exception_outcome(e: BaseException) -> Outcome:
    tail = "".join(traceback.format_exception(type(e), e, e.__traceback__)[-6:])
    if isinstance(e, Hang):
        return Outcome("crash", "hang", str(e), "hang")
    return Outcome("crash", "exception", tail[-3000:], f"{type(e).__name__}@{_innermost_compiler_frame(e.__traceback__)}")


def _message_shape(message: str) -> str:
    """A diagnostic message with its numbers and quoted words blanked, for crash signatures."""
    return re.sub(r"'[^']*'|0x[0-9a-fA-F]+|\d+", "_", message)[:80]


# The most a rendered diagnostic may hold (compiler/diagnostics.py bounds what it echoes): the headline,
# details, hint and notes at TEXT_CHARS each, the source window and caret, and the location.
ECHO_BOUND = 8 * 1000 + 2 * 200 + 1000


def check_diagnostics(err, text: str, filename: str, unlocated_ok: tuple[str, ...] = ()) -> Outcome:
    """Outcome of a CompileError: every diagnostic must be located in `filename`, inside `text`,
    and render the line it names. A diagnostic naming one of `unlocated_ok` may have no location
    (what --arch / --ptx-version override is written nowhere in the file)."""
    from compiler.diagnostics import SOURCE_WINDOW, CompileError

    assert isinstance(err, CompileError)
    if not err.diagnostics:
        return Outcome("crash", "empty", "CompileError without diagnostics", "empty")
    lines = source_lines(text)
    for d in err.diagnostics:
        shape = _message_shape(d.message)
        if d.loc is None and any(word in d.message for word in unlocated_ok):
            continue
        if d.loc is None or d.loc.file != filename:
            return Outcome("crash", "unlocated", f"{d.loc}: {d.message}", f"unlocated:{shape}")
        line, col, end = d.loc.line, d.loc.col, d.loc.end_col
        if not 1 <= line <= len(lines):
            return Outcome("crash", "out-of-range", f"line {line} of {len(lines)}: {d.message}",
                           f"out-of-range-line:{shape}")
        width = len(lines[line - 1])
        if not 1 <= col <= width + 1 or (end is not None and not col <= end <= width + 1):
            return Outcome("crash", "out-of-range", f"{line}:{col}-{end} on a line of {width} chars: {d.message}",
                           f"out-of-range-col:{shape}")
        full = d.render(text)
        if len(full) > ECHO_BOUND:
            return Outcome("crash", "unbounded", f"{len(full)} characters: {full[:300]}", f"unbounded:{shape}")
        rendered = full.split("\n")
        want = "  " + lines[line - 1].expandtabs(1)
        shows_line = len(rendered) >= 3 and rendered[1] == want
        if len(lines[line - 1]) > SOURCE_WINDOW and len(rendered) >= 3:
            # A long line is shown as a window around the caret: the caret must sit under the
            # character the location names.
            caret = rendered[2].find("^")
            shown_char = rendered[1][caret] if 0 <= caret < len(rendered[1]) else ""
            real_char = lines[line - 1][col - 1] if col <= width else ""
            shows_line = shown_char == (real_char.expandtabs(1) if real_char else "") and \
                len(rendered[1]) <= SOURCE_WINDOW + 8
        # A blank line (an empty file, the end of the file) may be shown or left out.
        if not shows_line and lines[line - 1].strip():
            shown = rendered[1] if len(rendered) > 1 else "(no source line)"
            return Outcome("crash", "misrendered", f"{d.loc}: {d.message}\n  shown: {shown!r}\n  want:  {want!r}",
                           "misrendered:line-split")
    return Outcome("error")


def check_source(text: str, filename: str = FUZZ_FILENAME, timeout: float | None = None, **compile_kw) -> Outcome:
    """Compile `text` in-process with compiler.driver.compile_source(text, filename, **compile_kw)
    and classify the result. With `arch` / `ptx_version` overrides (the CLI's --arch/--ptx-version),
    diagnostics about the target or the PTX version need no location."""
    from compiler.diagnostics import CompileError
    from compiler.driver import compile_source

    unlocated_ok: tuple[str, ...] = ()
    if compile_kw.get("arch") is not None:
        unlocated_ok += (compile_kw["arch"],)
    if compile_kw.get("ptx_version") is not None:
        unlocated_ok += ("PTX", ".version")
    try:
        with _time_limit(timeout):
            try:
                compile_source(text, filename, **compile_kw)
            except CompileError as e:
                return check_diagnostics(e, text, filename, unlocated_ok)
    except (Exception, Hang, RecursionError, MemoryError) as e:
        return _exception_outcome(e)
    return Outcome("ok")


_LOCATED = re.compile(r"^(?P<file>.+?):(?P<line>\d+):(?P<col>\d+): error: ")


def check_cli(data: str | bytes, workdir: str | None = None, timeout: float | None = None) -> Outcome:
    """Write `data` to a .tile file and run `tilec compile FILE -o OUT` through compiler.cli.main.

    Status 0 must leave PTX in OUT; status 1 must print located errors (every 'error:' line of stderr
    starts with 'FILE:LINE:COL: error: '); any other status is a crash.
    """
    from compiler.cli import main

    raw = data.encode("utf-8") if isinstance(data, str) else data
    with contextlib.ExitStack() as stack:
        if workdir is None:
            workdir = stack.enter_context(tempfile.TemporaryDirectory(prefix="tilec-fuzz-"))
        path = os.path.join(workdir, FUZZ_FILENAME)
        out = os.path.join(workdir, "out.ptx")
        with open(path, "wb") as f:
            f.write(raw)
        if os.path.exists(out):
            os.unlink(out)
        err, std = io.StringIO(), io.StringIO()
        try:
            with _time_limit(timeout), contextlib.redirect_stderr(err), contextlib.redirect_stdout(std):
                rc = main(["compile", path, "-o", out])
        except (Exception, Hang, RecursionError, MemoryError) as e:
            return _exception_outcome(e)
        stderr = err.getvalue()
        if rc == 0:
            if not os.path.exists(out):
                return Outcome("crash", "exit-code", "status 0 without an output file", "exit-code:0-no-output")
            return Outcome("ok")
        if rc != 1:
            first = stderr.strip().splitlines()[0] if stderr.strip() else ""
            internal = re.match(r"tilec: internal error: (\w+)", first)
            what = internal[1] if internal else _message_shape(first)
            return Outcome("crash", "exit-code", f"status {rc}: {stderr[-2000:]}", f"exit-code:{rc}:{what}")
        # Diagnostic headers start in column 1; the echoed source line and the caret are indented
        # (compiler/diagnostics.py), and a source line may itself contain "error:" (a lit CHECK line).
        errors = [ln for ln in stderr.split("\n") if not ln.startswith((" ", "hint:", "note:")) and "error:" in ln]
        if not errors:
            return Outcome("crash", "exit-code", f"status 1 without an error line: {stderr[-2000:]}", "exit-code:1-silent")
        for ln in errors:
            m = _LOCATED.match(ln)
            if m is None or m["file"] != path:
                return Outcome("crash", "unlocated", ln, f"cli-unlocated:{_message_shape(ln)}")
        return Outcome("error")


def input_digest(data: str | bytes) -> str:
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    return hashlib.sha1(raw).hexdigest()[:12]
