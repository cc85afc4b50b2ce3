"""`tilec tune` and `tilec compile --tuning` end to end without a GPU (issue 17: tile-shape and stage
choice per problem), and the legal-schedule enumerator they rest on (compiler/ptx/schedules.py).

The device is replaced by a fake runner (compiler.tune.make_runner): it "times" each candidate with a
formula of its schedule and reports one chosen candidate as computing a wrong D, so the tests see what the
CLI does with every outcome. tests/gpu/test_tune_gpu.py runs a small real search on an H100.
"""
from __future__ import annotations

import functools
import io
import json
import random
from dataclasses import astuple, fields, replace
from pathlib import Path

import pytest

from compiler import cli
from compiler import tune as tune_mod
from compiler.diagnostics import CompileError, SpecError
from compiler.driver import compile_source, parse_source
from compiler.ptx import schedules
from compiler.spec import ScheduleSpec

ROOT = Path(__file__).resolve().parent.parent
WGMMA = ROOT / "examples" / "sparse_wgmma_f16.tile"
SYNC = ROOT / "examples" / "sparse_gemm_f16.tile"


class FakeRunner:
    """Times a candidate as (cta_m * cta_n) ** -0.5 * (1 + 1/stages) ms: larger tiles and deeper rings are
    faster, so the fake's best is known. The schedule in `wrong` computes a wrong D, `error` fails."""

    device, sms = "Fake GPU", 132

    def __init__(self, wrong: set[str] = frozenset(), error: set[str] = frozenset()) -> None:
        self.wrong, self.error, self.seen = wrong, error, []

    def measure(self, result, tile, shape, seed):
        sc = result.tiles[tile].payload.schedule
        words = schedules.schedule_words(sc)
        self.seen.append(words)
        if words in self.error:
            return tune_mod.Measurement(error="CUDA_ERROR_LAUNCH_FAILED")
        if words in self.wrong:
            return tune_mod.Measurement(outside=7, total=shape[0] * shape[1])
        ms = (sc.cta_m * sc.cta_n) ** -0.5 * (1 + 1 / sc.stages)
        return tune_mod.Measurement(0, shape[0] * shape[1], [ms * 1.1, ms, ms * 0.99, ms * 1.3, ms])


def fake_median(words: str) -> float:
    sc = schedules_of(words)
    ms = (sc.cta_m * sc.cta_n) ** -0.5 * (1 + 1 / sc.stages)
    return ms          # the median of [1.1, 1, 0.99, 1.3, 1] x ms


def schedules_of(words: str) -> ScheduleSpec:
    from compiler.tuning import parse_schedule_words

    return parse_schedule_words(words, "sm_90a", "test")


@pytest.fixture
def tile_copy(tmp_path):
    def make(src: Path = WGMMA) -> Path:
        dst = tmp_path / src.name
        dst.write_bytes(src.read_bytes())
        return dst
    return make


def run_cli(capsys, *argv) -> tuple[int, str, str]:
    rc = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return rc, out, err


def ranked_words(path: Path, shape, sms=132) -> list[str]:
    text = path.read_text()
    r = compile_source(text, str(path))
    (name,) = r.tiles
    return [schedules.schedule_words(c.schedule)
            for c in schedules.search_order(r.tiles[name], r.module, *shape, sms)]


# ---- the search, end to end -------------------------------------------------------------------------------

