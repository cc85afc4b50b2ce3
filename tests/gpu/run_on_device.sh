#!/usr/bin/env bash
# Run tilec's GPU slice on a GPU machine that reaches no package registry (every change to GPU code runs it).
#
#   tests/gpu/make_wheelhouse.sh          # once, where PyPI is reachable: fills .whl/ (gitignored)
#   tests/gpu/run_on_device.sh            # on the GPU machine, from a checkout with .whl/ beside it
#   tests/gpu/run_on_device.sh --slow     # the full sweeps instead (-m "gpu and slow")
#   tests/gpu/run_on_device.sh --all      # both in one run
#   tests/gpu/run_on_device.sh --slow --jobs 6   # over 6 pytest-xdist workers sharing the one GPU: the
#                                         # sweeps' time is compiling and checking on the CPU, and serially they
#                                         # do not fit one device call (docs/verification.md); timings taken
#                                         # meanwhile (the tune and benchmark tests) are not comparable
#   tests/gpu/run_on_device.sh -- -k wgmma   # extra pytest arguments after --
#
# With the device tool: run(command="bash tests/gpu/run_on_device.sh", carry=[".whl"], timeout_s=600).
#
# 1. Installs what the machine lacks from the wheelhouse (.whl/, or $WHEELHOUSE), offline: lark (tilec's
#    parser; without it the slice cannot run), and filecheck / lit / hypothesis (the CPU suite's tools)
#    where missing. Into the running Python if it may be written, else into /tmp/tilec-site on PYTHONPATH.
# 2. Makes the checkout importable: `pip install --no-index --no-deps --no-build-isolation -e .` where
#    setuptools is there (gives the `tilec` command too); the repository root goes on PYTHONPATH either
#    way (the tests import `compiler` and `tests.gpu.harness` from it).
# 3. Runs `python3 -m pytest tests/gpu -m gpu` (default slice), `-m "gpu and slow"` (--slow) or both
#    (--all), and writes the log and a JUnit report under $OUT when it is set: gpu-<slice>.log,
#    gpu-<slice>.junit.xml (failing checks also leave their data there: fail_*.npz, *_report.json).
# Exit status: pytest's; 2 when the machine lacks something the slice needs (said why).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
py=${PYTHON:-python3}
whl=${WHEELHOUSE:-.whl}
site=/tmp/tilec-site
export PYTHONUNBUFFERED=1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

say() { echo "run_on_device: $*"; }

slice=default
markexpr=gpu
jobs=
while [ $# -gt 0 ]; do
    case "$1" in
        --slow) slice=slow; markexpr="gpu and slow"; shift ;;
        --all) slice=all; markexpr="gpu and (slow or not slow)"; shift ;;   # names `slow`: conftest keeps them
        --jobs)
            case "${2:-}" in
                ''|*[!0-9]*|0) say "usage: --jobs N takes a positive number of pytest-xdist workers, not '${2:-}'"; exit 2 ;;
            esac
            jobs=$2; shift 2 ;;
        --) shift; break ;;
        *) break ;;          # the rest goes to pytest as it is
    esac
done
has() { "$py" -c "import $1" 2>/dev/null; }

# --- 1. packages from the wheelhouse --------------------------------------------------------------------
install_wheel() {        # install_wheel DIST MODULE: from the wheelhouse, offline
    local dist=$1 module=$2
    has "$module" && return 0
    if [ ! -d "$whl" ]; then
        say "no wheelhouse $whl: cannot install $dist (make it with tests/gpu/make_wheelhouse.sh and carry it)"
        return 1
    fi
    if "$py" -m pip install -q --no-index --find-links "$whl" "$dist" 2>/dev/null && has "$module"; then
        say "installed $dist from $whl"
        return 0
    fi
    # read-only environment: the wheel and its wheelhouse siblings into a folder of our own
    mkdir -p "$site"
    case ":$PYTHONPATH:" in *":$site:"*) ;; *) export PYTHONPATH="$PYTHONPATH:$site" ;; esac
    local f
    for f in "$whl"/*.whl; do
        "$py" -m pip install -q --no-index --no-deps --no-compile --target "$site" "$f" 2>/dev/null || true
    done
    if has "$module"; then say "installed $dist into $site"; return 0; fi
    say "could not install $dist from $whl"
    return 1
}

install_wheel lark lark || { say "lark (tilec's parser) is required"; exit 2; }
if [ -n "$jobs" ]; then
    install_wheel pytest-xdist xdist || { say "--jobs needs pytest-xdist (tests/gpu/make_wheelhouse.sh puts it in the wheelhouse)"; exit 2; }
fi
for pair in filecheck:filecheck lit:lit hypothesis:hypothesis; do
    install_wheel "${pair%%:*}" "${pair##*:}" || say "${pair%%:*} missing: only the CPU suite needs it"
done

# --- 2. the checkout --------------------------------------------------------------------------------------
if has setuptools && "$py" -m pip install -q --no-index --no-deps --no-build-isolation -e . >/tmp/tilec-pip.log 2>&1; then
    say "tilec installed editable"
else
    say "no editable install ($(tail -1 /tmp/tilec-pip.log 2>/dev/null)); using PYTHONPATH=$PWD"
fi
if ! "$py" -c "import compiler, tests.gpu.harness" 2>/tmp/tilec-import.log; then
    say "the checkout does not import:"; cat /tmp/tilec-import.log; exit 2
fi

# --- 3. the slice -------------------------------------------------------------------------------------------
"$py" - <<'EOF'
import platform, shutil, subprocess
print(f"run_on_device: python {platform.python_version()}", end="")
for name in ("numpy", "ml_dtypes", "cupy", "torch", "lark", "pytest"):
    try:
        print(f", {name} {__import__(name).__version__}", end="")
    except Exception as e:           # report, the tests skip what they cannot run
        print(f", {name} missing ({type(e).__name__})", end="")
print()
try:
    import cupy as cp
    props = cp.cuda.runtime.getDeviceProperties(0)
    print(f"run_on_device: device {props['name'].decode()} sm_{cp.cuda.Device().compute_capability}, "
          f"driver {cp.cuda.runtime.driverGetVersion()}")
except Exception as e:
    print(f"run_on_device: no GPU through cupy: {type(e).__name__}: {e}")
from compiler.ptxas import find_ptxas
exe = find_ptxas()
version = subprocess.run([exe, "--version"], capture_output=True, text=True).stdout.strip().splitlines()[-1] if exe else ""
print(f"run_on_device: ptxas {exe or 'missing (the driver JIT-compiles the PTX)'} {version}")
EOF

args=(-m pytest tests/gpu -m "$markexpr" -q -rfEs --durations=15 -p no:cacheprovider)
if [ -n "$jobs" ]; then           # the tests share no files; the kernels share the GPU (correctness, not timing)
    args+=(-n "$jobs")
fi
if has pytest_timeout; then       # a hung kernel fails its test instead of the whole call
    args+=(--timeout "${GPU_TEST_TIMEOUT:-540}")
fi
log=/dev/null
if [ -n "${OUT:-}" ]; then
    mkdir -p "$OUT"
    args+=(--junitxml "$OUT/gpu-$slice.junit.xml")
    log="$OUT/gpu-$slice.log"
fi
say "$py ${args[*]} $*"
start=$(date +%s)
"$py" "${args[@]}" "$@" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
say "slice '$slice' finished with status $rc in $(( $(date +%s) - start )) s" | tee -a "$log"
exit "$rc"
