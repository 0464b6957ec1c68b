"""How busy the client process is: the CPU its threads used over the last moments, in cores. A drafted token
costs the client several times an AR token's CPU, and once its Python threads hold the interpreter lock most
of the time (about one core), every request waits for the others.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Callable

WINDOW_S = 1.0  # the span the utilisation is measured over
MIN_SPAN_S = 0.25  # samples spanning less than this say nothing yet


class ClientCpu:
    """Samples (wall time, process CPU time) as rounds end, and reads the CPU used per second over the last
    WINDOW_S. Not thread-safe: the policy calls it under its lock. The clocks are parameters so that tests
    can script them."""

    def __init__(self, cpu_clock: Callable[[], float] = time.process_time,
                 wall_clock: Callable[[], float] = time.perf_counter) -> None:
        self._cpu_clock, self._wall_clock = cpu_clock, wall_clock
        self._samples: deque[tuple[float, float]] = deque()

    def sample(self) -> None:
        now = self._wall_clock()
        self._samples.append((now, self._cpu_clock()))
        while len(self._samples) > 2 and self._samples[1][0] <= now - WINDOW_S:
            self._samples.popleft()

    def cores(self) -> float | None:
        """CPU seconds per second over about the last WINDOW_S (None until the samples span MIN_SPAN_S)."""
        if len(self._samples) < 2:
            return None
        (wall0, cpu0), (wall1, cpu1) = self._samples[0], self._samples[-1]
        if wall1 - wall0 < MIN_SPAN_S:
            return None
        return (cpu1 - cpu0) / (wall1 - wall0)
