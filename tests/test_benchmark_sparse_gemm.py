"""benchmarks/sparse_gemm.py on the CPU: which example tile times which case (from the examples' ABIs and the
runtime's requires / limits), the correctness gate (a wrong kernel is reported, never timed), and the table
and ratios it prints, from fake timings. The GPU run itself is the lead's (docs/measurements.md)."""
from __future__ import annotations

import json
import math
import runpy
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# the script's functions, without putting benchmarks/ on sys.path (its fuzz.py would shadow tests/fuzz)
SG = runpy.run_path(str(ROOT / "benchmarks" / "sparse_gemm.py"), run_name="sparse_gemm")
Case, Candidate = SG["Case"], SG["Candidate"]


def fake_abi(a="f16", d="f16", requires=("M % 256 == 0", "N % 256 == 0", "K % 64 == 0"), limits=(), **extra):
    """The parts of a sparse wgmma kernel's ABI the selection reads (CompileResult.to_json() shape)."""
    buffers = {"a_values": {"element": a, "shape": ["M", "K/2"]},
               "a_metadata": {"element": "u32", "shape": ["M/16", "K/32", 32]},
               "b": {"element": a}, "d": {"element": d, "shape": ["M", "N"]}}
    params = [{"name": "tensor_maps", "type": "bytes", "bytes": 384, "align": 64}, {"name": "d", "type": "u64"}] + \
        [{"name": x, "type": "u32"} for x in ("M", "N", "K")]
    abi = {"buffers": buffers, "params": params, "requires": list(requires), "limits": list(limits),
           "tile_m": 128, "tile_n": 256, "tile_k": 64}
    for key, value in extra.items():
        if key == "buffers":
            abi["buffers"].update(value)
        elif key == "params":
            abi["params"] += value
        else:
            abi[key] = value
    return abi


def cand(name, **kw):
    return Candidate(f"examples/{name}.tile", name, fake_abi(**kw))


# ------------------------------------------------------------------------------------------------
# Which tile runs which case
# ------------------------------------------------------------------------------------------------

def test_a_case_gets_the_tiles_of_its_types_that_meet_requires_and_limits():
    wide = cand("wide")                                                     # M, N multiples of 256
    any_n = cand("any_n", requires=("M % 128 == 0", "K % 64 == 0"))        # e.g. an edges / split-K tile
    small = cand("small", requires=(), limits=("M < 4096",))               # a limit, not a requirement
    bf16 = cand("bf16_tile", a="bf16", d="bf16")
    f32_out = cand("f32_out", d="f32", buffers={"c": {"element": "f32"}}, requires=("M % 128 == 0",))
    everything = [f32_out, wide, any_n, small, bf16]

    # the tiles writing the case's D without C first; then the others of its input type (f32 D + C here)
    chosen, unmet = SG["select"](everything, Case(4096, 4096, 4096, "f16"))
    assert [c.tile for c in chosen] == ["wide", "any_n", "f32_out"]
    assert [c.unlike(Case(4096, 4096, 4096, "f16")) for c in chosen] == [None, None, "f32 D, reads C"]
    assert unmet == {"small.tile": "M < 4096"}          # another input type is not the case's at all

    chosen, unmet = SG["select"](everything, Case(8192, 16, 8192, "f16"))
    assert [c.tile for c in chosen] == ["any_n", "f32_out"]
    assert unmet == {"wide.tile": "N % 256 == 0", "small.tile": "M < 4096"}

    chosen, unmet = SG["select"](everything, Case(2048, 2048, 2048, "bf16"))
    assert [c.tile for c in chosen] == ["bf16_tile"] and unmet == {}


def test_a_case_nothing_can_run_is_a_row_saying_why():
    case = Case(8192, 16, 8192, "e4m3")                 # e4m3 in, bf16 out
    chosen, unmet = SG["select"]([cand("w", a="e4m3", d="bf16", requires=("N % 256 == 0",))], case)
    assert chosen == []
    assert SG["unavailable"](case, unmet) == "n/a (w.tile: N % 256 == 0)"
    chosen, unmet = SG["select"]([cand("w")], case)     # no e4m3 tile at all
    assert SG["unavailable"](case, unmet) == "n/a (no example tile takes e4m3 as D = A*B)"


def test_only_plain_products_are_timed():
    not_plain = SG["not_plain"]
    assert not_plain(fake_abi()) is None
    # C is given as zeros: D = A*B all the same, in another row type (Candidate.unlike says how)
    assert not_plain(fake_abi(buffers={"c": {"element": "f32"}})) is None
    assert not_plain(fake_abi(epilogue={"bias": "col", "act": "none"})) == "adds a bias (col)"
    assert not_plain(fake_abi(epilogue={"bias": "none", "act": "silu"})) == "applies silu"
    assert not_plain(fake_abi(epilogue={"alpha": 2.0})).startswith("scales")
    assert not_plain(fake_abi(params=[{"name": "gamma", "type": "f32"}])) == "takes gamma"
    # a buffer of a new schedule is the runtime's to fill (or refuse, reported in the row): not filtered here
    assert not_plain(fake_abi(params=[{"name": "workspace", "type": "u64"}])) is None
    assert not_plain({"buffers": {"A": {}}, "params": []}) == "no packed 2:4 A"


