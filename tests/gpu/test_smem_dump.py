"""tilec's tcgen05 global->shared copy code on a Hopper GPU (benchmarks/smem_dump_check.py).

The smem-dump variant of each tile (sm_90a, tcgen05 instructions left out) is launched on a 2x2 grid (4x2
CTAs for cta_group::2); each CTA writes its shared buffer after every K stage. The images are then read
back by the independent reference model (compiler.sim) through the tile's own descriptors (PTX 9.7.16.4.1
Table 40, canonical layouts of 9.7.16.3.3) and must give exactly the global inputs of that CTA's M/N
offset and stage's K range; the model's MMA over all K steps must equal numpy; and each operand region must
equal the CPU emulation of compiler/layout.py's copy map byte for byte.

Runs the quick sweep (every width, every swizzle and major of each operand at least once, K in two
stages). Needs an sm_90 GPU with cupy, plus lark and ml_dtypes for tilec and the model; skipped otherwise.
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _smem_dump_check():
    spec = importlib.util.spec_from_file_location("smem_dump_check", REPO / "benchmarks" / "smem_dump_check.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod          # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def flow(cupy_device, tmp_path_factory):
    _, cc = cupy_device
    if cc != 90:
        pytest.skip(f"the dump kernels are sm_90a code (arch-specific, PTX 5.1: runs on sm_90 only), device is sm_{cc}")
    pytest.importorskip("lark")           # tilec's parser
    pytest.importorskip("ml_dtypes")      # compiler.sim's element decoding
    from compiler.ptxas import find_ptxas

    mod = _smem_dump_check()
    data = tmp_path_factory.mktemp("smemdump")
    out = data / "out"
    # without ptxas the driver JIT-compiles the PTX (RawModule loads either)
    manifest = mod.prepare(data, quick=True, assemble=find_ptxas() is not None)
    status = mod.run_device(data, out, isolate=False)
    report = mod.check(data, out)
    return mod, manifest, status, report


def test_every_dump_kernel_ran(flow):
    mod, manifest, status, _ = flow
    assert manifest["tiles"] and not manifest["rejected"]
    for name, st in status["tiles"].items():
        assert st["status"] == "ok", f"{name}: {st.get('error')}"
        # S was pre-filled with a sentinel: no 16-byte chunk of any CTA/stage image may still hold it
        assert st["unwritten_chunks"] == 0, name
        # the dump variant has no epilogue: D (and SFA/SFB) keep their sentinel
        assert st["d_untouched"], name
    assert len(status["tiles"]) == len(manifest["tiles"])


def test_images_read_back_through_descriptors(flow):
    mod, manifest, _, report = flow
    assert report.device_errors == []
    assert report.failures == [], "\n".join(report.failures[:10])
    assert report.tiles_checked == len(manifest["tiles"])
    assert report.byte_mismatches == 0 and report.bytes_compared > 0
    # every width and every major of the quick sweep was read back, with elements actually compared
    widths = {(op, w, major) for (op, w, major, _), t in report.operands.items() if t.elements}
    for label, width in mod.WIDTHS.items():
        majors = ("K", "MN") if width.transposable else ("K",)
        for major in majors:
            assert ("A", mod.width_label(width.a_type, width.kind), major) in widths, (label, major)


def test_mma_over_dumped_images_matches_numpy(flow):
    _, manifest, _, report = flow
    assert len(report.mma) == len(manifest["tiles"])
    bad = [m for m in report.mma if not m["ok"]]
    assert not bad, bad[:5]
    assert all(m["d_elements"] > 0 for m in report.mma)
