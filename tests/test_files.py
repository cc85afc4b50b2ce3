"""Files as users expect from compiler tools (compiler/files.py) and the one exit-code scheme of the
command line (compiler/cli.py): 0 success, 1 a diagnostic or an OS error on a named file (the message
names that file, never a temporary), 2 usage, 3 internal error.
"""
from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from compiler import CompileError, compile_file
from compiler.cli import main

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "gemm_bf16.tile"
VALID = EXAMPLE.read_text()


def run(argv, capsys):
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def listing(d: Path) -> list[str]:
    return sorted(p.name for p in d.iterdir())


@pytest.fixture
def src(tmp_path):
    p = tmp_path / "gemm.tile"
    p.write_text(VALID)
    return p


# -- modes -------------------------------------------------------------------------------------------

def test_a_new_output_honours_the_umask(src, tmp_path, capsys):
    old = os.umask(0o027)
    try:
        assert run(["compile", src, "-o", tmp_path / "k.ptx"], capsys)[0] == 0
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(tmp_path / "k.ptx").st_mode) == 0o666 & ~0o027 == 0o640


def test_an_existing_output_keeps_its_mode(src, tmp_path, capsys):
    out = tmp_path / "k.ptx"
    out.write_text("old")
    os.chmod(out, 0o604)
    assert run(["compile", src, "-o", out], capsys)[0] == 0
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o604
    assert ".entry gemm_bf16" in out.read_text()


# -- symbolic links: written through to the target, like cc -o -------------------------------------

def test_output_through_a_symlink_writes_the_target_and_keeps_the_link(src, tmp_path, capsys):
    target = tmp_path / "real.ptx"
    target.write_text("old")
    link = tmp_path / "link.ptx"
    link.symlink_to("real.ptx")
    assert run(["compile", src, "-o", link], capsys)[0] == 0
    assert link.is_symlink() and os.readlink(link) == "real.ptx"
    assert ".entry gemm_bf16" in target.read_text()
    assert listing(tmp_path) == ["gemm.tile", "link.ptx", "real.ptx"]


def test_a_dangling_symlink_creates_its_target(src, tmp_path, capsys):
    (tmp_path / "link.ptx").symlink_to("new.ptx")
    assert run(["compile", src, "-o", tmp_path / "link.ptx"], capsys)[0] == 0
    assert (tmp_path / "link.ptx").is_symlink() and ".entry gemm_bf16" in (tmp_path / "new.ptx").read_text()


def test_a_symlink_loop_is_an_error_naming_the_output(src, tmp_path, capsys):
    (tmp_path / "a").symlink_to("b")
    (tmp_path / "b").symlink_to("a")
    rc, out, err = run(["compile", src, "-o", tmp_path / "a"], capsys)
    assert rc == 1 and err == f"tilec: error: cannot write '{tmp_path / 'a'}': Too many levels of symbolic links\n"


def test_a_symlink_to_the_input_is_still_refused(src, tmp_path, capsys):
    (tmp_path / "link.tile").symlink_to(src)
    rc, out, err = run(["compile", src, "-o", tmp_path / "link.tile"], capsys)
    assert rc == 2 and "refusing to overwrite the input file" in err
    assert src.read_text() == VALID


# -- exit codes and messages for OS errors -----------------------------------------------------------

def test_output_into_a_missing_directory_is_1_naming_the_output(src, tmp_path, capsys):
    out = tmp_path / "no" / "k.ptx"
    rc, stdout, err = run(["compile", src, "-o", out], capsys)
    assert rc == 1 and stdout == ""
    assert err == f"tilec: error: cannot write '{out}': No such file or directory\n"     # no temporary named


def test_output_that_is_a_directory_is_1(src, tmp_path, capsys):
    rc, _, err = run(["compile", src, "-o", tmp_path], capsys)
    assert rc == 1 and err == f"tilec: error: cannot write '{tmp_path}': Is a directory\n"


def test_missing_input_is_1_naming_it(tmp_path, capsys):
    missing = tmp_path / "missing.tile"
    rc, _, err = run(["compile", missing], capsys)
    assert rc == 1 and err == f"tilec: error: cannot read '{missing}': No such file or directory\n"


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads and writes regardless of permissions")
def test_unreadable_input_and_unwritable_directory_are_1(src, tmp_path, capsys):
    os.chmod(src, 0)
    rc, _, err = run(["compile", src], capsys)
    assert rc == 1 and f"cannot read '{src}': Permission denied" in err
    os.chmod(src, 0o644)
    d = tmp_path / "ro"
    d.mkdir(mode=0o555)
    rc, _, err = run(["compile", src, "-o", d / "k.ptx"], capsys)
    assert rc == 1 and err == f"tilec: error: cannot write '{d / 'k.ptx'}': Permission denied\n"


def test_compile_file_raises_compile_error_not_os_error(tmp_path):
    """Issue 15 item 12: the API's file entry point reports a missing or undecodable file as the
    CompileError every other bad input is."""
    with pytest.raises(CompileError, match="cannot read .*missing.tile.: No such file or directory"):
        compile_file(tmp_path / "missing.tile")
    bad = tmp_path / "latin1.tile"
    bad.write_bytes(b"target sm_100a;\n// caf\xe9\n")
    # offset: len("target sm_100a;\n") = 16, then "// caf" = 6 -> the Latin-1 e-acute is byte 22
    with pytest.raises(CompileError, match=r"is not valid UTF-8 \(byte 0xe9 at offset 22\)"):
        compile_file(bad)


