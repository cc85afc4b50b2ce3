"""Does the ptxas in use accept the PTX ISA version tilec writes?

tilec writes the `.version` its forms and target need (verify); an older CUDA's ptxas rejects a newer
one ("Unsupported .version 9.0; current version is '8.4'"). When PTX is written, the command line
warns about that (`warn_if_ptxas_too_old`); `tilec compile --emit cubin` makes it an error
(`ptx_version_problem`).

Start-up cost. Asking ptxas costs a process start (tens of ms), too much for every `tilec compile`
(lit pays start-up on every RUN line). So the answer is cached per ptxas executable (its real path,
size and modification time) in tilec's cache directory (that of the parser cache): a warm check is
a PATH lookup, one stat and a small JSON read. No ptxas found: no check, no warning (the PTX may be
meant for another machine). A cache file that is unreadable, corrupt or of the wrong shape is ignored
and rewritten.

How the newest version is learned: ptxas is given a stub module with `.version 99.9`; every ptxas
since CUDA 11 answers "Unsupported .version 99.9; current version is 'X.Y'", the newest PTX ISA it
accepts. That needs no table of CUDA releases and stays right for releases newer than tilec.
"""
from __future__ import annotations

import os
import sys

Version = tuple[int, int]

_CACHE_NAME = "ptxas-versions.json"


def find_ptxas_quick() -> str | None:
    """$PTXAS, else `ptxas` on PATH, else the nvidia-cuda-nvcc wheel (compiler/ptxas.py's order), without
    the imports of compiler/ptxas.py (shutil, subprocess, pathlib)."""
    env = os.environ.get("PTXAS")
    if env:
        return env if os.path.isfile(env) and os.access(env, os.X_OK) else None
    for d in os.environ.get("PATH", os.defpath).split(os.pathsep):
        cand = os.path.join(d or ".", "ptxas")
        if os.path.isfile(cand) and os.access(cand, os.X_OK):
            return cand
    for base in sys.path:
        for sub in ("cu13", "cu12", "cuda_nvcc"):
            cand = os.path.join(base or ".", "nvidia", sub, "bin", "ptxas")
            if os.path.isfile(cand) and os.access(cand, os.X_OK):
                return cand
    return None


def _cache_path() -> str:
    # the parser cache's directory (compiler/frontend/parser.py _cache_dir)
    env = os.environ.get("TILEC_CACHE_DIR")
    if env:
        return os.path.join(env, _CACHE_NAME)
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = os.path.join(xdg, "tilec") if xdg else os.path.join(os.path.expanduser("~"), ".cache", "tilec")
    return os.path.join(base, _CACHE_NAME)


def _load_cache(path: str) -> dict:
    import json

    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _store_cache(path: str, data: dict) -> None:
    import json

    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(data, f, sort_keys=True)
        os.replace(tmp, path)
    except OSError:            # read-only cache directory: ask ptxas again next time
        try:
            os.unlink(tmp)
        except OSError:
            pass


def probe_max_ptx(exe: str) -> Version | None:
    """Run ptxas once on a `.version 99.9` stub and read the newest version from its complaint."""
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        stub = os.path.join(d, "probe.ptx")
        with open(stub, "w", encoding="ascii") as f:
            f.write(".version 99.9\n.target sm_80\n.address_size 64\n")
        try:
            proc = subprocess.run([exe, "-arch=sm_80", stub, "-o", os.path.join(d, "probe.cubin")],
                                  capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.SubprocessError):
            return None
    import re

    m = re.search(r"current version is '(\d+)\.(\d+)'", proc.stdout + proc.stderr)
    return (int(m.group(1)), int(m.group(2))) if m else None


def ptxas_max_ptx(exe: str | None = None) -> tuple[str, Version] | None:
    """(ptxas path, newest PTX ISA version it accepts), cached; None when there is no ptxas or it does
    not say."""
    exe = exe or find_ptxas_quick()
    if exe is None:
        return None
    try:
        real = os.path.realpath(exe)
        st = os.stat(real)
    except OSError:
        return None
    stamp = [st.st_size, st.st_mtime_ns]
    path = _cache_path()
    cache = _load_cache(path)
    entry = cache.get(real)
    if isinstance(entry, dict) and entry.get("stamp") == stamp:
        v = entry.get("max_ptx")
        if isinstance(v, list) and len(v) == 2 and all(isinstance(x, int) for x in v):
            return exe, (v[0], v[1])
        if v is None:
            return None
    found = probe_max_ptx(exe)
    cache = {k: v for k, v in cache.items() if isinstance(v, dict)}
    cache[real] = {"stamp": stamp, "max_ptx": list(found) if found else None}
    _store_cache(path, cache)
    return (exe, found) if found else None


def ptx_version_problem(version: Version, exe: str | None = None) -> str | None:
    """Why the ptxas in use (or `exe`) cannot assemble PTX of ISA `version`, or None when it can or when
    there is no ptxas to ask. `--emit cubin` reports it as an error."""
    known = ptxas_max_ptx(exe)
    if known is None:
        return None
    path, newest = known
    if version <= newest:
        return None
    return (f"the PTX needs PTX ISA {version[0]}.{version[1]}, but {path} accepts at most "
            f"{newest[0]}.{newest[1]} (a newer CUDA's ptxas is needed; set $PTXAS to choose one)")


def ptx_text_version(ptx: str) -> Version | None:
    """The `.version X.Y` of PTX text (its first directive; only comments come before it)."""
    at = ptx.find("\n.version ") + 1 if not ptx.startswith(".version ") else 0
    if at == 0 and not ptx.startswith(".version "):
        return None
    major, _, minor = ptx[at + len(".version "):ptx.find("\n", at) % (len(ptx) + 1)].strip().partition(".")
    return (int(major), int(minor)) if major.isdigit() and minor.isdigit() else None


def warn_if_ptxas_too_old(ptx: str) -> str | None:
    """The warning to print when the PTX being written is newer than the ptxas in use accepts."""
    version = ptx_text_version(ptx)
    problem = ptx_version_problem(version) if version else None
    return f"tilec: warning: {problem}" if problem else None