@pytest.fixture(scope="module")
def examples():
    pytest.importorskip("lark", reason="the examples are compiled by the DSL's front end")
    return SG["discover"]()


def test_the_examples_in_the_repository(examples):
    found, skipped = examples
    names = {c.name for c in found}
    # the plain wgmma tiles in the benchmark's output types are there; whatever else lands in examples/
    # must be a plain product too (discover's rule), of a type the benchmark knows
    assert {"sparse_wgmma_f16_out_f16.tile", "sparse_wgmma_bf16_out_bf16.tile", "sparse_wgmma_e4m3_out_bf16.tile",
            "sparse_wgmma_s8_out_s32.tile", "sparse_wgmma_e4m3_bf16.tile"} <= names
    # the fp8 pair: promoted (compared with cuBLAS without fast accumulation) and not (with it)
    assert {c.name for c in found if c.promoted} == {
        "sparse_wgmma_e4m3_bf16.tile", "sparse_wgmma_e4m3_bf16.tile:sparse_wgmma_e4m3_bf16_128x192",
        *(f"sparse_wgmma_decode.tile:sparse_wgmma_e4m3_decode_n{n}_promoted" for n in (16, 64, 128)),
        "sparse_wgmma_small_cube.tile:sparse_wgmma_e4m3_small_cube_promoted"}
    assert skipped["examples/sparse_wgmma_s8_s8.tile:sparse_wgmma_s8_s8"] == "scales D (param)"
    assert all(SG["not_plain"](c.abi) is None and c.a_type in SG["OUTPUT"] for c in found)
    assert skipped["examples/sparse_wgmma_f16_silu_bias.tile:sparse_wgmma_f16_silu_bias"] == "adds a bias (col)"
    f32_c = next(c for c in found if c.name == "sparse_wgmma_f16.tile")       # f32 D = A*B + C: C as zeros
    assert f32_c.unlike(Case(4096, 4096, 4096, "f16")) == "f32 D, reads C"
    assert skipped["examples/tcgen05_sparse.tile"] == "sm_100a code (the device is sm_90)"
    for case in SG["cases"](SG["SHAPES"], ("f16", "bf16", "e4m3", "s8")):
        chosen, unmet = SG["select"](found, case)
        assert all(c.a_type == case.a for c in chosen)
        assert chosen or unmet, case                    # each of the four types has a tile
    chosen, _ = SG["select"](found, Case(4096, 4096, 4096, "f16"))
    assert "sparse_wgmma_f16_out_f16.tile" in {c.name for c in chosen}
    assert chosen[0].unlike(Case(4096, 4096, 4096, "f16")) is None


def test_examples_meant_for_some_shapes_time_only_those(examples):
    """`// benchmark shapes: COND` in an example: the split-K and stream-K decode tiles time N <= 256, the persistent tile
    4096 <= min(M, N); elsewhere they are listed as meant for their shapes."""
    found, _ = examples
    split = "sparse_wgmma_f16_decode_split_k.tile"
    stream = "sparse_wgmma_f16_decode_stream_k.tile"
    persistent = "sparse_wgmma_f16_persistent.tile"
    for case, runs, not_meant in ((Case(8192, 16, 8192, "f16"), split, persistent),
                                  (Case(8192, 16, 8192, "f16"), stream, persistent),
                                  (Case(8192, 8192, 8192, "f16"), persistent, split),
                                  (Case(8192, 8192, 8192, "f16"), persistent, stream)):
        chosen, unmet = SG["select"](found, case)
        assert runs in {c.name for c in chosen} and not_meant not in {c.name for c in chosen}
        assert unmet[not_meant].startswith("meant for ")
    # the bf16 and e4m3 (-> bf16) decode rows get their own split-K tiles, written in the case's output
    # type (first in select's order), and not at 8192^3
    decode = "sparse_wgmma_bf16_e4m3_decode_split_k.tile"
    for a in ("bf16", "e4m3"):
        tile = f"{decode}:sparse_wgmma_{a}_decode_split_k_n16"
        chosen, _ = SG["select"](found, Case(8192, 16, 8192, a))
        mine = next(c for c in chosen if c.name == tile)
        assert mine.unlike(Case(8192, 16, 8192, a)) is None and mine.abi["split_k"] == 4
        chosen, unmet = SG["select"](found, Case(8192, 8192, 8192, a))
        assert tile not in {c.name for c in chosen} and unmet[tile].startswith("meant for ")


def test_setmaxnreg_tiles_time_the_large_shapes(examples):
    """examples/sparse_wgmma_setmaxnreg.tile (256 x 192 and 192 x 192 CTA tiles, the consumers' registers from
    the producer by setmaxnreg) is meant for 4096 <= min(M, N): each large case of f16, bf16 and e4m3 times
    its tiles of that input type, writing the case's output type without C; the 2048 cube and decode do not."""
    found, _ = examples
    file = "sparse_wgmma_setmaxnreg.tile"
    for a in ("f16", "bf16", "e4m3"):
        for m, n, k in [(4096, 4096, 4096), (8192, 8192, 8192), (5120, 13824, 5120), (13824, 5120, 5120),
                        (4096, 128256, 4096)]:
            case = Case(m, n, k, a)
            ours = [c for c in SG["select"](found, case)[0] if c.file.endswith(file)]
            assert ours and all(c.unlike(case) is None for c in ours), (case, ours)
        for case in (Case(2048, 2048, 2048, a), Case(8192, 256, 8192, a)):
            assert not [c for c in SG["select"](found, case)[0] if c.file.endswith(file)]


