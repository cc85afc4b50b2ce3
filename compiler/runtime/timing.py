"""Kernel times without the host's launch cost: `tilec run --bench`, `tilec tune` and benchmarks/.

A launch through `Kernel.__call__` checks and packs its arguments in Python (tens of microseconds), so CUDA
events around single launches measure the host, not the kernel, for any kernel shorter than that (a 2048^3
GEMM takes ~25 us on an H100). Here a callable is captured `batch` times into a CUDA graph on a side stream
(torch.cuda.graph, or cupy's Stream.begin_capture / end_capture) and the graph is replayed between two CUDA
events: the GPU runs the launches back to back and the time per launch is the replay's over `batch`. Where
the capture fails (a library that does not allow it), `batch` launches go back to back between two events
instead (the queue still runs ahead of the host when a launch costs the host less than the kernel takes);
`how` says which.
"""
from __future__ import annotations

import math
import statistics


MAX_WARM_REPLAYS = 10000       # LaunchTimer.warm's bound, whatever the events say a replay took


class LaunchTimer:
    """Milliseconds per launch of a no-argument callable that launches on the current stream of `lib`
    (torch or cupy, named by `lib_name`)."""

    def __init__(self, lib_name: str, lib, target_ms: float = 2.0, max_batch: int = 200) -> None:
        if lib_name not in ("torch", "cupy"):
            raise ValueError(f"LaunchTimer times through torch or cupy, not {lib_name}")
        self.lib_name, self.lib, self.target_ms, self.max_batch = lib_name, lib, target_ms, max_batch

    # -------------------------------------------------------------- the library's events and streams
    def sync(self) -> None:
        if self.lib_name == "torch":
            self.lib.cuda.synchronize()
        else:
            self.lib.cuda.runtime.deviceSynchronize()

    def _events(self):
        if self.lib_name == "torch":
            return self.lib.cuda.Event(enable_timing=True), self.lib.cuda.Event(enable_timing=True)
        return self.lib.cuda.Event(), self.lib.cuda.Event()

    def _elapsed_ms(self, start, end) -> float:
        if self.lib_name == "torch":
            return start.elapsed_time(end)
        return self.lib.cuda.get_elapsed_time(start, end)

    def _between_events(self, run) -> float:
        start, end = self._events()
        start.record()
        run()
        end.record()
        self.sync()
        return self._elapsed_ms(start, end)

    # -------------------------------------------------------------- capture and replay
    def back_to_back(self, fn, launches: int) -> float:
        """ms per launch of `launches` launches between two events."""
        def run():
            for _ in range(launches):
                fn()
        return self._between_events(run) / launches

    def capture(self, fn, multiple: int = 1):
        """(graph or None, batch, how): `fn` captured `batch` times, batch chosen from a warm-up so that one
        replay takes about target_ms, rounded up to a multiple of `multiple` (a closure that cycles through
        that many copies of an operand: every replay then reads each copy equally often, in the same cyclic
        order across replays, so no launch reads a copy its predecessor just read)."""
        fn()
        self.sync()
        est = self.back_to_back(fn, 3)
        batch = max(1, min(self.max_batch, math.ceil(self.target_ms / max(est, 1e-3))))
        multiple = max(1, multiple)
        batch = -(-batch // multiple) * multiple
        try:
            graph = self._capture(fn, batch)
        except Exception as e:          # noqa: BLE001 -- any capture failure: time back-to-back launches
            self.sync()
            return None, batch, f"{batch} back-to-back launches between CUDA events ({type(e).__name__}: {str(e)[:120]})"
        return graph, batch, f"CUDA graph of {batch} launches"

    def _capture(self, fn, batch: int):
        lib = self.lib
        if self.lib_name == "torch":
            g = lib.cuda.CUDAGraph()
            stream = lib.cuda.Stream()
            stream.wait_stream(lib.cuda.current_stream())
            with lib.cuda.stream(stream):
                fn()                                    # per-stream state (libraries, the runtime) first
                lib.cuda.synchronize()
                with lib.cuda.graph(g, stream=stream):
                    for _ in range(batch):
                        fn()
            lib.cuda.current_stream().wait_stream(stream)
            g.replay()
            lib.cuda.synchronize()
            return g
        stream = lib.cuda.Stream(non_blocking=True)
        with stream:
            fn()
            stream.synchronize()
            stream.begin_capture()
            try:
                for _ in range(batch):
                    fn()
            finally:
                g = stream.end_capture()
        g.launch(stream)
        stream.synchronize()
        return g

    def replay(self, fn, graph, batch: int) -> float:
        """ms per launch of one replay (back-to-back launches where there is no graph)."""
        if graph is None:
            return self.back_to_back(fn, batch)
        if self.lib_name == "torch":
            return self._between_events(graph.replay) / batch
        stream = self.lib.cuda.get_current_stream()
        return self._between_events(lambda: graph.launch(stream)) / batch

    def warm(self, fn, graph, batch: int, warm_ms: float) -> None:
        """Replays (or back-to-back launches), not timed, until `warm_ms` of them have run. A power-capped
        GPU's clock follows the power drawn over the last tens of milliseconds: measured on an H200 (700 W),
        a kernel timed right after idle or a lighter kernel ran up to 18 % faster for its first ~40 ms and
        settled after ~80 ms (docs/measurements.md, "Power-capped clocks and the rounds"), so a time meant
        to hold for the kernel run steadily comes after this."""
        spent, replays = 0.0, 0
        while spent < warm_ms and replays < MAX_WARM_REPLAYS:     # a replay the events time at 0 ends too
            spent += self.replay(fn, graph, batch) * batch
            replays += 1

    def times(self, fn, replays: int) -> tuple[list[float], int, str]:
        """(ms per launch of each of `replays` replays, launches per replay, how they were timed)."""
        graph, batch, how = self.capture(fn)
        try:
            return [self.replay(fn, graph, batch) for _ in range(replays)], batch, how
        finally:
            del graph

    def median_ms(self, fn, replays: int = 5) -> float:
        return statistics.median(self.times(fn, replays)[0])
