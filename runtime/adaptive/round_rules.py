"""Timelines of the round rules on real step lengths: what a round costs when steps are unequal.

The formulas of theory.py price a round as if every step had the same length; real steps do not, and what a
round pays for that depends on its rule (docs/method.md, "Real step lengths: the replay"):

- `longest`: one batched fork (sync): the draft writes γ steps, the γ + 1 branches run together, the round
  waits for the longest, then one judge call;
- `decision`: streamed branches (sync, streamed_fork.py): t_0 runs while the draft writes, each draft step is
  judged as soon as its target step ends, the round ends at its decision, and after a wholly accepted window
  it keeps the bonus branch's first `handoff_tokens` tokens and hands the branch on as the next t_0;
- `async`: the step pipeline (pipeline.py): the draft writes up to γ steps ahead, t_k starts as soon as d_k
  exists, a rejection ends the round.

`replay` walks one answer's step lengths (tokens) through a rule, each draft accepted with probability α, at
the costs of `RuleCosts`; a draft step is as long as the target's step at its position, and the judge runs
beside the target without slowing it. eval/replay.py replays recorded answers (`lookahead bench replay`); the
planner prices streamed rounds with it on the run's own step lengths.
"""

from __future__ import annotations

import random
import statistics
from dataclasses import dataclass

RULES = ("longest", "decision", "async")


@dataclass(frozen=True)
class RuleCosts:
    """What the replay prices a round with (seconds)."""

    target_token_s: float  # T: one target token, one request alone
    request_s: float = 0.0  # a target request's fixed cost (scheduling, its few uncached prompt tokens)
    c: float = 0.45  # a draft token over a target token
    judge_s: float = 0.0  # one judge call
    widths: tuple[tuple[int, float], ...] = ((1, 1.0),)  # (n, B(n)) measured
    target_beside_draft: float = 1.0  # a target token's time while the draft writes, over alone
    draft_beside_target: float = 1.0  # a draft token's time while the target writes, over alone
    handoff_tokens: int = 32  # `decision`: the bonus step's tokens kept at a wholly accepted window (the config's)

    def b(self, n: int) -> float:
        """B(n), linear between the measured widths and beyond the last one."""
        points = sorted({1: 1.0, **dict(self.widths)}.items())
        if n <= 1:
            return 1.0
        for (n0, b0), (n1, b1) in zip(points, points[1:]):
            if n <= n1:
                return b0 + (b1 - b0) * (n - n0) / (n1 - n0)
        if len(points) == 1:
            return 1.0
        (n0, b0), (n1, b1) = points[-2], points[-1]
        return b1 + (b1 - b0) / (n1 - n0) * (n - n1)


def ar_time(lengths: list[int], costs: RuleCosts) -> float:
    """The target alone: one request that writes every step."""
    return costs.request_s + sum(lengths) * costs.target_token_s


def replay(lengths: list[int], rule: str, depth: int, alpha: float, costs: RuleCosts, rng: random.Random) -> float:
    """Seconds one answer of these step lengths takes under `rule` at γ = `depth`, drafts accepted with `alpha`."""
    if rule not in RULES:
        raise ValueError(f"rule must be one of {RULES}")
    return {"longest": _longest, "decision": _decision, "async": _async}[rule](lengths, depth, alpha, costs, rng)


def _accepts(rng: random.Random, alpha: float) -> bool:
    return rng.random() < alpha


def _longest(lengths, depth, alpha, costs, rng) -> float:
    t, p, n, T = 0.0, 0, len(lengths), costs.target_token_s
    while p < n:
        m = min(depth, n - 1 - p)  # draft steps whose target step after exists to judge against
        draft = costs.c * T * sum(lengths[p:p + m])
        branches = lengths[p:p + m + 1]
        fork = costs.request_s + costs.b(len(branches)) * T * max(branches)
        accepted = 0
        while accepted < m and _accepts(rng, alpha):
            accepted += 1
        t += draft + fork + (costs.judge_s if m else 0.0)
        p += accepted + 1
    return t


