"""Run every mma.sp form that an sm_80 / sm_89 / sm_90 GPU can execute through tilec's own kernel emitter
and compare with numpy.

For each form: kernels from compiler/ptx/mma_sp_kernel.py in several variants (every legal sparsity
selector; `.sp::ordered_metadata` and plain `.sp`; the form's minimum target and sm_90; runtime metadata
and static metadata patterns; one-warp and 2x2-warp x 2x2-tile CTAs), each run on random structured-sparse
data (compiler/sparse.py) for several problem sizes. Integers must match exactly (wrap-around, or
per-k-step saturation with .satfinite); floats within fp32 (or f16) accumulation tolerance.
Prints one line per form with the max abs / rel error; exit status 1 if anything fails.

Needs cupy and a GPU; bf16, fp8 and 4-bit forms also need ml_dtypes (skipped without it).
The GPU test is tests/gpu/test_mma_sp_gpu.py (quick variant set per form; the full set under
`-m "gpu and slow"`). By hand, from the repository root:
    python3 -m tests.gpu.harness.mma_sp_hw [--quick] [--filter SUBSTRING] [--json OUT] [--dry-run]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field

import numpy as np

from compiler import sparse
from compiler.isa.mma_sp.forms import Form, all_forms
from compiler.isa.mma_sp.metadata import expand_pattern, kept_elements, legal_nibbles, static_metadata
from compiler.ptx.mma_sp_kernel import MmaSpKernelConfig, emit_mma_sp_kernel
from compiler.isa.targets import TARGETS
from compiler.isa.types import TYPES

INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1


def runnable_forms(device_sm: int = 90) -> list[Form]:
    """Forms whose target rule admits a plain (suffix-less) target at or below the device's sm."""
    out = []
    for f in all_forms():
        plain = [TARGETS[t] for t in f.row.target_rule.targets() if TARGETS[t].suffix == ""]
        if any(t.sm <= device_sm for t in plain):
            out.append(f)
    return out


def min_target(form: Form) -> str:
    return min((t for t in form.row.target_rule.targets() if TARGETS[t].suffix == ""),
               key=lambda t: TARGETS[t].sm)


@dataclass(frozen=True)
class Variant:
    label: str
    target: str
    ptx_version: tuple[int, int] | None
    selector: int
    pattern: object              # None = runtime metadata (random sparsity), else a static pattern
    warps: tuple[int, int]
    tiles: tuple[int, int]


def variants(form: Form, quick: bool) -> list[Variant]:
    lo = min_target(form)
    v = [Variant(f"sel{s}", lo, None, s, None, (1, 1), (1, 1)) for s in form.selectors]
    v.append(Variant("2x2warps2x2tiles", lo, None, form.selectors[-1], None, (2, 2), (2, 2)))
    if quick:
        return v
    plain_sp = max(form.min_ptx, TARGETS["sm_90"].min_ptx)      # below 8.5: plain .sp
    v.append(Variant("plain.sp,sm_90", "sm_90", plain_sp, 0, None, (1, 2), (2, 1)))
    v.append(Variant("static-rotate", lo, None, form.selectors[-1], "rotate", (2, 1), (2, 2)))
    if form.granularity.slots_per_group == 1:
        # plain .sp with decreasing index pairs (e.g. 0b0001): checks that the j-th stored value of a chunk
        # goes to the j-th index of its nibble (compiler/sparse.decompress)
        v.append(Variant("plain.sp-decreasing", "sm_90", plain_sp, 0, "unordered", (1, 1), (1, 1)))
    v.append(Variant("static-first_two", "sm_90", None, 0, "first_two", (1, 1), (1, 2)))
    return v


def sizes(kernel_abi: dict, quick: bool) -> list[tuple[int, int, int]]:
    tm, tn, tk = kernel_abi["tile_m"], kernel_abi["tile_n"], kernel_abi["tile_k"]
    s = [(tm, tn, tk), (2 * tm, 3 * tn, 4 * tk)]
    if not quick:
        s.append((3 * tm, 2 * tn, max(8 * tk, 256)))
    return s


