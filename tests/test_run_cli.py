"""`tilec run` without a GPU: usage errors (exit 2), a tile this machine cannot run is a clear error that
names --emulate (exit 1, no traceback), and `--emulate` checks every example on the CPU emulator."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from compiler.cli import main

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EX = os.path.join(ROOT, "examples")
EXAMPLES = sorted(f for f in os.listdir(EX) if f.endswith(".tile"))


def _has_gpu() -> bool:
    try:
        from cuda.core import Device

        Device()
        return True
    except Exception:
        return False


def run(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main(["run", *argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


def _example_tiles() -> list:
    """(file, tile) of every tile of every example, in file order. By default each file's first tile runs; the
    others, tcgen05_k96's big problem and the cluster-launch-control example (tests/test_tcgen05_clc.py runs
    a small one by default) are in the slow sweep. The other tiles of a file vary the schedule of the same
    kernel, which tests/test_sparse_wgmma_sched.py and the GPU slice (tests/gpu/test_dsl_examples_gpu.py,
    every tile of every example) exercise; emulating them all took about a fifth of the suite's time."""
    import re

    out = []
    for name in EXAMPLES:
        with open(os.path.join(EX, name)) as f:
            tiles = re.findall(r"^\s*tile\s+([A-Za-z_][A-Za-z0-9_]*)", f.read(), re.M)
        assert tiles, name
        for i, tile in enumerate(tiles):
            slow = i > 0 or name in ("tcgen05_k96.tile", "tcgen05_gemm_f16_clc.tile")
            out.append(pytest.param(name, tile, id=f"{name}:{tile}", marks=pytest.mark.slow if slow else ()))
    return out


@pytest.mark.parametrize("name,tile", _example_tiles())
def test_emulate_passes_on_every_example(capsys, name, tile):
    rc, out, err = run(capsys, "--emulate", os.path.join(EX, name), "--tile", tile)
    assert rc == 0, out + err
    # a fused epilogue's .approx activations are checked within their error bound (compiler/emulator/
    # sparse_host.py epilogue_atol); every other kernel bit for bit
    with open(os.path.join(EX, name)) as f:
        fused = any(line.strip().startswith(("epilogue ", "epilogue;")) for line in f)      # bare `epilogue;` too
    want = "D matches the numpy reference " + ("within the epilogue's tolerance" if fused else "bit for bit")
    assert out.count(want) == len(out.splitlines()) >= 1


def test_emulate_takes_a_shape_whose_k_is_not_the_loop_k(capsys):
    # sparse_gemm_f16's tile loops K = 32; its pipelined kernel takes any multiple of its K step, 64
    rc, out, _ = run(capsys, "--emulate", "--shape", "128,256,192", os.path.join(EX, "sparse_gemm_f16.tile"))
    assert rc == 0 and "128 x 256 x 192" in out


@pytest.mark.parametrize("argv, message", [
    (["--shape", "1,2"], "--shape must be M,N,K"),
    (["--shape", "1,1,2147483648"], "K < 2147483648"),           # any M, N, K >= 1 up to the limits
    (["--emulate", "--bench"], "--bench times the GPU"),
    (["--tile", "nope"], "--tile nope: no such tile"),
    (["--iters", "0", "--bench"], "--iters must be positive"),
    (["--warm-ms", "-1", "--bench"], "--warm-ms must be a finite number of milliseconds, not negative"),
    (["--warm-ms", "nan", "--bench"], "--warm-ms must be a finite number of milliseconds, not negative"),
    (["--warm-ms", "inf", "--bench"], "--warm-ms must be a finite number of milliseconds, not negative"),
])
def test_usage_errors(capsys, argv, message):
    rc, _, err = run(capsys, *argv, os.path.join(EX, "sparse_gemm_f16.tile"))
    assert rc == 2 and message in err


def test_emulate_a_batch(capsys):
    """--batch: two problems of 100 x 72 x 64 in one launch of the warp-specialised kernel (one partial tile
    each) on the emulator, both checked bit for bit."""
    rc, out, err = run(capsys, "--emulate", "--batch", "2", "--shape", "100,72,64",
                       os.path.join(EX, "tcgen05_gemm_f16.tile"))
    assert rc == 0, out + err
    assert "100 x 72 x 64 x 2 problems on the CPU emulator" in out and "bit for bit" in out