def _decision(lengths, depth, alpha, costs, rng) -> float:
    T, n = costs.target_token_s, len(lengths)
    t, p = 0.0, 0
    head = 0.0  # tokens of step p that the handed-on t_0 had written when its round began
    piece = 0  # tokens of step p that the round before kept: the draft writes the rest
    while p < n:
        m = min(depth, n - 1 - p)
        draft = costs.c * T * costs.draft_beside_target * (sum(lengths[p:p + m]) - piece) if m else 0.0
        per_token = T * costs.b(m + 1)  # every branch, once the draft is done
        start = t if head else t + costs.request_s  # t_0: running already, or sent now
        left = lengths[p] - head
        beside = T * costs.target_beside_draft if m else T
        during_draft = max(0.0, t + draft - start) / beside  # what t_0 writes while the draft writes
        ends = [start + left * beside if during_draft >= left else t + draft + (left - during_draft) * per_token]
        sent = t + draft + costs.request_s  # t_1..t_m, after the draft's window
        ends += [sent + lengths[p + k] * per_token for k in range(1, m + 1)]
        decided, k = t + draft, 0
        while k < m:  # d_{k+1} is judged against t_k once both are there
            decided = max(decided, ends[k]) + costs.judge_s
            if not _accepts(rng, alpha):
                break
            k += 1
        if m == 0:
            t, p, head, piece = ends[0], p + 1, 0.0, 0
        elif k < m:  # rejected: t_k is kept, the branches after it are aborted
            t, p, head, piece = decided, p + k + 1, 0.0, 0
        elif lengths[p + m] <= costs.handoff_tokens:  # the window is accepted, its short bonus step kept whole
            t, p, head, piece = max(decided, ends[m]), p + m + 1, 0.0, 0
        else:  # the bonus step's first tokens kept; t_m goes on as the next round's t_0
            decided = max(decided, sent + costs.handoff_tokens * per_token)
            t, p = decided, p + m
            head, piece = min(float(lengths[p]), (decided - sent) / per_token), costs.handoff_tokens
    return t


def _async(lengths, depth, alpha, costs, rng) -> float:
    T, n = costs.target_token_s, len(lengths)
    target_token = T * costs.target_beside_draft * costs.b(depth + 1)
    draft_token = costs.c * T * costs.draft_beside_target
    t, p = 0.0, 0
    while p < n:
        target_end = {0: t + costs.request_s + lengths[p] * target_token}
        draft_end: dict[int, float] = {}
        accepted_at: dict[int, float] = {0: t}
        judge_free, i = t, 1
        while True:
            if p + i >= n:  # no step after the last: its target step is kept
                t, p = target_end[i - 1], n
                break
            # d_i starts when d_{i-1} is done and the draft is at most γ steps ahead of the verified
            start = max(draft_end.get(i - 1, t), accepted_at.get(max(0, i - 1 - depth), t))
            draft_end[i] = start + draft_token * lengths[p + i - 1]
            target_end[i] = draft_end[i] + costs.request_s + lengths[p + i] * target_token
            judge_free = max(judge_free, target_end[i - 1], draft_end[i]) + costs.judge_s
            if not _accepts(rng, alpha):
                t, p = judge_free, p + i
                break
            accepted_at[i] = judge_free
            i += 1
    return t


def speedup(answers: list[list[int]], costs: RuleCosts, rule: str, depth: int, alpha: float, draws: int = 20,
            seed: str = "") -> float:
    """AR time over LR time summed over `answers`, the median over `draws` seeded draws of the verdicts."""
    ar = sum(ar_time(lengths, costs) for lengths in answers)
    ratios = []
    for draw in range(draws):
        rng = random.Random(f"{seed}:{rule}:{depth}:{alpha}:{draw}")
        ratios.append(ar / sum(replay(lengths, rule, depth, alpha, costs, rng) for lengths in answers))
    return statistics.median(ratios)


def rule_of(engine: str, fork: str) -> str:
    """The rule an engine setting runs its chain rounds by."""
    if engine == "async":
        return "async"
    return "decision" if fork == "streamed" else "longest"