def test_tune_chooses_the_fastest_correct_candidate_and_never_a_wrong_one(tile_copy, tmp_path, capsys, monkeypatch):
    src = tile_copy()
    shape = (1024, 1024, 512)
    order = ranked_words(src, shape)
    # the fake's fastest of the first 8 tried is made wrong: it must be reported, not chosen
    first = order[:8]
    fastest = min(first, key=lambda w: (fake_median(w), first.index(w)))
    runner = FakeRunner(wrong={fastest}, error={first[-1]} - {fastest})
    monkeypatch.setattr(tune_mod, "make_runner", lambda: runner)
    out_json = tmp_path / "t.json"
    rc, out, err = run_cli(capsys, "tune", src, "--shape", "1024,1024,512", "--top", 8, "--out", out_json)
    assert rc == 0, err
    doc = json.loads(out_json.read_text())
    assert doc["timing"]["warm_ms"] == tune_mod.WARM_MS == 150.0     # each candidate timed after its warm-up
    assert doc["timing"]["launch"].startswith("programmatic dependent launch")
    rec = doc["tiles"]["sparse_wgmma_f16"]
    assert [c["schedule"] for c in rec["candidates"]] == first == runner.seen
    status = {c["schedule"]: c["status"] for c in rec["candidates"]}
    assert status[fastest] == "wrong" and status[first[-1]] == "error"
    ok = [w for w in first if status[w] == "ok"]
    want = min(ok, key=lambda w: (fake_median(w), first.index(w)))
    assert rec["chosen"] == want != fastest
    best = next(c for c in rec["candidates"] if c["schedule"] == want)
    assert best["median_ms"] == pytest.approx(fake_median(want), rel=1e-5)
    # TFLOP/s = 2*M*N*K / median
    assert best["tflops"] == pytest.approx(2 * 1024 * 1024 * 512 / (best["median_ms"] * 1e-3) / 1e12, rel=1e-3)
    assert doc["device"] == "Fake GPU" and doc["shape"] == [1024, 1024, 512] and doc["target"] == "sm_90a"
    assert doc["tilec"] == __import__("compiler").__version__ and doc["format"] == "tilec-tuning"
    assert rec["written"] == "cta=128x256x64 warps=8x1 stages=4 mma=wgmma cluster=2" == first[0]  # the baseline
    assert [c["rank"] for c in rec["candidates"]] == list(range(8))
    assert "7 of" in next(c["detail"] for c in rec["candidates"] if c["status"] == "wrong")
    # stdout names the choice; stderr has one progress line per candidate (not a terminal)
    assert f"schedule {want};" in out
    assert len([ln for ln in err.splitlines() if ln.startswith("tune sparse_wgmma_f16: ")]) == 8
    assert src.read_bytes() == WGMMA.read_bytes()          # without --write the file is not touched


def test_write_changes_only_the_schedule_statement_and_matches_compile_tuning(tile_copy, tmp_path, capsys,
                                                                               monkeypatch):
    src = tile_copy()
    monkeypatch.setattr(tune_mod, "make_runner", lambda: FakeRunner())
    out_json = tmp_path / "t.json"
    original = src.read_bytes()
    rc, out, err = run_cli(capsys, "tune", src, "--shape", "2048,2048,1024", "--top", 5, "--out", out_json,
                           "--write")
    assert rc == 0, err
    chosen = json.loads(out_json.read_text())["tiles"]["sparse_wgmma_f16"]["chosen"]
    new = src.read_bytes()
    old_lines, new_lines = original.split(b"\n"), new.split(b"\n")
    changed = [i for i, (a, b) in enumerate(zip(old_lines, new_lines)) if a != b]
    assert len(old_lines) == len(new_lines) and len(changed) == 1
    assert new_lines[changed[0]] == b"  schedule " + chosen.encode() + b";"
    # compile --tuning on the original == compile of the rewritten file, byte for byte
    orig = tmp_path / "orig.tile"
    orig.write_bytes(original)
    a, b = tmp_path / "a.ptx", tmp_path / "b.ptx"
    assert run_cli(capsys, "compile", orig, "--tuning", out_json, "-o", a)[0] == 0
    assert run_cli(capsys, "compile", src, "-o", b)[0] == 0
    assert a.read_bytes() == b.read_bytes()
    assert a.read_bytes() != compile_source(original.decode(), str(orig)).ptx.encode()   # it did change
    # and the tuning still applies to the rewritten file (its key ignores the schedule)
    assert run_cli(capsys, "compile", src, "--tuning", out_json, "-o", a)[0] == 0
    assert a.read_bytes() == b.read_bytes()


