"""Speedup theory of Lookahead Reasoning (the paper's §5 and appendix), with a judge term.

Symbols: α acceptance rate, c = draft time per step / target time per step, k the
paper's depth: the most steps one round can advance. Our `depth` γ counts draft
steps per round, so:

- sync engine: γ drafts, and the target's bonus step when all are accepted, so
  k = γ + 1;
- async engine with a chain (step-level pipelining): the draft runs up to γ steps
  ahead of the last verified step while the target's step at the verified prefix is
  already in flight, so up to γ + 1 steps are in the pipeline and k = γ + 1;
- async engine with a tree (window pipelining): a window of γ levels; on full
  acceptance the next window is already being drafted from its end, so the bonus
  step is not kept and k = γ.

The paper's formulas leave the judge out. We add it as j = judge time per round /
target time per step: the judge runs after the target's branches, on the critical
path. For the sync engine a round costs 1 + c(k−1) + j target-step times. For the
async engine the verification stage (target, then judge) takes 1 + j; in units of that
stage the draft costs c / (1 + j), so S_j(k, α, c) = S(k, α, c / (1 + j)) / (1 + j).
With j = 0 both reduce to the paper's formulas.
"""

from __future__ import annotations

import math


def _check(alpha: float, c: float, k: int | None = None, judge: float = 0.0) -> None:
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must lie in [0, 1], got {alpha}")
    if c <= 0.0:
        raise ValueError(f"c must be > 0, got {c}")
    if k is not None and k < 1:
        raise ValueError(f"depth must be >= 1, got {k}")
    if judge < 0.0:
        raise ValueError(f"judge cost must be >= 0, got {judge}")


def expected_steps(k: int, alpha: float) -> float:
    """E[steps advanced per round] = 1 + α + … + α^(k−1)."""
    return float(k) if alpha == 1.0 else (1.0 - alpha**k) / (1.0 - alpha)


def token_level(k: int, alpha: float, c: float) -> float:
    """g(k) = (1 − α^(k+1)) / ((1 − α)(1 + ck)): token-level speculative decoding; at most 1/(1 − α)."""
    _check(alpha, c, k)
    return expected_steps(k + 1, alpha) / (1.0 + c * k)


def f_sync(k: int, alpha: float, c: float, judge: float = 0.0) -> float:
    """(1 − α^k) / ((1 − α)(1 − c + ck + j)): synchronous step-level speedup."""
    _check(alpha, c, k, judge)
    return expected_steps(k, alpha) / (1.0 - c + c * k + judge)


def f_async(k: int, alpha: float, c: float, judge: float = 0.0) -> float:
    """Asynchronous step-level speedup; with j = 0 the paper's formula:

    k >= ⌈1/c⌉: 1 / (c + (1 − c)(1 − α)); otherwise
    (1 − α^k) / ((1 − α) + c(α − α^(k+1) − k(1 − α)α^k)).
    """
    _check(alpha, c, k, judge)
    if judge:
        return f_async(k, alpha, c / (1.0 + judge)) / (1.0 + judge)
    if k >= math.ceil(1.0 / c - 1e-12):
        return 1.0 / (c + (1.0 - c) * (1.0 - alpha))
    if alpha == 1.0:
        return float(k)
    numerator = 1.0 - alpha**k
    denominator = (1.0 - alpha) + c * (alpha - alpha ** (k + 1) - k * (1.0 - alpha) * alpha**k)
    return numerator / denominator


def engine_speedup(engine: str, depth: int, alpha: float, c: float, judge: float = 0.0, width: int = 1) -> float:
    """Theoretical speedup of our engines at draft depth γ (see the module docstring for k).

    For a tree (width > 1) pass the per-position acceptance of the tree as α; if each
    candidate is accepted independently with α₁, that is 1 − (1 − α₁)^W.
    """
    if engine == "sync":
        return f_sync(depth + 1, alpha, c, judge)
    if engine == "async":
        return f_async(depth + 1 if width == 1 else depth, alpha, c, judge)
    raise ValueError(f"engine must be sync or async, got {engine!r}")


def combined(step_speedup: float, token_speedup: float) -> float:
    """Step-level and token-level speculation multiply (while the hardware has parallel width for both)."""
    return step_speedup * token_speedup


def best_depth(
    engine: str, alpha: float, c: float, judge: float = 0.0, max_depth: int = 8, width: int = 1
) -> tuple[int, float]:
    """(γ, speedup) maximizing the engine's theoretical speedup; γ = 0 means plain AR (speedup 1)."""
    best = (0, 1.0)
    for depth in range(1, max_depth + 1):
        s = engine_speedup(engine, depth, alpha, c, judge, width)
        if s > best[1] + 1e-12:
            best = (depth, s)
    return best
