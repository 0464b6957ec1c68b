"""The probe schedule: the rounds that measure what the plan cannot see from the rounds it runs.

- Fork probes, while the branches alone rule drafting out: an AR round whose fork writes the same step once
  more prices a second branch (the slope behind B(n)); the AR round before it writes a lone step.
- Drafted probes, where the branches could pay but the plan says AR: the round the model would run, or one
  step where that would lose more than the budget spreads over the longest spacing. They renew α̂ too.
- AR checks, while drafting wins: an AR round now and then keeps the target's time alone measured.
- Spacing: every `spacing` AR steps, so that what probes lose against AR stays within PROBE_BUDGET; each fork
  probe after which the model still plans AR doubles the fork probes' spacing, up to PROBE_BACKOFF times.
- An answer's first round is not timed, so it is never a probe nor a check: where one is due, one answer
  writes a lone step and takes it next round, while other answers' first rounds write stretches.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from lookahead_reasoning.runtime.adaptive.planner import Estimates, Plan, Planner
from lookahead_reasoning.runtime.adaptive.round_plan import RoundPlan
from lookahead_reasoning.runtime.adaptive.tuning import (
    PROBE_BACKOFF, PROBE_BUDGET, PROBE_MIN_TOKENS, PROBE_SHARE, PROBE_SPACING,
)



def spacing_for(loss: float) -> int:
    """Steps between two rounds that each lose `loss` of a step, so that they cost PROBE_BUDGET at most."""
    return min(PROBE_SPACING[1], max(PROBE_SPACING[0], math.ceil(loss / PROBE_BUDGET)))


def check_spacing(speedup: float) -> int:
    """Drafting rounds between AR checks: an AR round where drafting advances `speedup` times as fast."""
    return spacing_for(1.0 - 1.0 / speedup if speedup > 1.0 else 0.0)


def probe_tokens(step_tokens: float | None) -> int:
    """The cap of a fork probe's short branch, for steps of `step_tokens` (None: not known yet)."""
    return max(PROBE_MIN_TOKENS, math.ceil(PROBE_SHARE * (step_tokens or PROBE_MIN_TOKENS / PROBE_SHARE)))


class ProbeSchedule:
    """Counts AR steps and drafting rounds since the last probe and check; not thread-safe (the policy holds
    its lock)."""

    def __init__(self, planner: Planner) -> None:
        self.planner = planner
        self.ar_steps = 0  # steps AR rounds wrote since the last probe
        self.drafting_rounds = 0  # drafting rounds since the last AR check
        self.backoff = 1  # the fork probes' spacing multiple
        self._lone_before_probe = False  # the lone step before a fork probe was planned
        self._claim: int | None = None  # the answer whose first round put off a due probe

    def count_ar_steps(self, steps: int) -> None:
        """An AR round (not a probe) wrote `steps` steps."""
        self.ar_steps += steps

    def release(self, answer: int) -> None:
        """`answer` asks for its next round, or ended: a probe it put off is any answer's to take."""
        if self._claim == answer:
            self._claim = None

    def is_fork(self, e: Estimates) -> bool:
        """A fork probe (cheap) while the branches alone make lookahead lose; else a drafted probe."""
        return self.planner.forks_itself and self.planner.rules_drafting_out(e)

    def drafted_probe(self, e: Estimates) -> tuple[int, int, float]:
        """(γ, W, loss in AR steps) of a drafted probe (see the module docstring)."""
        if e.costs.c() is None:
            return 1, 1, 0.0  # nothing to price a round with yet: one step, which measures c and j
        depth, width, _ = self.planner.model_plan(e)
        if depth:
            loss = self.planner.drafted_loss(e, depth, width)
            if loss <= PROBE_BUDGET * PROBE_SPACING[1]:
                return depth, width, loss
        return 1, 1, self.planner.drafted_loss(e, 1, 1)

    def budget_spacing(self, e: Estimates, fork: bool) -> int:
        """AR steps between probes that keeps their loss within PROBE_BUDGET (`fork`: fork probes)."""
        if fork:
            share = e.costs.request_share(e.answers)
            return spacing_for((e.costs.branch_cost(2, e.answers) - 1.0) * PROBE_SHARE + 2.0 * share)
        return spacing_for(self.drafted_probe(e)[2])

    def spacing(self, e: Estimates) -> int:
        """AR steps between probes: the budget's, times the backoff for fork probes."""
        fork = self.is_fork(e)
        return min(PROBE_SPACING[1], self.budget_spacing(e, fork) * (self.backoff if fork else 1))

    def probe_taken(self, e: Estimates, fork: bool, spacing: int) -> None:
        """A probe is planned now, `spacing` AR steps after the last. The count keeps what it held beyond the
        spacing, up to a probe owed by each other answer in flight: answers end their stretches together and
        one takes the probe. After a fork probe where the model plans AR, the backoff doubles."""
        self.ar_steps = min(max(0, self.ar_steps - spacing), spacing * (e.answers - 1))
        if fork and not self.planner.model_plan(e).depth:
            self.backoff = min(PROBE_BACKOFF, 2 * self.backoff)

    def next_round(self, e: Estimates, plan: Plan, first: bool, answer: int,
                   stretch: Callable[[], RoundPlan]) -> RoundPlan:
        """The round of `answer` where the planner says `plan`: the plan, an AR check, a probe, or an AR
        round (`stretch()`: a stretch as stretches.py sizes it). `first`: the answer's first round."""
        depth, width, speedup = plan
        if depth and not math.isnan(speedup):
            self.backoff = 1  # the model plans drafting: the probes found what they watch for
            self.drafting_rounds += 1
            if self.drafting_rounds > check_spacing(speedup) and not first:
                self.drafting_rounds = 0
                return RoundPlan(0)  # an AR check
        if depth or e.costs.target_alone_unknown:
            return self.planner.drafting_plan(e, depth, width)
        spacing = self.spacing(e) if e.costs.slope_known else None
        due = spacing is None or self.ar_steps >= spacing
        if first and due:
            if self._claim is None:
                self._claim = answer
                return RoundPlan(0)
            return stretch()  # another answer's next round takes it
        if not e.costs.slope_known:
            return RoundPlan(0, probe_tokens=probe_tokens(e.costs.step_figures()[0]))
        if not due:
            return stretch()
        if not self.is_fork(e):
            self.probe_taken(e, fork=False, spacing=spacing)
            depth, width, _ = self.drafted_probe(e)
            return self.planner.drafting_plan(e, depth, width)
        if not self._lone_before_probe:
            self._lone_before_probe = True
            return RoundPlan(0)
        self._lone_before_probe = False
        self.probe_taken(e, fork=True, spacing=spacing)
        return RoundPlan(0, probe_tokens=probe_tokens(e.costs.step_figures()[0]))
