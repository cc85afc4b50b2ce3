"""The read side of tilec's shared-memory descriptors on a Hopper tensor core (tests/gpu/harness/wgmma_read.py).

For each case of the sweep (every wgmma form x legal A/B major x swizzle none/32B/64B/128B, mixed
swizzles, odd N, misaligned tile bases, base-offset probes), a shared-memory image is built with tilec's
`canonical_layout(...).offset`, tilec's per-K-step tcgen05 descriptors are converted to wgmma descriptors
(PTX 9.7.15.5.1.2.2 vs 9.7.16.4.1 Table 40), and a hand-written sm_90a kernel runs the wgmma chain over
all K steps. D must equal numpy: integers exactly, floats within the per-type bound of REL_TOL.

Default slice: the quick sweep (every form x major pair x swizzle once, N cycling, one case of each extra
group). `-m "gpu and slow"`: the full sweep as well (N in 64/128/256 for every cell, all mixed swizzle
pairs, N = 8 and 200 for every swizzle, every misalignment, every probe). A failing check writes its
report under $OUT. Needs an sm_90 GPU with cupy, and ml_dtypes for the host model; skipped otherwise.
"""
from __future__ import annotations

import json
import os

import pytest

from tests.gpu.harness import wgmma_read


def _flow(cp_device, tmp_path_factory, quick: bool):
    _, cc = cp_device
    if cc != 90:
        pytest.skip(f"wgmma is sm_90a code (arch-specific: runs on sm_90 only), device is sm_{cc}")
    pytest.importorskip("ml_dtypes", reason="compiler.sim decodes the elements")
    from compiler.ptxas import find_ptxas

    data = tmp_path_factory.mktemp("wgmma")
    out = data / "out"
    # without ptxas the driver JIT-compiles the PTX (RawModule loads either)
    manifest = wgmma_read.prepare(data, quick=quick, assemble=find_ptxas() is not None)
    # each case in a worker process (`python -m tests.gpu.harness.wgmma_read device-worker`), restarted
    # past a case whose fault kills the CUDA context
    status = wgmma_read.run_device(data, out, isolate=True)
    report = wgmma_read.check(data, out)
    wgmma_read.print_report(report, manifest, status)
    if (report.failures or report.device_errors) and os.environ.get("OUT"):     # analyse offline
        path = os.path.join(os.environ["OUT"], f"wgmma_read_{'quick' if quick else 'full'}_report.json")
        with open(path, "w") as fh:
            json.dump({"report": wgmma_read.report_json(report), "device": status}, fh, indent=1, default=str)
    return manifest, status, report


@pytest.fixture(scope="module")
def flow(cupy_device, tmp_path_factory):
    return _flow(cupy_device, tmp_path_factory, quick=True)


@pytest.fixture(scope="module")
def full_flow(cupy_device, tmp_path_factory):
    return _flow(cupy_device, tmp_path_factory, quick=False)


def _every_kernel_ran_and_wrote_all_of_d(manifest, status):
    assert manifest["cases"] and not manifest["ptxas_failures"]
    assert len(status["cases"]) == len(manifest["cases"])
    for name, st in status["cases"].items():
        assert st["status"] == "ok", f"{name}: {st.get('error')}"
        assert st["unwritten"] == 0, name          # D was pre-filled with a sentinel
        assert st["smem_base"] % 1024 == 0, name


def _d_matches_numpy_for_every_case(manifest, report):
    assert report.device_errors == []
    assert report.failures == [], "\n".join(report.failures[:10])
    assert report.ok == report.cases == sum(c["group"] != "probe" for c in manifest["cases"])
    # the images were also read back by the independent model through the tcgen05 descriptors
    assert report.model_elements > 0


def _every_form_major_and_swizzle_was_exercised(report):
    cells = {(form, a, b) for (form, a, b, group), t in report.cells.items() if group == "sweep" and t.kernels}
    for label in ("f16", "bf16", "tf32", "e4m3", "e5m2", "s8"):
        for am, bm in wgmma_read._major_pairs(wgmma_read.FORMS[label]):
            for sw in wgmma_read.SWIZZLES:
                assert (label, f"{am}:{sw}", f"{bm}:{sw}") in cells, (label, am, bm, sw)


def _misaligned_tiles_and_phase_probes(report):
    # tilec's misaligned tiles (pattern at the tile base, base offset (base >> 7) & 7) are in the pass/fail
    # set above; the probes (pattern row / base-offset field overridden) must come out as the rule
    # measured on the H100 predicts: phase = ((address >> 7) - base offset) mod 2^B.
    assert any(name.startswith("base_offset") for name in report.by_case)
    assert report.probes
    off = {name: p for name, p in report.probes.items() if p["matches"] != p["predicted"]}
    assert not off, off


def test_every_kernel_ran_and_wrote_all_of_d(flow):
    manifest, status, _ = flow
    _every_kernel_ran_and_wrote_all_of_d(manifest, status)


def test_d_matches_numpy_for_every_case(flow):
    manifest, _, report = flow
    _d_matches_numpy_for_every_case(manifest, report)


def test_every_form_major_and_swizzle_was_exercised(flow):
    _every_form_major_and_swizzle_was_exercised(flow[2])


def test_misaligned_tiles_and_phase_probes(flow):
    _misaligned_tiles_and_phase_probes(flow[2])


@pytest.mark.slow
def test_full_sweep_every_kernel_ran_and_wrote_all_of_d(full_flow):
    manifest, status, _ = full_flow
    _every_kernel_ran_and_wrote_all_of_d(manifest, status)
    assert len(manifest["cases"]) == len(wgmma_read.sweep(quick=False))


@pytest.mark.slow
def test_full_sweep_d_matches_numpy_for_every_case(full_flow):
    manifest, _, report = full_flow
    _d_matches_numpy_for_every_case(manifest, report)
    _every_form_major_and_swizzle_was_exercised(report)


@pytest.mark.slow
def test_full_sweep_misaligned_tiles_and_phase_probes(full_flow):
    _misaligned_tiles_and_phase_probes(full_flow[2])