@pytest.mark.parametrize("argv, name, message", [
    (["--batch", "0"], "tcgen05_gemm_f16.tile", "--batch must be positive"),
    # the one-instruction-tile mma.sp kernel has no `batch` in its ABI
    (["--emulate", "--batch", "2"], "sparse_f16.tile", "takes no batch"),
    (["--emulate", "--batch", "70000", "--shape", "128,128,64"], "tcgen05_gemm_f16.tile", "batch <= 65535"),
])
def test_batch_usage_errors(capsys, argv, name, message):
    rc, _, err = run(capsys, *argv, os.path.join(EX, name))
    assert rc == 2 and message in err, err


@pytest.mark.parametrize("name, k, statement, unit", [
    ("tcgen05_gemm_sparse_f16.tile", "98", "sparsity 2:4", "4-element chunks"),
    ("tcgen05_gemm_mxf4nvf4.tile", "264", "block_scale vec=16", "16-element scale vectors")])
def test_ws_k_off_its_unit_is_located_at_the_statement_that_imposes_it(capsys, name, k, statement, unit):
    """A warp-specialised tcgen05 tile takes any K that is whole metadata chunks / scale vectors (a K tail
    is zero-filled and its images padded): another K is blamed on the tile's `sparsity` / `block_scale`
    (tcgen05_ws_kernel.check_k), with the PTX section in the hint; exit 1, on the emulator and the GPU alike."""
    path = os.path.join(EX, name)
    rc, _, err = run(capsys, "--emulate", "--shape", f"64,64,{k}", path)
    line = next(i for i, text in enumerate(open(path).read().splitlines(), 1) if text.strip().startswith(statement))
    assert rc == 1 and err.startswith(f"{path}:{line}:") and f"K = {k} is not a multiple" in err
    assert "^" in err and f"hint: " in err and unit in err and "PTX 9.7.16.10." in err


def test_tcgen05_k_is_fixed(capsys):
    rc, _, err = run(capsys, "--emulate", "--shape", "128,256,128", os.path.join(EX, "gemm_bf16.tile"))
    assert rc == 2 and "K == 64" in err