def test_write_keeps_comments_inside_the_statement_and_crlf(tile_copy, tmp_path, capsys, monkeypatch):
    src = tile_copy()
    text = WGMMA.read_text().replace("  schedule cta=128x256x64 warps=8x1 stages=4 mma=wgmma cluster=2;",
                                     "  schedule cta=128x256x64 // the tile\n    warps=8x1 # ; not the end\n"
                                     "    stages=4 mma=wgmma cluster=2;  // after")
    src.write_bytes(text.replace("\n", "\r\n").encode())
    monkeypatch.setattr(tune_mod, "make_runner", lambda: FakeRunner())
    rc, _, err = run_cli(capsys, "tune", src, "--shape", "1024,1024,512", "--top", 2, "--out", tmp_path / "t.json",
                         "--write")
    assert rc == 0, err
    chosen = json.loads((tmp_path / "t.json").read_text())["tiles"]["sparse_wgmma_f16"]["chosen"]
    want = text.replace("schedule cta=128x256x64 // the tile\n    warps=8x1 # ; not the end\n"
                        "    stages=4 mma=wgmma cluster=2;", f"schedule {chosen};").replace("\n", "\r\n")
    assert src.read_bytes() == want.encode()


def test_budget_and_top_stop_the_search(tile_copy, tmp_path, capsys, monkeypatch):
    src = tile_copy()
    monkeypatch.setattr(tune_mod, "make_runner", lambda: FakeRunner())

    class Clock:                 # each look at the clock is one second later
        t = 0.0

        def monotonic(self):
            self.t += 1.0
            return self.t

    monkeypatch.setattr(tune_mod, "time", Clock())
    rc, _, err = run_cli(capsys, "tune", src, "--shape", "1024,1024,512", "--budget", "3.5", "--out",
                         tmp_path / "t.json")
    assert rc == 0, err
    rec = json.loads((tmp_path / "t.json").read_text())["tiles"]["sparse_wgmma_f16"]
    # start at t=1; candidates start at t=2, 3, 4 (elapsed 1, 2, 3 <= 3.5); t=5: elapsed 4 > 3.5
    assert len(rec["candidates"]) == 3 and rec["stopped"] == "budget of 3.5 s spent"


def test_the_pipelined_mma_sp_kernel_is_tuned_too(tile_copy, tmp_path, capsys, monkeypatch):
    src = tile_copy(SYNC)
    monkeypatch.setattr(tune_mod, "make_runner", lambda: FakeRunner())
    rc, out, err = run_cli(capsys, "tune", src, "--shape", "1024,1024,512", "--top", 3, "--out", tmp_path / "t.json")
    assert rc == 0, err
    rec = json.loads((tmp_path / "t.json").read_text())["tiles"]["sparse_gemm_f16"]
    assert rec["kernel"] == "sparse_gemm" and len(rec["candidates"]) == 3
    assert all("mma=wgmma" not in c["schedule"] for c in rec["candidates"])


def test_no_correct_candidate_is_an_error_with_the_json_written(tile_copy, tmp_path, capsys, monkeypatch):
    src = tile_copy()
    order = ranked_words(src, (1024, 1024, 512))
    monkeypatch.setattr(tune_mod, "make_runner", lambda: FakeRunner(wrong=set(order[:2])))
    rc, _, err = run_cli(capsys, "tune", src, "--shape", "1024,1024,512", "--top", 2, "--out", tmp_path / "t.json",
                         "--write")
    assert rc == 1 and "no candidate ran correctly" in err
    assert json.loads((tmp_path / "t.json").read_text())["tiles"]["sparse_wgmma_f16"]["chosen"] is None
    assert src.read_bytes() == WGMMA.read_bytes()


def test_a_terminal_gets_a_bar_redrawn_in_place():
    class Tty(io.StringIO):
        def isatty(self):
            return True

    s = Tty()
    p = tune_mod.Progress(s, "t", 4)
    p.step("cta=64x8x32 warps=4x1 stages=2 mma=wgmma", "ok", 0.5)
    p.step("cta=64x16x32 warps=4x1 stages=2 mma=wgmma", "wrong", None)
    p.close()
    text = s.getvalue()
    assert text.count("\r") == 2 and text.endswith("\n")
    assert "[######..................] 1/4 best 0.5000 ms" in text
    assert "[############............] 2/4 best 0.5000 ms" in text and ": wrong" in text


