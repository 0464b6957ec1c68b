"""Speedup theory of Lookahead Reasoning (the paper's §5 and appendix), with a judge term j and a branch cost B(n).

α: acceptance; c: the draft's time per step over the target's; k: the most steps one round advances. Our γ
counts draft steps, so k = γ + 1 for the sync engine (the bonus step) and for the async chain pipeline; the
async engine with a tree pipelines windows of γ levels (`f_windows`). j is the judge's time per round and B(n)
a fork of n target branches, both in target steps: a sync round costs c·γ + B(γ + 1) + j, the async
verification stage B + j, so S_j,B(k, α, c) = S(k, α, c / (B + j)) / (B + j). With j = 0 and B = 1 these are
the paper's formulas. The derivations: docs/method.md, "Theory".
"""

from __future__ import annotations

import math
from typing import Callable

BranchCost = Callable[[int], float]  # n target branches in one fork -> B(n)


def free_branches(n: int) -> float:
    """B(n) = 1: parallel branches cost one step (an idle GPU; the paper's assumption)."""
    return 1.0


def check_arguments(alpha: float, c: float, k: int | None = None, judge: float = 0.0, branch: float = 1.0) -> None:
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must lie in [0, 1], got {alpha}")
    if c <= 0.0:
        raise ValueError(f"c must be > 0, got {c}")
    if k is not None and k < 1:
        raise ValueError(f"depth must be >= 1, got {k}")
    if judge < 0.0:
        raise ValueError(f"judge cost must be >= 0, got {judge}")
    if branch <= 0.0:
        raise ValueError(f"branch cost must be > 0, got {branch}")


def expected_steps(k: int, alpha: float) -> float:
    """E[steps advanced per round] = 1 + α + … + α^(k−1)."""
    return float(k) if alpha == 1.0 else (1.0 - alpha**k) / (1.0 - alpha)


def round_steps(engine: str, depth: int, alpha: float, window: bool = False) -> float:
    """E[steps one round of γ = `depth` keeps]: sync k = γ + 1; async with windows k = γ; the async chain
    pipeline goes on drafting while its drafts are accepted, so its round ends only at a rejection (or
    the end of the problem): 1 / (1 − α) steps."""
    if engine == "async" and not window:
        return 1.0 / (1.0 - alpha) if alpha < 1.0 else math.inf
    return expected_steps(depth + (engine == "sync"), alpha)


def token_level(k: int, alpha: float, c: float) -> float:
    """g(k) = (1 − α^(k+1)) / ((1 − α)(1 + ck)): token-level speculative decoding; at most 1/(1 − α)."""
    check_arguments(alpha, c, k)
    return expected_steps(k + 1, alpha) / (1.0 + c * k)


def f_sync(k: int, alpha: float, c: float, judge: float = 0.0, branch: float = 1.0) -> float:
    """(1 − α^k) / ((1 − α)(c(k − 1) + B + j)): synchronous step-level speedup; B = 1 gives the paper's."""
    check_arguments(alpha, c, k, judge, branch)
    return expected_steps(k, alpha) / (c * (k - 1) + branch + judge)


def f_async(k: int, alpha: float, c: float, judge: float = 0.0, branch: float = 1.0) -> float:
    """Asynchronous step-level speedup; with j = 0 and B = 1 the paper's formula:

    k >= ⌈1/c⌉: 1 / (c + (1 − c)(1 − α)); otherwise
    (1 − α^k) / ((1 − α) + c(α − α^(k+1) − k(1 − α)α^k)).
    """
    check_arguments(alpha, c, k, judge, branch)
    stage = branch + judge  # the verification stage, in target steps
    if stage != 1.0:
        return f_async(k, alpha, c / stage) / stage
    if k >= math.ceil(1.0 / c - 1e-12):
        return 1.0 / (c + (1.0 - c) * (1.0 - alpha))
    if alpha == 1.0:
        return float(k)
    numerator = 1.0 - alpha**k
    denominator = (1.0 - alpha) + c * (alpha - alpha ** (k + 1) - k * (1.0 - alpha) * alpha**k)
    return numerator / denominator


def first_candidate_alpha(alpha: float, width: int) -> float:
    """α₁, one candidate's acceptance, where W independent candidates accept a position with α = 1 − (1 − α₁)^W."""
    return 1.0 - (1.0 - alpha) ** (1.0 / width)


def f_windows(depth: int, alpha: float, c: float, judge: float = 0.0, branch: float = 1.0, width: int = 1) -> float:
    """Asynchronous window pipelining (the async engine with a tree): E[steps] / E[time] of a round.

    A round verifies a window of γ levels (its fork and judge: s = B + j) and keeps the accepted
    positions, then the target's step at a rejection: 1 + α + … + α^(γ−1) steps. Its window was drafted
    during the previous verification, so costs max(s, γc), when the previous round's walk took the first
    candidate at all γ levels (probability α₁^γ); otherwise it is drafted first: γc + s.
    """
    check_arguments(alpha, c, depth, judge, branch)
    stage, drafting = branch + judge, depth * c
    reused = first_candidate_alpha(alpha, width) ** depth
    return expected_steps(depth, alpha) / (reused * max(stage, drafting) + (1.0 - reused) * (drafting + stage))


def tree_branches(depth: int, width: int, max_nodes: int | None = None) -> int:
    """Target branches of one round: one per distinct prefix, the root and every draft node.

    A chain (W = 1) forks γ + 1; a full tree Σ W^i for i = 0..γ, its nodes capped at `max_nodes`.
    """
    nodes = sum(width**i for i in range(1, depth + 1))
    if max_nodes is not None:
        nodes = min(nodes, max_nodes)
    return 1 + nodes


def engine_speedup(
    engine: str, depth: int, alpha: float, c: float, judge: float = 0.0, width: int = 1,
    branch_cost: BranchCost = free_branches, max_nodes: int | None = None, window: bool | None = None,
) -> float:
    """Theoretical speedup of our engines at draft depth γ (see the module docstring for k).

    For a tree (width > 1) pass the per-position acceptance of the tree as α; if each
    candidate is accepted independently with α₁, that is 1 − (1 − α₁)^W. `window`: the
    async engine pipelines windows (`f_windows`); None: it does for trees, and steps for chains.
    """
    branch = branch_cost(tree_branches(depth, width, max_nodes))
    if engine == "sync":
        return f_sync(depth + 1, alpha, c, judge, branch)
    if pipelines_windows(engine, width, window):
        return f_windows(depth, alpha, c, judge, branch, width)
    if engine == "async":
        return f_async(depth + 1, alpha, c, judge, branch)
    raise ValueError(f"engine must be sync or async, got {engine!r}")


def pipelines_windows(engine: str, width: int, window: bool | None) -> bool:
    """Whether the async engine pipelines windows: for trees unless `window` says otherwise."""
    return engine == "async" and (width > 1 if window is None else window)


def best_depth(speedup_at: Callable[[int], float], max_depth: int) -> tuple[int, float]:
    """(γ, speedup) of the γ in 1..`max_depth` with the highest `speedup_at(γ)`; (0, 1.0), plain AR, where none
    beats 1."""
    best = (0, 1.0)
    for depth in range(1, max_depth + 1):
        s = speedup_at(depth)
        if s > best[1] + 1e-12:
            best = (depth, s)
    return best
