"""The drafting slots: how many of the answers that share a policy may be in a drafting round at once.

At most `slots` answers draft at once; an answer whose plan would draft beyond that writes AR. The slots
start at one; after a timed drafting round they double (up to the answers in flight) where the measured rates
gain at least GAIN_TO_WIDEN, the round began with every slot taken and the client process uses under
CLIENT_CORES_TO_WIDEN of a core, and halve where the rates gain under GAIN_TO_DRAFT or the client uses over
CLIENT_CORES_TO_NARROW. Only a round begun after the last change changes them again (rounds in flight end
together). Why: docs/method.md, "Engines, trees and adaptive depth".
"""

from __future__ import annotations

import math
import time

from lookahead_reasoning.runtime.adaptive.client_cpu import ClientCpu
from lookahead_reasoning.runtime.adaptive.tuning import (
    CLIENT_CORES_TO_NARROW, CLIENT_CORES_TO_WIDEN, GAIN_TO_DRAFT, GAIN_TO_WIDEN,
)



class DraftSlots:
    """The answers in flight and which of them draft; not thread-safe (the policy holds its lock). An answer
    is told apart by its thread: the engines plan an answer's rounds in the caller's thread."""

    def __init__(self, client_cpu: ClientCpu | None = None) -> None:
        self.client_cpu = client_cpu  # how busy the client process is (None: not watched)
        self.active_answers = 0  # answers in flight that share the policy
        self.slots = 1
        self._drafting: set[int] = set()  # the threads of the answers whose round in flight drafts
        self._filled = math.inf  # time.perf_counter() when every slot was taken since they last changed
        self._changed = -math.inf  # time.perf_counter() when they last changed

    @property
    def answers(self) -> int:
        """The answers sharing the policy, at least one."""
        return max(1, self.active_answers)

    def answer_started(self) -> None:
        self.active_answers += 1

    def answer_finished(self, answer: int) -> None:
        self.active_answers = max(0, self.active_answers - 1)
        self._drafting.discard(answer)

    def admit(self, answer: int, drafts: bool) -> bool:
        """The next round of `answer`, which `drafts` or not, begins: whether it may run as planned (False:
        its plan drafts and every slot is taken)."""
        self._drafting.discard(answer)
        if not drafts:
            return True
        if len(self._drafting) >= self.slots:
            return False
        self._drafting.add(answer)
        if len(self._drafting) >= self.slots:
            self._filled = min(self._filled, time.perf_counter())
        return True

    def client_cores(self) -> float | None:
        """The client process's CPU over the last second, in cores (None: not watched, or not known yet)."""
        return self.client_cpu.cores() if self.client_cpu is not None else None

    def sample_client(self) -> None:
        if self.client_cpu is not None:
            self.client_cpu.sample()

    def drafting_round_timed(self, started: float, gain: float | None) -> None:
        """A timed drafting round that began at `started` (time.perf_counter()) ended; `gain`: the measured
        rates' drafting over AR (see the module docstring)."""
        if gain is None or started < self._changed:
            return
        slots, cores = self.slots, self.client_cores()
        if gain < GAIN_TO_DRAFT or (cores is not None and cores > CLIENT_CORES_TO_NARROW):
            self.slots = max(1, slots // 2)
        elif gain >= GAIN_TO_WIDEN and started >= self._filled and (cores or 0.0) < CLIENT_CORES_TO_WIDEN:
            self.slots = max(slots, min(2 * slots, self.answers))
        if self.slots != slots:
            self._filled = math.inf  # until the new number of answers draft at once
            self._changed = time.perf_counter()
