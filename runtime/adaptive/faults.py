"""Role faults: a round whose draft or verifier request failed (an error, a timeout) is no measurement.

Its times and verdicts never enter the cost model, the rates or α̂. While a role is down the policy plans AR,
but for one retry every FAULT_RETRY_S, one answer at a time; the first drafting round that started after the
latest fault and had none ends the outage, and the measured rates start afresh.
"""

from __future__ import annotations

from lookahead_reasoning.runtime.adaptive.tuning import FAULT_RETRY_S



class RoleFaults:
    """The roles that are down and the retry that checks on them; not thread-safe (the policy holds its lock).
    Times are time.perf_counter() readings, as a round's `started`."""

    def __init__(self) -> None:
        self.down: set[str] = set()
        self.since = 0.0  # when the latest fault was recorded
        self.retry_at = 0.0  # when the next retry may start
        self.retry_by: int | None = None  # the answer whose drafting round is the retry in flight
        self.outages = 0  # outages that ended (for reports and tests)

    def failed(self, roles: list[str], now: float) -> None:
        """A round saw `roles` fail: they are down, and the next retry waits FAULT_RETRY_S."""
        self.down.update(roles)
        self.since = now
        self.retry_at = now + FAULT_RETRY_S
        self.retry_by = None

    def answered(self, started: float) -> bool:
        """A drafting round that started at `started` had no fault; True where that ends an outage."""
        if not self.down or started <= self.since:
            return False
        self.down.clear()
        self.retry_by = None
        self.outages += 1
        return True

    def take_retry(self, answer: int, now: float) -> bool:
        """Whether `answer`'s next round is the retry (the roles are down, a retry is due and none is out)."""
        if self.retry_by is not None or now < self.retry_at:
            return False
        self.retry_by = answer
        self.retry_at = now + FAULT_RETRY_S
        return True

    def release(self, answer: int) -> None:
        """`answer` ended, or its retry did not draft: another answer may retry when it is due."""
        if self.retry_by == answer:
            self.retry_by = None
