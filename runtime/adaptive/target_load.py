"""The target requests in flight across the answers that share a policy, as each request saw them."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass


class TargetLoad:
    """Target requests in flight across the answers that share a policy (`lookahead serve`: other answers
    come and go), so that a request's load is what it saw on average over its tokens.

    Averaged over tokens, not time: a token written beside x others takes (1 + s·x) times as long, so
    the cost model's T = o + L·(t₁ + u·x̄) holds with the token average, where a time average of a
    bursty load would overstate x (a request that shares the server for a third of its time writes
    less than a third of its tokens then). The weights take s = 1, where it matters; with free
    branches (s = 0) the time any x costs is nothing, so x's weighting does not matter there."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.in_flight = 0
        self._events: list[tuple[float, int]] = [(time.monotonic(), 0)]  # (from when, requests in flight)
        self._marks: list[float] = []  # when each tracked block still running started

    @property
    def events_kept(self) -> int:
        """How many changes of the load it holds: those since the oldest request still in flight, and the last."""
        with self._lock:
            return len(self._events)

    def started(self, requests: int) -> float:
        with self._lock:
            now = time.monotonic()
            self.in_flight += requests
            self._events.append((now, self.in_flight))
            self._marks.append(now)
            return now

    def finished(self, requests: int, mark: float) -> float:
        """The mean number of *other* target requests in flight over the tokens of `requests` started at `mark`."""
        with self._lock:
            now = time.monotonic()
            weighted = weights = 0.0
            segments = [e for e in self._events if e[0] >= mark]
            for (since, in_flight), until in zip(segments, [e[0] for e in segments[1:]] + [now]):
                others = max(0, in_flight - requests)
                weight = (until - since) / (1.0 + others)  # the share of the tokens written then
                weighted += others * weight
                weights += weight
            self.in_flight -= requests
            self._events.append((now, self.in_flight))
            self._marks.remove(mark)
            oldest = min(self._marks, default=now)
            self._events = [e for e in self._events if e[0] >= oldest]  # the one just added stays
            return weighted / weights if weights > 0 else 0.0

    @contextmanager
    def track(self, requests: int) -> Iterator[Tracked]:
        """`requests` in flight for the block; after it, `.others` is what else was in flight meanwhile."""
        tracked, mark = Tracked(), self.started(requests)
        try:
            yield tracked
        finally:
            tracked.others = self.finished(requests, mark)


@dataclass
class Tracked:
    others: float = 0.0  # the mean number of other target requests in flight, over the block's tokens
