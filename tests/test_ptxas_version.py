"""The PTX ISA version written vs the ptxas in use (compiler/ptxas_version.py): a warning when PTX is
written, cached per ptxas executable so that start-up does not pay a ptxas run."""
from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from compiler import ptxas_version
from compiler.cli import main

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "gemm_bf16.tile"        # sm_100a: .version 8.6 (the target's minimum)


def fake_ptxas(d: Path, newest: str) -> Path:
    """A ptxas that answers the `.version 99.9` probe as ptxas does, and logs each call."""
    exe = d / "ptxas"
    exe.write_text("#!/bin/sh\n"
                   f"echo call >> '{d}/calls'\n"
                   f"echo \"ptxas probe.ptx, line 1; fatal   : Unsupported .version 99.9; current version is "
                   f"'{newest}'\" >&2\n"
                   "exit 255\n")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return exe


@pytest.fixture
def env(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEC_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path


def compile_rc(capsys, *extra):
    rc = main(["compile", str(EXAMPLE), *extra])
    return rc, *capsys.readouterr()


def test_ptx_newer_than_ptxas_is_a_warning(env, monkeypatch, capsys):
    """CUDA 12.4's ptxas takes PTX ISA 8.4 at most; sm_100a PTX is .version 8.6 (PTX ISA release notes:
    sm_100a from 8.6)."""
    monkeypatch.setenv("PTXAS", str(fake_ptxas(env, "8.4")))
    rc, out, err = compile_rc(capsys)
    assert rc == 0 and ".version 8.6" in out
    assert err == (f"tilec: warning: the PTX needs PTX ISA 8.6, but {env / 'ptxas'} accepts at most 8.4 "
                   "(a newer CUDA's ptxas is needed; set $PTXAS to choose one)\n")


def test_no_warning_when_ptxas_is_new_enough_or_absent(env, monkeypatch, capsys):
    monkeypatch.setenv("PTXAS", str(fake_ptxas(env, "9.0")))
    assert compile_rc(capsys)[2] == ""
    monkeypatch.setenv("PTXAS", str(env / "no-such-ptxas"))
    assert compile_rc(capsys)[2] == ""


def test_ptxas_is_asked_once_then_the_cache_answers(env, monkeypatch, capsys):
    exe = fake_ptxas(env, "8.4")
    monkeypatch.setenv("PTXAS", str(exe))
    for _ in range(3):
        assert "warning" in compile_rc(capsys)[2]
    assert (env / "calls").read_text().count("call") == 1
    # a changed executable (another size) is asked again
    exe.write_text(exe.read_text() + "# updated\n")
    assert "warning" in compile_rc(capsys)[2]
    assert (env / "calls").read_text().count("call") == 2


@pytest.mark.parametrize("content", ["{not json", "[1, 2]", '{"x": 3}', '{"%s": {"stamp": "bad"}}'])
def test_a_corrupt_cache_is_ignored_and_rewritten(content, env, monkeypatch, capsys):
    exe = fake_ptxas(env, "8.4")
    monkeypatch.setenv("PTXAS", str(exe))
    cache = env / "cache" / "ptxas-versions.json"
    cache.parent.mkdir()
    cache.write_text(content.replace("%s", os.path.realpath(exe)))
    rc, out, err = compile_rc(capsys)
    assert rc == 0 and "accepts at most 8.4" in err
    assert json.loads(cache.read_text())[os.path.realpath(exe)]["max_ptx"] == [8, 4]


def test_emit_ir_does_not_warn(env, monkeypatch, capsys):
    monkeypatch.setenv("PTXAS", str(fake_ptxas(env, "8.4")))
    rc, out, err = compile_rc(capsys, "--emit", "ir")
    assert rc == 0 and err == "" and not (env / "calls").exists()


def test_the_real_ptxas_is_probed(env):
    """The probe's answer from the ptxas on PATH (when there is one) is a version tilec can compare."""
    exe = ptxas_version.find_ptxas_quick()
    if exe is None:
        pytest.skip("no ptxas")
    found = ptxas_version.ptxas_max_ptx(exe)
    assert found is not None and found[1] >= (7, 0)


def test_ptx_version_problem_for_emit_cubin(env):
    """The function `--emit cubin` calls: a message when the ptxas cannot take the version, else None."""
    exe = str(fake_ptxas(env, "8.8"))
    assert ptxas_version.ptx_version_problem((8, 8), exe) is None
    assert "needs PTX ISA 9.0" in ptxas_version.ptx_version_problem((9, 0), exe)
