"""Inputs an audit of the CLI found mishandled: IR module attributes that reached the PTX unchecked, a `loc`
naming a FIFO or /dev/zero, values nested past reason, `-o` onto the --tuning file, `tune --out` checked only
after the search, negative seeds, --arch's exit status, undrawable TMEM shapes, explain's verdict on stderr,
closed or full standard streams, an emulated problem too large for host memory, and a --tuning schedule's
errors shown without saying where the schedule came from. Each is a located or plain diagnostic with exit
1 (bad input) or 2 (usage), never a traceback, a hang or an internal error."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from compiler.cli import main

ROOT = Path(__file__).resolve().parent.parent
EX = ROOT / "examples"


def run(argv, capsys):
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.fixture(scope="module")
def wgmma_ir():
    from compiler.driver import compile_file

    return compile_file(str(EX / "sparse_wgmma_f16.tile"), passes=[]).module


def ir_text(capsys):
    rc, out, _ = run(["compile", EX / "sparse_wgmma_f16.tile", "--emit", "ir"], capsys)
    assert rc == 0
    return out


@pytest.mark.parametrize("version", ['8.5\\n.target sm_100a', "banana", "", "08.5", "9.99"])
def test_ir_ptx_version_must_be_a_released_version(tmp_path, capsys, version):
    text = ir_text(capsys)
    assert 'ptx_version = "8.5"' in text
    bad = tmp_path / "x.ir"
    bad.write_text(text.replace('ptx_version = "8.5"', f'ptx_version = "{version}"', 1))
    rc, out, err = run(["compile", bad], capsys)
    assert rc == 1 and out == ""
    assert f"{bad}:1:" in err and "^" in err
    assert ("is not a PTX ISA version" in err) if version != "9.99" else \
        ("was never released" in err)


def test_ir_target_must_be_known(tmp_path, capsys):
    bad = tmp_path / "x.ir"
    bad.write_text(ir_text(capsys).replace('target = "sm_90a"', 'target = "sm_999"', 1))
    rc, out, err = run(["compile", bad], capsys)
    assert rc == 1 and "unknown target \"sm_999\"" in err and f"{bad}:1:" in err


def test_ir_value_nested_too_deep_is_located(tmp_path, capsys):
    bad = tmp_path / "x.ir"
    bad.write_text('tilec.module {target = "sm_90a", passes = ' + "[" * 2000 + "]" * 2000 + "} {\n}\n")
    for cmd in ("compile", "opt"):
        rc, out, err = run([cmd, bad], capsys)
        assert rc == 1 and "nested more than 32 levels deep" in err and "internal error" not in err


@pytest.mark.parametrize("kind", ["fifo", "devzero"])
def test_a_loc_naming_a_fifo_or_dev_zero_is_not_read(tmp_path, kind):
    # an error located in the .tile the IR came from shows that file's line; a FIFO (open waits for a writer)
    # or /dev/zero (read never ends) must not be read
    if kind == "fifo":
        target = tmp_path / "fifo"
        os.mkfifo(target)
    else:
        target = Path("/dev/zero")
    src = tmp_path / "t.tile"
    src.write_text((EX / "sparse_wgmma_f16.tile").read_text().replace("target sm_90a;", "target sm_80;"))
    ir = subprocess.run([sys.executable, "-m", "compiler", "compile", str(src), "--emit", "ir", "--arch", "sm_90a"],
                        capture_output=True, text=True, cwd=ROOT)
    assert ir.returncode == 0, ir.stderr
    text = ir.stdout.replace('target = "sm_90a"', 'target = "sm_80"').replace(str(src), str(target))
    bad = tmp_path / "x.ir"
    bad.write_text(text)
    done = subprocess.run([sys.executable, "-m", "compiler", "compile", str(bad)], capture_output=True, text=True,
                          cwd=ROOT, timeout=60)
    assert done.returncode == 1 and "Traceback" not in done.stderr and "internal error" not in done.stderr
    assert f"{target}:" in done.stderr and "requires sm_90a" in done.stderr


def tuning_file(tmp_path, chosen):
    """A --tuning file for examples/sparse_wgmma_f16.tile whose chosen schedule is `chosen`."""
    from compiler.driver import parse_source
    from compiler.tuning import FORMAT, FORMAT_VERSION, tile_key

    tile = EX / "sparse_wgmma_f16.tile"
    spec = parse_source(tile.read_text(), str(tile))
    (t,) = spec.tiles
    tuning = tmp_path / "t.json"
    tuning.write_text(json.dumps({"format": FORMAT, "format_version": FORMAT_VERSION,
                                  "tiles": {t.name: {"key": tile_key(spec.target, t), "chosen": chosen}}}))
    return tile, tuning


def test_o_onto_the_tuning_file_is_refused(tmp_path, capsys):
    tile, tuning = tuning_file(tmp_path, "cta=128x256x64 warps=8x1 stages=3 mma=wgmma")
    before = tuning.read_text()
    assert run(["compile", tile, "--tuning", tuning], capsys)[0] == 0
    rc, _, err = run(["compile", tile, "--tuning", tuning, "-o", tuning], capsys)
    assert rc == 2 and "refusing to overwrite the input file" in err and tuning.read_text() == before


@pytest.mark.parametrize("out", ["missing-dir/t.json", "."])
def test_tune_out_is_checked_before_the_search(tmp_path, capsys, monkeypatch, out):
    import compiler.driver as driver

    def no_search(*a, **kw):
        raise AssertionError("the search started")

    monkeypatch.setattr(driver, "compile_source", no_search)      # tune's first step after its checks
    rc, _, err = run(["tune", EX / "sparse_wgmma_f16.tile", "--shape", "1024,1024,512", "--out", tmp_path / out],
                     capsys)
    assert rc == 1 and "cannot write" in err and ("No such file" in err or "Is a directory" in err)


@pytest.mark.parametrize("argv", [["draw", "sparse", "--seed", "-1"],
                                  ["run", EX / "sparse_f16.tile", "--emulate", "--seed", "-1"],
                                  ["compile", EX / "gemm_f16.tile", "--arch", "bogus"],
                                  ["run", EX / "sparse_f16.tile", "--emulate", "--arch", "sm_999"]])
def test_bad_flag_values_are_usage_errors(capsys, argv):
    rc, out, err = run(argv, capsys)
    assert rc == 2 and "internal error" not in err and ("non-negative integer" in err or "unknown target" in err)


@pytest.mark.parametrize("n", ["-8", "0", "7", "100000000"])
def test_draw_tmem_refuses_an_n_no_tcgen05_mma_has(capsys, n):
    rc, out, err = run(["draw", "tmem", "--n", n], capsys)
    assert rc == 2 and out == "" and "valid N: 8..256" in err


def test_explain_says_on_stderr_that_it_failed(capsys):
    rc, out, err = run(["explain", "idesc", "0x10", "--kind", "f16"], capsys)
    assert rc == 1 and "N = 0" in out and "tilec: error: idesc" in err and "N = 0" in err
    rc, out, err = run(["explain", "smem-desc", "0", "--kind", "f16"], capsys)
    assert rc == 2 and "explain smem-desc takes no --kind" in err and "unexpected keyword" not in err


@pytest.mark.parametrize("argv, shell, says", [
    (["compile", "examples/gemm_f16.tile"], ">&-", "standard output is closed"),
    (["compile", "-"], "<&-", "standard input is closed"),
    (["passes"], "> /dev/full", "cannot write '<stdout>'"),
    (["explain", "idesc", "0x10", "--kind", "f16"], "> /dev/full", "cannot write '<stdout>'"),
])
def test_closed_or_full_standard_streams_are_file_errors(argv, shell, says):
    if not os.path.exists("/dev/full") and "full" in shell:
        pytest.skip("no /dev/full here")
    done = subprocess.run(f"{sys.executable} -m compiler {' '.join(argv)} {shell}", shell=True, cwd=ROOT,
                          capture_output=True, text=True)
    assert done.returncode == 1 and says in done.stderr and "internal error" not in done.stderr


def test_an_emulated_problem_too_large_for_host_memory_is_an_error(capsys, monkeypatch):
    import compiler.run as run_mod

    def too_large(*a, **kw):
        raise MemoryError("Unable to allocate 11.9 GiB")

    monkeypatch.setattr(run_mod, "emulate_tile", too_large)
    rc, out, err = run(["run", EX / "sparse_f16.tile", "--emulate", "--shape", "16,8,99999936"], capsys)
    assert rc == 1 and "too large for the CPU emulator" in err and "internal error" not in err


def test_a_tuned_schedule_error_says_it_came_from_the_tuning_file(tmp_path, capsys):
    tile, tuning = tuning_file(tmp_path, "cta=128x256x64 warps=8x1 stages=99 mma=wgmma")
    rc, out, err = run(["compile", tile, "--tuning", tuning], capsys)
    assert rc == 1, err
    assert "stages = 99" in err and f"note: the `schedule` shown is {tuning}'s choice (--tuning)" in err


@pytest.mark.parametrize("example, edit, says", [
    ("tcgen05_gemm_mxf4nvf4.tile", ("accumulators = 2,", "accumulators = 0xffffffff,"), "is more than 512"),
    ("tcgen05_gemm_mxf4nvf4.tile", ("k_block = 256, stage_bytes", "k_block = 4294967295, stage_bytes"),
     "is more than 8192"),
    ("sparse_f16.tile", ("tiles_m = 1,", "tiles_m = 4294967295,"), "accumulator registers a thread"),
])
def test_ir_plan_values_past_the_hardware_are_errors_not_a_2_to_the_32_loop(tmp_path, capsys, example, edit, says):
    rc, text, _ = run(["compile", EX / example, "--emit", "ir"], capsys)
    assert rc == 0 and edit[0] in text
    bad = tmp_path / "x.ir"
    bad.write_text(text.replace(edit[0], edit[1], 1))
    rc, out, err = run(["compile", bad], capsys)
    assert rc == 1 and out == "" and says in err and "internal error" not in err