# ---- usage and input errors ------------------------------------------------------------------------------

@pytest.mark.parametrize("argv, message", [
    (["--shape", "1,2"], "--shape must be M,N,K"),
    (["--shape", "64,64,64", "--top", "0"], "--top must be a positive"),
    (["--shape", "64,64,64", "--budget", "0"], "--budget must be a positive"),
    (["--shape", "64,64,64", "--tile", "nope"], "--tile nope: no such tile"),
])
def test_usage_errors_exit_2(argv, message, capsys, monkeypatch):
    monkeypatch.setattr(tune_mod, "make_runner", lambda: pytest.fail("no runner for a usage error"))
    rc, _, err = run_cli(capsys, "tune", WGMMA, *argv)
    assert rc == 2 and message in err


def test_write_needs_a_file_and_out_is_not_the_input(tile_copy, capsys, monkeypatch):
    monkeypatch.setattr(tune_mod, "make_runner", lambda: FakeRunner())
    rc, _, err = run_cli(capsys, "tune", "-", "--shape", "64,64,64", "--write")
    assert rc == 2 and "--write rewrites FILE" in err
    src = tile_copy()
    rc, _, err = run_cli(capsys, "tune", src, "--shape", "1024,1024,512", "--top", 1, "--out", src)
    assert rc == 2 and "refusing to overwrite the input file" in err
    assert src.read_bytes() == WGMMA.read_bytes()