def test_a_new_example_joins_without_a_change_to_the_benchmark(tmp_path):
    pytest.importorskip("lark")
    src = (ROOT / "examples" / "sparse_wgmma_f16_out_f16.tile").read_text()
    (tmp_path / "narrow.tile").write_text(src.replace("sparse_wgmma_f16_out_f16", "narrow")
                                          .replace("cta=128x256x64", "cta=128x128x64"))
    (tmp_path / "broken.tile").write_text("target sm_90a;\ntile broken { engine mma.sp; }\n")
    found, skipped = SG["discover"](tmp_path)
    assert [c.tile for c in found] == ["narrow"]
    assert found[0].abi["tile_n"] == 128 and found[0].unlike(Case(8192, 128, 8192, "f16")) is None
    assert skipped["broken.tile"].startswith("does not compile")
    chosen, _ = SG["select"](found, Case(8192, 128, 8192, "f16"))
    assert [c.tile for c in chosen] == ["narrow"]


def test_cases_and_shapes():
    full = SG["cases"](SG["SHAPES"], ("f16", "bf16", "e4m3", "s8"))
    # 9 shapes (3 cubes, 2 LLM layers, 3 decode, the vocabulary) x 3 float types, and s8 at 8192^3 only
    assert len(full) == 9 * 3 + 1 and full[-1] == Case(8192, 8192, 8192, "s8")
    assert (4096, 128256, 4096) in SG["SHAPES"] and (8192, 16, 8192) in SG["SHAPES"]
    quick = SG["cases"](SG["QUICK_SHAPES"], ("f16", "bf16", "e4m3", "s8"))
    assert len(quick) == 3 * 3 + 1
    assert SG["parse_shapes"]("4096, 8192x256x8192") == [(4096, 4096, 4096), (8192, 256, 8192)]
    with pytest.raises(ValueError):
        SG["parse_shapes"]("8192x256")
    assert Case(8192, 8192, 8192, "e4m3").out == "bf16" and Case(1, 1, 1, "s8").out == "s32"


# ------------------------------------------------------------------------------------------------
# Correctness first
# ------------------------------------------------------------------------------------------------

def test_a_wrong_kernel_is_reported_not_timed():
    timed = []
    errors = {"good": 1e-4, "wrong": 0.7, "nan": float("nan"), "unwritten": float("inf")}

    def check(name):
        if name == "raises":
            raise RuntimeError("launch failed")
        return errors[name]

    def measure(name):
        timed.append(name)
        return {"good": 1.5}[name]

    res = SG["gate"]({n: n for n in ("good", "wrong", "nan", "unwritten", "raises")}, check, measure, 2e-3)
    assert timed == ["good"]
    assert res["good"] == {"rel_err": 1e-4, "ms": 1.5}
    assert res["wrong"]["wrong"] == "wrong (rel err 7.0e-01 > 2e-03)" and "ms" not in res["wrong"]
    assert "ms" not in res["nan"] and "ms" not in res["unwritten"]
    assert res["raises"] == {"error": "RuntimeError: launch failed"}
    assert SG["fastest"](res) == "good"
    assert SG["fastest"]({"w": res["wrong"]}) is None


def test_tolerances_come_from_the_output_type():
    # f16 rounds to 2^-11 relative, bf16 to 2^-8; s32 sums of the benchmark's integers are exact
    assert SG["tolerance"]("f16") < SG["tolerance"]("bf16") and SG["tolerance"]("s32") == 0.0
    assert SG["tolerance"]("f16") > 2 ** -11 and SG["tolerance"]("bf16") > 2 ** -8


# ------------------------------------------------------------------------------------------------
# The table
# ------------------------------------------------------------------------------------------------

