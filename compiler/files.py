"""Output files written the way users expect from compiler tools (`tilec compile -o OUT`).

* Atomic: the text goes to a temporary file beside the output, then one rename puts it in place, so a
  reader never sees half a file and a failed run leaves an existing output untouched.
* Modes: a new output gets 0666 minus the umask (the temporary is created with that mode, so the kernel
  applies the umask); an existing output keeps its permission bits (and, where we may, its owner/group).
* Symbolic links: `-o LINK` writes through to the link's target, as cc/gcc/ld do (they open the name, which
  follows the link); the link itself stays. The rename happens in the target's directory, so atomicity
  holds there. A dangling link creates its target; a link loop is an error naming the output.
* Not regular files (devices, FIFOs, /dev/stdout) are written through, never replaced: renaming over
  `/dev/null` as root would replace the device with a regular file.
* Temporaries are named `.NAME.tilec-PID-RANDOM.tmp`. They are removed on any exception, on SIGINT
  (KeyboardInterrupt), and on SIGTERM/SIGHUP while one exists (the process then dies of that signal as
  it would have). SIGKILL cannot be caught: the next run writing the same output removes temporaries of
  that output whose process is gone.
* Errors: every OS error is a `FileError` that names the file the user gave (never the temporary); the
  command line reports it with status 1.
"""
from __future__ import annotations

import os
import sys


class FileError(OSError):
    """An OS error on a file the user named: its message names that file (never a temporary)."""

    def __init__(self, message: str, path: str | None = None) -> None:
        super().__init__(message)
        self.path = path

    def __str__(self) -> str:
        return str(self.args[0])


class OverwritesInput(Exception):
    """`-o` names the input file itself (or another name of it): a usage mistake, not an OS error."""


def file_error(verb: str, path: str, e: OSError) -> FileError:
    """'cannot <verb> 'PATH': <reason>' for an OSError raised on `path` or on a file standing in for it."""
    reason = e.strerror or str(e) or type(e).__name__
    return FileError(f"cannot {verb} '{path}': {reason}", path)


_TMP_TAG = ".tilec-"


def _temp_prefix(real: str) -> str:
    return os.path.join(os.path.dirname(real), "." + os.path.basename(real) + _TMP_TAG)


def _process_gone(pid: int) -> bool:
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:            # EPERM: it exists under another user
        return False
    return False


def remove_stale_temporaries(real: str) -> list[str]:
    """Remove temporaries of output `real` left by runs that were killed (SIGKILL cannot be caught);
    those of live processes (a concurrent run writing the same output) are kept. Returns the removed
    paths. Best effort: an unreadable directory or a racing removal is not an error."""
    prefix = _temp_prefix(real)
    d, stem = os.path.split(prefix)
    removed = []
    try:
        names = os.listdir(d or ".")
    except OSError:
        return removed
    for name in names:
        if not (name.startswith(stem) and name.endswith(".tmp")):
            continue
        pid = name[len(stem):-len(".tmp")].partition("-")[0]
        if pid.isdigit() and _process_gone(int(pid)):
            try:
                os.unlink(os.path.join(d, name))
                removed.append(os.path.join(d, name))
            except OSError:
                pass
    return removed


class _Signalled(BaseException):
    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


class _CleanupOnSignals:
    """While a temporary exists: SIGTERM and SIGHUP raise `_Signalled` (so the temporary is removed) when
    their disposition is the default one; an ignored signal (nohup) or a caller's own handler is left
    alone. Python only lets the main thread install handlers; elsewhere nothing changes."""

    SIGNALS = ("SIGTERM", "SIGHUP")

    def __enter__(self):
        import signal
        import threading

        self.saved = []
        if threading.current_thread() is not threading.main_thread():
            return self

        def handler(signum, frame):
            raise _Signalled(signum)
        for name in self.SIGNALS:
            sig = getattr(signal, name, None)
            if sig is not None and signal.getsignal(sig) == signal.SIG_DFL:
                self.saved.append((sig, signal.signal(sig, handler)))
        return self

    def __exit__(self, *exc) -> None:
        import signal

        for sig, old in self.saved:
            signal.signal(sig, old)


