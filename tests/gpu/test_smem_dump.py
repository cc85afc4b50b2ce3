"""tilec's tcgen05 global->shared copy code on a Hopper GPU (tests/gpu/harness/smem_dump.py).

The smem-dump variant of each tile (sm_90a, tcgen05 instructions left out) is launched on a 2x2 grid (4x2
CTAs for cta_group::2); each CTA writes its shared buffer after every K stage. The images are then read
back by the independent reference model (compiler.sim) through the tile's own descriptors (PTX 9.7.16.4.1
Table 40, canonical layouts of 9.7.16.3.3) and must give exactly the global inputs of that CTA's M/N
offset and stage's K range; the model's MMA over all K steps must equal numpy; and each operand region must
equal the CPU emulation of compiler/layout.py's copy map byte for byte.

Default slice: the quick sweep (every width, every swizzle and major of each operand at least once, K in
two stages). `-m "gpu and slow"`: the full sweep as well (every (major, swizzle) twice per operand, four
stages, cta_group::2, mixed widths, a 3x2 grid, sparse A). A failing check writes its report under $OUT.
Needs an sm_90 GPU with cupy, plus lark and ml_dtypes for tilec and the model; skipped otherwise.
"""
from __future__ import annotations

import json
import os

import pytest

from tests.gpu.harness import smem_dump


def _flow(cp_device, tmp_path_factory, quick: bool):
    _, cc = cp_device
    if cc != 90:
        pytest.skip(f"the dump kernels are sm_90a code (an arch-specific `.target`: runs on sm_90 only), "
                    f"device is sm_{cc}")
    pytest.importorskip("lark", reason="tilec's parser compiles the dump tiles")
    pytest.importorskip("ml_dtypes", reason="compiler.sim decodes the elements")
    from compiler.ptxas import find_ptxas

    data = tmp_path_factory.mktemp("smemdump")
    out = data / "out"
    # without ptxas the driver JIT-compiles the PTX (RawModule loads either)
    manifest = smem_dump.prepare(data, quick=quick, assemble=find_ptxas() is not None)
    status = smem_dump.run_device(data, out, isolate=False)
    report = smem_dump.check(data, out)
    if not report.ok and os.environ.get("OUT"):         # the device tool brings $OUT back: analyse offline
        path = os.path.join(os.environ["OUT"], f"smem_dump_{'quick' if quick else 'full'}_report.json")
        with open(path, "w") as fh:
            json.dump({"report": report.to_json(), "device": status}, fh, indent=1, default=str)
    return manifest, status, report


@pytest.fixture(scope="module")
def flow(cupy_device, tmp_path_factory):
    return _flow(cupy_device, tmp_path_factory, quick=True)


@pytest.fixture(scope="module")
def full_flow(cupy_device, tmp_path_factory):
    return _flow(cupy_device, tmp_path_factory, quick=False)


def _every_dump_kernel_ran(manifest, status):
    assert manifest["tiles"] and not manifest["rejected"]
    for name, st in status["tiles"].items():
        assert st["status"] == "ok", f"{name}: {st.get('error')}"
        # S was pre-filled with a sentinel: no 16-byte chunk of any CTA/stage image may still hold it
        assert st["unwritten_chunks"] == 0, name
        # the dump variant has no epilogue: D (and SFA/SFB) keep their sentinel
        assert st["d_untouched"], name
    assert len(status["tiles"]) == len(manifest["tiles"])


def _images_read_back_through_descriptors(manifest, report):
    assert report.device_errors == []
    assert report.failures == [], "\n".join(report.failures[:10])
    assert report.tiles_checked == len(manifest["tiles"])
    assert report.byte_mismatches == 0 and report.bytes_compared > 0
    # every width and every major of the sweep was read back, with elements actually compared
    widths = {(op, w, major) for (op, w, major, _), t in report.operands.items() if t.elements}
    for label, width in smem_dump.WIDTHS.items():
        majors = ("K", "MN") if width.transposable else ("K",)
        for major in majors:
            assert ("A", smem_dump.width_label(width.a_type, width.kind), major) in widths, (label, major)


def _mma_over_dumped_images_matches_numpy(manifest, report):
    assert len(report.mma) == len(manifest["tiles"])
    bad = [m for m in report.mma if not m["ok"]]
    assert not bad, bad[:5]
    assert all(m["d_elements"] > 0 for m in report.mma)


def test_every_dump_kernel_ran(flow):
    manifest, status, _ = flow
    _every_dump_kernel_ran(manifest, status)


def test_images_read_back_through_descriptors(flow):
    manifest, _, report = flow
    _images_read_back_through_descriptors(manifest, report)


def test_mma_over_dumped_images_matches_numpy(flow):
    manifest, _, report = flow
    _mma_over_dumped_images_matches_numpy(manifest, report)


@pytest.mark.slow
def test_full_sweep_every_dump_kernel_ran(full_flow):
    manifest, status, _ = full_flow
    _every_dump_kernel_ran(manifest, status)
    # the full sweep's extra groups all ran: staged K, CTA pairs, mixed widths, a 3x2 grid, sparse A
    assert {t["tile"]["group"] for t in manifest["tiles"]} >= {"sweep", "stages", "cta2", "mixed", "grid", "sparse"}


@pytest.mark.slow
def test_full_sweep_images_read_back_through_descriptors(full_flow):
    manifest, _, report = full_flow
    _images_read_back_through_descriptors(manifest, report)


@pytest.mark.slow
def test_full_sweep_mma_over_dumped_images_matches_numpy(full_flow):
    manifest, _, report = full_flow
    _mma_over_dumped_images_matches_numpy(manifest, report)