def test_the_table_and_its_ratios_from_fake_timings():
    f16 = Case(4096, 4096, 4096, "f16")
    e4m3 = Case(8192, 8192, 8192, "e4m3")
    s8 = Case(8192, 8192, 8192, "s8")
    rows = [
        {"case": f16, "tilec_tile": "sparse_wgmma_f16_out_f16.tile", "tilec_rel_err": 2.1e-4,
         "final_ms": {"tilec": 0.125, "cusparselt": 0.25, "cuBLAS": 0.1875}, "cusparselt_config": "alg 1, B view",
         "clocks": "1980 MHz, 400 W, 50 C"},
        {"case": e4m3, "tilec_tile": "e.tile", "tilec_rel_err": 1e-3, "tilec_promoted_tile": "p.tile",
         "final_ms": {"tilec": 1.0, "tilec promoted": 1.5, "cusparselt": 1.1, "cuBLAS fp8 fast acc": 0.8,
                      "cuBLAS fp8 no-fast acc": 1.2}},
        {"case": Case(8192, 16, 8192, "f16"), "unavailable": "n/a (w.tile: N % 256 == 0)",
         "final_ms": {"cuBLAS": 0.05}, "cusparselt_note": "no cuSPARSELt: RuntimeError"},
        {"case": s8, "tilec_wrong": "s.tile: wrong (rel err 1.0e+00 > 0e+00)", "final_ms": {"cuBLAS int8": 1.0}},
    ]
    table = SG["markdown_table"](rows).splitlines()
    assert len(table) == 2 + len(rows)
    assert all(line.count("|") == table[0].count("|") for line in table)
    cells = [c.strip() for c in table[2].split("|")[1:-1]]
    # 2 * 4096^3 / 0.125 ms = 1099.5 TFLOP/s; cuSPARSELt at 0.25 ms: 549.8; cuBLAS at 0.1875 ms: 733.0
    assert cells[:6] == ["4096x4096x4096", "f16 → f16", "sparse_wgmma_f16_out_f16.tile", "1100",
                         "550 (alg 1, B view)", "cuBLAS 733"]
    assert cells[6:9] == ["1.50", "2.00", "2.1e-04"]     # 0.1875 / 0.125, 0.25 / 0.125
    e = [c.strip() for c in table[3].split("|")[1:-1]]
    # like with like: the unpromoted tile against fast accumulation (0.8 / 1.0), the promoted one against
    # cuBLAS without it (1.2 / 1.5); 2 * 8192^3 / 1.5 ms = 733 TFLOP/s for the promoted tile
    assert e[6] == "0.80 (cuBLAS fp8 fast acc) · 0.80 (cuBLAS fp8 no-fast acc, promoted)" and e[7] == "1.10"
    assert e[2] == "e.tile; promoted: p.tile 733"
    na = [c.strip() for c in table[4].split("|")[1:-1]]
    assert na[2] == "n/a (w.tile: N % 256 == 0)" and na[3] == "-" and na[4] == "no cuSPARSELt: RuntimeError"
    assert na[6] == na[7] == "-"
    wrong = [c.strip() for c in table[5].split("|")[1:-1]]
    # 2 * 8192^3 / 1 ms = 1099.5 TOPS for the int8 peer; tilec has no time: wrong, not timed
    assert wrong[1] == "s8 → s32 (TOPS)" and wrong[2].startswith("s.tile: wrong") and wrong[3] == "-"
    assert wrong[5] == "cuBLAS int8 1100"

    s = SG["summarize"](f16, rows[0])
    assert s["best_dense"] == "cuBLAS" and s["tilec_over_dense"] == pytest.approx(1.5)
    assert SG["summarize"](e4m3, rows[1])["best_dense"] == "cuBLAS fp8 fast acc"
    # without a promoted tile the no-fast pairing has no like: "-", not the unpromoted tile's ratio
    unpaired = dict(rows[1], final_ms={k: v for k, v in rows[1]["final_ms"].items() if k != "tilec promoted"})
    unpaired.pop("tilec_promoted_tile")
    e = [c.strip() for c in SG["markdown_table"]([unpaired]).splitlines()[2].split("|")[1:-1]]
    assert e[6] == "0.80 (cuBLAS fp8 fast acc) · - (cuBLAS fp8 no-fast acc, promoted)" and e[2] == "e.tile"


def test_json_rows_are_plain_json():
    rows = [{"case": Case(8192, 16, 8192, "bf16"), "unavailable": "n/a (x)", "final_ms": {"cuBLAS": float("nan")}}]
    out = SG["jsonable"](rows)
    text = json.dumps(out, allow_nan=False)
    back = json.loads(text)[0]
    assert back["M"] == 8192 and back["N"] == 16 and back["a"] == "bf16" and back["d"] == "bf16"
    assert back["final_ms"]["cuBLAS"] is None and back["summary"]["tilec"] is None
    assert math.isnan(SG["rate"](Case(1, 1, 1, "f16"), float("nan")))


def test_list_runs_without_a_gpu(tmp_path):
    pytest.importorskip("lark")
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "sparse_gemm.py"), "--list", "--quick"],
                          capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    (s8,) = [line for line in lines if line.strip().startswith("8192x8192x8192 s8 -> s32:")]
    assert "sparse_wgmma_s8_out_s32.tile" in s8
    assert sum(1 for line in lines if " -> " in line) == 3 * 3 + 1


# ------------------------------------------------------------------------------------------------
# One case end to end on a stand-in for torch: launches advance a fake GPU clock that CUDA events read
# ------------------------------------------------------------------------------------------------

class _Gpu:
    now = 0.0                 # ms of GPU time so far
    capturing = None          # the graph being captured, if any


class _Launch:
    """A contender: `ms` of GPU time per launch, a D whose relative error is `err`; captured launches
    are recorded in the graph, not run."""

    def __init__(self, ms, err=1e-4):
        self.ms, self.err, self.launches = ms, err, 0

    def __call__(self):
        if _Gpu.capturing is not None:
            _Gpu.capturing.calls.append(self)
            return None
        self.launches += 1
        _Gpu.now += self.ms
        return self


