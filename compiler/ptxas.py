"""Finding and running ptxas, the assembler whose verdict tests trust.

Looked up in order: $PTXAS, `ptxas` on PATH, the `nvidia-cuda-nvcc` wheel
(site-packages/nvidia/cu13/bin/ptxas, installed by the test extra).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path


def find_ptxas() -> str | None:
    env = os.environ.get("PTXAS")
    if env:
        return env if os.path.isfile(env) and os.access(env, os.X_OK) else None
    on_path = shutil.which("ptxas")
    if on_path:
        return on_path
    for base in map(Path, sys.path):
        for sub in ("cu13", "cu12", "cuda_nvcc"):
            cand = base / "nvidia" / sub / "bin" / "ptxas"
            if cand.is_file() and os.access(cand, os.X_OK):
                return str(cand)
    return None


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
