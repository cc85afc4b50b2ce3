"""The schedule's persistent= / raster= / split_k= fields (issue 17): DSL -> spec -> DSL, spec -> IR -> spec
(printed and parsed), the IR attribute types, and a located diagnostic for every value or combination no
kernel takes."""
import pytest

from compiler import CompileError
from compiler.driver import compile_source, parse_source
from compiler.ir import print_op
from compiler.ir_parser import parse_ir
from compiler.lowering import lower
from compiler.passes.derive import tile_spec
from compiler.spec import SPLIT_K_STREAM
from compiler.spec_printer import print_file

TILE = """target sm_90a;
tile t {{
  engine mma.sp;
  shape M=16 N=8 K=32;
  A: f16 global;
  B: f16 global;
  C: f32 global;
  D: f32 global;
  sparsity 2:4 metadata=runtime selector=0;
  schedule cta=128x256x64 warps=8x1 stages=4 mma=wgmma{extra};
}}
"""

OPTIONS = [
    ("", dict(persistent="none", raster=None, split_k=1)),
    (" persistent=static", dict(persistent="static", raster=None, split_k=1)),
    (" persistent=clc raster=16", dict(persistent="clc", raster=16, split_k=1)),
    (" raster=1 split_k=4", dict(persistent="none", raster=1, split_k=4)),
    (" persistent=static raster=4 split_k=stream", dict(persistent="static", raster=4, split_k=SPLIT_K_STREAM)),
    (" split_k=1 persistent=none", dict(persistent="none", raster=None, split_k=1)),
]


@pytest.mark.parametrize("extra,want", OPTIONS)
def test_front_end_reads_the_fields(extra, want):
    sc = parse_source(TILE.format(extra=extra), "t.tile").tiles[0].schedule
    assert {k: getattr(sc, k) for k in want} == want


@pytest.mark.parametrize("extra,want", OPTIONS)
def test_dsl_and_ir_round_trips(extra, want):
    spec = parse_source(TILE.format(extra=extra), "t.tile")
    text = print_file(spec)
    assert parse_source(text, "t.tile") == spec
    # defaults are not written: the printed statement names exactly the non-default fields
    for k, v in want.items():
        default = {"persistent": "none", "raster": None, "split_k": 1}[k]
        assert (f" {k}=" in text) == (v != default), text
    # spec -> IR text -> IR -> spec: the fields survive, and the text is a fixed point
    printed = print_op(lower(spec))
    again = parse_ir(printed, "t.ir")
    assert print_op(again) == printed
    assert tile_spec(again.ops("tilec.tile")[0]).schedule == spec.tiles[0].schedule


def test_split_k_attribute_type():
    spec = parse_source(TILE.format(extra=" split_k=stream"), "t.tile")
    printed = print_op(lower(spec))
    assert 'split_k = "stream"' in printed
    for bad, why in (('split_k = "streamk"', 'expected a slice count (u32) or "stream"'),
                     ("split_k = 4294967296", 'expected a slice count (u32) or "stream"')):
        with pytest.raises(CompileError) as e:
            parse_ir(printed.replace('split_k = "stream"', bad), "t.ir")
        assert why in e.value.render()


def _error(extra: str) -> str:
    with pytest.raises(CompileError) as e:
        compile_source(TILE.format(extra=extra), "t.tile")
    return e.value.render()


@pytest.mark.parametrize("extra,token,words", [
    (" persistent=clc", "clc", "cluster launch control"),
    (" raster=0", "0", "at least one tile row"),
    (" split_k=0", "0", "at least one slice"),
    (" persistent=sometimes", "sometimes", "unknown schedule persistent"),
    (" split_k=x", "x", "a slice count or 'stream'"),
])
def test_illegal_values_are_located(extra, token, words):
    out = _error(extra)
    line = "  schedule cta=128x256x64 warps=8x1 stages=4 mma=wgmma" + extra + ";"
    col = line.index(extra.strip().split("=")[0]) + len(extra.strip().split("=")[0]) + 2
    assert out.startswith(f"t.tile:10:{col}: error:"), out
    assert words in out
    assert line in out


