"""The planner: from the cost estimates and α̂ to the round with the highest expected speedup (γ, W; γ = 0 is AR).

Rules, in order (why: docs/method.md, "Engines, trees and adaptive depth"):
1. No lone target step timed yet: AR. No slope known yet: AR, which a fork probe joins (the async chain
   pipeline, which cannot fork, drafts at the initial γ instead).
2. The ceiling: where free drafts, always accepted and judged for free, would not beat AR by CEILING_MARGIN,
   AR.
3. The draft or the verifier not priced yet: a measuring round (one drafted step; the target writes only its
   own step, so it costs c + j over AR).
4. Else the (γ, W) of the highest expected speedup over AR as it runs here (stretches.ar_step): by
   theory.engine_speedup with B(n) and j, and chain rounds that stream (up to STREAMED_MAX_ANSWERS answers)
   by a replay of the run's own step lengths (round_rules.py) once REPLAY_STEPS are known. AR where nothing
   beats 1.
5. Where α̂ says AR but α̂ one standard error up says drafting, one drafted step.
6. Where the measured rates say drafting gains under GAIN_TO_DRAFT, AR whatever the model says.

A width never run is priced at α_w from the width known best (alpha.py); trees are capped at W^γ ≤
TREE_NODE_BUDGET. The planner holds no state: each call gets an `Estimates`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

from lookahead_reasoning.runtime.adaptive.cost_model import CostModel
from lookahead_reasoning.runtime.adaptive.tuning import (
    CEILING_MARGIN, GAIN_TO_DRAFT, REPLAY_DRAWS, REPLAY_STEPS, STREAMED_MAX_ANSWERS, TREE_NODE_BUDGET,
)
from lookahead_reasoning.runtime.adaptive.round_plan import RoundPlan
from lookahead_reasoning.runtime.adaptive.round_rules import RuleCosts
from lookahead_reasoning.runtime.adaptive.round_rules import speedup as replayed_speedup
from lookahead_reasoning.runtime.adaptive.theory import best_depth, engine_speedup, round_steps, tree_branches



def depth_limit(max_depth: int, width: int) -> int:
    """The deepest γ at `width`: `max_depth` for chains, W^γ within TREE_NODE_BUDGET for trees."""
    if width == 1:
        return max_depth
    limit = 1
    while width ** (limit + 1) <= TREE_NODE_BUDGET:
        limit += 1
    return min(max_depth, limit)


class Plan(NamedTuple):
    depth: int  # γ; 0: AR
    width: int
    speedup: float  # expected, over AR; nan where the estimates cannot tell yet


@dataclass(frozen=True)
class Estimates:
    """What a plan is made from, at one moment."""

    costs: CostModel
    answers: int  # answers sharing the servers
    alpha_at: Callable[..., float]  # (width, optimistic=False) -> α̂
    ar_step: float  # AR's step as it runs here over a target step (stretches.ar_step)
    gain: float | None = None  # the measured rates' drafting over AR (rates.py)
    measure_drafting: bool = False  # draft once even where the ceiling rules drafting out, to report c, j, α


@dataclass(frozen=True)
class Planner:
    mode: str  # "sync" or "async"
    width: int  # the widest W it may choose
    initial: int  # γ where nothing is known and the engine cannot fork a probe
    max_depth: int
    max_nodes: int | None = None
    rule: str = "longest"  # how the engine's chain rounds run (round_rules.RULES)
    _ceilings: dict = field(default_factory=dict, compare=False, repr=False)  # see `ceiling`
    _replayed: dict = field(default_factory=dict, compare=False, repr=False)  # see `speedup`

    @property
    def forks_itself(self) -> bool:
        """Whether the engine's AR rounds can fork (the async chain pipeline sends lone target steps)."""
        return not (self.mode == "async" and self.width == 1)

    @property
    def window(self) -> bool:
        """Whether the async engine pipelines windows (a tree config, at any width) rather than steps."""
        return self.mode == "async" and self.width > 1

    def round_steps(self, depth: int, alpha: float) -> float:
        """E[steps a round of γ = `depth` keeps] on this engine."""
        return round_steps(self.mode, depth, alpha, self.window)

    def speedup(self, e: Estimates, depth: int, width: int, alpha: float, c: float, judge: float) -> float:
        """The expected speedup of a round of (γ, W) over AR as it runs here."""
        if self.rule == "decision" and width == 1 and e.answers <= STREAMED_MAX_ANSWERS:
            lengths = e.costs.step_lengths()
            if len(lengths) >= REPLAY_STEPS:
                return self._replay(e, lengths, depth, alpha, c, judge) * e.ar_step
        branch_cost = lambda n: e.costs.branch_cost(n, e.answers, longest=True)  # noqa: E731
        return engine_speedup(self.mode, depth, alpha, c, judge, width, branch_cost, self.max_nodes,
                              self.window) * e.ar_step

    def _replay(self, e: Estimates, lengths: list[int], depth: int, alpha: float, c: float, judge: float) -> float:
        """Streamed rounds of γ = `depth` replayed on `lengths`, in target tokens. A replay takes about a
        millisecond and a plan weighs every γ, so a price is kept while its inputs hold to two decimals and
        until REPLAY_STEPS more step lengths per answer sharing the policy are seen: repriced every round, the
        planning would lengthen every round and, under the policy's lock, hold up the other answers."""
        widths = tuple((n, round(e.costs.branch_cost(n, e.answers), 2)) for n in range(2, depth + 2))
        key = (e.costs.lengths_seen // (REPLAY_STEPS * e.answers), e.answers, depth, round(alpha, 2), round(c, 2), round(judge, 2),
               widths)
        if key not in self._replayed:
            if len(self._replayed) > 512:
                self._replayed.clear()
            mean = sum(lengths) / len(lengths)
            costs = RuleCosts(target_token_s=1.0, c=c, judge_s=judge * mean, widths=widths)
            self._replayed[key] = replayed_speedup([lengths], costs, "decision", depth, alpha, REPLAY_DRAWS)
        return self._replayed[key]

    def best(self, e: Estimates, width: int, alpha: float, c: float, judge: float | None = None) -> tuple[int, float]:
        """(γ, speedup) at `width`, (0, 1.0) where AR wins; `judge` None: j from the cost model for each γ's pairs."""
        def speedup_at(depth: int) -> float:
            j = judge if judge is not None else e.costs.judge_cost(tree_branches(depth, width, self.max_nodes) - 1,
                                                                   e.answers)
            return self.speedup(e, depth, width, alpha, c, j)

        return best_depth(speedup_at, depth_limit(self.max_depth, width))

    def ceiling(self, e: Estimates) -> float:
        """The speedup of free drafts, always accepted and judged for free (rule 2). It depends on the costs
        and the answers alone, and a plan asks for it up to three times: kept until either changes."""
        key = (e.costs.version, e.answers)
        if key not in self._ceilings:  # a chain: with every draft accepted, more width only costs
            self._ceilings.clear()
            self._ceilings[key] = self.best(e, 1, 0.999, 1e-3, 0.0)[1]
        return self._ceilings[key]

    def rules_drafting_out(self, e: Estimates) -> bool:
        """Whether the branches alone make lookahead lose (rule 2)."""
        return self.ceiling(e) <= CEILING_MARGIN

    def best_by_width(self, e: Estimates, optimistic: bool = False) -> dict[int, tuple[int, float]]:
        """(γ, expected speedup) at each width it may choose (empty until it can plan); `optimistic`: at α̂
        one standard error up."""
        c = e.costs.c(e.answers)
        if c is None or not e.costs.ready:
            return {}
        return {w: self.best(e, w, min(e.alpha_at(w, optimistic), 0.999), max(c, 1e-3))
                for w in range(1, self.width + 1)}

    def width_speedups(self, e: Estimates) -> dict[int, float]:
        return {width: speedup for width, (_, speedup) in self.best_by_width(e).items()}

    def best_plan(self, e: Estimates, optimistic: bool = False) -> Plan:
        """The best plan over the widths at α̂ (`optimistic`: one standard error up); AR at 1.0."""
        best = Plan(0, 1, 1.0)
        for width, (depth, speedup) in self.best_by_width(e, optimistic).items():
            if speedup > best.speedup + 1e-9:
                best = Plan(depth, width, speedup)
        return best

    def model_plan(self, e: Estimates) -> Plan:
        """What the cost model alone plans (rules 1 to 5)."""
        c = e.costs.c(e.answers)
        if e.costs.target_alone_unknown:
            return Plan(0, 1, math.nan)
        if not e.costs.slope_known:
            return Plan(0 if self.forks_itself else self.initial, 1, math.nan)
        if self.rules_drafting_out(e):
            return Plan(1, 1, math.nan) if e.measure_drafting and c is None else Plan(0, 1, 1.0)
        if c is None or not e.costs.ready:
            return Plan(1, 1, math.nan)
        best = self.best_plan(e)
        if not best.depth and self.best_plan(e, optimistic=True).depth:
            alpha = min(e.alpha_at(1, True), 0.999)
            return Plan(1, 1, self.speedup(e, 1, 1, alpha, max(c, 1e-3), e.costs.judge_cost(1, e.answers)))
        return best

    def plan(self, e: Estimates) -> Plan:
        """The plan (rules 1 to 6)."""
        best = self.model_plan(e)
        if best.depth and e.gain is not None and e.gain < GAIN_TO_DRAFT:
            return Plan(0, 1, 1.0)
        return best

    def drafting_plan(self, e: Estimates, depth: int, width: int) -> RoundPlan:
        """A round of (γ, W); γ = 1 before the draft is priced is a measuring round (rule 3)."""
        measuring = depth == 1 and width == 1 and self.forks_itself and e.costs.c() is None
        return RoundPlan(depth, width, measuring=measuring)

    def drafted_loss(self, e: Estimates, depth: int, width: int) -> float:
        """What a drafting round of (γ, W) loses against AR writing its steps, in AR steps: its expected steps
        times its time per step over AR's, less one (at the measured gain where that is lower)."""
        alpha = min(e.alpha_at(width), 0.999)
        pairs = tree_branches(depth, width, self.max_nodes) - 1
        c, judge = max(e.costs.c(e.answers), 1e-3), e.costs.judge_cost(pairs, e.answers)
        speedup = self.speedup(e, depth, width, alpha, c, judge)
        speedup = speedup if e.gain is None else min(speedup, e.gain)
        return self.round_steps(depth, alpha) * max(0.0, 1.0 / speedup - 1.0)