def test_a_tile_without_a_whole_gemm_kernel_is_a_located_error(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(tune_mod, "make_runner", lambda: pytest.fail("no runner for bad input"))
    src = tmp_path / "one.tile"
    src.write_text(SYNC.read_text().replace("stages=3", "stages=1"))
    rc, _, err = run_cli(capsys, "tune", src, "--shape", "256,256,256")
    line = next(i for i, ln in enumerate(src.read_text().splitlines(), 1) if "schedule" in ln and "cta=" in ln)
    assert rc == 1 and f"{src}:{line}:3: error: tile 'sparse_gemm_f16' does not use a whole-GEMM kernel" in err


def test_no_gpu_is_an_error_without_a_traceback(capsys, monkeypatch, tmp_path):
    from compiler.run import RunError

    def none():
        raise RunError("tilec tune needs a GPU, and torch or cupy to hold its arrays")

    monkeypatch.setattr(tune_mod, "make_runner", none)
    rc, _, err = run_cli(capsys, "tune", WGMMA, "--shape", "1024,1024,512", "--out", tmp_path / "t.json")
    assert rc == 1 and err == "tilec: error: tilec tune needs a GPU, and torch or cupy to hold its arrays\n"
    assert not (tmp_path / "t.json").exists()


# ---- compile --tuning refuses what does not match -----------------------------------------------------------

@pytest.fixture
def tuning(tmp_path, tile_copy, capsys, monkeypatch) -> Path:
    monkeypatch.setattr(tune_mod, "make_runner", lambda: FakeRunner())
    out = tmp_path / "tuning.json"
    assert run_cli(capsys, "tune", tile_copy(), "--shape", "1024,1024,512", "--top", 2, "--out", out)[0] == 0
    return out


def test_compile_tuning_refuses_a_changed_tile(tmp_path, tuning, capsys):
    changed = tmp_path / "changed.tile"
    changed.write_text(WGMMA.read_text().replace("D: f32 global;", "D: f16 global;"))
    rc, _, err = run_cli(capsys, "compile", changed, "--tuning", tuning)
    line = next(i for i, ln in enumerate(changed.read_text().splitlines(), 1) if ln.startswith("tile "))
    assert rc == 1 and f"{changed}:{line}:6: error: {tuning} does not match tile 'sparse_wgmma_f16': it was " \
        "tuned for another tile (its statements other than `schedule`)" in err
    assert "re-run `tilec tune`" in err


def test_compile_tuning_refuses_another_target_and_another_tile(tmp_path, tuning, capsys):
    doc = json.loads(tuning.read_text())
    doc["tiles"]["sparse_wgmma_f16"]["key"]["target"] = "sm_100a"
    other = tmp_path / "other.json"
    other.write_text(json.dumps(doc))
    rc, _, err = run_cli(capsys, "compile", WGMMA, "--tuning", other)
    assert rc == 1 and "tuned for another target sm_100a, not sm_90a" in err
    rc, _, err = run_cli(capsys, "compile", SYNC, "--tuning", tuning)
    assert rc == 1 and "was tuned for tile 'sparse_wgmma_f16', which" in err and "does not have" in err


def test_compile_tuning_reports_bad_json_at_its_line_and_column(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text('{\n  "format": "tilec-tuning",\n  "tiles": {,\n}\n')
    rc, _, err = run_cli(capsys, "compile", WGMMA, "--tuning", bad)
    assert rc == 1 and err.startswith(f"{bad}:3:13: error: not a tuning file: ")
    bad.write_text('{"format": "something else"}')
    rc, _, err = run_cli(capsys, "compile", WGMMA, "--tuning", bad)
    assert rc == 1 and 'not a tuning file: no "format": "tilec-tuning"' in err
    rc, _, err = run_cli(capsys, "compile", WGMMA, "--tuning", tmp_path / "missing.json")
    assert rc == 1 and "missing.json" in err


def test_compile_without_tuning_is_unchanged(tuning, capsys, tmp_path):
    """Compile output depends on its inputs only: a tuning file lying around changes nothing."""
    a = tmp_path / "a.ptx"
    assert run_cli(capsys, "compile", WGMMA, "-o", a)[0] == 0
    assert a.read_text() == compile_source(WGMMA.read_text(), str(WGMMA)).ptx


# ---- the enumerator ------------------------------------------------------------------------------------------

def compiled(path: Path):
    r = compile_source(path.read_text(), str(path))
    (name,) = r.tiles
    return r, r.tiles[name]


@functools.lru_cache(maxsize=None)
def wgmma_legal():
    """(result, view, legal schedules) of examples' wgmma tile, enumerated once per test process (about 5 s
    each time: the ranking tests share it; they only read it)."""
    r, view = compiled(WGMMA)
    return r, view, tuple(schedules.legal_schedules(view, r.module))


@pytest.mark.parametrize("path", [WGMMA, SYNC])
def test_legal_schedules_agree_with_the_compiler(path):
    """Every enumerated schedule compiles; schedules of the product the enumerator drops do not (a sample of
    each, seeded), so its legality is the kernels' own."""
    from compiler.tuning import with_schedule

    r, view = compiled(path)
    text = path.read_text()
    tile = parse_source(text, str(path)).tiles[0]
    legal = schedules.legal_schedules(view, r.module)
    assert view.payload.schedule in [c.schedule for c in legal]
    rng = random.Random(17)
    for cand in rng.sample(legal, 12):
        compile_source(with_schedule(text, tile, cand.schedule), str(path))
    kept = {astuple(c.schedule) for c in legal}
    axes = schedules.axes(schedules.tile_kernel(view, r.module))
    import itertools
    product = [replace(view.payload.schedule, **dict(zip((a.field for a in axes), vals)))
               for vals in itertools.product(*(a.values(view.facts["form"]) for a in axes))]
    dropped = [s for s in product if astuple(s) not in kept]
    assert dropped
    for s in rng.sample(dropped, 12):
        with pytest.raises(CompileError):
            compile_source(with_schedule(text, tile, s), str(path))


def test_wgmma_schedules_follow_the_isa_and_the_register_and_smem_budgets():
    from compiler.ptx.sparse_wgmma_kernel import CONSUMER_OTHER_REGS, check_config

    r, view, legal = wgmma_legal()
    # N: every .m64nNk32 N of f16 (PTX 9.7.15.6.3: 8..256 step 8) appears
    assert sorted({c.schedule.cta_n for c in legal}) == list(range(8, 257, 8))
    # 2 warpgroups of 128 rows at N = 256: 2 m64 blocks x 256/2 = 256 accumulators + 40 > 240, the most
    # setmaxnreg gives each consumer of a 384-thread CTA (24 left to the producer: 24 + 2 x 240 = 3 x 168)
    big = replace(view.payload.schedule, cta_m=256, cta_n=256)
    assert astuple(big) not in {astuple(c.schedule) for c in legal}
    config = replace(legal[0].config, cta_m=256, cta_n=256, consumers=2)
    assert config.accumulators + CONSUMER_OTHER_REGS == 2 * 256 // 2 + 40 > config.consumer_budget == 240
    with pytest.raises(SpecError, match="setmaxnreg.inc 240 is the most"):
        check_config(config)
    # ... at N = 192 they fit (192 + 40 <= 240): the producer hands its registers over
    fits = replace(legal[0].config, cta_m=256, cta_n=192, consumers=2, stages=4)
    check_config(fits)
    assert (fits.register_split.low, fits.register_split.high) == (24, 240)
    # smem: each kept candidate fits the block's budget, and the next stage up (when legal) would not
    for c in legal:
        assert c.config.smem_bytes <= c.config.smem_limit


def test_every_schedule_field_is_searched_or_says_why_not():
    """A new `schedule` field (compiler/spec.py ScheduleSpec) needs a row in schedules.AXES, or an entry in
    schedules.NOT_SEARCHED with its reason."""
    names = {f.name for f in fields(ScheduleSpec)}
    for kernel in schedules.AXES:
        searched = {a.field for a in schedules.axes(kernel)}
        assert names - searched == set(schedules.NOT_SEARCHED[kernel]) & names, \
            f"{kernel}: add a row to compiler/ptx/schedules.py AXES (or NOT_SEARCHED with the reason)"
        assert not searched & set(schedules.NOT_SEARCHED[kernel])


def test_ranking_prefers_big_tiles_for_big_problems_and_filling_the_sms_for_small():
    r, view, legal = wgmma_legal()
    big = schedules.ranked(legal, view, 8192, 8192, 8192, 132)
    small = schedules.ranked(legal, view, 256, 256, 8192, 132)
    assert sorted(map(id, big)) == sorted(map(id, legal))           # a permutation of the legal list
    area = [c.config.cta_m * c.config.cta_n for c in big[:10]]
    assert min(area) >= 128 * 128                                    # few L2 bytes per flop
    # 256 x 256: one 128x256 CTA pair leaves 130 of 132 SMs idle; the best use far more CTAs
    best_small = small[0].config
    assert (256 // best_small.cta_m) * (256 // best_small.cta_n) >= 16
    assert schedules.ranked(legal, view, 8192, 8192, 8192, 132) == big     # deterministic


def test_readme_tune_commands_run_as_written(tmp_path, capsys, monkeypatch):
    """README's `tilec tune` / `compile --tuning` example, run as written (from a copy of the repository's
    examples/ in a scratch directory) with the fake runner in place of the GPU."""
    import re
    import shlex

    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("### Tuning schedules (`tilec tune`)"):]
    block = re.search(r"```sh\n(.*?)```", section, re.S).group(1)
    lines = [ln for ln in block.splitlines() if ln.strip()]
    assert [ln.split()[:2] for ln in lines] == [["tilec", "tune"], ["tilec", "compile"]]
    (tmp_path / "examples").mkdir()
    (tmp_path / "examples" / WGMMA.name).write_bytes(WGMMA.read_bytes())
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(tune_mod, "make_runner", lambda: FakeRunner())
    for line in lines:
        rc, _, err = run_cli(capsys, *shlex.split(line)[1:])
        assert rc == 0, (line, err)
    assert (tmp_path / "sparse_wgmma_f16.ptx").read_text().startswith("//")


def test_the_host_problem_is_made_without_a_gpu_and_shared_by_schedules():
    """compiler.run.sparse_host (what the device runner makes once per tile and shape): the reference of the
    plain tile, and the epilogue inputs (bias per row or column, parameters) of the fused one."""
    from compiler.run import sparse_host

    for path, fused in ((WGMMA, False), (ROOT / "examples" / "sparse_wgmma_f16_silu_bias.tile", True)):
        r = compile_source(path.read_text(), str(path))
        (name,) = r.tiles
        abi = r.to_json()["tiles"][name]["kernel"]
        host = sparse_host(abi, r, name, 256, 256, 128, 0)
        assert host.ref.shape == (256, 256) and host.scale.shape == (256, 256)
        assert (host.scalars is not None) == fused and (host.bias is not None) == fused
        if fused:
            assert host.bias.size == 256
        # the same seed gives the same data for any schedule of the tile
        again = sparse_host(abi, r, name, 256, 256, 128, 0)
        assert (again.p.a == host.p.a).all() and (again.ref == host.ref).all()


def test_ranking_shows_one_depth_per_tile_shape():
    """A measured failure of the plain ranking (H200; docs/measurements.md, "Stream-K at large shapes"): the
    first six of examples/sparse_wgmma_f16_out_f16.tile at 8192^3 were one schedule at stages 3..8 (equal
    estimates). Now no two of the first 40 are the same schedule but its stages with the same estimate, and
    within a tie the depth that stages D in the fewest column blocks ranks (a fifth stage that cuts D's
    staging finer measured slower); e.g. 128 x 256 persistent pairs, K blocks of 64: 4 stages before 5."""
    r, view, legal = wgmma_legal()
    form = view.facts["form"]
    orders = {shape: schedules.ranked(legal, view, *shape, 132) for shape in ((8192, 8192, 8192), (13824, 5120, 5120))}
    for shape, order in orders.items():
        top = order[:40]
        est = {id(c): schedules.estimate_cycles("sparse_wgmma", c.config, form, *shape, 132) for c in top}
        seen = set()
        for c in top:
            key = (astuple(replace(c.schedule, stages=0)), est[id(c)])
            assert key not in seen, schedules.schedule_words(c.schedule)
            seen.add(key)
    order = orders[(8192, 8192, 8192)]
    where = {id(c): i for i, c in enumerate(order)}
    first: dict = {}
    for c in order:
        key = (astuple(replace(c.schedule, stages=0)),
               schedules.estimate_cycles("sparse_wgmma", c.config, form, 8192, 8192, 8192, 132))
        first.setdefault(key, c)
        assert schedules._d_staging_blocks(first[key].config) <= schedules._d_staging_blocks(c.config)
    pair = [c for c in legal if (c.config.cta_m, c.config.cta_n, c.config.cta_k, c.config.cluster_m)
            == (128, 256, 64, 2) and c.config.persistent and c.schedule.split_k == 1 and c.schedule.stages in (4, 5)]
    by_stages = {c.schedule.stages: c for c in pair}
    assert schedules._d_staging_blocks(by_stages[4].config) < schedules._d_staging_blocks(by_stages[5].config)
    assert where[id(by_stages[4])] < where[id(by_stages[5])]


def test_ranking_of_stream_k_with_its_data_parallel_waves():
    """Stream-K walks all but the last full wave and the partial one whole (sparse_wgmma_kernel's
    stream_split), so its estimate is the persistent kernel's waves with the tail balanced to the K block
    plus the shared tiles' partial round trips. Measured on an H200 (docs/measurements.md, "Stream-K with
    data-parallel waves", the benchmark's rounds), and ranked alike: at 4096^3 the 256 x 176 pairs' stream-K
    (1.9 tiles' worth of shared tiles a CTA) ran 1.19x slower than the same tiles persistent; at 5120 x 13824
    x 5120 the 256 x 192 pairs' 1.02x slower; at 13824 x 5120 x 5120 (729 pair tiles on 66 pairs: 11.05
    waves) 256 x 192 stream-K was the fastest tile, 0.99x the persistent 256 x 176. A tile count the grid
    divides shares no tile: stream-K's estimate is then the persistent one. Stream-K still ranks early for a
    decode shape (64 tiles of 128 x 128 on 132 SMs)."""
    r, view, legal = wgmma_legal()
    form = view.facts["form"]

    def tile(m, n, stages, split):
        return next(c for c in legal if (c.config.cta_m, c.config.cta_n, c.config.cta_k, c.config.cluster_m,
                                         c.schedule.stages, c.schedule.split_k) == (m, n, 64, 2, stages, split)
                    and c.config.persistent)

    def est(c, *shape):
        return schedules.estimate_cycles("sparse_wgmma", c.config, form, *shape, 132)

    sk176, p176 = tile(256, 176, 4, "stream"), tile(256, 176, 4, 1)
    sk192, p192 = tile(256, 192, 3, "stream"), tile(256, 192, 3, 1)
    assert est(sk176, 4096, 4096, 4096) > est(p176, 4096, 4096, 4096)
    assert est(sk192, 5120, 13824, 5120) > est(p192, 5120, 13824, 5120)
    assert est(sk192, 13824, 5120, 5120) < min(est(p176, 13824, 5120, 5120), est(p192, 13824, 5120, 5120))
    # 12 x 22 = 264 CTA tiles of 256 x 176 on 132 CTAs: two whole waves, nothing shared
    assert est(sk176, 3072, 3872, 4096) == est(p176, 3072, 3872, 4096)
    decode = schedules.ranked(legal, view, 8192, 64, 8192, 132)[:40]
    assert any(c.schedule.split_k == "stream" for c in decode)


def test_a_decode_tile_bound_by_reading_a_ranks_the_longest_k_block_first():
    """Measured (docs/measurements.md, "Cold weights"): at e4m3 8192x256x8192 the 128 x 128 CTA pairs with K
    blocks of 256 in 4 stages ran 25.5 us, with blocks of 128 in 8 / 6 / 5 stages 27.6 us; every block costs
    its producer and consumers a barrier round whatever its bytes (BLOCK_LOAD_CYCLES). Without that cost the
    three K blocks tied in the estimate and enumeration order put 64 first."""
    from compiler.ptx.emission import _select_mma_sp

    path = ROOT / "examples" / "sparse_wgmma_decode.tile"
    r = compile_source(path.read_text(), str(path))
    view = r.tiles["sparse_wgmma_e4m3_decode_n128"]
    base = view.payload.schedule
    cands = []
    for cta_k, stages in ((128, 8), (64, 16), (256, 4)):
        schedule = replace(base, cta_k=cta_k, stages=stages, persistent="none", split_k=1)
        cands.append(schedules.Candidate(schedule, _select_mma_sp(view, r.module, schedule)[1]))
    order = schedules.ranked(cands, view, 8192, 256, 8192, 132)
    assert [c.schedule.cta_k for c in order] == [256, 128, 64]
    est = [schedules.estimate_cycles("sparse_wgmma", c.config, view.facts["form"], 8192, 256, 8192, 132)
           for c in order]
    blocks = [8192 // c.schedule.cta_k for c in order]      # one wave: the estimates differ by the blocks' cost
    assert est[1] - est[0] == pytest.approx((blocks[1] - blocks[0]) * schedules.BLOCK_LOAD_CYCLES)


@pytest.mark.slow
@pytest.mark.parametrize("path", [WGMMA, ROOT / "examples" / "sparse_wgmma_e4m3_bf16.tile", SYNC])
def test_pruned_enumeration_equals_the_full_product(path):
    """legal_schedules stops a schedule's ring depths at the first refused one (compiler/ptx/schedules.py):
    the same list, in the same order, as checking every depth of the product."""
    import itertools

    from compiler.ptx.emission import _select_mma_sp

    r = compile_source(path.read_text(), str(path))
    view = next(iter(r.tiles.values()))          # the file's first tile
    kernel = schedules.tile_kernel(view, r.module)
    form, rows, check = view.facts["form"], schedules.axes(kernel), schedules._checker(kernel)
    full = []
    for values in itertools.product(*(a.values(form) for a in rows)):
        words = dict(zip((a.field for a in rows), values))
        if not schedules._plausible(kernel, words, form):
            continue
        schedule = replace(view.payload.schedule, **words)
        try:
            chosen, config = _select_mma_sp(view, r.module, schedule)
            if chosen != kernel:
                continue
            check(config)
        except SpecError:
            continue
        full.append(astuple(schedule))
    assert [astuple(c.schedule) for c in schedules.legal_schedules(view, r.module)] == full