# ----------------------------------------------------------------------------------------------
# reference
# ----------------------------------------------------------------------------------------------

def reference(form: Form, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    if TYPES[form.c_type].is_int:
        a64, b64, acc = a.astype(np.int64), b.astype(np.int64), c.astype(np.int64)
        k = form.k
        for ks in range(a.shape[1] // k):       # each mma.sp saturates / wraps its own result
            acc = acc + a64[:, ks * k:(ks + 1) * k] @ b64[ks * k:(ks + 1) * k]
            acc = np.clip(acc, INT32_MIN, INT32_MAX) if form.satfinite else \
                (acc + (1 << 31)) % (1 << 32) - (1 << 31)
        return acc
    return a.astype(np.float64) @ b.astype(np.float64) + c.astype(np.float64)


def tolerance(form: Form, a, b, c) -> np.ndarray:
    """Per-element bound: accumulation-type epsilon x (number of k-steps + 2) x sum |a||b| + |c|."""
    scale = np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64)) + np.abs(c.astype(np.float64))
    eps = 2.0 ** -10 if form.c_type == "f16" else 2.0 ** -22
    return eps * (a.shape[1] // form.k + 2) * scale


# ----------------------------------------------------------------------------------------------
# running
# ----------------------------------------------------------------------------------------------

@dataclass
class FormResult:
    form: str
    cases: int = 0
    failures: list[str] = field(default_factory=list)
    max_abs: float = 0.0          # exact-data cases (must be 0 for integers)
    max_rel: float = 0.0          # exact-data cases, |d - ref| / max(|ref|, 1)
    gauss_abs: float = 0.0        # standard-normal cases (float forms)
    gauss_rel: float = 0.0        # standard-normal cases, |d - ref| / (sum |a||b| + |c|)
    skipped: str = ""


def _load(cp, text: str, name: str, tmpdir: str):
    path = os.path.join(tmpdir, f"{name}.ptx")
    with open(path, "w") as fh:
        fh.write(text)
    return cp.RawModule(path=path).get_function(name)


def _make_a(rng, form: Form, m: int, k: int, pattern) -> np.ndarray:
    if pattern is None:
        return sparse.random_sparse(rng, m, k, form.a_type, form.shape, density=0.85)
    lay = form.layout
    nib = expand_pattern(lay, pattern, m, k)
    gran = lay.granularity
    mask = np.zeros((m, k), bool)
    for r in range(m):
        for ch, code in enumerate(nib[r]):
            for e in kept_elements(lay, code):
                mask[r, ch * gran.chunk + e] = True
    vals = sparse.random_values(rng, (m, k), form.a_type)
    return np.where(mask, vals, np.zeros((), vals.dtype)).astype(vals.dtype)


def _unordered_case(rng, form: Form, m: int, k: int):
    """Compressed values + metadata with random codes of either index order (plain .sp only), and the
    dense A they describe."""
    lay = form.layout
    codes = np.array(legal_nibbles(lay, ordered=False))
    nib = codes[rng.integers(0, len(codes), size=(m, k // lay.granularity.chunk))]
    meta = sparse.pack_metadata_words(nib, lay)
    values = sparse.encode_storage(sparse.random_values(rng, (m, k // 2), form.a_type), form.a_type, lay)
    return sparse.decompress(values, meta, form.a_type, form.shape), values, meta


def _random_c(rng, form: Form, m: int, n: int, saturating: bool) -> np.ndarray:
    if TYPES[form.c_type].is_int:
        if saturating:   # near the int32 limits so that A*B + C overflows
            return rng.choice([INT32_MAX - 50, INT32_MIN + 50], size=(m, n)).astype(np.int32)
        return rng.integers(-1000, 1000, size=(m, n)).astype(np.int32)
    return sparse.random_values(rng, (m, n), "f16" if form.c_type == "f16" else "f32").astype(
        np.float16 if form.c_type == "f16" else np.float32)


def _gaussian(rng, shape, dtype: str) -> np.ndarray:
    """Standard-normal values rounded to `dtype` (tf32: low 13 mantissa bits cleared, as the tensor core
    reads them), so that the only error left is the accumulation's."""
    x = rng.standard_normal(shape).astype(np.float32)
    if dtype == "tf32":
        x = (x.view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32)
    return sparse.to_elements(x, dtype)


def _gaussian_a(rng, form: Form, m: int, k: int) -> np.ndarray:
    keep = sparse._nonzero(sparse.random_sparse(rng, m, k, form.a_type, form.shape), form.a_type)
    vals = _gaussian(rng, (m, k), form.a_type)
    return np.where(keep, vals, np.zeros((), vals.dtype)).astype(vals.dtype)


def _launch(cp, fn, kern, values, meta, static, bt, c, m, n, k) -> np.ndarray:
    d_dev = cp.zeros((m, n), dtype=c.dtype)
    # device buffers are the C-order bytes of the host arrays (compiler/sparse.py); cupy has no
    # bf16/fp8/int4 dtypes, so element buffers travel as raw bytes
    raw = lambda x: cp.asarray(np.ascontiguousarray(x).view(np.uint8))   # noqa: E731
    args = [raw(values)]
    if static is None:
        args.append(cp.asarray(np.ascontiguousarray(meta)))
    args += [raw(bt), cp.asarray(np.ascontiguousarray(c)), d_dev, np.uint32(m), np.uint32(n), np.uint32(k)]
    fn(kern.grid(m, n, k), kern.block, tuple(args))
    return cp.asnumpy(d_dev)


def check_form(cp, form: Form, rng, quick: bool, tmpdir: str, counter: list[int]) -> FormResult:
    """All variants x sizes of one form. Exact-data cases (values whose products and sums are exact in
    the accumulator) must match within `tolerance`; for float forms, each variant also runs one
    standard-normal case whose error, relative to sum|a||b| + |c|, is reported (gauss_rel) and only has to
    stay under a sanity bound (2^-8 for f32 accumulation, 2^-4 for f16)."""
    res = FormResult(form.name)
    is_int = TYPES[form.c_type].is_int
    for var in variants(form, quick):
        counter[0] += 1
        name = f"mma_sp_check_{counter[0]}"
        static = None if var.pattern in (None, "unordered") else static_metadata(form.layout, var.pattern)
        cfg = MmaSpKernelConfig(name, form, var.target, var.ptx_version, warps_m=var.warps[0],
                                warps_n=var.warps[1], tiles_m=var.tiles[0], tiles_n=var.tiles[1],
                                selector=var.selector, static_metadata=static)
        kern = emit_mma_sp_kernel(cfg)
        fn = _load(cp, kern.text, name, tmpdir) if cp is not None else None
        sz = sizes(kern.abi, quick)
        cases = [(size, "sat-C" if sat else "exact") for size in sz for sat in ((False, True) if is_int else (False,))]
        if not is_int and var.pattern is None:
            cases.append((sz[-1], "gauss"))
        for (m, n, k), data in cases:
            if var.pattern == "unordered":
                a, values, meta = _unordered_case(rng, form, m, k)
                b = sparse.random_values(rng, (k, n), form.b_type)
                c = _random_c(rng, form, m, n, data == "sat-C")
            elif data == "gauss":
                a = _gaussian_a(rng, form, m, k)
                b = _gaussian(rng, (k, n), form.b_type)
                c = _gaussian(rng, (m, n), form.c_type)
            else:
                a = _make_a(rng, form, m, k, var.pattern)
                b = sparse.random_values(rng, (k, n), form.b_type)
                c = _random_c(rng, form, m, n, data == "sat-C")
            if var.pattern != "unordered":
                values, meta = sparse.compress(a, form.a_type, form.shape, var.selector)
            if static is not None:   # the static table must describe exactly this A
                pm, pk = len(static), len(static[0])
                tiled = np.array(static, np.uint32)[np.arange(m // 16)[:, None] % pm,
                                                    np.arange(k // form.k)[None, :] % pk]
                assert np.array_equal(tiled, meta), "static metadata does not match A"
            bt = sparse.pack_b(b, form.b_type, form.shape)
            ref = reference(form, a, b, c)
            if fn is None:           # --dry-run: everything but the launch
                d = ref.astype(c.dtype)
            else:
                d = _launch(cp, fn, kern, values, meta, static, bt, c, m, n, k)
            res.cases += 1
            where = f"{var.label} M={m} N={n} K={k} {data}"
            if is_int:
                diff = np.abs(d.astype(np.int64) - ref)
                res.max_abs = max(res.max_abs, float(diff.max()))
                bad = diff > 0
                what = "mismatches"
            else:
                diff = np.abs(d.astype(np.float64) - ref)
                if data == "gauss":
                    scale = (np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64))
                             + np.abs(c.astype(np.float64)))
                    rel = diff / scale
                    res.gauss_abs = max(res.gauss_abs, float(diff.max()))
                    res.gauss_rel = max(res.gauss_rel, float(rel.max()))
                    bad = rel > (2.0 ** -4 if form.c_type == "f16" else 2.0 ** -8)
                else:
                    res.max_abs = max(res.max_abs, float(diff.max()))
                    res.max_rel = max(res.max_rel, float((diff / np.maximum(np.abs(ref), 1.0)).max()))
                    bad = diff > tolerance(form, a, b, c)
                what = "outside tolerance"
            if bad.any():
                r, cc = np.argwhere(bad)[0]
                res.failures.append(f"{where}: {int(bad.sum())} {what}, first ({r},{cc}) got {d[r, cc]} "
                                    f"want {ref[r, cc]}")
    return res


def needs_ml_dtypes(form: Form) -> bool:
    return any(TYPES[t].np_name not in ("float16", "float32", "int8", "uint8", "int32")
               for t in (form.a_type, form.b_type))


def run_checks(quick: bool = False, name_filter: str = "", seed: int = 0, log=print,
               dry_run: bool = False) -> list[FormResult]:
    """Check every runnable form; `dry_run` does everything except loading and launching kernels."""
    try:
        import ml_dtypes  # noqa: F401
        have_ml = True
    except ImportError:
        have_ml = False
    if dry_run:
        cp, sm = None, 90
    else:
        import cupy as cp
        sm = int(cp.cuda.Device().compute_capability)
    rng = np.random.default_rng(seed)
    results = []
    counter = [0]
    with tempfile.TemporaryDirectory() as tmpdir:
        for form in runnable_forms(sm):
            if name_filter and name_filter not in form.name:
                continue
            if needs_ml_dtypes(form) and not have_ml:
                results.append(FormResult(form.name, skipped="ml_dtypes missing"))
                continue
            t0 = time.time()
            r = check_form(cp, form, rng, quick, tmpdir, counter)
            results.append(r)
            status = "PASS" if not r.failures else f"FAIL ({len(r.failures)})"
            gauss = "" if TYPES[form.c_type].is_int else \
                f" gauss_abs={r.gauss_abs:.3g} gauss_rel={r.gauss_rel:.3g}"
            log(f"{form.name:52s} cases={r.cases:3d} max_abs={r.max_abs:.3g} max_rel={r.max_rel:.3g}{gauss} "
                f"{status} [{time.time() - t0:.1f}s]")
            for f in r.failures[:3]:
                log(f"    {f}")
    return results


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--filter", default="")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default="")
    ap.add_argument("--dry-run", action="store_true", help="no GPU: check the host side only")
    args = ap.parse_args()
    if not args.dry_run:
        import cupy as cp
        props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
        print(f"device: {props['name'].decode()} sm_{cp.cuda.Device().compute_capability}")
    t0 = time.time()
    results = run_checks(args.quick, args.filter, args.seed, dry_run=args.dry_run)
    failed = [r for r in results if r.failures]
    skipped = [r for r in results if r.skipped]
    print(f"{len(results)} forms, {sum(r.cases for r in results)} cases, {len(failed)} failed, "
          f"{len(skipped)} skipped, {time.time() - t0:.1f}s")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump([r.__dict__ for r in results], fh, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