def test_no_gpu_is_a_clear_error_naming_emulate():
    if _has_gpu():
        pytest.skip("a GPU is present")
    proc = subprocess.run([sys.executable, "-m", "compiler.cli", "run", os.path.join(EX, "sparse_f16.tile")],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 1, proc.stderr
    assert "--emulate" in proc.stderr and "Traceback" not in proc.stderr and proc.stdout == ""


def test_help_says_where_shape_may_differ_from_loop_k(capsys):
    assert main(["run", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    # the scheduled kernels take edges; the unscheduled ones whole tiles (their ABIs' `requires`)
    assert "take any M and N, and any K (tcgen05 sparsity and block_scale tiles: whole metadata chunks, scale vectors)" in text
    assert "the other kernels take multiples of their tile, K a multiple of their K step (tcgen05: its loop K)" in text


# `--emulate[=POLICY]` and `--seed N`: the emulator's scheduling policy (compiler.emulate's `mode`)

@pytest.mark.parametrize("policy", ["adversarial", "random"])
def test_emulate_policy_runs_and_names_policy_and_seed(capsys, policy):
    rc, out, err = run(capsys, f"--emulate={policy}", "--seed", "7", os.path.join(EX, "sparse_wgmma_f16.tile"))
    assert rc == 0, out + err
    assert f"{policy} scheduling, seed 7" in out and "bit for bit" in out


def test_bare_emulate_is_eager_and_leaves_the_file_a_word_of_its_own(capsys):
    # `--emulate FILE`: the optional policy is written with '=', so FILE is not taken as the policy
    rc, out, _ = run(capsys, "--emulate", os.path.join(EX, "gemm_bf16.tile"))
    assert rc == 0 and "(tcgen05, tcgen05 kernel)" in out and "scheduling" not in out
    rc2, out2, _ = run(capsys, "--emulate=eager", os.path.join(EX, "gemm_bf16.tile"))
    assert rc2 == 0 and out2 == out


def test_emulate_policy_reaches_the_emulator(capsys, monkeypatch):
    """The policy and the seed are passed to compiler.emulate as its mode and seed."""
    import compiler.emulator.api as api

    seen = []
    real = api.emulate

    def spy(*a, **kw):
        seen.append((kw["mode"], kw["seed"]))
        return real(*a, **kw)

    monkeypatch.setattr(api, "emulate", spy)
    rc, _, _ = run(capsys, "--emulate=adversarial", "--seed", "5", os.path.join(EX, "gemm_bf16.tile"))
    assert rc == 0 and seen == [("adversarial", 5)]


def test_emulate_unknown_policy_is_a_usage_error(capsys):
    rc, _, err = run(capsys, "--emulate=lazy", os.path.join(EX, "gemm_bf16.tile"))
    assert rc == 2 and "invalid choice: 'lazy'" in err and "adversarial" in err


def test_emulate_policy_catches_a_seeded_protocol_bug(capsys, monkeypatch):
    """The consumer's wait on a full barrier dropped from the wgmma kernel (the mutation of
    tests/test_emulator_async.py): `--emulate` (eager: every copy lands at issue, warps in a fixed
    order) at best sees a wrong D without the cause; `--emulate=adversarial --seed N` stops on the read of
    a stage the TMA has not finished writing (exit 1, the tile named, no traceback)."""
    import re

    import compiler.emulator.api as api
    from compiler.driver import compile_source

    path = os.path.join(EX, "sparse_wgmma_f16.tile")
    ptx = compile_source(open(path).read(), path).ptx
    loops = list(re.finditer(r"(WAIT_\d+):\n\s*mbarrier\.try_wait[^\n]*\n\s*@!%p\d+ bra(?:\.uni)? \1;\n", ptx))
    bad = ptx[:loops[1].start()] + loops[1].group(1) + ":\n" + ptx[loops[1].end():]
    real = api.emulate
    monkeypatch.setattr(api, "emulate", lambda *a, **kw: real(*a, **{**kw, "ptx": bad}))
    rc, out, err = run(capsys, "--emulate", path)
    assert "has not finished writing" not in out + err
    caught = []
    for seed in range(4):
        rc, out, err = run(capsys, "--emulate=adversarial", "--seed", str(seed), path)
        if rc:
            caught.append(seed)
            assert "sparse_wgmma_f16: the CPU emulator stopped" in out and "has not finished writing" in out, out
            assert "Traceback" not in out + err
    assert caught, "no seed of 0..3 caught the dropped wait"


def _example_abi(name: str):
    from compiler.runtime import load

    return load(os.path.join(EX, name)).abi


def test_default_shape_is_whole_kernel_tiles_for_kernels_that_take_any_size():
    """`tilec run` without --shape runs two kernel tiles (CTA pairs) along M and N, also for a kernel that
    takes any M, N, K (the wgmma kernel: no multiple-of requirement), whose granule would otherwise be 1.
    examples/sparse_wgmma_f16.tile: cta=128x256x64, cluster=2 -> 2 x (128 x 2) rows, 2 x 256 columns."""
    from compiler.run import default_shape

    abi = _example_abi("sparse_wgmma_f16.tile")
    assert abi["tile_m"] == 128 and abi["tile_n"] == 256 and abi["cluster"][0] == 2
    m, n, k = default_shape(abi, 64)
    assert (m, n) == (2 * 128 * 2, 2 * 256) and k % abi["tile_k"] == 0


@pytest.mark.parametrize("shape", [(2, 2, 64), (200, 136, 72), (16, 8, 33)])
def test_host_problem_off_the_instruction_grid(shape):
    """The GPU path's host problem (compiler.run.sparse_host) for shapes that are not multiples of the
    mma.sp instruction (16 rows, the form's K): A keeps the 2:4 pattern in whole chunks of the padded K and
    the reference is A @ B of the same operands."""
    import numpy as np

    from compiler.driver import compile_source
    from compiler.run import sparse_host

    result = compile_source(open(os.path.join(EX, "sparse_wgmma_f16.tile")).read(), "sparse_wgmma_f16.tile")
    m, n, k = shape
    h = sparse_host(_example_abi("sparse_wgmma_f16.tile"), result, "sparse_wgmma_f16", m, n, k, 0)
    assert h.p.a.shape == (m, k) and h.p.b.shape == (k, n)
    want = h.p.a.astype(np.float64) @ h.p.b.astype(np.float64) + (h.p.c if h.p.c is not None else 0)
    np.testing.assert_allclose(h.ref.astype(np.float64), want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("shape", [(200, 136, 72), (16, 8, 33), (64, 64, 64)])
def test_device_arguments_off_the_instruction_grid(shape, monkeypatch):
    """The step after the host problem (compiler.run._sparse_problem, what `tilec run --check --shape` and
    `tilec tune` launch): B goes to the device as its packed B^T (N x K, K contiguous) for any K. Off the
    form's K it was None (compiler.emulator.sparse_host.edge_problem left it to the caller) and the upload
    failed; then, at K = 33, its 66-byte rows broke the runtime's 16-byte row-stride rule (on an H200). Here
    the upload is the host array itself: B^T is B with its K padded to the instruction K by zeros, packed,
    then cut back to K columns (sparse.pack_b; for f16 it is B transposed), in rows a multiple of 16 bytes
    apart, and so are C's."""
    from types import SimpleNamespace

    import numpy as np

    from compiler import sparse
    from compiler.driver import compile_source
    from compiler.run import _sparse_problem, sparse_host
    from compiler.runtime import kernel as runtime_kernel

    name = "sparse_wgmma_f16.tile"
    result = compile_source(open(os.path.join(EX, name)).read(), name)
    form = result.tiles["sparse_wgmma_f16"].facts["form"]
    uploads = []
    monkeypatch.setattr(runtime_kernel, "upload",
                        lambda host, library, element, shape=None, device=None: uploads.append(element) or host)
    kernel = SimpleNamespace(abi=_example_abi(name), pack_a=lambda a, library: ("packed", a.shape))
    m, n, k = shape
    prob = _sparse_problem(kernel, result, "sparse_wgmma_f16", m, n, k, 0, SimpleNamespace(__name__="torch"))
    a, b, c = prob.args
    assert a == ("packed", (m, k)) and uploads[0] == form.b_type and b.shape == (k, n)   # N x K, viewed K x N
    logical = sparse_host(kernel.abi, result, "sparse_wgmma_f16", m, n, k, 0).p.b          # the same seed
    want = sparse.pack_b(np.concatenate([logical, np.zeros((-k % form.k, n), logical.dtype)]), form.b_type,
                         form.shape)[:, :k]
    np.testing.assert_array_equal(np.asarray(b.T), want)
    np.testing.assert_array_equal(want, logical.T)        # f16: the packing is the transpose
    for x in (b.T, c):
        assert x.strides[0] % 16 == 0 and x.strides[1] == x.itemsize and x.strides[0] < x.shape[1] * x.itemsize + 16


def test_a_missing_host_library_is_an_error_with_a_hint(monkeypatch, capsys):
    # `tilec tune` / `run` import numpy on demand; without it the answer is exit 1 and what to install,
    # not "internal error" (seen on a GPU machine whose `tilec` script ran under a Python without numpy)
    import compiler.cli as cli

    def no_numpy(args):
        raise ModuleNotFoundError("No module named 'numpy'", name="numpy")

    monkeypatch.setattr("compiler.run.cmd_run", no_numpy)
    assert cli.main(["run", os.path.join(EX, "sparse_gemm_f16.tile")]) == 1
    err = capsys.readouterr().err
    assert "`tilec run` needs the Python package 'numpy'" in err and "hint: pip install 'numpy'" in err


def test_a_missing_internal_module_is_still_an_internal_error(monkeypatch, capsys):
    import compiler.cli as cli

    def broken(args):
        raise ModuleNotFoundError("No module named 'compiler.nowhere'", name="compiler.nowhere")

    monkeypatch.setattr("compiler.run.cmd_run", broken)
    assert cli.main(["run", os.path.join(EX, "sparse_gemm_f16.tile")]) == 3
    assert "internal error" in capsys.readouterr().err
