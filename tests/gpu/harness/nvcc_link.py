"""Building CUDA C++ callers of tilec fragments with nvcc: the README "Embedding" recipe as functions.

    .tile --(tilec compile --emit func)--> frag.ptx --(nvcc -gencode arch=compute_XX,code=sm_XX -dc)--> frag.o
    caller.cu --(nvcc -gencode ... -rdc=true -dc)--> caller.o
    caller.o frag.o --(nvcc -gencode ...)--> executable   (or -dlink -cubin: one linked cubin to load)

`-gencode arch=compute_XX,code=sm_XX` names the PTX's own virtual architecture: nvcc takes a `.ptx` input
as code for that virtual architecture, and `-arch=sm_90a` alone makes ptxas refuse the `.target sm_90a`
PTX ("cannot be compiled for architecture 'compute_90'"). Separate compilation (`-rdc=true` / `-dc`) is
what lets a caller call an `extern "C" __device__` function defined in another object (nvlink resolves
it and compares the two prototypes).

nvcc is looked up like ptxas (compiler/ptxas.py): $NVCC, `nvcc` on PATH, the `nvidia-cuda-nvcc` wheel
(site-packages/nvidia/cu13/bin/nvcc, with nvlink, fatbinary and ptxas beside it; the test extra pins the
wheels its front end needs, nvidia-nvvm and nvidia-cuda-crt, to the same release). The host compiler is
the system's (`g++` on PATH, as nvcc finds it). Nothing here needs a GPU.
"""
from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path

from compiler.ptxas import find_cuda_tool


def find_nvcc() -> str | None:
    return find_cuda_tool("nvcc", "NVCC", ("cu13",))


def gencode(target: str) -> list[str]:
    """`-gencode arch=compute_90a,code=sm_90a` for target sm_90a (nvcc's virtual + real architecture pair)."""
    return ["-gencode", f"arch=compute_{target[3:]},code={target}"]


class NvccError(RuntimeError):
    pass


