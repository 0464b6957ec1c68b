"""The speedup theory on a problem of a finite number of steps: what `lookahead bench sim` compares the
runtime with (runtime/adaptive/theory.py holds the endless formulas the planner uses).

The endless formulas assume every round can keep as many steps as its depth allows. A problem of N steps
cannot: the draft stops at EOS, so the last rounds draft fewer steps, and when every draft through EOS is
accepted there is no bonus step. `finite_speedup` averages the cost model's rounds over the verdicts drawn
with α; `pattern_time` replays them on the verdicts a run drew.
"""

from __future__ import annotations

import math
from typing import Sequence

from lookahead_reasoning.runtime.adaptive.theory import (
    BranchCost, check_arguments, first_candidate_alpha, free_branches, pipelines_windows, tree_branches,
)


def _round_outcomes(
    engine: str, depth: int, c: float, judge: float, width: int, branch_cost: BranchCost, max_nodes: int | None,
    left: int,
) -> list[tuple[float, int]]:
    """The cost model's rounds with `left` steps to go: (time in target steps, steps kept) for each count X of
    accepted positions before the first rejection, X = 0 … m, where X = m means every position was accepted.

    - sync: a round drafts m = min(γ, left) steps, costs c·m + B(n) + j (n: the round's target branches;
      none after a step that ends on EOS), and keeps the accepted drafts and the target's step after them:
      X + 1 steps for X < m; m + 1 when all m are accepted, or m at EOS (m = left).
    - async with the chain pipeline: up to k = γ + 1 positions; the first verdict comes s = B + j after the
      round starts, each further one a draft step c later; a rejection after X accepted ends the round at
      s + cX keeping X + 1 steps (the target's step last); k accepted positions keep k steps and cost s,
      their drafting hidden behind the previous verification. With k ≥ ⌈s/c⌉ the depth limit never holds
      the draft back, and a round runs on until a rejection or EOS (m = left). At the end of the problem
      (m = left) all m accepted end it at the last verdict, s + c(m − 1). (This is the formula's idealized
      pipeline: in pipeline.py the draft of position i + k waits for the verdict on i, so k accepted
      positions there cost s + c, a few % less speedup at small γ.)
    (Windows: `_window_round`.)
    """
    if engine == "sync":
        m = min(depth, left)
        eos = m == left
        cost = c * m + branch_cost(tree_branches(m - 1 if eos else m, width, max_nodes)) + judge
        return [(cost, x + 1) for x in range(m)] + [(cost, m if eos else m + 1)]
    if engine != "async":
        raise ValueError(f"engine must be sync or async, got {engine!r}")
    k = depth + 1
    stage = branch_cost(tree_branches(depth, width, max_nodes)) + judge
    m = left if k >= math.ceil(1.0 / (c / stage) - 1e-12) else min(k, left)
    full = stage + c * (m - 1) if m == left else stage
    return [(stage + c * x, x + 1) for x in range(m)] + [(full, m)]


def _window_round(depth: int, c: float, stage: float, left: int, reused: bool) -> tuple[int, float]:
    """A window round with `left` steps to go: (positions m, time). Its m = min(γ, left) levels (the draft
    stops at EOS) were drafted during the previous verification when `reused`: max(s, mc); else first:
    mc + s. All verdicts come together after the fork; it keeps X + 1 steps for X < m accepted, m for all."""
    m = min(depth, left)
    return m, max(stage, m * c) if reused else m * c + stage


