"""`tilec compile --emit cubin` (issue 15): ptxas assembles the kernel for the file's own target.

A cubin is an ELF object: e_ident starts with 0x7f 'E' 'L' 'F', and e_machine (the 16-bit field at byte 18
of the ELF header, little-endian for ELFCLASS64/ELFDATA2LSB) is EM_CUDA = 190 (the ELF machine registry).
"""
from __future__ import annotations

import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest

from compiler.ptxas import ELF_MAGIC, PtxasError, assemble_cubin, ptx_target

ROOT = Path(__file__).resolve().parent.parent
EM_CUDA = 190


def _tilec(*args, env=None, **kw):
    return subprocess.run([sys.executable, "-m", "compiler", *args], capture_output=True,
                          env={**os.environ, **(env or {})}, **kw)


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    # the ptxas version probe (compiler/ptxas_version.py) caches per ptxas executable: keep fakes out of ~/.cache
    monkeypatch.setenv("TILEC_CACHE_DIR", str(tmp_path / "cache"))


def _is_cuda_elf(data: bytes) -> bool:
    return data[:4] == ELF_MAGIC and int.from_bytes(data[18:20], "little") == EM_CUDA


@pytest.mark.parametrize("example", ["gemm_bf16.tile", "sparse_wgmma_f16.tile"])
def test_cubin_file_is_a_cuda_elf(example, tmp_path, ptxas):
    out = tmp_path / "k.cubin"
    proc = _tilec("compile", str(ROOT / "examples" / example), "--emit", "cubin", "-o", str(out),
                  env={"PTXAS": ptxas})
    assert proc.returncode == 0, proc.stderr
    assert _is_cuda_elf(out.read_bytes())


def test_cubin_to_a_redirected_stdout(ptxas):
    proc = _tilec("compile", str(ROOT / "examples" / "sparse_f16.tile"), "--emit", "cubin", env={"PTXAS": ptxas})
    assert proc.returncode == 0, proc.stderr
    assert _is_cuda_elf(proc.stdout)


def test_cubin_to_a_terminal_is_a_usage_error():
    leader, follower = pty.openpty()
    try:
        proc = subprocess.run([sys.executable, "-m", "compiler", "compile", str(ROOT / "examples" / "gemm_bf16.tile"),
                               "--emit", "cubin"], stdout=follower, stderr=subprocess.PIPE, text=True)
    finally:
        os.close(follower)
        os.close(leader)
    assert proc.returncode == 2
    assert "--emit cubin writes a binary file: give -o FILE" in proc.stderr


def test_ptx_target_is_the_target_directive():
    assert ptx_target("//\n.version 8.6\n.target sm_100a\n.address_size 64\n") == "sm_100a"
    assert ptx_target(".version 8.0\n.target sm_90a, debug\n") == "sm_90a"
    with pytest.raises(PtxasError, match="no .target"):
        assemble_cubin(".version 8.0\n")


def test_no_ptxas_is_a_clear_error(tmp_path):
    proc = _tilec("compile", str(ROOT / "examples" / "gemm_bf16.tile"), "--emit", "cubin", "-o",
                  str(tmp_path / "k.cubin"), env={"PTXAS": str(tmp_path / "missing")}, text=True)
    assert proc.returncode == 1
    assert proc.stderr == f"tilec: error: $PTXAS is '{tmp_path / 'missing'}', which is not an executable file\n"
    assert not (tmp_path / "k.cubin").exists()


def _fake_ptxas(tmp_path: Path, stderr_line: str) -> str:
    """A ptxas that rejects its input the way the real one words it; $SRC is the PTX path it was given."""
    exe = tmp_path / "ptxas"
    exe.write_text('#!/bin/sh\nfor a; do SRC="$a"; done\n'
                   f'echo "{stderr_line}" >&2\nexit 255\n')
    exe.chmod(0o755)
    return str(exe)


def test_ptxas_rejection_is_a_diagnostic_naming_the_ptx_not_a_temporary(tmp_path):
    fake = _fake_ptxas(tmp_path, "ptxas $SRC, line 12; error   : Arguments mismatch for instruction 'mma'")
    proc = _tilec("compile", str(ROOT / "examples" / "gemm_bf16.tile"), "--emit", "cubin", "-o",
                  str(tmp_path / "k.cubin"), env={"PTXAS": fake}, text=True)
    assert proc.returncode == 1
    assert proc.stderr == (
        f"tilec: error: ptxas {fake} rejected the PTX for sm_100a (exit status 255):\n"
        "ptxas gemm_bf16.ptx, line 12; error   : Arguments mismatch for instruction 'mma'\n"
        "hint: `tilec compile --emit ptx` writes the gemm_bf16.ptx that ptxas's line numbers refer to\n")
    assert not (tmp_path / "k.cubin").exists()


def test_ptx_newer_than_ptxas_is_an_error_for_cubin(tmp_path):
    # What an older CUDA's ptxas says to PTX ISA 8.6 (gemm_bf16 needs 8.6: tcgen05.mma on sm_100a).
    fake = _fake_ptxas(tmp_path, "ptxas fatal   : Unsupported .version 8.6; current version is '8.4'")
    proc = _tilec("compile", str(ROOT / "examples" / "gemm_bf16.tile"), "--emit", "cubin", "-o",
                  str(tmp_path / "k.cubin"), env={"PTXAS": fake}, text=True)
    assert proc.returncode == 1
    assert proc.stderr == (f"tilec: error: the PTX needs PTX ISA 8.6, but {fake} accepts at most 8.4 "
                           "(a newer CUDA's ptxas is needed; set $PTXAS to choose one)\n")