@pytest.mark.parametrize("argv, message", [
    (["explain", "idesc", "0x08400490"], "explain idesc needs --kind"),
    (["explain", "idesc", "0x08400490", "--kind", "f17"], "--kind f17 is not a tcgen05 kind"),
    (["explain", "idesc", "0x100000000", "--kind", "f16"], "0x100000000 does not fit the 32-bit descriptor"),
    (["explain", "idesc", "-1", "--kind", "f16"], "-1 does not fit the 32-bit descriptor"),
    (["explain", "smem-desc", str(1 << 64)], "0x10000000000000000 does not fit the 64-bit descriptor"),
    (["explain", "zcm", "0", "--m", "100", "--n", "64"], "--m 100: a zero-column mask exists for M = 32, 64, 128"),
    (["explain", "zcm", "0", "--m", "64", "--n", "7"], "--n 7 is not 1..256 in 2 equal sub-masks"),
])
def test_explain_usage_mistakes_are_2(argv, message, capsys):
    """Issue 15 item 11: a missing/unknown --kind or an out-of-range value or M/N is a usage error (2),
    not a descriptor violation (1)."""
    rc, out, err = run(argv, capsys)
    assert rc == 2 and out == "" and message in err


# -- temporaries and signals -------------------------------------------------------------------------

# A child that compiles to OUT but stops inside the write, after the temporary exists: os.replace is
# wrapped to announce itself and sleep, so the parent can signal it at exactly that point.
# Dispositions are set as an interactive shell leaves them: a shell without job control starts background
# jobs (the test suite under land.sh) with SIGINT ignored, and tilec rightly leaves an ignored signal alone.
_CHILD = textwrap.dedent("""
    import os, signal, sys, time
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    real_replace = os.replace
    def slow_replace(a, b):
        print("TMP", a, flush=True)
        time.sleep(60)
        real_replace(a, b)
    os.replace = slow_replace
    from compiler.cli import main
    sys.exit(main(["compile", sys.argv[1], "-o", sys.argv[2]]))
""")


def _start_stuck_child(src: Path, out: Path) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, "-c", _CHILD, str(src), str(out)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    assert line.startswith("TMP "), line + proc.stderr.read()
    tmp = line.split(" ", 1)[1].strip()
    assert os.path.exists(tmp) and os.path.basename(tmp).startswith(".k.ptx.tilec-")
    return proc, tmp


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_a_signal_during_the_write_removes_the_temporary(sig, src, tmp_path):
    out = tmp_path / "k.ptx"
    out.write_text("old")
    proc, tmp = _start_stuck_child(src, out)
    proc.send_signal(sig)
    rc = proc.wait(timeout=30)
    err = proc.stderr.read()
    assert "Traceback" not in err
    # SIGTERM/SIGHUP: the process still dies of the signal; SIGINT: 'interrupted', status 130
    assert rc == (130 if sig == signal.SIGINT else -sig), err
    assert listing(tmp_path) == ["gemm.tile", "k.ptx"] and out.read_text() == "old"


def test_the_next_run_removes_the_temporary_of_a_killed_run(src, tmp_path, capsys):
    out = tmp_path / "k.ptx"
    proc, tmp = _start_stuck_child(src, out)
    proc.kill()
    proc.wait(timeout=30)
    assert os.path.exists(tmp)                                  # SIGKILL cannot be caught
    other = tmp_path / ".other.ptx.tilec-1-0.tmp"               # another output's temporary: not ours
    other.write_text("")
    assert run(["compile", src, "-o", out], capsys)[0] == 0
    assert listing(tmp_path) == [".other.ptx.tilec-1-0.tmp", "gemm.tile", "k.ptx"]


def test_a_live_runs_temporary_is_kept(src, tmp_path, capsys):
    """A concurrent run writing the same output is not a stale temporary."""
    out = tmp_path / "k.ptx"
    proc, tmp = _start_stuck_child(src, out)
    try:
        assert run(["compile", src, "-o", out], capsys)[0] == 0
        assert os.path.exists(tmp)
    finally:
        proc.kill()
        proc.wait(timeout=30)


def test_an_ignored_sighup_is_left_alone(src, tmp_path):
    """Under nohup SIGHUP is ignored: tilec must not turn it back into a fatal signal while writing."""
    out = tmp_path / "k.ptx"
    child = _CHILD.replace("signal.signal(signal.SIGHUP, signal.SIG_DFL)", "signal.signal(signal.SIGHUP, signal.SIG_IGN)")
    child = child.replace("time.sleep(60)", "time.sleep(2)")
    proc = subprocess.Popen([sys.executable, "-c", child, str(src), str(out)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline().startswith("TMP ")
    proc.send_signal(signal.SIGHUP)
    assert proc.wait(timeout=30) == 0, proc.stderr.read()
    assert listing(tmp_path) == ["gemm.tile", "k.ptx"] and ".entry gemm_bf16" in out.read_text()
