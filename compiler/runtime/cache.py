"""The compiled-kernel cache: cubins assembled by ptxas, under `kernels/` of the parser's cache directory
($TILEC_CACHE_DIR, else $XDG_CACHE_HOME/tilec, else ~/.cache/tilec). The key is the SHA-256 of the PTX
text, the ptxas target, ptxas's version and options, and the driver version; the file holds a header with
the cubin's own SHA-256, so a truncated or corrupt entry is detected, removed and rebuilt. Entries are
written to a temporary file and renamed (parallel processes never read half an entry)."""
from __future__ import annotations

import hashlib
import os
import subprocess
import tempfile

MAGIC = b"TILEC-CUBIN 1\n"
_PTXAS_VERSIONS: dict[str, str] = {}


def cache_dir() -> str:
    from ..frontend.parser import _cache_dir

    return os.path.join(_cache_dir(), "kernels")


def ptxas_version(exe: str) -> str:
    """ptxas's `--version` text (its last line names the release and build); asked once per process."""
    if exe not in _PTXAS_VERSIONS:
        proc = subprocess.run([exe, "--version"], capture_output=True, text=True)
        _PTXAS_VERSIONS[exe] = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else "unknown"
    return _PTXAS_VERSIONS[exe]


def key(ptx: str, arch: str, ptxas: str, options: tuple[str, ...], driver: int) -> str:
    h = hashlib.sha256()
    for part in (hashlib.sha256(ptx.encode()).hexdigest(), arch, ptxas, " ".join(options), str(driver)):
        h.update(part.encode() + b"\0")
    return h.hexdigest()


def read(path: str) -> bytes | None:
    """The cubin of a cache entry, or None when missing or corrupt (a corrupt entry is removed)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return None
    head = MAGIC + b"sha256 "
    if data.startswith(head) and len(data) > len(head) + 65 and data[len(head) + 64:len(head) + 65] == b"\n":
        digest = data[len(head):len(head) + 64].decode("ascii", "replace")
        body = data[len(head) + 65:]
        if hashlib.sha256(body).hexdigest() == digest:
            return body
    try:
        os.unlink(path)
    except OSError:
        pass
    return None


def write(path: str, cubin: bytes) -> None:
    """Store an entry atomically; a cache that cannot be written (read-only home) is only slower."""
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-")
        with os.fdopen(fd, "wb") as f:
            f.write(MAGIC + b"sha256 " + hashlib.sha256(cubin).hexdigest().encode() + b"\n" + cubin)
        os.replace(tmp, path)
    except OSError:
        pass


def assemble(ptx: str, arch: str, exe: str, options: tuple[str, ...] = ()) -> bytes:
    """ptxas's cubin of `ptx` for `arch`; RuntimeError with ptxas's messages when it refuses."""
    with tempfile.TemporaryDirectory() as d:
        src, out = os.path.join(d, "k.ptx"), os.path.join(d, "k.cubin")
        with open(src, "w") as f:
            f.write(ptx)
        proc = subprocess.run([exe, f"-arch={arch}", *options, "-o", out, src], capture_output=True, text=True)
        if proc.returncode != 0:
            from .errors import TilecRuntimeError

            raise TilecRuntimeError(f"ptxas -arch={arch} failed:\n{proc.stdout}{proc.stderr}".rstrip())
        with open(out, "rb") as f:
            return f.read()


def cubin(ptx: str, arch: str, driver: int, exe: str, options: tuple[str, ...] = ()) -> tuple[bytes, bool]:
    """(cubin, whether it came from the cache) for `ptx` on `arch`, assembling and storing on a miss."""
    path = os.path.join(cache_dir(), key(ptx, arch, ptxas_version(exe), options, driver) + ".cubin")
    hit = read(path)
    if hit is not None:
        return hit, True
    data = assemble(ptx, arch, exe, options)
    write(path, data)
    return data, False