def test_options_belong_to_the_wgmma_kernel():
    text = TILE.format(extra="").replace("warps=8x1 stages=4 mma=wgmma", "warps=2x4 stages=3 split_k=2")
    with pytest.raises(CompileError) as e:
        compile_source(text, "t.tile")
    assert "schedule split_k= is a schedule of the sparse wgmma kernel" in e.value.render()


def test_raster_reaches_the_kernel():
    """raster=G is the wgmma kernel's raster group: its tile-rows-per-group bound `min.u32 .., G`."""
    ptx = compile_source(TILE.format(extra=" raster=3"), "t.tile").ptx
    assert "min.u32 %x, %x, 3;" in ptx
    default = compile_source(TILE.format(extra=""), "t.tile").ptx
    assert "min.u32 %x, %x, 8;" in default and "min.u32 %x, %x, 3;" not in default


def test_persistent_reaches_the_kernel():
    """persistent=static: the wgmma kernel's work loop over tiles ctaid.x, += nctaid.x (its ABI grid counts
    the device's multiprocessors); tests/test_sparse_wgmma_sched.py runs it."""
    res = compile_source(TILE.format(extra=" persistent=static"), "t.tile")
    abi = res.to_json()["tiles"]["t"]["kernel"]
    assert abi["persistent"] and abi["grid"][0] == "min(tiles, multiprocessors * max_ctas_per_sm)"
    assert "add.u32 %t, %t, %x;" in res.ptx
    assert "%nctaid.x" not in compile_source(TILE.format(extra=""), "t.tile").ptx


def test_split_k_reaches_the_kernel():
    """split_k=N: N CTAs per tile (ABI grid tiles * N), the workspace and semaphores among the parameters;
    tests/test_sparse_wgmma_sched.py runs it."""
    res = compile_source(TILE.format(extra=" split_k=4"), "t.tile")
    abi = res.to_json()["tiles"]["t"]["kernel"]
    assert abi["split_k"] == 4 and abi["grid"][0] == "tiles * 4" and set(abi["scratch"]) == {"workspace", "semaphores"}
    assert "atom.acq_rel.gpu.global.add.u32" in res.ptx


def test_stream_k_reaches_the_kernel():
    """split_k=stream (with or without persistent=static: stream-K CTAs are persistent): grid min(tiles x K
    blocks, SMs), the workspace and semaphores; tests/test_sparse_wgmma_sched.py runs it."""
    for extra in (" split_k=stream", " persistent=static split_k=stream"):
        res = compile_source(TILE.format(extra=extra), "t.tile")
        abi = res.to_json()["tiles"]["t"]["kernel"]
        assert abi["split_k"] == "stream" and abi["persistent"] and set(abi["scratch"]) == {"workspace", "semaphores"}
        assert abi["grid"][0] == "min(tiles * ((K + 63) // 64), multiprocessors * max_ctas_per_sm)"
        assert "atom.acq_rel.gpu.global.add.u32" in res.ptx


def test_stream_k_with_cta_pairs_reaches_the_kernel():
    """cluster=2 split_k=stream: ranges of pair tiles; the grid in whole pairs."""
    res = compile_source(TILE.format(extra=" cluster=2 split_k=stream"), "t.tile")
    abi = res.to_json()["tiles"]["t"]["kernel"]
    assert abi["cluster"] == [2, 1, 1] and abi["split_k"] == "stream"
    assert abi["grid"][0] == "2 * min(tiles * ((K + 63) // 64) // 2, multiprocessors * max_ctas_per_sm // 2)"


def test_stream_k_on_the_sync_kernel_is_refused_where_written():
    text = TILE.format(extra="").replace("warps=8x1 stages=4 mma=wgmma", "warps=2x4 stages=3 split_k=stream")
    with pytest.raises(CompileError) as e:
        compile_source(text, "t.tile")
    out = e.value.render()
    line = "  schedule cta=128x256x64 warps=2x4 stages=3 split_k=stream;"
    assert out.startswith(f"t.tile:10:{line.index('split_k=') + len('split_k=') + 1}: error:"), out
    assert "schedule split_k= is a schedule of the sparse wgmma kernel" in out and line in out