def run_nvcc(nvcc: str, args: Sequence[str], cwd: str | Path) -> str:
    proc = subprocess.run([nvcc, *args], cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise NvccError(f"nvcc {' '.join(args)} (in {cwd}) failed with status {proc.returncode}:\n"
                        f"{proc.stdout}{proc.stderr}")
    return proc.stdout + proc.stderr


@lru_cache(maxsize=None)
def toolchain_problem(nvcc: str | None) -> str | None:
    """Why this nvcc cannot build a `-rdc` caller and link it into an executable, or None.

    Catches the two ways a partial toolchain fails: no host compiler, and a front end (cicc, from the
    nvidia-nvvm wheel) newer than the ptxas beside nvcc ("Unsupported .version 9.5; current version is
    '9.0'": the nvcc wheel does not pin the wheels it depends on)."""
    if nvcc is None:
        return "nvcc not found (set $NVCC, put it on PATH, or pip install nvidia-cuda-nvcc)"
    if shutil.which("g++") is None and shutil.which("c++") is None:
        return "nvcc needs a host C++ compiler (g++) on PATH"
    with tempfile.TemporaryDirectory() as d:
        Path(d, "probe.cu").write_text('extern "C" __device__ unsigned probe_f(unsigned);\n'
                                       'extern "C" __global__ void probe_k(unsigned *p) { *p = probe_f(*p); }\n'
                                       'extern "C" __device__ unsigned probe_f(unsigned x) { return x + 1; }\n'
                                       "int main() { return 0; }\n")
        try:
            run_nvcc(nvcc, [*gencode("sm_80"), *host_library_flags(nvcc), "-rdc=true", "probe.cu", "-o", "probe"], d)
        except NvccError as e:
            first = next((ln for ln in str(e).splitlines()[1:] if ln.strip()), "")
            hint = ("; the front end writes a newer PTX ISA than this ptxas reads: install nvidia-nvvm and "
                    "nvidia-cuda-crt of nvcc's own release (pyproject's test extra pins them)"
                    if "Unsupported .version" in first else "")
            return f"{nvcc} cannot build a -rdc executable: {first.strip()}{hint}"
    return None


def compile_caller(nvcc: str, cu: str, target: str, workdir: Path, stem: str = "caller",
                   extra: Sequence[str] = ()) -> Path:
    """caller.cu -> caller.o, relocatable device code (`-rdc=true -dc`)."""
    (workdir / f"{stem}.cu").write_text(cu)
    run_nvcc(nvcc, [*gencode(target), "-rdc=true", "-dc", *extra, f"{stem}.cu", "-o", f"{stem}.o"], workdir)
    return workdir / f"{stem}.o"


def compile_fragments(nvcc: str, ptx: str, target: str, workdir: Path, stem: str = "fragments") -> Path:
    """tilec's PTX (`--emit func`) -> a relocatable object (`-dc`: ptxas -c, wrapped for nvlink)."""
    (workdir / f"{stem}.ptx").write_text(ptx)
    run_nvcc(nvcc, [*gencode(target), "-dc", f"{stem}.ptx", "-o", f"{stem}.o"], workdir)
    return workdir / f"{stem}.o"


def host_library_flags(nvcc: str) -> list[str]:
    """`-L` for the CUDA runtime libraries where nvcc's profile does not look: the wheel puts
    libcudart_static.a and libcudadevrt.a in nvidia/cu13/lib, its nvcc.profile searches lib64."""
    top = Path(nvcc).resolve().parent.parent
    if (top / "lib" / "libcudart_static.a").is_file() and not (top / "lib64" / "libcudart_static.a").is_file():
        return ["-L", str(top / "lib")]
    return []


def link_executable(nvcc: str, objects: Sequence[Path], target: str, workdir: Path, name: str = "app") -> Path:
    """Device link (nvlink: resolves the extern calls, checks prototypes) and host link, in one nvcc call."""
    run_nvcc(nvcc, [*gencode(target), *host_library_flags(nvcc), *map(str, objects), "-o", name], workdir)
    return workdir / name


def link_cubin(nvcc: str, objects: Sequence[Path], target: str, workdir: Path, name: str = "linked.cubin") -> Path:
    """Device link only, to one cubin a driver API (cupy.RawModule, cuModuleLoad) loads."""
    run_nvcc(nvcc, [*gencode(target), "-dlink", "-cubin", *map(str, objects), "-o", name], workdir)
    return workdir / name


def _argument(cpp_type: str, word: str) -> str:
    return {"float": f"__uint_as_float({word})", "int": f"(int){word}", "unsigned": word}[cpp_type]


def _caller_kernel(kernel: str, callee: str, f, args: str) -> str:
    """`extern "C" __global__ void KERNEL(const unsigned *in[, D *out])` calling `callee(args)`: a fragment
    with a result by every thread (written to out[threadIdx.x]), one without by thread 0."""
    if f.result is None:
        return (f'extern "C" __global__ void {kernel}(const unsigned *in) {{\n'
                f"    if (threadIdx.x == 0) {callee}({args});\n}}")
    return (f'extern "C" __global__ void {kernel}(const unsigned *in, {f.result.cpp_type} *out) {{\n'
            f"    out[threadIdx.x] = {callee}({args});\n}}")


def caller_source(fragments: Sequence) -> str:
    """A CUDA C++ translation unit that declares each fragment (`Fragment.cpp_declaration()`) and calls it
    from a kernel of its own, `call_<fragment>(const unsigned *in[, D *out])`, every argument read from
    `in` (so nothing folds): mma.sp fragments by every thread of the block (a warp calls together),
    tcgen05 fragments by thread 0. Enough to make nvcc emit the `.extern .func` prototype and nvlink
    resolve and check it; the GPU tests run a real caller (fragment_gemm.py)."""
    out = []
    for f in fragments:
        args = ", ".join(_argument(p.cpp_type, f"in[{i}]") for i, p in enumerate(f.params))
        out.append(f.cpp_declaration().rstrip("\n"))
        out.append(_caller_kernel(f"call_{f.name}", f.name, f, args))
    out.append("int main() { return 0; }")
    return "\n".join(out) + "\n"


def header_caller_source(fragments: Sequence, header: str,
                         kinds: Sequence[str] = ("call", "inline", "bundle", "bundle_inline")) -> str:
    """A translation unit that includes the `--emit header` output `header` and, per fragment, calls it
    out of line from `call_<name>` and inlined (`<name>_inline`) from `inline_<name>`; mma.sp fragments
    also through their register bundles (`<name>_call` / `<name>_call_inline`, kernels `bundle_<name>` /
    `bundle_inline_<name>`); `kinds` picks which of these kernels to write. Arguments come from `in` as
    in caller_source."""
    out = [f'#include "{header}"']
    for f in fragments:
        args = ", ".join(_argument(p.cpp_type, f"in[{i}]") for i, p in enumerate(f.params))
        for kernel, callee in ((f"call_{f.name}", f.name), (f"inline_{f.name}", f"{f.name}_inline")):
            if kernel.split("_")[0] not in kinds:
                continue
            out.append(_caller_kernel(kernel, callee, f, args))
        if f.result is None:
            continue
        steps = f.constants["k_steps"]
        c_regs = sum(1 for p in f.params if p.name.startswith("c"))
        fill = [f"    {f.name}_c c;", f"    {f.name}_k_step k[{steps}];",
                f"    for (int i = 0; i < {c_regs}; ++i) c.r[i] = ({f.params[0].cpp_type})in[i];",
                "    unsigned *w = (unsigned *)k;",
                f"    for (int i = 0; i < (int)(sizeof(k) / 4); ++i) w[i] = in[{c_regs} + i];"]
        for kind, callee in (("bundle", f"{f.name}_call"), ("bundle_inline", f"{f.name}_call_inline")):
            if kind not in kinds:
                continue
            kernel = f"{kind}_{f.name}"
            out.append(f'extern "C" __global__ void {kernel}(const unsigned *in, {f.name}_c *out) {{\n'
                       + "\n".join(fill) + f"\n    out[threadIdx.x] = {callee}(c, k);\n}}")
    out.append("int main() { return 0; }")
    return "\n".join(out) + "\n"


def entry_bodies(ptx: str) -> dict[str, str]:
    """The text of each `.entry` of a PTX module (from its name to the next entry), by name."""
    import re

    parts = re.split(r"^\.visible \.entry (\w+)\(", ptx, flags=re.M)
    return {parts[i]: parts[i + 1] for i in range(1, len(parts) - 1, 2)}


def undefined_functions(cubin: Path) -> list[str]:
    """The functions a relocatable cubin (`nvcc -rdc=true -cubin`) calls but does not define (`readelf -sW`:
    FUNC symbols in section UND): what an out-of-line call leaves for nvlink, and what an inlined one does not."""
    proc = subprocess.run(["readelf", "-sW", str(cubin)], capture_output=True, text=True, check=True)
    return sorted(ln.split()[-1] for ln in proc.stdout.splitlines() if " FUNC " in ln and " UND " in ln)
