"""Finding and running ptxas, the assembler whose verdict tests trust.

Looked up in order: $PTXAS, `ptxas` on PATH, the `nvidia-cuda-nvcc` wheel
(site-packages/nvidia/cu13/bin/ptxas, installed by the test extra).
`assemble_cubin` is `tilec compile --emit cubin`: the PTX assembled for its own `.target`.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path


def find_cuda_tool(name: str, env: str, wheel_dirs: tuple[str, ...] = ("cu13", "cu12", "cuda_nvcc")) -> str | None:
    """A CUDA tool (ptxas, nvcc): $`env`, `name` on PATH, else the `nvidia-cuda-nvcc` wheel's
    site-packages/nvidia/<wheel_dir>/bin/`name`."""
    given = os.environ.get(env)
    if given:
        return given if os.path.isfile(given) and os.access(given, os.X_OK) else None
    on_path = shutil.which(name)
    if on_path:
        return on_path
    for base in map(Path, sys.path):
        for sub in wheel_dirs:
            cand = base / "nvidia" / sub / "bin" / name
            if cand.is_file() and os.access(cand, os.X_OK):
                return str(cand)
    return None


def find_ptxas() -> str | None:
    return find_cuda_tool("ptxas", "PTXAS")


@dataclass
class PtxasResult:
    ok: bool
    returncode: int
    output: str


def assemble(ptx: str, arch: str, ptxas: str | None = None, extra: list[str] | None = None) -> PtxasResult:
    """Assemble PTX text for `arch` (e.g. sm_100a); returns ptxas's verdict and messages."""
    exe = ptxas or find_ptxas()
    if exe is None:
        raise FileNotFoundError("ptxas not found (set $PTXAS, put it on PATH, or pip install nvidia-cuda-nvcc)")
    with tempfile.TemporaryDirectory() as d:
        src = Path(d) / "k.ptx"
        src.write_text(ptx)
        proc = subprocess.run([exe, f"-arch={arch}", "-o", str(Path(d) / "k.cubin"), *(extra or []), str(src)],
                              capture_output=True, text=True)
    return PtxasResult(proc.returncode == 0, proc.returncode, proc.stdout + proc.stderr)


ELF_MAGIC = b"\x7fELF"      # a cubin is an ELF object (e_ident[EI_MAG0..3])


class PtxasError(Exception):
    """`--emit cubin` could not get a cubin: no ptxas, or ptxas refused the PTX (message says why)."""


def ptx_target(ptx: str) -> str | None:
    """The target of PTX text: the first `.target NAME[, ...]` directive (PTX ISA 11.1.2 "PTX Module
    Directives: .target"). ptxas assembles for exactly that architecture (sm_100a, sm_90a, ...)."""
    for line in ptx.split("\n"):
        if line.startswith(".target"):
            return line[len(".target"):].split(",")[0].split("//")[0].strip() or None
    return None


def assemble_cubin(ptx: str, ptxas: str | None = None, name: str = "kernel.ptx") -> bytes:
    """Assemble PTX text into a cubin (ELF) for the PTX's own `.target`; raises PtxasError.

    `name` stands for the PTX file in ptxas's messages (they otherwise name a temporary file), so a user
    can look the line up in `tilec compile --emit ptx` output."""
    arch = ptx_target(ptx)
    if arch is None:
        raise PtxasError("the PTX has no .target directive")
    exe = ptxas or find_ptxas()
    if exe is None:
        if os.environ.get("PTXAS"):
            raise PtxasError(f"$PTXAS is '{os.environ['PTXAS']}', which is not an executable file")
        raise PtxasError("--emit cubin needs ptxas: put CUDA's ptxas on PATH, set $PTXAS, "
                         "or pip install nvidia-cuda-nvcc")
    from .ptxas_version import ptx_text_version, ptx_version_problem

    version = ptx_text_version(ptx)
    problem = ptx_version_problem(version, exe) if version else None      # asked once per ptxas, cached
    if problem:
        raise PtxasError(problem)
    with tempfile.TemporaryDirectory() as d:
        src, out = os.path.join(d, "k.ptx"), os.path.join(d, "k.cubin")
        with open(src, "w", encoding="utf-8") as f:
            f.write(ptx)
        try:
            proc = subprocess.run([exe, f"-arch={arch}", "-o", out, src], capture_output=True, text=True)
        except OSError as e:
            raise PtxasError(f"cannot run ptxas {exe}: {e.strerror or e}") from None
        messages = (proc.stdout + proc.stderr).replace(src, name).strip()
        if proc.returncode != 0:
            raise PtxasError(_explain_failure(exe, arch, messages, proc.returncode))
        try:
            with open(out, "rb") as f:
                cubin = f.read()
        except OSError:
            cubin = b""
    if not cubin.startswith(ELF_MAGIC):
        raise PtxasError(f"ptxas {exe} wrote no ELF object for {arch}" + (f":\n{messages}" if messages else ""))
    return cubin


def _explain_failure(exe: str, arch: str, messages: str, status: int) -> str:
    import re

    # An older CUDA's ptxas: "Unsupported .version 9.0; current version is '8.4'".
    m = re.search(r"Unsupported \.version (\d+\.\d+); current version is '(\d+\.\d+)'", messages)
    if m:
        return (f"the PTX needs PTX ISA {m.group(1)}, but {exe} accepts at most {m.group(2)} "
                f"(a newer CUDA's ptxas is needed; set $PTXAS to choose one)")
    return f"ptxas {exe} rejected the PTX for {arch} (exit status {status})" + (f":\n{messages}" if messages else "")
