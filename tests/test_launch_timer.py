"""compiler/runtime/timing.py LaunchTimer on a stand-in for torch whose CUDA events read a fake GPU clock."""
from __future__ import annotations

from types import SimpleNamespace

from compiler.runtime.timing import LaunchTimer


class _Clock:
    now = 0.0


class _Event:
    def __init__(self, enable_timing=True):
        self.t = None

    def record(self):
        self.t = _Clock.now

    def elapsed_time(self, end):
        return end.t - self.t


def _torch():
    return SimpleNamespace(cuda=SimpleNamespace(Event=_Event, synchronize=lambda: None))


def test_warm_runs_untimed_replays_until_the_time_is_spent():
    """warm(fn, None, batch, ms): back-to-back batches (no graph) until `ms` of GPU time have run: a 0.5 ms
    kernel in batches of 6 (3 ms a batch) needs 50 batches for 150 ms; 0 ms runs none."""
    launches = []

    def fn():
        launches.append(1)
        _Clock.now += 0.5

    timer = LaunchTimer("torch", _torch())
    timer.warm(fn, None, 6, 150.0)
    assert len(launches) == 300 and _Clock.now >= 150.0
    launches.clear()
    timer.warm(fn, None, 6, 0.0)
    assert launches == []


def test_bench_summary_counts_the_problems_of_a_launch_not_the_launches_of_a_replay():
    """`tilec run --bench` printed 3x the TFLOP/s of a kernel timed in a CUDA graph of 3 launches (on an H200:
    1030 us for 8192^3, "3201.7 TFLOP/s"): the launches a replay holds had overwritten --batch. 2 x 8192^3 /
    1030 us = 1067.5 TFLOP/s; a launch of 2 problems (--batch 2) twice that."""
    from compiler.run import bench_summary

    line = bench_summary([1030.0, 1029.0, 1031.0], "CUDA graph of 3 launches", 10, 150.0, (8192, 8192, 8192))
    assert "median 1030.0 us" in line and "(1067.5 TFLOP/s" in line and "150 ms of untimed replays" in line
    assert "(2135.0 TFLOP/s" in bench_summary([1030.0], "x", 10, 0.0, (8192, 8192, 8192), problems=2)


def test_warm_ends_when_the_events_time_a_replay_at_zero():
    from compiler.runtime import timing

    calls = []
    timing.LaunchTimer("torch", _torch()).warm(lambda: calls.append(1), None, 1, 150.0)
    assert len(calls) == timing.MAX_WARM_REPLAYS


def test_run_reports_the_problems_of_a_launch(monkeypatch):
    """tilec run --bench's line (bench_line, what run_tile appends): _bench's launches per replay (here 3)
    are not the problems of a launch (--batch 2); 1030 us for two 8192^3 problems is 2135 TFLOP/s."""
    import compiler.run as run

    seen = {}

    def fake_bench(kernel, prob, name, lib, iters, warmup, warm_ms):
        seen["warm_ms"] = warm_ms
        return [1030.0, 1029.0, 1031.0], 3, "CUDA graph of 3 launches"

    monkeypatch.setattr(run, "_bench", fake_bench)
    line = run.bench_line(None, None, "torch", None, 100, 10, 150.0, (8192, 8192, 8192), 2)
    assert "(2135.0 TFLOP/s" in line and seen["warm_ms"] == 150.0
    assert "programmatic" not in line
    # a kernel launched programmatically (the sparse wgmma kernels' default) says so
    from types import SimpleNamespace

    line = run.bench_line(SimpleNamespace(programmatic=True), None, "torch", None, 100, 10, 0.0, (8192,) * 3, 1)
    assert "CUDA graph of 3 launches (programmatic dependent launch) after 10 warm-up" in line
