"""The read side of tilec's shared-memory descriptors on a Hopper tensor core (benchmarks/wgmma_read_check.py).

For each case of the quick sweep (every wgmma form x legal A/B major x swizzle none/32B/64B/128B, mixed
swizzles, odd N, misaligned tile bases, base-offset probes), a shared-memory image is built with tilec's
`canonical_layout(...).offset`, tilec's per-K-step tcgen05 descriptors are converted to wgmma descriptors
(PTX 9.7.15.5.1.2.2 vs 9.7.16.4.1 Table 40), and a hand-written sm_90a kernel runs the wgmma chain over
all K steps. D must equal numpy: integers exactly, floats within the per-type bound of REL_TOL.

Needs an sm_90 GPU with cupy, and ml_dtypes for the host model; skipped otherwise.
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _wgmma_read_check():
    spec = importlib.util.spec_from_file_location("wgmma_read_check", REPO / "benchmarks" / "wgmma_read_check.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod          # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def flow(cupy_device, tmp_path_factory):
    _, cc = cupy_device
    if cc != 90:
        pytest.skip(f"wgmma is sm_90a code (arch-specific: runs on sm_90 only), device is sm_{cc}")
    pytest.importorskip("ml_dtypes")      # compiler.sim's element decoding
    from compiler.ptxas import find_ptxas

    mod = _wgmma_read_check()
    data = tmp_path_factory.mktemp("wgmma")
    out = data / "out"
    # without ptxas the driver JIT-compiles the PTX (RawModule loads either)
    manifest = mod.prepare(data, quick=True, assemble=find_ptxas() is not None)
    status = mod.run_device(data, out, isolate=True)
    report = mod.check(data, out)
    return mod, manifest, status, report


def test_every_kernel_ran_and_wrote_all_of_d(flow):
    _, manifest, status, _ = flow
    assert manifest["cases"] and not manifest["ptxas_failures"]
    assert len(status["cases"]) == len(manifest["cases"])
    for name, st in status["cases"].items():
        assert st["status"] == "ok", f"{name}: {st.get('error')}"
        assert st["unwritten"] == 0, name          # D was pre-filled with a sentinel
        assert st["smem_base"] % 1024 == 0, name


def test_d_matches_numpy_for_every_case(flow):
    _, manifest, _, report = flow
    assert report.device_errors == []
    assert report.failures == [], "\n".join(report.failures[:10])
    assert report.ok == report.cases == sum(c["group"] != "probe" for c in manifest["cases"])
    # the images were also read back by the independent model through the tcgen05 descriptors
    assert report.model_elements > 0


def test_every_form_major_and_swizzle_was_exercised(flow):
    mod, _, _, report = flow
    cells = {(form, a, b) for (form, a, b, group), t in report.cells.items() if group == "sweep" and t.kernels}
    for label in ("f16", "bf16", "tf32", "e4m3", "e5m2", "s8"):
        for am, bm in mod._major_pairs(mod.FORMS[label]):
            for sw in mod.SWIZZLES:
                assert (label, f"{am}:{sw}", f"{bm}:{sw}") in cells, (label, am, bm, sw)


def test_misaligned_tiles_and_phase_probes(flow):
    # tilec's misaligned tiles (pattern at the tile base, base offset (base >> 7) & 7) are in the pass/fail
    # set above; the probes (pattern row / base-offset field overridden) must come out as the rule
    # measured on the H100 predicts: phase = ((address >> 7) - base offset) mod 2^B.
    mod, _, _, report = flow
    assert any(name.startswith("base_offset") for name in report.by_case)
    assert report.probes
    off = {name: p for name, p in report.probes.items() if p["matches"] != p["predicted"]}
    assert not off, off