def _die_of(signum: int) -> None:
    """Terminate as the signal's default action would have (the parent sees 'killed by SIGTERM')."""
    import signal

    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def check_writable(path: str) -> None:
    """FileError unless write_output could create or replace `path`: not a directory, in a directory that
    exists and may be written. For a command that works long before it writes (tilec tune)."""
    real = os.path.realpath(path)
    if os.path.isdir(real):
        raise FileError(f"cannot write '{path}': Is a directory", path)
    parent = os.path.dirname(real) or "."
    if not os.path.isdir(parent):
        raise FileError(f"cannot write '{path}': No such file or directory", path)
    if not os.access(parent, os.W_OK) or (os.path.exists(real) and not os.access(real, os.W_OK)):
        raise FileError(f"cannot write '{path}': Permission denied", path)


def write_output(path: str | None, text: str | bytes, input_path: str | tuple | None = None) -> None:
    """Write `text` to `path` ('-' or None: stdout) as described in the module docstring; bytes (a cubin)
    are written as they are. `input_path`: the input file, or a tuple of them (a tile and its --tuning).

    Raises OverwritesInput when `path` is an input file, FileError for any OS error."""
    if path in (None, "-"):
        if sys.stdout is None:              # started with stdout closed (>&-)
            raise FileError("cannot write '<stdout>': standard output is closed", "<stdout>")
        try:
            if isinstance(text, bytes):
                sys.stdout.flush()
                sys.stdout.buffer.write(text)
                sys.stdout.buffer.flush()
            else:
                sys.stdout.write(text)
                sys.stdout.flush()
        except OSError as e:
            raise file_error("write", "<stdout>", e) from None
        return
    real = os.path.realpath(path)          # write through a symbolic link to its target
    try:
        st: os.stat_result | None = os.stat(real)
    except FileNotFoundError:
        st = None
    except OSError as e:                    # ELOOP, EACCES, ENOTDIR, ...
        raise file_error("write", path, e) from None
    inputs = input_path if isinstance(input_path, tuple) else (input_path,)
    for one in inputs if st is not None else ():
        if one in (None, "-"):
            continue
        try:
            same = os.path.samestat(st, os.stat(one))
        except OSError:
            same = False
        if same:
            raise OverwritesInput(f"refusing to overwrite the input file '{path}'")
    import stat as stat_mod

    if st is not None and not stat_mod.S_ISREG(st.st_mode):
        if stat_mod.S_ISDIR(st.st_mode):
            raise FileError(f"cannot write '{path}': Is a directory", path)
        try:
            with open(real, "wb") as f:
                f.write(text if isinstance(text, bytes) else text.encode("utf-8"))
        except OSError as e:
            raise file_error("write", path, e) from None
        return
    remove_stale_temporaries(real)
    data = text if isinstance(text, bytes) else text.encode("utf-8")
    prefix = _temp_prefix(real)
    tmp: str | None = None
    with _CleanupOnSignals():
        try:
            for _ in range(100):
                name = f"{prefix}{os.getpid()}-{os.urandom(4).hex()}.tmp"
                try:
                    # 0o666: the kernel applies the umask, as for any file a tool creates
                    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666)
                except FileExistsError:
                    continue
                tmp = name
                break
            else:
                raise FileExistsError(17, "no free temporary name")
            try:
                if st is not None:
                    _keep_mode_and_owner(fd, st)
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
            finally:
                os.close(fd)
            os.replace(tmp, real)
            tmp = None
        except _Signalled as s:
            _unlink(tmp)
            _die_of(s.signum)
            raise
        except OSError as e:
            _unlink(tmp)
            raise file_error("write", path, e) from None
        except BaseException:
            _unlink(tmp)
            raise


def _keep_mode_and_owner(fd: int, st: os.stat_result) -> None:
    import stat as stat_mod

    if hasattr(os, "fchown") and (st.st_uid != os.geteuid() or st.st_gid != os.getegid()):
        try:
            os.fchown(fd, st.st_uid, st.st_gid)      # root may; a group member may change the group
        except OSError:
            try:
                os.fchown(fd, -1, st.st_gid)
            except OSError:
                pass
    os.fchmod(fd, stat_mod.S_IMODE(st.st_mode))


def _unlink(tmp: str | None) -> None:
    if tmp is not None:
        try:
            os.unlink(tmp)
        except OSError:
            pass