def finite_speedup(
    engine: str, depth: int, alpha: float, c: float, judge: float = 0.0, width: int = 1,
    branch_cost: BranchCost = free_branches, max_nodes: int | None = None, window: bool | None = None,
    *, steps: int,
) -> float:
    """Expected speedup on a problem of exactly N = `steps` steps: AR's N target steps over the method's
    expected time, under the cost model of `engine_speedup` (exact dynamic programming over the steps left,
    each position accepted with α; the rounds are `_round_outcomes`).

    The endless formulas assume every round can keep as many steps as its depth allows. A problem of N
    steps cannot: the draft stops at EOS, so the last rounds draft fewer steps, and when every draft
    through EOS is accepted there is no bonus step. So the endless formula overstates what a problem of
    N steps can gain; this converges to it as N grows.
    """
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    check_arguments(alpha, c, depth, judge)
    if pipelines_windows(engine, width, window):
        return steps / _finite_windows_time(depth, alpha, c, judge, width, branch_cost, max_nodes, steps)
    left = [0.0] * (steps + 1)  # left[r]: expected time to finish r steps left, in target steps
    for r in range(1, steps + 1):
        outcomes = _round_outcomes(engine, depth, c, judge, width, branch_cost, max_nodes, r)
        *rejected, (full_cost, full_kept) = outcomes
        t = alpha ** len(rejected) * (full_cost + left[r - full_kept])
        for x, (cost, kept) in enumerate(rejected):
            t += alpha**x * (1.0 - alpha) * (cost + left[r - kept])
        left[r] = t
    return steps / left[steps]


def _finite_windows_time(
    depth: int, alpha: float, c: float, judge: float, width: int, branch_cost: BranchCost, max_nodes: int | None,
    steps: int,
) -> float:
    """Expected time of a problem of `steps` steps under window pipelining (`_window_round`): the first
    window is drafted first; the next is reused when the walk took the first candidate at every level."""
    stage = branch_cost(tree_branches(depth, width, max_nodes)) + judge
    first = first_candidate_alpha(alpha, width)
    cold, warm = [0.0] * (steps + 1), [0.0] * (steps + 1)  # time for r steps left, the window drafted first or reused
    for r in range(1, steps + 1):
        for table, reused in ((cold, False), (warm, True)):
            m, t = _window_round(depth, c, stage, r, reused)
            for x in range(m):
                t += alpha**x * (1.0 - alpha) * cold[r - x - 1]
            if m < r:
                t += first**m * warm[r - m] + (alpha**m - first**m) * cold[r - m]
            table[r] = t
    return cold[steps]


def pattern_time(
    engine: str, depth: int, verdicts: Sequence[bool | None], c: float, judge: float = 0.0, width: int = 1,
    branch_cost: BranchCost = free_branches, max_nodes: int | None = None, window: bool | None = None,
    first_candidate: Sequence[bool] | None = None,
) -> float:
    """The cost model's time, in target steps, for one problem whose position i is accepted when
    `verdicts[i]` (N = len(verdicts) steps; for a tree, when one of its candidates is): the rounds of
    `finite_speedup`, replayed on these verdicts instead of averaged over them. AR takes N. Where a
    benchmark knows the verdicts its problems drew, N / this is the speedup the theory gives them, free
    of the luck of a few problems' draws (its expectation over verdicts drawn with α is
    N / finite_speedup). None marks a position that was never judged (a bonus step): a round that needs
    its verdict raises ValueError. For window pipelining, `first_candidate[i]`: position i was accepted
    with the first candidate at every level of its round so far (None: every accepted position was, as
    in a chain)."""
    if not verdicts:
        raise ValueError("a problem has at least one step")
    check_arguments(0.0, c, depth, judge)
    if pipelines_windows(engine, width, window):
        first = list(verdicts) if first_candidate is None else list(first_candidate)
        stage = branch_cost(tree_branches(depth, width, max_nodes)) + judge
        done, spent, reused = 0, 0.0, False
        while done < len(verdicts):
            m, cost = _window_round(depth, c, stage, len(verdicts) - done, reused)
            accepted = _accepted(verdicts, done, m)
            spent += cost
            reused = accepted == m and all(first[done:done + m])
            done += accepted + (accepted < m)
        return spent
    done, spent = 0, 0.0
    while done < len(verdicts):
        outcomes = _round_outcomes(engine, depth, c, judge, width, branch_cost, max_nodes, len(verdicts) - done)
        cost, kept = outcomes[_accepted(verdicts, done, len(outcomes) - 1)]
        spent += cost
        done += kept
    return spent


def _accepted(verdicts: Sequence[bool | None], start: int, positions: int) -> int:
    """Accepted positions from `start` before the first rejection, of at most `positions`."""
    for x, verdict in enumerate(verdicts[start:start + positions]):
        if verdict is None:
            raise ValueError(f"the rounds need the verdict of step {start + x}, which was not drawn")
        if not verdict:
            return x
    return positions