class _Event:
    def __init__(self, enable_timing=True):
        self.t = None

    def record(self):
        self.t = _Gpu.now

    def elapsed_time(self, end):
        return end.t - self.t


class _Graph:
    def __init__(self):
        self.calls = []

    def replay(self):
        for fn in self.calls:
            fn()


class _Capture:
    def __init__(self, g, stream=None):
        self.g = g

    def __enter__(self):
        _Gpu.capturing = self.g

    def __exit__(self, *exc):
        _Gpu.capturing = None


class _Stream:
    def wait_stream(self, other):
        pass


def _fake_torch():
    from contextlib import nullcontext
    from types import SimpleNamespace

    cuda = SimpleNamespace(Event=_Event, synchronize=lambda: None, CUDAGraph=_Graph, Stream=_Stream,
                           current_stream=_Stream, stream=lambda s: nullcontext(), graph=_Capture)
    return SimpleNamespace(cuda=cuda, empty=lambda *a, **k: "D", float16="f16", bfloat16="bf16", float32="f32")


def test_a_tile_that_pads_a_gets_a_packing_of_its_rows(examples):
    """A 192-row tile on CTA pairs pads A's metadata to whole pairs of tiles: at M = 8192 it reads 528 metadata
    tiles of 16 rows (ceil(8192 / 384) * 384 = 8448 rows; the runtime refuses fewer) beside M rows of values; the
    benchmark packs A for the most rows any chosen tile reads and gives each tile its rows (the first M are A's)."""
    found, _ = examples
    case = Case(8192, 8192, 8192, "f16")
    chosen, _ = SG["select"](found, case)
    rows = {c.name: SG["packed_rows"](c, case) for c in chosen if "a_metadata" in c.abi["buffers"]}
    assert rows["sparse_wgmma_setmaxnreg.tile:sparse_wgmma_f16_192x192"] == (8192, 8448 // 16)
    assert rows["sparse_wgmma_f16_out_f16.tile"] == (8192, 8192 // 16)


def test_one_case_on_a_fake_gpu(monkeypatch):
    g = SG["run_case"].__globals__          # the script's module globals, which run_case reads
    wrong, good, slow, f32_c = _Launch(0.1, err=0.9), _Launch(0.5), _Launch(0.6), _Launch(0.3, err=1e-6)
    launches = {"wrong.tile": wrong, "good.tile": good, "slow.tile": slow, "f32_c.tile": f32_c}
    sparse_lib, view, contig = _Launch(0.8), _Launch(1.0), _Launch(1.25)
    monkeypatch.setitem(g, "operands", lambda torch, case, seed, **kw: (None, None, None, None, "ref"))
    monkeypatch.setitem(g, "tilec_contenders", lambda torch, case, group, *a: {c.name: launches[c.name] for c in group})
    monkeypatch.setitem(g, "cusparselt", lambda *a: {"alg 0, B view": sparse_lib, "_keep": None})
    monkeypatch.setitem(g, "dense_peers", lambda *a: {"cuBLAS": {"view": view, "contig": contig}})
    monkeypatch.setitem(g, "checker", lambda torch, ref, d=None: (lambda fn: fn().err))
    monkeypatch.setitem(g, "gpu_state", lambda: "1980 MHz, 300 W, 40 C")
    torch = _fake_torch()
    case = Case(4096, 4096, 4096, "f16")
    tiles = [Candidate(f"examples/{n}.tile", n, fake_abi()) for n in ("wrong", "good", "slow")]
    tiles += [Candidate(f"examples/{n}.tile", n, fake_abi(d="f32", buffers={"c": {"element": "f32"}})) for n in ("f32_c",)]
    args = type("Args", (), {"rounds": 3, "cslt_max_algs": 4})()
    row = SG["run_case"](torch, case, tiles, args, SG["Timer"](torch))

    assert wrong.launches == 1                   # its check; never timed
    assert row["tilec"]["wrong.tile"]["wrong"].startswith("wrong (rel err 9.0e-01")
    # the fastest tile writing f16 without C, though the f32 D + C tile is faster: like with like
    assert row["tilec_tile"] == "good.tile" and row["tilec"]["slow.tile"]["ms"] == pytest.approx(0.6)
    assert row["tilec"]["f32_c.tile"]["ms"] == pytest.approx(0.3)
    assert row["final_ms"] == pytest.approx({"tilec": 0.5, "cusparselt": 0.8, "cuBLAS": 1.0})   # view < contig
    assert len(row["rounds_ms"]["tilec"]) == 3 and row["timing"]["tilec"].startswith("CUDA graph of 6 launches")
    s = SG["summarize"](case, row)               # 1.0 / 0.5 and 0.8 / 0.5
    assert s["tilec_over_dense"] == pytest.approx(2.0) and s["tilec_over_cusparselt"] == pytest.approx(1.6)
    line = SG["markdown_table"]([row]).splitlines()[2]
    assert "| good.tile |" in line and "| 2.00 | 1.60 |" in line and "1980 MHz" in line
    # where no tile writes the case's D without C, the row is the best other one, saying how it differs
    row = SG["run_case"](torch, case, tiles[3:], args, SG["Timer"](torch))
    assert row["tilec_tile"] == "f32_c.tile (f32 D, reads C)" and row["final_ms"]["tilec"] == pytest.approx(0.3)


def test_promoted_fp8_tiles_pair_with_cublas_without_fast_accumulation(monkeypatch):
    g = SG["run_case"].__globals__
    fast, prom = _Launch(0.5), _Launch(0.4)        # the promoted tile faster here: still not the "tilec" entry
    launches = {"fast.tile": fast, "prom.tile": prom}
    peers = {"cuBLAS fp8 fast acc": {"view": _Launch(0.45)}, "cuBLAS fp8 no-fast acc": {"view": _Launch(0.8)}}
    monkeypatch.setitem(g, "operands", lambda torch, case, seed, **kw: (None, None, None, None, "ref"))
    monkeypatch.setitem(g, "tilec_contenders", lambda torch, case, group, *a: {c.name: launches[c.name] for c in group})
    monkeypatch.setitem(g, "cusparselt", lambda *a: {"_keep": None})
    monkeypatch.setitem(g, "dense_peers", lambda *a: peers)
    monkeypatch.setitem(g, "checker", lambda torch, ref, d=None: (lambda fn: fn().err))
    monkeypatch.setitem(g, "gpu_state", lambda: "-")
    case = Case(4096, 4096, 4096, "e4m3")
    tiles = [Candidate(f"examples/{n}.tile", n, fake_abi(a="e4m3", d="bf16", **kw))
             for n, kw in (("fast", {}), ("prom", {"promote": 4}))]
    args = type("Args", (), {"rounds": 1, "cslt_max_algs": 1})()
    row = SG["run_case"](_fake_torch(), case, tiles, args, SG["Timer"](_fake_torch()))
    assert row["tilec_tile"] == "fast.tile" and row["tilec_promoted_tile"] == "prom.tile"
    assert row["tilec_promoted_finalists"] == ["prom.tile"] and set(row["rounds_ms"]) == {
        "tilec", "tilec promoted", "cuBLAS fp8 fast acc", "cuBLAS fp8 no-fast acc"}
    assert row["final_ms"]["tilec"] == pytest.approx(0.5) and row["final_ms"]["tilec promoted"] == pytest.approx(0.4)
    s = SG["summarize"](case, row)                # 0.45 / 0.5 (fast acc), 0.8 / 0.4 (no-fast, promoted)
    assert s["tilec_over_each_dense"] == pytest.approx({"cuBLAS fp8 fast acc": 0.9, "cuBLAS fp8 no-fast acc": 2.0})


class _Warming(_Launch):
    """A contender that runs at `fast` ms for its first `cool` launches (a cooler card's clock) and at `ms`
    after: a single screening replay then ranks it ahead of a tile that is faster in the rounds."""

    def __init__(self, fast, ms, cool):
        super().__init__(ms)
        self.fast, self.cool = fast, cool

    def __call__(self):
        if _Gpu.capturing is None and self.launches < self.cool:
            self.launches += 1
            _Gpu.now += self.fast
            return self
        return super().__call__()


def test_the_rounds_decide_among_the_screenings_finalists(monkeypatch):
    g = SG["run_case"].__globals__
    # screened first on a cool card: first.tile's first 27 launches (its check and screening replays: the
    # first assert below shows they were enough) take 0.4 ms, the rounds' 0.6; steady.tile is 0.5 throughout,
    # late.tile 0.55, never.tile 0.9 (4th: not a finalist of 3)
    launches = {}

    def fresh():
        launches.update({"first.tile": _Warming(0.4, 0.6, cool=1 + 3 * 6 + 8), "steady.tile": _Launch(0.5),
                         "late.tile": _Launch(0.55), "never.tile": _Launch(0.9)})
    fresh()
    monkeypatch.setitem(g, "operands", lambda torch, case, seed, **kw: (None, None, None, None, "ref"))
    monkeypatch.setitem(g, "tilec_contenders", lambda torch, case, group, *a: {c.name: launches[c.name] for c in group})
    monkeypatch.setitem(g, "cusparselt", lambda *a: {"_keep": None})
    monkeypatch.setitem(g, "dense_peers", lambda *a: {"cuBLAS": {"view": _Launch(1.0)}})
    monkeypatch.setitem(g, "checker", lambda torch, ref, d=None: (lambda fn: fn().err))
    monkeypatch.setitem(g, "gpu_state", lambda: "-")
    case = Case(4096, 4096, 4096, "f16")
    tiles = [Candidate(f"examples/{n}.tile", n, fake_abi()) for n in ("first", "steady", "late", "never")]
    args = type("Args", (), {"rounds": 3, "cslt_max_algs": 1, "finalists": 3})()
    row = SG["run_case"](_fake_torch(), case, tiles, args, SG["Timer"](_fake_torch()))
    assert row["tilec"]["first.tile"]["ms"] < row["tilec"]["steady.tile"]["ms"]      # the screening's order
    assert row["tilec_finalists"] == ["first.tile", "steady.tile", "late.tile"]
    assert row["tilec_tile"] == "steady.tile" and row["final_ms"]["tilec"] == pytest.approx(0.5)
    assert row["tilec_finalists_ms"] == pytest.approx({"first.tile": 0.6, "steady.tile": 0.5, "late.tile": 0.55})
    assert set(row["rounds_ms"]) == {"tilec", "cuBLAS"} and len(row["rounds_ms"]["tilec"]) == 3
    assert set(row["timing"]) == {"tilec", "cuBLAS"}
    # --finalists 1: the screening's fastest alone, as before
    args.finalists = 1
    fresh()
    row = SG["run_case"](_fake_torch(), case, tiles, args, SG["Timer"](_fake_torch()))
    assert row["tilec_finalists"] == ["first.tile"] and row["tilec_tile"] == "first.tile"


class _Drawing(_Launch):
    """A contender drawing `power` (0..1) on a power-capped card: the card's heat follows the power drawn
    with a time constant of 20 ms (a launch moves it 1 - exp(-ms / 20) of the way), and every launch takes
    `ms` x (1 + 0.25 heat): right after a light contender, a heavy one runs faster for tens of milliseconds
    (the clock the light one left behind)."""

    def __init__(self, ms, power):
        super().__init__(ms)
        self.power = power

    def __call__(self):
        if _Gpu.capturing is not None:
            return super().__call__()
        self.launches += 1
        _Gpu.now += self.ms * (1 + 0.25 * _Gpu.heat)
        _Gpu.heat += (1 - math.exp(-self.ms / 20)) * (self.power - _Gpu.heat)
        return self


def test_a_finalist_after_a_light_one_is_not_timed_at_its_clock(monkeypatch):
    """Two copies of one heavy kernel (tilec and cuSPARSELt stand-ins, 0.5 ms at a cool card) and a light,
    slow dense peer: in the rounds each finalist runs alone for Timer.warm_ms before its timed replays, so
    the one that follows the light peer gets no head start: both within 1 % of each other and of 0.5 x 1.25
    (after WARM_MS = 150 ms, 7.5 time constants, the heat is all the way)."""
    g = SG["run_case"].__globals__
    tile, lib, peer = _Drawing(0.5, 1.0), _Drawing(0.5, 1.0), _Drawing(2.0, 0.0)
    monkeypatch.setattr(_Gpu, "heat", 0.0, raising=False)
    monkeypatch.setitem(g, "operands", lambda torch, case, seed, **kw: (None, None, None, None, "ref"))
    monkeypatch.setitem(g, "tilec_contenders", lambda torch, case, group, *a: {"heavy.tile": tile})
    monkeypatch.setitem(g, "cusparselt", lambda *a: {"alg 0, B view": lib, "_keep": None})
    monkeypatch.setitem(g, "dense_peers", lambda *a: {"cuBLAS": {"view": peer}})
    monkeypatch.setitem(g, "checker", lambda torch, ref, d=None: (lambda fn: fn().err))
    monkeypatch.setitem(g, "gpu_state", lambda: "-")
    case = Case(4096, 4096, 4096, "f16")
    args = type("Args", (), {"rounds": 5, "cslt_max_algs": 1})()
    clocks = iter(range(1000, 2000))
    heavy = Candidate(f"examples/{'heavy'}.tile", "heavy", fake_abi())
    row = first = SG["run_case"](_fake_torch(), case, [heavy], args,
                                 SG["Timer"](_fake_torch(), clock=lambda: next(clocks)))
    assert row["final_ms"]["tilec"] == pytest.approx(0.625, rel=1e-2)
    assert row["final_ms"]["tilec"] == pytest.approx(row["final_ms"]["cusparselt"], rel=1e-2)
    # without the warm-up (the rotation of the rounds alone), whichever entry follows the light peer starts
    # cool: here the same kernel times 6 % faster as tilec than as cuSPARSELt
    monkeypatch.setattr(_Gpu, "heat", 0.0, raising=False)
    row = SG["run_case"](_fake_torch(), case, [heavy], args, SG["Timer"](_fake_torch(), warm_ms=0.0))
    assert row["final_ms"]["tilec"] < 0.97 * row["final_ms"]["cusparselt"]
    # the first run read one SM clock per round and entry: the medians under the entries' names
    assert set(first["sm_mhz"]) == {"tilec", "cusparselt", "cuBLAS"}
    assert "| tilec " in SG["markdown_table"]([first]).splitlines()[2] and row["sm_mhz"] == {}


def test_the_shortlist_leaves_out_tiles_far_behind_the_fastest():
    res = {"a": {"ms": 1.0}, "b": {"ms": 1.4}, "c": {"ms": 3.0}, "wrong": {"wrong": "x"}}
    assert SG["shortlist"](res, 3) == ["a", "b"]
    assert SG["shortlist"](res, 3, margin=4.0) == ["a", "b", "c"] and SG["shortlist"](res, 1) == ["a"]


class _Tensor:
    """Enough of a tensor for the copies of A: a size, clones that remember whose copy they are, .t()."""

    def __init__(self, nbytes, name="A"):
        self.nbytes, self.name = nbytes, name

    def numel(self):
        return self.nbytes

    def element_size(self):
        return 1

    def clone(self):
        return _Tensor(self.nbytes, self.name + "'")

    def t(self):
        return self

    def contiguous(self):
        return self


def test_each_launch_reads_an_a_the_l2_does_not_hold():
    """Copies of A that together are COLD_L2_FACTOR (3) x the L2, handed out in turn; one A where it is that
    large itself, or with --warm-l2."""
    from types import SimpleNamespace

    assert SG["copies_for"](40, 50) == 4 and SG["copies_for"](150, 50) == 1 and SG["copies_for"](149, 50) == 2
    assert SG["copies_for"](40, 50, warm_l2=True) == 1 and SG["copies_for"](40, None) == 1
    fake = SimpleNamespace(mm=lambda a, b: a,
                           cuda=SimpleNamespace(get_device_properties=lambda i: SimpleNamespace(L2_cache_size=50)))
    peers = SG["dense_peers"](fake, Case(8192, 16, 8192, "f16"), _Tensor(40), _Tensor(1, "B"))
    read = [peers["cuBLAS"]["view"]() for _ in range(9)]
    assert [a.name for a in read[:4]] == ["A", "A'", "A'", "A'"] and len({id(a) for a in read[:4]}) == 4
    assert [id(a) for a in read[4:]] == [id(a) for a in read[:4]] + [id(read[0])]
    peers = SG["dense_peers"](fake, Case(8192, 16, 8192, "f16"), _Tensor(40), _Tensor(1, "B"), warm_l2=True)
    assert {id(peers["cuBLAS"]["view"]()) for _ in range(5)} == {id(peers["cuBLAS"]["view"]())}


class _CopyRead:
    """A launch that reads the next copy of a Ring, `ms` of GPU time; as in a CUDA graph, a captured launch
    keeps the copy it read at capture time, and every replay reads that one again."""

    def __init__(self, ring, ms):
        self.ring, self.ms, self.read = ring, ms, []

    def __call__(self):
        copy = self.ring.next()
        if _Gpu.capturing is not None:
            _Gpu.capturing.calls.append(lambda copy=copy: self._run(copy))
            return None
        return self._run(copy)

    def _run(self, copy):
        self.read.append(copy)
        _Gpu.now += self.ms
        return self


@pytest.mark.parametrize("copies,ms", [(3, 0.9), (8, 4.0), (4, 0.017)])
def test_a_graph_of_a_cycling_launch_reads_every_copy_in_turn(copies, ms):
    """A CUDA graph records the copy each captured launch read, and every replay repeats them: the Timer
    captures a launch over n copies (`cycling`) a multiple of n times, so that every replay reads each copy
    equally often and the launch after a replay's last reads the copy after it. Before, a 4 ms launch over 8
    copies was captured once (every replay read one copy, still in the L2 from the replay before), and 177
    launches of 17 us over 2 copies left one launch a replay reading the copy its predecessor had read."""
    ring = SG["Ring"](range(copies))
    launch = _CopyRead(ring, ms)
    fn = SG["cycling"](launch, ring)
    timer = SG["Timer"](_fake_torch(), warm_ms=0)
    graph, batch = timer.capture("x", fn)
    assert batch % copies == 0 and batch >= copies
    launch.read.clear()
    for _ in range(3):
        timer.replay(fn, graph, batch, 1)
    read = launch.read
    assert len(read) == 3 * batch
    assert all(b == (a + 1) % copies for a, b in zip(read, read[1:])), read[:20]
    # the launch closures of every contender are marked with their ring's length
    from types import SimpleNamespace

    fake = SimpleNamespace(mm=lambda a, b: a,
                           cuda=SimpleNamespace(get_device_properties=lambda i: SimpleNamespace(L2_cache_size=50)))
    peers = SG["dense_peers"](fake, Case(8192, 16, 8192, "f16"), _Tensor(40), _Tensor(1, "B"))
    assert peers["cuBLAS"]["view"].copies == 4 and peers["cuBLAS"]["contig"].copies == 4


def test_launch_timer_rounds_the_batch_to_the_copies():
    from compiler.runtime.timing import LaunchTimer

    timer = LaunchTimer("torch", _fake_torch(), target_ms=3.0)
    for multiple, want in ((1, 4), (3, 6), (8, 8), (5, 5)):
        _, batch, how = timer.capture(_Launch(0.9), multiple)
        assert batch == want and how == f"CUDA graph of {want} launches"


def test_rounds_change_each_entry_s_predecessor():
    """Round r starts at entry r * len / rounds and odd rounds run backwards: with 3 entries and 5 rounds,
    tilec follows cuBLAS in 2 rounds, not 4 as with the rotation alone."""
    names = ["tilec", "cusparselt", "cuBLAS"]
    order = SG["round_order"](names, 5)
    assert len(order) == 15 and all(sorted(order[i:i + 3]) == sorted(names) for i in range(0, 15, 3))
    before = [order[i - 1] for i in range(1, 15) if order[i] == "tilec" and i % 3]
    assert before.count("cuBLAS") <= 2 and len(set(before)) == 2


def test_warm_ms_must_be_finite_and_not_negative():
    parse = SG["milliseconds"]
    assert parse("150") == 150.0 and parse("0") == 0.0
    for bad in ("-1", "inf", "nan", "x"):
        with pytest.raises(Exception, match="milliseconds"):
            parse(bad)
