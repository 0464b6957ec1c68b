"""α̂, the per-position acceptance the policy plans with, per draft width.

α̂ at a width is the Beta(½, ½) posterior mean of the positions judged there, over a long memory
(ALPHA_SLOW_FORGET per round of each answer) that restarts from a short one when the two disagree by more
than ALPHA_SHIFT_Z standard errors: steady where acceptance holds, quick where it changes. A width never run
gets α_w = 1 − (1 − α_k)^(w/k) from the width k measured best (independent candidates, the optimistic case).
"""

from __future__ import annotations

import math

from lookahead_reasoning.runtime.adaptive.tuning import ALPHA_SHIFT_Z



class AcceptanceTally:
    """Accepted and rejected draft positions on two time scales (see the module docstring)."""

    PRIOR_MEAN = 0.5  # α̂ before any position was judged

    def __init__(self) -> None:
        self.fast = (0.0, 0.0)
        self.slow = (0.0, 0.0)

    @staticmethod
    def _mean(tally: tuple[float, float]) -> float:
        # a weak prior: a strong one drags α̂ toward ½ and the chosen γ too low when α is high
        return (tally[0] + 0.5) / (tally[0] + tally[1] + 1.0)

    @property
    def positions(self) -> float:
        return sum(self.slow)

    def estimate(self, optimistic: bool = False) -> float:
        """α̂; `optimistic`: one standard error above it."""
        mean = self._mean(self.slow)
        if not optimistic:
            return mean
        return min(0.999, mean + math.sqrt(mean * (1.0 - mean) / (self.positions + 1.0)))

    def add(self, accepted: float, rejected: float, forget: float, slow_forget: float) -> None:
        self.fast = (forget * self.fast[0] + accepted, forget * self.fast[1] + rejected)
        self.slow = (slow_forget * self.slow[0] + accepted, slow_forget * self.slow[1] + rejected)
        long = self._mean(self.slow)
        error = math.sqrt(long * (1.0 - long) / (sum(self.fast) + 1.0))
        if abs(self._mean(self.fast) - long) > ALPHA_SHIFT_Z * error:
            self.slow = self.fast


class Acceptance:
    """One tally per width the policy drafted at; not thread-safe (the policy holds its lock)."""

    def __init__(self) -> None:
        self._tallies: dict[int, AcceptanceTally] = {}
        self.last_width = 1  # of the last round that drafted

    def add(self, width: int, accepted: float, rejected: float, forget: float, slow_forget: float) -> None:
        """A round at `width` judged `accepted` + `rejected` positions; `forget`, `slow_forget`: the short and
        the long memory's discount of the past."""
        self._tallies.setdefault(width, AcceptanceTally()).add(accepted, rejected, forget, slow_forget)
        self.last_width = width

    def alpha_at(self, width: int, optimistic: bool = False) -> float:
        """α̂ at `width`: measured, or derived from the best-known width; `optimistic`: one standard error up."""
        tally = self._tallies.get(width)
        if tally is not None and tally.positions >= 1.0:
            return tally.estimate(optimistic)
        if not self._tallies:
            return AcceptanceTally.PRIOR_MEAN
        known, tally = max(self._tallies.items(), key=lambda item: item[1].positions)
        return 1.0 - (1.0 - tally.estimate(optimistic)) ** (width / known)

    @property
    def alpha(self) -> float:
        """α̂ at the width the last drafting round used."""
        return self.alpha_at(self.last_width)
